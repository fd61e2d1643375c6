"""An interval for the expected calibration error of one cell.

``cube.analysis.stats.expected_calibration_error`` gives the point value; a report that compares
cells needs to say how far that value moves with the item sample. Here: the percentile interval
of the item bootstrap. Each item keeps its bin under resampling (its confidence is its own), so
a replicate's ECE is ``sum_bins |sum_{i in bin} w_i (hit_i - conf_i)| / N`` with ``w`` the
replicate's multiplicities: one matrix product per chunk of replicates, not a loop over them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from cube.analysis.stats import _bin_index, _confidence_and_hits, expected_calibration_error


@dataclass(frozen=True)
class CalibrationInterval:
    ece: float  # the point value (expected_calibration_error)
    lo: float
    hi: float
    n: int
    replicates: int


def ece_interval(probs: ArrayLike, labels: ArrayLike, n_bins: int = 10, replicates: int = 1000,
                 seed: int = 0, level: float = 0.95, chunk: int = 200) -> CalibrationInterval:
    """The ECE of ``probs`` against ``labels`` and its item-bootstrap percentile interval.

    Resamples are drawn as ``rng.integers(0, n, size=(chunk, n))`` replicate by replicate, in
    chunks, so a naive loop over the same draws (the test's reference) gives the same values.
    """
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels)
    point = expected_calibration_error(p, y, n_bins, "width")
    conf, hit = _confidence_and_hits(p, y)  # the ECE's own top option and bins: one definition
    bins, gap = _bin_index(conf, n_bins, "width"), hit.astype(np.float64) - conf
    n = p.shape[0]
    rng = np.random.default_rng(seed)
    values = np.empty(replicates)
    onehot = np.zeros((n, n_bins))
    onehot[np.arange(n), bins] = gap
    done = 0
    while done < replicates:
        size = min(chunk, replicates - done)
        draws = rng.integers(0, n, size=(size, n))
        flat = (np.arange(size)[:, None] * n + draws).ravel()
        weights = np.bincount(flat, minlength=size * n).reshape(size, n).astype(np.float64)
        values[done:done + size] = np.abs(weights @ onehot).sum(axis=1) / n
        done += size
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    return CalibrationInterval(point, float(lo), float(hi), n, replicates)


__all__ = ["CalibrationInterval", "ece_interval"]
