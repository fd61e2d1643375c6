"""The chance level of a slice of records: what a guesser scores on these items.

An item with N options is guessed right with probability 1/N, so a slice of items with mixed
option counts (a user's file of 3-, 4- and 5-option items) has the chance level mean(1/N) over
its items, not 1/4. Every printed chance line, above-chance test and report takes it from here.
The option count of a record is the length of its ``scores`` list (one score per option shown).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def options_per_record(table: pa.Table) -> np.ndarray:
    """The number of options each record's item showed (the length of its ``scores``)."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    return pc.list_value_length(table.column("scores")).to_numpy(zero_copy_only=False).astype(np.int64)


def chance_per_record(table: pa.Table) -> np.ndarray:
    """1/N for each record, N its item's option count."""
    return 1.0 / np.maximum(options_per_record(table), 1)


def chance_level(table: pa.Table) -> float:
    """The mean of 1/N over the slice's records (one cell: over its items); NaN for no records."""
    if table.num_rows == 0:
        return float("nan")
    return float(chance_per_record(table).mean())
