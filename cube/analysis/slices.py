"""Slices of stored records and the cells they hold: what selects records and what names a cell.

Every figure of a store is computed per *cell*, one protocol on one model (``CELL_COLUMNS``), over a
*slice* that the command line or a notebook selects by protocol fields (``SLICE_FIELDS``). Rescoring,
the paired comparisons, the ranking shift and ``cube explain`` all select, and check that a slice
is one cell, the same way; this module is that shared vocabulary, so that none of them reaches into
another for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cube.errors import ConfigError
from cube.records.store import column_codes, group_ids

SLICE_FIELDS = ("model", "scorer", "label_set", "shots", "order", "context")
CELL_COLUMNS = ("model", "benchmark", "scorer", "label_set", "context", "shots", "order")


def select(table: pa.Table, **filters: Any) -> pa.Table:
    """Rows matching every filter; a filter is one value or a sequence of allowed values.

    ``None`` leaves a field free. Fields: model, scorer, label_set, shots, order, context.
    """
    mask = None
    for name, wanted in filters.items():
        if name not in SLICE_FIELDS:
            raise ConfigError(f"cannot slice on {name!r}; fields: {', '.join(SLICE_FIELDS)}")
        if wanted is None:
            continue
        values = [wanted] if isinstance(wanted, (str, int)) else list(wanted)
        if name == "shots":
            try:
                values = [int(v) for v in values]
            except ValueError:
                raise ConfigError(f"shots must be integers, got {values!r}") from None
        column = table.column(name)
        test = pc.is_in(column, value_set=pa.array(values, type=column.type))
        mask = test if mask is None else pc.and_(mask, test)
    return table if mask is None else table.filter(mask)


def filters_from(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Keep only the slice fields of a mapping (e.g. argparse's namespace as a dict)."""
    return {k: mapping[k] for k in SLICE_FIELDS if mapping.get(k) is not None}


def describe_cells(table: pa.Table) -> str:
    _, keys = group_ids(table, CELL_COLUMNS)
    shown = "; ".join(", ".join(f"{n}={v}" for n, v in zip(CELL_COLUMNS, k)) for k in keys[:3])
    return f"{len(keys)} cells ({shown}{'; ...' if len(keys) > 3 else ''})"


def one_per_item(table: pa.Table, name: str) -> pa.Table:
    """Check that a slice holds one record per item, i.e. exactly one protocol cell."""
    if table.num_rows == 0:
        raise ConfigError(f"slice {name} has no records")
    codes, uids = column_codes(table, "uid")
    if len(uids) != table.num_rows:
        raise ConfigError(
            f"slice {name} holds {table.num_rows} records for {len(uids)} items; it spans "
            f"{describe_cells(table)}: narrow it to one cell"
        )
    return table
