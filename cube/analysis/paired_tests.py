"""Two protocols on the same items: the paired tests and intervals of an accuracy difference.

One family of the paper's statistics (:mod:`cube.analysis.stats` holds the conventions they share):
the exact McNemar test, its consistent interval and its power; the paired bootstrap; and, where
pairs repeat an item (several cells or models answer the same item), the item-clustered McNemar
test and bootstrap. They stand apart from one accuracy's intervals because every function here
takes two aligned outcome arrays, and only the discordant items carry the difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import bdtr, chdtrc

from cube.analysis.stats import as_outcomes, check_level
from cube.errors import CubeError


def _check_paired(a: NDArray, b: NDArray) -> None:
    if a.shape != b.shape:
        raise CubeError(
            f"paired outcomes must cover the same items: correct_a has {a.shape[0]} items, "
            f"correct_b has {b.shape[0]}"
        )


@dataclass(frozen=True)
class McNemarResult:
    """Discordant counts and the two-sided p-value.

    ``b``: items protocol A gets right and protocol B gets wrong; ``c``: the reverse.
    ``statistic`` is ``b / (b + c)`` (NaN when there are no discordant pairs), the observed
    share of discordant pairs won by A, which is 0.5 under the null hypothesis.
    """

    b: int
    c: int
    statistic: float
    p_value: float
    mid_p: bool


def mcnemar_exact(correct_a: ArrayLike, correct_b: ArrayLike, mid_p: bool = False) -> McNemarResult:
    """Exact McNemar test: do two protocols differ in accuracy on the same items?

    Only discordant items carry information about the difference, and under the null each is
    equally likely to favour either protocol, so ``b ~ Binomial(b + c, 1/2)``. The two-sided
    p-value is ``min(1, 2 * P(X <= min(b, c)))``, which for p = 1/2 equals scipy's
    ``binomtest(b, b + c, 0.5).pvalue``. With no discordant pairs there is no evidence: p = 1.

    ``mid_p=True`` gives the mid-p variant ``P(X <= m) + P(X <= m - 1)`` (half the weight of the
    observed outcome), which is less conservative; it is opt-in because the paper's headline
    tests use the exact p-value.
    """
    a = as_outcomes("correct_a", correct_a)
    b_arr = as_outcomes("correct_b", correct_b)
    _check_paired(a, b_arr)
    b = int(np.count_nonzero(a & ~b_arr))
    c = int(np.count_nonzero(~a & b_arr))
    n = b + c
    if n == 0:
        return McNemarResult(b, c, math.nan, 1.0, mid_p)
    m = min(b, c)
    tail = float(bdtr(m, n, 0.5))
    if mid_p:
        below = float(bdtr(m - 1, n, 0.5)) if m > 0 else 0.0
        p = tail + below
    else:
        p = 2.0 * tail
    return McNemarResult(b, c, b / n, min(1.0, p), mid_p)


@dataclass(frozen=True)
class McNemarInterval:
    """The paired accuracy difference A − B with the exact interval that agrees with the test."""

    n: int
    b: int
    c: int
    delta: float
    lo: float
    hi: float
    p_value: float


def mcnemar_interval(correct_a: ArrayLike, correct_b: ArrayLike, level: float = 0.95) -> McNemarInterval:
    """A − B with the interval of the exact McNemar test, so that the two never disagree.

    A bootstrap interval of the difference and the exact McNemar p-value are two tests; on 600
    items one can exclude 0 while the other gives p = 0.058. This interval is the exact one of
    the same conditional model: given the ``d = b + c`` discordant items, ``b ~ Binomial(d, π)``
    and ``A − B = (d / n)(2π − 1)``, so the Clopper–Pearson interval of ``π`` maps to one of the
    difference. It inverts the two one-sided exact binomial tests at ``(1 − level) / 2`` each, so
    at level 0.95 it excludes 0 exactly when :func:`mcnemar_exact`'s p-value is below 0.05.
    """
    check_level(level)
    a = as_outcomes("correct_a", correct_a)
    b_arr = as_outcomes("correct_b", correct_b)
    _check_paired(a, b_arr)
    n = int(a.size)
    if n == 0:
        raise CubeError("mcnemar_interval needs at least one paired item")
    test = mcnemar_exact(a, b_arr)
    d = test.b + test.c
    delta = (test.b - test.c) / n
    if d == 0:
        return McNemarInterval(n, 0, 0, 0.0, 0.0, 0.0, 1.0)
    from scipy.stats import beta

    tail = (1.0 - level) / 2.0
    pi_lo = float(beta.ppf(tail, test.b, d - test.b + 1)) if test.b > 0 else 0.0
    pi_hi = float(beta.ppf(1.0 - tail, test.b + 1, d - test.b)) if test.b < d else 1.0
    scale = d / n
    return McNemarInterval(n, test.b, test.c, delta, scale * (2 * pi_lo - 1), scale * (2 * pi_hi - 1),
                           test.p_value)


def mcnemar_power(n: int, discordant_rate: float, delta: float, alpha: float = 0.05) -> float:
    """Power of the two-sided exact McNemar test to detect an accuracy difference ``delta``.

    The items split into discordant ones at rate ``discordant_rate`` (taken from the data: the
    protocol's effect on it is what a study can plan with), of which a share
    ``π = (1 + delta / discordant_rate) / 2`` favour A. Power sums, over every discordant count
    ``d ~ Binomial(n, discordant_rate)``, the probability that ``b ~ Binomial(d, π)`` lands in
    the test's rejection region at ``d``; it is exact, not simulated.
    """
    from scipy.stats import binom

    if n < 1:
        raise CubeError(f"mcnemar_power needs n >= 1 items, got {n!r}")
    if not 0.0 < discordant_rate <= 1.0:
        raise CubeError(f"discordant_rate must lie in (0, 1], got {discordant_rate!r}")
    if abs(delta) > discordant_rate:
        raise CubeError(f"an accuracy difference of {delta!r} needs at least that share of discordant items, "
                        f"got {discordant_rate!r}")
    if not 0.0 < alpha < 1.0:
        raise CubeError(f"alpha must lie in (0, 1), got {alpha!r}")
    pi = 0.5 * (1.0 + delta / discordant_rate)
    ds = np.arange(n + 1)
    weight = binom.pmf(ds, n, discordant_rate)
    power = 0.0
    for d, w in zip(ds, weight):
        if d == 0 or w < 1e-15:
            continue
        ks = np.arange(d + 1)
        lower = bdtr(np.minimum(ks, d - ks), d, 0.5)
        reject = np.minimum(1.0, 2.0 * lower) < alpha
        power += w * float(binom.pmf(ks[reject], d, pi).sum())
    return float(power)


def paired_bootstrap_ci(
    correct_a: ArrayLike,
    correct_b: ArrayLike,
    B: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Accuracy difference ``acc(A) - acc(B)`` with a paired percentile-bootstrap interval.

    Paired because both protocols answer the same items: resampling items (not the two
    protocols independently) keeps the item-difficulty correlation that makes the difference
    far more precise than either accuracy.

    Resampling N item indices and summing ``d_i = a_i - b_i`` only depends on how many drawn
    items have ``d = +1`` and how many ``d = -1``; those counts are exactly
    ``Multinomial(N, (n_plus/N, n_minus/N, n_zero/N))``. Drawing them directly gives the same
    bootstrap distribution as index resampling at O(B) cost instead of O(B * N).
    """
    check_level(level)
    if B < 1:
        raise CubeError(f"number of bootstrap replicates B must be >= 1, got {B!r}")
    a = as_outcomes("correct_a", correct_a)
    b = as_outcomes("correct_b", correct_b)
    _check_paired(a, b)
    n = a.size
    n_plus = int(np.count_nonzero(a & ~b))
    n_minus = int(np.count_nonzero(~a & b))
    shares = np.array([n_plus, n_minus, n - n_plus - n_minus], dtype=np.float64) / n
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, shares, size=B)
    deltas = (draws[:, 0] - draws[:, 1]) / n
    alpha = 1.0 - level
    lo, hi = np.quantile(deltas, [alpha / 2.0, 1.0 - alpha / 2.0])
    return (n_plus - n_minus) / n, float(lo), float(hi)


