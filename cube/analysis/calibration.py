"""Calibration of one cell: the reliability table, the expected calibration error and its interval.

One family of the paper's statistics (:mod:`cube.analysis.stats` holds the conventions they share):
whether the option distribution a protocol induces can be read as a probability of being right.
The reliability table and the ECE come from one binning of the top option, so the plot and the
number cannot disagree; a report that compares cells also needs to say how far the ECE moves with
the item sample. That is the percentile interval of the item bootstrap. Each item keeps its bin
under resampling (its confidence is its own), so a replicate's ECE is
``sum_bins |sum_{i in bin} w_i (hit_i - conf_i)| / N`` with ``w`` the replicate's multiplicities:
one matrix product per chunk of replicates, not a loop over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import ArrayLike, NDArray

from cube.analysis.slices import CELL_COLUMNS
from cube.errors import ConfigError, CubeError
from cube.records.schema import GENERATION_RECORD_SCORERS
from cube.records.store import group_ids, list_matrix

Binning = Literal["width", "mass"]


def _confidence_and_hits(probs: ArrayLike, labels: ArrayLike) -> tuple[NDArray, NDArray]:
    """Top-option probability and whether the top option is gold.

    Argmax ties go to the first option (numpy's rule), the same tie-break the harness's argmax
    scorer uses, so the calibration figure describes the predictions actually scored.
    """
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] < 2:
        raise CubeError(f"probs must be an (items, options) array with >= 2 options, got {p.shape}")
    if y.shape != (p.shape[0],):
        raise CubeError(
            f"labels must have one gold index per item ({p.shape[0]}), got shape {y.shape}"
        )
    if not np.issubdtype(y.dtype, np.integer):
        raise CubeError(f"labels must be integer option indices, got dtype {y.dtype}")
    bad_label = (y < 0) | (y >= p.shape[1])
    if bad_label.any():
        i = int(np.argmax(bad_label))
        raise CubeError(f"labels row {i}: gold index {int(y[i])} is outside 0..{p.shape[1] - 1}")
    bad_prob = ~np.isfinite(p) | (p < 0.0) | (p > 1.0)
    if bad_prob.any():
        i, j = (int(x) for x in np.argwhere(bad_prob)[0])
        raise CubeError(
            f"probs row {i}, option {j}: {p[i, j].item()!r} is not a probability in [0, 1]"
        )
    off = np.abs(p.sum(axis=1) - 1.0) > 1e-4
    if off.any():
        i = int(np.argmax(off))
        raise CubeError(
            f"probs row {i} sums to {p[i].sum():.6g}, not 1; renormalise over the options"
        )
    pred = p.argmax(axis=1)
    return p[np.arange(p.shape[0]), pred], pred == y


def _bin_index(conf: NDArray, n_bins: int, binning: Binning) -> NDArray[np.intp]:
    """Bin of each item.

    ``width``: edges ``np.linspace(0, 1, n_bins + 1)``; bins are right-closed ``(lo, hi]`` except
    the first, ``[0, hi]``, so confidence 1.0 lands in the last bin and 0.0 in the first.

    ``mass``: items sorted by confidence (stable, so ties keep item order) and cut into
    ``n_bins`` runs whose sizes differ by at most one (``np.array_split``'s rule, larger runs
    first). Equal counts are the point of equal-mass binning, so tied confidences may straddle
    a boundary rather than making bins unequal.
    """
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise CubeError(f"n_bins must be a positive integer, got {n_bins!r}")
    if binning == "width":
        inner_edges = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
        return np.searchsorted(inner_edges, conf, side="left")
    if binning == "mass":
        n = conf.size
        order = np.argsort(conf, kind="stable")
        sizes = np.full(n_bins, n // n_bins)
        sizes[: n % n_bins] += 1
        bins = np.empty(n, dtype=np.intp)
        bins[order] = np.repeat(np.arange(n_bins), sizes)
        return bins
    raise CubeError(f"binning must be 'width' or 'mass', got {binning!r}")


def reliability_table(
    probs: ArrayLike, labels: ArrayLike, n_bins: int = 10, binning: Binning = "width"
) -> dict[str, NDArray]:
    """Per-bin counts, accuracy and mean confidence: the data of a reliability diagram.

    A dict of equal-length numpy arrays (one entry per bin, empty bins included) rather than a
    data frame, so the statistics need no pandas. ``bin_lo``/``bin_hi`` are the fixed edges for
    ``width`` bins and the smallest/largest confidence in the bin for ``mass`` bins. Empty bins
    have ``count`` 0 and NaN accuracy, confidence and (for ``mass``) edges.
    """
    conf, hit = _confidence_and_hits(probs, labels)
    bins = _bin_index(conf, n_bins, binning)
    count = np.bincount(bins, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.bincount(bins, weights=hit.astype(np.float64), minlength=n_bins) / count
        confidence = np.bincount(bins, weights=conf, minlength=n_bins) / count
    if binning == "width":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        bin_lo, bin_hi = edges[:-1].copy(), edges[1:].copy()
    else:
        bin_lo = np.full(n_bins, np.nan)
        bin_hi = np.full(n_bins, np.nan)
        filled = count > 0
        bin_lo[filled] = [conf[bins == m].min() for m in np.flatnonzero(filled)]
        bin_hi[filled] = [conf[bins == m].max() for m in np.flatnonzero(filled)]
    return {
        "bin_lo": bin_lo,
        "bin_hi": bin_hi,
        "count": count,
        "accuracy": accuracy,
        "confidence": confidence,
    }


def expected_calibration_error(
    probs: ArrayLike, labels: ArrayLike, n_bins: int = 10, binning: Binning = "width"
) -> float:
    """ECE = sum over bins of ``|B_m| / N * |acc(B_m) - conf(B_m)|`` on the top option.

    It answers whether the option distribution a protocol induces can be read as a probability
    of being right; computed from the same bins as :func:`reliability_table` so that the plot
    and the number cannot disagree.
    """
    table = reliability_table(probs, labels, n_bins, binning)
    count = table["count"]
    filled = count > 0
    gaps = np.abs(table["accuracy"][filled] - table["confidence"][filled])
    return float(np.sum(count[filled] * gaps) / count.sum())


def calibration(
    table: pa.Table, n_bins: int = 10, binning: Binning = "width"
) -> pa.Table:
    """Expected calibration error of every scored (non-generation) cell, from ``probs``.

    Generation cells are left out: their ``probs`` are not an option distribution the model
    gave. One ``expected_calibration_error`` call per cell (a few hundred at paper scale).
    """
    if "probs" not in table.column_names:
        raise ConfigError("calibration needs the probs column; read the records with it")
    scored = table.filter(pc.invert(pc.is_in(table.column("scorer"),
                                             value_set=pa.array(GENERATION_RECORD_SCORERS))))
    if scored.num_rows == 0:
        raise ConfigError("no scored (non-generation) records in this slice")
    ids, keys = group_ids(scored, CELL_COLUMNS)
    probs = list_matrix(scored, "probs").astype(np.float64)
    gold = scored.column("gold").to_numpy().astype(np.int64)
    order = np.argsort(ids, kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(len(keys) + 1))
    out: dict[str, list] = {name: [] for name in (*CELL_COLUMNS, "n", "ece")}
    for g, key in enumerate(keys):
        rows = order[bounds[g]:bounds[g + 1]]
        p = probs[rows] / probs[rows].sum(axis=1, keepdims=True)  # float32 storage rounding
        for name, value in zip(CELL_COLUMNS, key):
            out[name].append(value)
        out["n"].append(int(rows.size))
        out["ece"].append(expected_calibration_error(p, gold[rows], n_bins, binning))
    out["shots"] = pa.array(out["shots"], type=pa.int8())
    return pa.table(out)


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


__all__ = ["Binning", "CalibrationInterval", "calibration", "ece_interval", "expected_calibration_error", "reliability_table"]
