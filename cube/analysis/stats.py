"""The paper's statistics: small pure functions over numpy arrays.

Every claim the paper makes about a protocol (an accuracy, a difference between two protocols,
a calibration figure, a change of model ranking) goes through one of these functions, so each is
short enough to check by hand and each is tested against an independent computation (scipy, a
naive loop, or a closed form).

Conventions shared by all functions:

* ``correct`` arrays are per-item outcomes, bool (or 0/1) with one entry per item.
* Paired functions take two arrays over the *same items in the same order*; it is the caller's
  job (the records store) to align them by ``uid``.
* Randomised functions take an explicit ``seed`` and give the same answer for the same seed.
* Bad input raises :class:`cube.errors.CubeError` with a one-line message naming the argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import bdtr, chdtrc, gammaln
from tqdm import tqdm

from cube.errors import CubeError

# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------


def _as_outcomes(name: str, values: ArrayLike, ndim: int = 1) -> NDArray[np.bool_]:
    """Accept bool or 0/1 arrays: records store outcomes as bool, notebooks often as ints."""
    arr = np.asarray(values)
    if arr.ndim != ndim:
        raise CubeError(
            f"{name} must be a {ndim}-D array of per-item outcomes, got shape {arr.shape}"
        )
    if arr.size == 0:
        raise CubeError(f"{name} is empty; at least one item is needed")
    if arr.dtype == np.bool_:
        return arr
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise CubeError(f"{name} must be bool or 0/1, got dtype {arr.dtype}")
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise CubeError(f"{name} must be bool or 0/1; entry {where} is {arr[where].item()!r}")
    return arr.astype(bool)


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise CubeError(f"confidence level must lie strictly between 0 and 1, got {level!r}")


def _check_paired(a: NDArray, b: NDArray) -> None:
    if a.shape != b.shape:
        raise CubeError(
            f"paired outcomes must cover the same items: correct_a has {a.shape[0]} items, "
            f"correct_b has {b.shape[0]}"
        )


# --------------------------------------------------------------------------------------------
# Accuracy with an interval
# --------------------------------------------------------------------------------------------


def wilson_interval(
    successes: ArrayLike, trials: ArrayLike, level: float = 0.95
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Wilson score interval for a binomial proportion, vectorised over subjects or slices.

    Wilson rather than the normal (Wald) interval because per-subject accuracies sit near 0 or 1
    on small subjects, where Wald collapses to zero width or leaves [0, 1]; Wilson does neither.
    Array-valued so that rescoring can get every subject's interval in one call.
    """
    _check_level(level)
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise CubeError("wilson_interval needs 0 <= successes <= trials and trials > 0")
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denom
    half = z * np.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    # The interval always contains p; at p = 0 or 1 the bound is exact in closed form but
    # centre - half rounds to ~1e-17 off it, so clamp to p (and to [0, 1]).
    lo = np.minimum(np.clip(centre - half, 0.0, 1.0), p)
    hi = np.maximum(np.clip(centre + half, 0.0, 1.0), p)
    return lo, hi


def accuracy_ci(correct: ArrayLike, level: float = 0.95) -> tuple[float, float, float]:
    """Accuracy and its Wilson score interval: every accuracy the paper reports carries one."""
    outcomes = _as_outcomes("correct", correct)
    k, n = int(outcomes.sum()), outcomes.size
    lo, hi = wilson_interval(k, n, level)
    return k / n, float(lo), float(hi)


def macro_effective_n(trials: ArrayLike) -> float:
    """The sample size that gives an equally weighted mean of stratum proportions its variance.

    The mean of S proportions ``p_s`` over ``n_s`` items each has variance
    ``sum p_s(1 - p_s) / n_s / S**2``; with a common ``p`` that is ``p(1 - p) / n_eff`` for
    ``n_eff = S**2 / sum(1 / n_s)`` (the harmonic-mean size times S: the total when strata are
    equal, less when they are not).
    """
    n = np.asarray(trials, dtype=np.float64)
    if n.ndim != 1 or n.size == 0 or np.any(n <= 0):
        raise CubeError("macro_effective_n needs a non-empty 1-D array of positive stratum sizes")
    return float(n.size**2 / np.sum(1.0 / n))