# --------------------------------------------------------------------------------------------
# Pairs that repeat an item (several cells or models answer the same item)
# --------------------------------------------------------------------------------------------


def _cluster_codes(clusters: ArrayLike, n_pairs: int) -> tuple[NDArray[np.intp], int]:
    keys = np.asarray(clusters)
    if keys.ndim != 1 or keys.size != n_pairs:
        raise CubeError(
            f"clusters must name one item per pair: {n_pairs} pairs, {keys.size} clusters"
        )
    _, codes = np.unique(keys, return_inverse=True)
    return codes, int(codes.max()) + 1


@dataclass(frozen=True)
class ClusteredMcNemarResult:
    """McNemar's test with items as clusters: ``b``/``c`` as in :class:`McNemarResult`."""

    b: int
    c: int
    n_clusters: int
    statistic: float  # chi-square, 1 degree of freedom
    p_value: float


def clustered_mcnemar(
    correct_a: ArrayLike, correct_b: ArrayLike, clusters: ArrayLike
) -> ClusteredMcNemarResult:
    """McNemar's test when pairs repeat an item (Durkalski et al. 2003, Stat Med 22:2417).

    Pooling several cells or models pairs each item many times; the exact McNemar test then
    counts one item's correlated outcomes as independent evidence, and repeating every pair k
    times divides its p-value without limit. Here each item ``k`` contributes ``d_k`` = (pairs
    only A gets right) - (pairs only B gets right) over all its cells, and the statistic
    ``(sum d_k)^2 / sum d_k^2`` is referred to chi-square with 1 degree of freedom: the
    item-stratified form of McNemar's, whose variance is estimated from the items themselves.
    With one pair per item it is McNemar's chi-square ``(b - c)^2 / (b + c)``; repeating every
    pair of an item k times leaves it unchanged. With no item tilted either way, p = 1.
    """
    a = as_outcomes("correct_a", correct_a)
    b = as_outcomes("correct_b", correct_b)
    _check_paired(a, b)
    codes, n_clusters = _cluster_codes(clusters, a.size)
    only_a, only_b = a & ~b, ~a & b
    d = np.bincount(codes, weights=only_a.astype(np.int64) - only_b.astype(np.int64),
                    minlength=n_clusters).astype(np.int64)
    total, square = int(d.sum()), int((d * d).sum())
    n_b, n_c = int(only_a.sum()), int(only_b.sum())
    if square == 0:
        return ClusteredMcNemarResult(n_b, n_c, n_clusters, 0.0, 1.0)
    statistic = total * total / square
    return ClusteredMcNemarResult(n_b, n_c, n_clusters, statistic, float(chdtrc(1, statistic)))


