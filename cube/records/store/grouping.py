"""Group ids over record columns: the helpers every analysis groups records with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.errors import RecordsError


def column_codes(table: pa.Table, name: str) -> tuple[np.ndarray, list]:
    """Integer code per row and the distinct values, in first-appearance order.

    Grouping 2.5 M records by a string column is a dictionary encode (C++) plus integer work in
    numpy; no Python loop ever touches a record.
    """
    column = table.column(name)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    encoded = pc.dictionary_encode(column.combine_chunks())
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return codes, encoded.dictionary.to_pylist()


def group_ids(
    table: pa.Table, names: Sequence[str], with_keys: bool = True
) -> tuple[np.ndarray, list[tuple]]:
    """One group id per row for the combination of ``names``, and each group's key tuple.

    Groups are numbered in sorted order of their per-column codes; keys are the column values.
    ``with_keys=False`` skips building the key tuples (an empty list is returned): use it when
    groups are as many as records, e.g. for the duplicate check.
    """
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64), []
    coded = [column_codes(table, n) for n in names]
    sizes = [max(len(values), 1) for _, values in coded]
    if float(np.prod(np.array(sizes, dtype=np.float64))) < 2.0**62:
        combined = np.zeros(table.num_rows, dtype=np.int64)
        for (codes, _), size in zip(coded, sizes):
            combined = combined * size + codes
        uniq, inverse = np.unique(combined, return_inverse=True)
        parts = []
        for size in reversed(sizes):
            parts.append(uniq % size)
            uniq = uniq // size
        parts.reverse()
    else:  # too many combinations for one integer: sort rows lexicographically instead
        stacked = np.stack([codes for codes, _ in coded])
        uniq_rows, inverse = np.unique(stacked.T, axis=0, return_inverse=True)
        parts = list(uniq_rows.T)
    if not with_keys:
        return inverse.reshape(-1).astype(np.int64, copy=False), []
    keys = [
        tuple(values[int(code)] for (_, values), code in zip(coded, combo))
        for combo in zip(*parts)
    ]
    return inverse.reshape(-1).astype(np.int64, copy=False), keys


# What an absent option reads as where items have different numbers of options (a user's file with
# 2 to 10): probability 0, a score no option beats, no token. A row of N options is padded on the
# right, so column k is still displayed position k and ``gold`` indexes it unchanged.
RAGGED_FILL = {"probs": 0.0, "scores": -np.inf, "first_token_ids": -1, "n_tokens": 0}


def list_matrix(table: pa.Table, name: str) -> np.ndarray:
    """A list column as a 2-D numpy array, one row per record; rows of fewer options than the
    widest are padded with ``RAGGED_FILL`` (columns without one must be rectangular)."""
    column = table.column(name).combine_chunks()
    if len(column) == 0:
        return np.zeros((0, 0))
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    if lengths.min() == lengths.max():
        return values.reshape(len(column), int(lengths[0]))
    if name not in RAGGED_FILL:
        raise RecordsError(
            f"column {name}: rows have {int(lengths.min())} to {int(lengths.max())} entries; "
            "this analysis needs the same number of options in every record"
        )
    fill = RAGGED_FILL[name]
    dtype = np.result_type(values.dtype, np.asarray(fill).dtype)
    out = np.full((len(column), int(lengths.max())), fill, dtype=dtype)
    rows = np.repeat(np.arange(len(column)), lengths)
    cols = np.arange(len(values)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, cols] = values
    return out


PROTOCOL_COLUMNS = ("scorer", "label_set", "context", "shots", "order")


def protocols(table: pa.Table) -> list[dict[str, Any]]:
    """Each (scorer, label set, context, shots, order) present, with its record count."""
    ids, keys = group_ids(table, PROTOCOL_COLUMNS)
    counts = np.bincount(ids, minlength=len(keys)) if keys else np.zeros(0, dtype=np.int64)
    rows = [dict(zip(PROTOCOL_COLUMNS, key), records=int(n)) for key, n in zip(keys, counts)]
    return sorted(rows, key=lambda r: tuple(str(r[c]) for c in PROTOCOL_COLUMNS))
