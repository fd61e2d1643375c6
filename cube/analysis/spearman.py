"""Spearman's rank correlation with its exact p-value, for the handful of models a ranking here has.

scipy's ``spearmanr`` gives a p from the t approximation, which at n = 4 is not the test's: with
4 models only 24 orderings exist, so the exact two-sided p of ρ = +0.80 is 8/24 = 0.33 (issue 47:
the book printed ρ without any p). Every ordering of one variable's ranks is enumerated against
the other's, ties sharing their mean rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import permutations

import numpy as np
from numpy.typing import ArrayLike

from cube.analysis.footrule import average_ranks
from cube.errors import CubeError

MAX_EXACT_N = 9  # 9! = 362,880 orderings; beyond that the enumeration is too slow to be the default


@dataclass(frozen=True)
class SpearmanResult:
    rho: float
    p_value: float  # exact two-sided: the share of orderings with |ρ| at least the observed
    n: int
    orderings: int  # how many were enumerated (n!)


def _rho(ra: np.ndarray, rb: np.ndarray) -> float:
    da, db = ra - ra.mean(), rb - rb.mean()
    denominator = math.sqrt(float((da * da).sum() * (db * db).sum()))
    return float((da * db).sum() / denominator) if denominator > 0 else 0.0


def spearman_exact(x: ArrayLike, y: ArrayLike) -> SpearmanResult:
    """ρ between ``x`` and ``y`` (Pearson's correlation of their mean ranks) and its exact
    two-sided permutation p-value over all n! orderings of ``y``'s ranks."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise CubeError(f"spearman_exact needs two equal-length 1-d sequences, got shapes {a.shape} and {b.shape}")
    n = a.size
    if n < 2 or n > MAX_EXACT_N:
        raise CubeError(f"spearman_exact enumerates n! orderings: n must be 2 to {MAX_EXACT_N}, got {n}")
    ra, rb = average_ranks(-a), average_ranks(-b)  # ρ does not depend on the rank direction
    observed = _rho(ra, rb)
    tolerance = 1e-12
    extreme = sum(abs(_rho(ra, np.asarray(p))) >= abs(observed) - tolerance for p in permutations(rb))
    total = math.factorial(n)
    return SpearmanResult(observed, extreme / total, n, total)
