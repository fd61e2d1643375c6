"""The calibration section: each log-likelihood cell's ECE with its item-bootstrap interval and its
reliability bins (``cube.analysis.calibration``, ``cube.analysis.stats``).

Why a module of its own: the one section that reads the records' option probabilities.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from cube.records.schema import GENERATION_RECORD_SCORERS
from cube.records.store import list_matrix
from cube.report.model import CalibrationCell, CellScore


def calibration_section(cells: Sequence[CellScore], slices: Callable[[CellScore], pa.Table],
                        replicates: int, seed: int) -> list[CalibrationCell]:
    from cube.analysis.calibration import ece_interval
    from cube.analysis.calibration import reliability_table

    out = []
    for cell in cells:
        if cell.scorer in GENERATION_RECORD_SCORERS:
            continue
        table = slices(cell)
        if "probs" not in table.column_names or table.num_rows < 2:
            continue
        if np.isnan(list_matrix(table, "scores")).any():  # a generation (an import's too): no option scores
            continue
        probs = list_matrix(table, "probs").astype(np.float64)
        probs = probs / probs.sum(axis=1, keepdims=True)  # float32 storage rounding, as rescore's calibration
        gold = table.column("gold").to_numpy().astype(np.int64)
        interval = ece_interval(probs, gold, replicates=replicates, seed=seed)
        bins = reliability_table(probs, gold)
        filled = bins["count"] > 0
        out.append(CalibrationCell(cell.model, cell.name, cell.n, interval.ece, interval.lo, interval.hi,
                                   bins["confidence"][filled].tolist(), bins["accuracy"][filled].tolist(),
                                   bins["count"][filled].astype(int).tolist()))
    return out


__all__ = ["calibration_section"]
