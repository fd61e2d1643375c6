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

from cube.analysis.stats import Binning, expected_calibration_error, reliability_table
from cube.errors import CubeError


@dataclass(frozen=True)
class CalibrationInterval:
    ece: float  # the point value (expected_calibration_error)
    lo: float
    hi: float
    n: int
    replicates: int


def _bins_and_gaps(probs: np.ndarray, labels: np.ndarray, n_bins: int, binning: Binning) -> tuple[np.ndarray, np.ndarray]:
    """Each item's bin and its ``hit - confidence``, with the bins of ``reliability_table``."""
    table = reliability_table(probs, labels, n_bins, binning)  # validates probs and labels
    conf = probs.max(axis=1)
    pred = probs.argmax(axis=1)
    hit = (pred == labels).astype(np.float64)
    if binning == "width":
        edges = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
        bins = np.searchsorted(edges, conf, side="left")
    else:  # equal-mass bins are a property of the sample: resampling moves their edges
        raise CubeError("the ECE interval is defined for equal-width bins only")
    assert np.array_equal(np.bincount(bins, minlength=n_bins), table["count"])
    return bins, hit - conf


def ece_interval(probs: ArrayLike, labels: ArrayLike, n_bins: int = 10, replicates: int = 1000,
                 seed: int = 0, level: float = 0.95, chunk: int = 200) -> CalibrationInterval:
    """The ECE of ``probs`` against ``labels`` and its item-bootstrap percentile interval.

    Resamples are drawn as ``rng.integers(0, n, size=(chunk, n))`` replicate by replicate, in
    chunks, so a naive loop over the same draws (the test's reference) gives the same values.
    """
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels)
    point = expected_calibration_error(p, y, n_bins, "width")
    bins, gap = _bins_and_gaps(p, y, n_bins, "width")
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
