"""The report's cells and its reference cell: what every section compares against.

Each cell's accuracy and Wilson interval are ``rescore``'s overall micro row (``cell_scores``);
the reference cell is the user's ``--reference``, else the paper's standard protocol where the
stores hold it, else the commonest value, dimension by dimension (``choose_reference``).

Why a module of its own: the cells and the reference are the input of every section, and the
choice of reference is the report's own (the rest is ``cube.analysis``'s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.chance import chance_per_record
from cube.analysis.rescore import CELL_COLUMNS, rescore
from cube.errors import ConfigError
from cube.protocol.chat import split_context
from cube.records.store import group_ids
from cube.report.model import DIMENSIONS, CellScore
from cube.report.stores import LoadedStore

# The reference cell where the user names none: the paper's standard protocol where the store
# holds it, else the first value present (sorted), dimension by dimension.
PREFERRED = {"scorer": ("M1-seq", "M1-strict", "M2", "M6-strict"), "label_set": ("L1_halfwidth",),
             "cue": ("zh_cue", "en_label_space"), "shots": (0,), "order": ("original",), "chat_template": ("none",)}


def cell_scores(store: LoadedStore) -> tuple[list[CellScore], np.ndarray, list[tuple]]:
    """Every cell of a store with its accuracy (``rescore``'s overall micro row), and each record's
    cell index (for slicing the cell's records later)."""
    table = store.table
    ids, keys = group_ids(table, CELL_COLUMNS)
    n = np.bincount(ids, minlength=len(keys))
    chance = np.bincount(ids, weights=chance_per_record(table), minlength=len(keys)) / n
    rows = {tuple(r[c] for c in CELL_COLUMNS): r
            for r in rescore(table, level="overall").rows.to_pylist() if r["aggregation"] == "micro"}
    dtype_keys = []
    if "dtype" in table.column_names:  # null: not recorded (an import that does not say)
        dtype = pc.fill_null(table.column("dtype"), "not recorded")
        _, dtype_keys = group_ids(pa.table({"cell": pa.array(ids), "dtype": dtype}), ("cell", "dtype"))
    dtypes: dict[int, set[str]] = {}
    for cell, value in dtype_keys:
        dtypes.setdefault(int(cell), set()).add(value if value is not None else "not recorded")
    cells = []
    for i, key in enumerate(keys):
        r = rows[tuple(key)]
        cue, chat = split_context(str(r["context"]))
        cells.append(CellScore(
            str(store.path), r["model"], r["benchmark"], r["scorer"], r["label_set"], cue, chat, int(r["shots"]),
            r["order"], int(r["n"]), int(r["n_correct"]), float(r["accuracy"]), float(r["ci_lo"]), float(r["ci_hi"]),
            float(chance[i]), float(r["tie_rate"]), float(r["parse_failure_rate"]), r["within_noise_rate"],
            "+".join(sorted(dtypes.get(i, {"not recorded"})))))
    return cells, ids, [tuple(k) for k in keys]


def parse_reference(text: str | None) -> dict[str, str]:
    """``--reference scorer=M1-seq,label_set=L1_halfwidth,...``: the fields it fixes."""
    out: dict[str, str] = {}
    for term in filter(None, (text or "").split(",")):
        name, eq, value = term.partition("=")
        name = name.strip().replace("-", "_")
        if name == "context":
            name = "cue"
        if not eq or not value.strip() or name not in DIMENSIONS:
            raise ConfigError(f"--reference {term!r}: expected FIELD=VALUE with FIELD one of {', '.join(DIMENSIONS)}")
        out[name] = value.strip()
    return out


def choose_reference(cells: Sequence[CellScore], given: Mapping[str, str]) -> dict[str, str]:
    """The reference value of each dimension: the user's, else the preferred one present, else the
    commonest (ties: the first sorted). A value the user gives that no cell holds is refused."""
    reference = {}
    for dim in DIMENSIONS:
        values = [str(c.value(dim)) for c in cells]
        if dim in given:
            if given[dim] not in values:
                held = ", ".join(sorted(set(values), key=str))
                raise ConfigError(f"--reference {dim}={given[dim]}: no cell of these stores has it; they hold {held}")
            reference[dim] = given[dim]
            continue
        preferred = [str(v) for v in PREFERRED.get(dim, ()) if str(v) in values]
        if preferred:
            reference[dim] = preferred[0]
        else:
            counts = {v: values.count(v) for v in sorted(set(values))}
            reference[dim] = max(counts, key=lambda v: counts[v])
    return reference


def matches(cell: CellScore, reference: Mapping[str, str], skip: str | None = None) -> bool:
    return all(str(cell.value(d)) == reference[d] for d in DIMENSIONS if d != skip)


__all__ = ["PREFERRED", "cell_scores", "choose_reference", "matches", "parse_reference"]