def stratified_wilson_interval(
    mean: ArrayLike, effective_n: ArrayLike, level: float = 0.95
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Stratified Wilson interval (Yan & Su 2010) of a macro mean, vectorised over groups.

    Why not the normal interval ``mean ± z sqrt(sum p_s(1 - p_s)/n_s) / S``: its plug-in variance
    is 0 whenever every stratum's proportion is 0 or 1, which is always the case with one item per
    subject (``cube run --sample N`` below 67 draws exactly that), so it reported a macro accuracy
    of 0.167 as [0.167, 0.167]. The stratified Wilson interval is the set of ``p`` with
    ``(mean - p)**2 <= z**2 p(1 - p) / n_eff`` (:func:`macro_effective_n`): Wilson's score
    interval, with the variance taken at the candidate ``p`` rather than at the estimates, so it
    has width for any counts. With one item per subject it is the Wilson interval of the pooled
    items; when subjects differ, taking the variance at the common ``p`` overstates it (the mean
    of ``p_s(1 - p_s)`` is at most ``p(1 - p)``), so the interval errs wide, not narrow. By
    simulation (tests/analysis/test_stats.py) it covers at least 93% at the 95% level for 10 to
    67 subjects of 1 to 5 items each.
    """
    n = np.asarray(effective_n, dtype=np.float64)
    p = np.asarray(mean, dtype=np.float64)
    if np.any(p < 0.0) or np.any(p > 1.0):
        raise CubeError("stratified_wilson_interval needs a mean in [0, 1]")
    return wilson_interval(np.minimum(p * n, n), n, level)


def macro_accuracy_ci(
    successes: ArrayLike, trials: ArrayLike, level: float = 0.95
) -> tuple[float, float, float]:
    """Macro accuracy (the unweighted mean of stratum accuracies) and its stratified Wilson interval."""
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    n_eff = macro_effective_n(n)
    if k.shape != n.shape or np.any(k < 0) or np.any(k > n):
        raise CubeError("macro_accuracy_ci needs 0 <= successes <= trials, one entry per stratum")
    mean = float(np.mean(k / n))
    lo, hi = stratified_wilson_interval(mean, n_eff, level)
    return mean, float(lo), float(hi)


# --------------------------------------------------------------------------------------------
# Two protocols on the same items
# --------------------------------------------------------------------------------------------


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
    a = _as_outcomes("correct_a", correct_a)
    b_arr = _as_outcomes("correct_b", correct_b)
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
    _check_level(level)
    a = _as_outcomes("correct_a", correct_a)
    b_arr = _as_outcomes("correct_b", correct_b)
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
    _check_level(level)
    if B < 1:
        raise CubeError(f"number of bootstrap replicates B must be >= 1, got {B!r}")
    a = _as_outcomes("correct_a", correct_a)
    b = _as_outcomes("correct_b", correct_b)
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
    a = _as_outcomes("correct_a", correct_a)
    b = _as_outcomes("correct_b", correct_b)
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
    _check_level(level)
    if B < 1:
        raise CubeError(f"number of bootstrap replicates B must be >= 1, got {B!r}")
    if chunk < 1:
        raise CubeError(f"chunk must be >= 1, got {chunk!r}")
    a = _as_outcomes("correct_a", correct_a)
    b = _as_outcomes("correct_b", correct_b)
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


# --------------------------------------------------------------------------------------------
# Several tests at once
# --------------------------------------------------------------------------------------------


def holm_adjust(p_values: ArrayLike) -> NDArray[np.float64]:
    """Holm's step-down adjusted p-values: reject ``i`` at level α when ``adjusted[i] < α``.

    A page that runs k tests and reports the ones below 0.05 reports about 0.05 k false positives;
    Holm's correction holds the chance of any false positive to α for every k, with no
    assumption about how the tests depend on each other, and rejects at least what Bonferroni's
    does. The i-th smallest p is multiplied by ``k − i`` (0-based), kept monotone, capped at 1.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise CubeError(f"p_values must be 1-D, got shape {p.shape}")
    if p.size and (np.isnan(p).any() or p.min() < 0.0 or p.max() > 1.0):
        raise CubeError("p_values must lie in [0, 1]")
    k = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((k - np.arange(k)) * p[order])
    adjusted = np.empty(k, dtype=np.float64)
    adjusted[order] = np.minimum(1.0, stepped)
    return adjusted


def above_chance_p(n_correct: int, n: int, chance: float) -> float:
    """One-sided exact binomial p-value of ``n_correct`` of ``n`` against a guesser's rate.

    "Genuine accuracy" is accuracy a guesser would not reach: with four options, above 1/4. A
    scorer that only matches a tie-break reaches the tie-break's rate, which is not a test of
    the model; against chance it is.
    """
    if not 0 <= n_correct <= n or n < 1:
        raise CubeError(f"need 0 <= n_correct <= n and n >= 1, got {n_correct!r} of {n!r}")
    if not 0.0 < chance < 1.0:
        raise CubeError(f"chance must lie in (0, 1), got {chance!r}")
    return float(bdtr(n - n_correct, n, 1.0 - chance)) if n_correct > 0 else 1.0


def poisson_binomial_pmf(chances: ArrayLike) -> NDArray[np.float64]:
    """P(X = j), j = 0..n, of X the number right among independent items, item i right with
    probability ``chances[i]`` (a guesser on items of N_i options: 1/N_i).

    Items share a few option counts, so the distribution is the convolution of one binomial per
    distinct chance (exact, and O(n · distinct) instead of the O(n²) recursion over items)."""
    p = np.asarray(chances, dtype=np.float64).reshape(-1)
    if p.size and (np.isnan(p).any() or p.min() <= 0.0 or p.max() >= 1.0):
        raise CubeError("chances must lie in (0, 1)")
    pmf = np.ones(1)
    for chance, m in zip(*np.unique(p, return_counts=True)):
        j = np.arange(m + 1)
        log_pmf = (gammaln(m + 1) - gammaln(j + 1) - gammaln(m - j + 1) + j * math.log(chance)
                   + (m - j) * math.log1p(-chance))
        pmf = np.convolve(pmf, np.exp(log_pmf))
    return pmf


def above_chance_p_per_item(n_correct: int, chances: ArrayLike) -> float:
    """One-sided exact p-value of ``n_correct`` right against a guesser whose chance differs by
    item (``chances[i]`` = 1/N_i): the Poisson-binomial tail P(X >= n_correct).

    A user's file of 3-, 4- and 5-option items has no single chance rate, and a binomial at the
    mean rate is not exact. Where every item has the same chance it is ``above_chance_p``'s
    binomial tail, computed by that function (so the two agree to the last digit)."""
    p = np.asarray(chances, dtype=np.float64).reshape(-1)
    n = p.size
    if not 0 <= n_correct <= n or n < 1:
        raise CubeError(f"need 0 <= n_correct <= n and n >= 1, got {n_correct!r} of {n!r}")
    if np.all(p == p[0]):
        return above_chance_p(n_correct, n, float(p[0]))
    if n_correct == 0:
        return 1.0
    return float(min(1.0, poisson_binomial_pmf(p)[n_correct:].sum()))


# --------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Rankings
# --------------------------------------------------------------------------------------------


def average_ranks(scores: ArrayLike) -> NDArray[np.float64]:
    """Rank models by score along the last axis: rank 1 = highest score; ties share their mean.

    Average ranks (scipy's ``rankdata(-scores, method='average')``) keep the footrule
    symmetric in tied models, so two models with equal accuracy never move the statistic just
    because of their order in the input. Works on a batch ``(..., n_models)`` so the noise
    floor can rank thousands of bootstrap replicates at once. Ties are exact equality: pass
    integer hit counts (not rounded accuracies) when ties matter.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 0 or s.shape[-1] == 0:
        raise CubeError(f"scores must have at least one model along the last axis, got {s.shape}")
    if np.isnan(s).any():
        raise CubeError("scores contain NaN; a model without a score cannot be ranked")
    n = s.shape[-1]
    order = np.argsort(-s, axis=-1, kind="stable")
    ranked = np.take_along_axis(s, order, axis=-1)
    pos = np.broadcast_to(np.arange(n), ranked.shape)
    starts_run = np.ones(ranked.shape, dtype=bool)
    starts_run[..., 1:] = ranked[..., 1:] != ranked[..., :-1]
    ends_run = np.ones(ranked.shape, dtype=bool)
    ends_run[..., :-1] = starts_run[..., 1:]
    run_start = np.maximum.accumulate(np.where(starts_run, pos, 0), axis=-1)
    run_end = np.flip(
        np.minimum.accumulate(np.flip(np.where(ends_run, pos, n - 1), axis=-1), axis=-1), axis=-1
    )
    ranks = np.empty_like(ranked)
    np.put_along_axis(ranks, order, (run_start + run_end) / 2.0 + 1.0, axis=-1)
    return ranks


def _footrule_max(n: int) -> int:
    """Largest ``sum |ra - rb|`` over two permutations of 1..n (reached by reversal)."""
    return (n * n) // 2


def footrule(rank_a: ArrayLike, rank_b: ArrayLike) -> float:
    """Normalised Spearman footrule: ``sum |rank_a - rank_b| / floor(n^2 / 2)``, in [0, 1].

    The paper's measure of how much a protocol change reorders the leaderboard: 0 when the
    ranking is unchanged, 1 when it is reversed. The footrule (not Kendall's tau) because its
    unit is "rank positions moved", which reads directly off a leaderboard. Average ranks for
    ties stay within [0, 1]: they are means of permutations' ranks and the sum is convex.
    """
    a = np.asarray(rank_a, dtype=np.float64)
    b = np.asarray(rank_b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise CubeError(
            f"rankings must be 1-D over the same models, got shapes {a.shape} and {b.shape}"
        )
    if a.size < 2:
        raise CubeError(f"a footrule needs at least 2 models, got {a.size}")
    return float(np.abs(a - b).sum() / _footrule_max(a.size))


@dataclass(frozen=True)
class NoiseFloor:
    """How much the ranking moves from item sampling alone: mean, 95th percentile, all samples."""

    mean: float
    p95: float
    samples: NDArray[np.float64]

    @property
    def replicates(self) -> int:
        return int(self.samples.size)

    @property
    def mean_se(self) -> float:
        """Monte Carlo standard error of ``mean``: a floor from B draws is itself an estimate, and
        a mean from B = 1000 moves by about its own 3 % between seeds."""
        return float(self.samples.std(ddof=1) / math.sqrt(self.samples.size)) if self.samples.size > 1 else math.nan


def _check_floor_args(B: int, chunk: int) -> None:
    if B < 1:
        raise CubeError(f"number of bootstrap replicates B must be >= 1, got {B!r}")
    if chunk < 1:
        raise CubeError(f"chunk must be >= 1, got {chunk!r}")


def _floor_samples(
    protocols: NDArray[np.bool_], B: int, seed: int, chunk: int, progress: bool
) -> NDArray[np.float64]:
    """Footrules between rankings on two resamples, ``(protocols, B)``, every protocol on the
    same two resamples of each replicate (the draws do not depend on how many protocols)."""
    n_protocols, n_models, n_items = protocols.shape
    if n_models < 2:
        raise CubeError(f"the noise floor needs at least 2 models, got {n_models}")
    _check_floor_args(B, chunk)
    rng = np.random.default_rng(seed)
    per_item = [p.T.astype(np.float64) for p in protocols]  # (items, models) each
    scale = _footrule_max(n_models)
    samples = np.empty((n_protocols, B), dtype=np.float64)
    with tqdm(total=B, desc="noise floor", unit="rep", disable=not progress) as bar:
        for start in range(0, B, chunk):
            reps = min(chunk, B - start)
            idx = rng.integers(0, n_items, size=(2 * reps, n_items))
            idx += (np.arange(2 * reps) * n_items)[:, None]
            counts = np.bincount(idx.ravel(), minlength=2 * reps * n_items)
            counts = counts.reshape(2 * reps, n_items).astype(np.float64)
            for p, outcomes in enumerate(per_item):
                ranks = average_ranks(counts @ outcomes)
                moved = np.abs(ranks[0::2] - ranks[1::2]).sum(axis=1)
                samples[p, start : start + reps] = moved / scale
            bar.update(reps)
    return samples


def _floor(samples: NDArray[np.float64]) -> NoiseFloor:
    return NoiseFloor(float(samples.mean()), float(np.quantile(samples, 0.95)), samples)


def footrule_noise_floor(
    correct: ArrayLike,
    B: int = 1000,
    seed: int = 0,
    chunk: int = 64,
    progress: bool = False,
) -> NoiseFloor:
    """Footrule between rankings on two independent bootstrap resamples of the items, B times.

    A between-protocol footrule only means something relative to how much the ranking moves
    when nothing but the item sample changes; this is that baseline, under one protocol.

    ``correct`` is ``(models, items)``. Replicate ``r`` draws its two resamples as two rows of
    ``rng.integers(0, N, size=(2 * chunk, N))`` (resample A first); numpy's stream makes this
    identical to drawing ``integers(0, N, N)`` twice per replicate in order, so ``chunk`` changes
    memory use (about ``2 * chunk * N * 8`` bytes), never the result. Per-model hits are
    ``counts @ correct.T`` in float64, exact integers, so tied models tie exactly.
    """
    c = _as_outcomes("correct", correct, ndim=2)
    return _floor(_floor_samples(c[None], B, seed, chunk, progress)[0])


@dataclass(frozen=True)
class PairedNoiseFloor:
    """Each protocol's floor on the same resamples, and the floor of the comparison."""

    a: NoiseFloor
    b: NoiseFloor
    joint: NoiseFloor  # per replicate the larger of the two: what a verdict reads


def paired_noise_floor(
    correct_a: ArrayLike,
    correct_b: ArrayLike,
    B: int = 1000,
    seed: int = 0,
    chunk: int = 64,
    progress: bool = False,
) -> PairedNoiseFloor:
    """The noise floor of a comparison of two protocols on the same items: paired and symmetric.

    Each replicate draws its two item resamples once and ranks the models under *both*
    protocols on them, so ``a`` and ``b`` are each exactly :func:`footrule_noise_floor` of its
    protocol with this seed and differ only by the protocol, never by the draws. The floor a
    verdict reads is ``joint``: per replicate the larger of the two footrules, i.e. how far the
    ranking of whichever protocol is noisier moves when only the items change.

    Why this floor. The paper's floor is within one protocol: the footrule between rankings on
    two resamples of the items, the measure of "how much re-drawing the benchmark reorders the
    leaderboard" that a protocol effect is expressed in multiples of. Taken from protocol A
    alone it depends on which protocol is called A: a tie or near-tie under one protocol makes
    its floor wide while the other's is narrow, and a footrule between the two can be beyond
    one floor and within the other (on the archived records, full-width labels against
    half-width ones). Either protocol's item noise could have produced the observed disagreement,
    so the comparison is held to the noisier one, replicate by replicate on the same draws: the
    verdict is the same whichever protocol is called A, and it is never beyond a floor that one
    of the two protocols' own resampling reaches 5% of the time.

    Why not the null of exchangeability (swap the two protocols' outcomes on a random half of
    the items, then take the footrule between the swapped rankings). That tests whether the two
    protocols are interchangeable item by item, which McNemar tests already answer; a protocol
    that only moves one model's accuracy rejects it as soon as it breaks an exact tie, because
    the swapped rankings share the tie's resolution and agree on every replicate (on the
    archived records, generation's half-rank move, one exact tie resolved, gets the smallest
    p-value the permutations allow). It does not measure
    the item-sampling noise of a ranking, which is what the paper's multiples are in units of.

    ``correct_a`` and ``correct_b`` are ``(models, items)`` over the same models and items in the
    same order.
    """
    a = _as_outcomes("correct_a", correct_a, ndim=2)
    b = _as_outcomes("correct_b", correct_b, ndim=2)
    if a.shape != b.shape:
        raise CubeError(
            f"paired floors need the same models and items: correct_a is {a.shape}, "
            f"correct_b is {b.shape}"
        )
    samples = _floor_samples(np.stack([a, b]), B, seed, chunk, progress)
    return PairedNoiseFloor(_floor(samples[0]), _floor(samples[1]), _floor(samples.max(axis=0)))


def footrule_normalisation(n_models: int) -> str:
    """What a footrule of ``n_models`` is divided by, said beside every footrule shown: with few
    models its attainable values are a handful of multiples of ``1 / floor(n^2 / 2)``."""
    return f"n = {n_models} models, normalised by ⌊n²/2⌋ = {_footrule_max(n_models)}"


def footrule_has_power(floor: NoiseFloor) -> bool:
    """Whether any footrule could lie beyond the floor's 95th percentile.

    The largest normalised footrule is 1 (a reversal) for every n. Between two random rankings
    it is reached 1/2 of the time with 3 models, 1/6 with 4 or 5, 1/20 with 6 or 7, so when
    the models are close the floor's p95 is 1 and no protocol, however disruptive, can be
    beyond it: "not beyond the floor" then says nothing about the protocol.
    """
    return floor.p95 < 1.0


def footrule_verdict(observed: float, floor: NoiseFloor, n_models: int, effect: float | None = None) -> str:
    """The one-line reading of a footrule against its floor, with both no-power cases named.

    ``effect`` is the shift a source reports (the paper's footrule): a floor whose p95 is at
    least that large could not have shown it, so "within the floor" would read as evidence
    against the source when it is only a lack of power. Every page reads footrules through this
    one function, so the paper page, Results and claim 3's notebook say the same words.
    """
    if not footrule_has_power(floor):
        return (f"no power at n = {n_models}: the floor's 95th percentile is the largest "
                f"footrule {n_models} models can reach")
    if observed > floor.p95:
        return "beyond the floor's 95th percentile"
    if effect is not None and floor.p95 >= effect:
        return (f"no power at n = {n_models} for a shift of {effect:g}: within the floor, and only a "
                f"footrule above its 95th percentile {floor.p95:.3f} could exceed it")
    return "within the floor"


def footrule_multiple(observed: float, floor: NoiseFloor) -> tuple[float, float]:
    """The headline: the observed between-protocol footrule in units of the noise floor.

    Returned as multiples of the floor's mean and of its 95th percentile; a multiple above 1 of
    the p95 says the protocol moved the ranking more than 95% of resampling noise does. A zero
    floor gives ``inf`` for a positive observation and NaN for a zero one (no scale to measure
    by).
    """
    if not (0.0 <= observed <= 1.0):
        raise CubeError(f"observed footrule must lie in [0, 1], got {observed!r}")

    def ratio(base: float) -> float:
        if base > 0.0:
            return observed / base
        return math.inf if observed > 0.0 else math.nan

    return ratio(floor.mean), ratio(floor.p95)