@dataclass(frozen=True)
class ClusteredDifference:
    """``acc(A) - acc(B)`` over pairs, with an item-clustered bootstrap interval and p-value."""

    delta: float
    lo: float
    hi: float
    p_value: float
    n_pairs: int
    n_clusters: int


def clustered_bootstrap_ci(
    correct_a: ArrayLike,
    correct_b: ArrayLike,
    clusters: ArrayLike,
    B: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
    chunk: int = 256,
) -> ClusteredDifference:
    """Accuracy difference of pairs that repeat items, resampling items with all their pairs.

    :func:`paired_bootstrap_ci` resamples pairs, which is right when each item is one pair; when
    cells or models share items, their pairs rise and fall together with the item, and
    resampling them apart makes the interval too narrow by about the square root of the
    repetition. Drawing items (every pair of a drawn item comes along, as often as it is drawn)
    keeps that dependence. Each replicate is ``sum of d over drawn pairs / their number``.

    The p-value is the centred bootstrap's two-sided one (Hall and Wilson 1991):
    ``(1 + #{|delta* - delta| >= |delta|}) / (B + 1)``, the share of replicates that stray from
    the estimate at least as far as the estimate is from 0. It is computed in integers, so ties
    at the boundary count exactly. Items are drawn as rows of
    ``rng.integers(0, K, size=(chunk, K))``, the same stream as one row per replicate, so
    ``chunk`` changes memory (about ``chunk * K * 8`` bytes), never the result.
    """
    check_level(level)
    if B < 1:
        raise CubeError(f"number of bootstrap replicates B must be >= 1, got {B!r}")
    if chunk < 1:
        raise CubeError(f"chunk must be >= 1, got {chunk!r}")
    a = as_outcomes("correct_a", correct_a)
    b = as_outcomes("correct_b", correct_b)
    _check_paired(a, b)
    codes, n_clusters = _cluster_codes(clusters, a.size)
    d = a.astype(np.int64) - b.astype(np.int64)
    sums = np.bincount(codes, weights=d, minlength=n_clusters).astype(np.int64)
    sizes = np.bincount(codes, minlength=n_clusters).astype(np.int64)
    total, n = int(d.sum()), a.size
    rng = np.random.default_rng(seed)
    deltas = np.empty(B, dtype=np.float64)
    far = 0
    for start in range(0, B, chunk):
        reps = min(chunk, B - start)
        idx = rng.integers(0, n_clusters, size=(reps, n_clusters))
        idx += (np.arange(reps) * n_clusters)[:, None]
        counts = np.bincount(idx.ravel(), minlength=reps * n_clusters).reshape(reps, n_clusters)
        s, m = counts @ sums, counts @ sizes
        deltas[start : start + reps] = s / m
        # |s/m - total/n| >= |total/n|  <=>  |s*n - total*m| >= |total|*m  (m, n > 0)
        far += int(np.count_nonzero(np.abs(s * n - total * m) >= abs(total) * m))
    alpha = 1.0 - level
    lo, hi = np.quantile(deltas, [alpha / 2.0, 1.0 - alpha / 2.0])
    return ClusteredDifference(total / n, float(lo), float(hi), (1 + far) / (B + 1), n, n_clusters)
