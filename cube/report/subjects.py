"""The subjects section: each model's reference cell per subject and per category (micro, Wilson),
with the benchmark's own taxonomy or a user file's category column.

Why a module of its own: the one section that groups a cell's items (``rescore`` by level).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from cube.analysis.rescore import rescore
from cube.errors import CubeError
from cube.report.model import CellScore, GroupScore


def group_section(references: Sequence[CellScore], slices: Callable[[CellScore], pa.Table]) -> tuple[list[GroupScore], str | None]:
    """Per subject and per category of each model's reference cell (micro, Wilson), with the
    benchmark's own taxonomy; one line where there is none."""
    from cube.analysis.store_file import store_taxonomy

    out, note = [], None
    for cell in references:
        table = slices(cell)
        # a user's file: its own category column, as `cube rescore --level category` takes it
        taxonomy = store_taxonomy(cell.store) or None
        for level in ("subject", "category"):
            try:
                rows = rescore(table, level=level, taxonomy=taxonomy).rows.to_pylist()
            except CubeError as exc:
                note = f"per category: {exc}"
                continue
            out += [GroupScore(cell.model, level, str(r["group"]), int(r["n"]), float(r["accuracy"]),
                               float(r["ci_lo"]), float(r["ci_hi"]))
                    for r in rows if r["aggregation"] in ("pooled", "micro")]
    return out, note


__all__ = ["group_section"]
