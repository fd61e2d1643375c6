"""The ECE interval: its replicates are the ECE of the resampled items, by a naive loop."""

import numpy as np
import pytest

from cube.analysis.calibration import ece_interval
from cube.analysis.calibration import expected_calibration_error


def _cell(n=120, k=4, seed=3):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    gold = rng.integers(0, k, size=n)
    return probs, gold


def test_the_interval_is_the_percentiles_of_the_naively_resampled_ece():
    probs, gold = _cell()
    got = ece_interval(probs, gold, replicates=300, seed=7, chunk=64)
    rng = np.random.default_rng(7)
    naive = []
    for size in (64, 64, 64, 64, 44):
        draws = rng.integers(0, len(gold), size=(size, len(gold)))
        naive += [expected_calibration_error(probs[d], gold[d]) for d in draws]
    lo, hi = np.quantile(naive, [0.025, 0.975])
    assert got.ece == pytest.approx(expected_calibration_error(probs, gold))
    assert (got.lo, got.hi) == pytest.approx((lo, hi), abs=1e-12)
    assert got.lo <= got.ece <= got.hi
