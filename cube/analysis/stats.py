"""The paper's statistics on one protocol's accuracy: small pure functions over numpy arrays.

Every claim the paper makes about a protocol goes through a function of this module or of its
siblings, one per family of test: here an accuracy with its interval (Wilson, stratified Wilson for
macro means), the exact tests of an accuracy against chance, and Holm's correction for many tests
at once; two protocols on the same items in :mod:`cube.analysis.paired_tests`; calibration in
:mod:`cube.analysis.calibration`; rankings and their noise floor in :mod:`cube.analysis.footrule`.
Each is short enough to check by hand and each is tested against an independent computation
(scipy, a naive loop, or a closed form). This module also holds the input checks every family
shares, which is why it stands first.

Conventions shared by all these functions:

* ``correct`` arrays are per-item outcomes, bool (or 0/1) with one entry per item.
* Paired functions take two arrays over the *same items in the same order*; it is the caller's
  job (the records store) to align them by ``uid``.
* Randomised functions take an explicit ``seed`` and give the same answer for the same seed.
* Bad input raises :class:`cube.errors.CubeError` with a one-line message naming the argument.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import bdtr, gammaln

from cube.errors import CubeError

# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------


def as_outcomes(name: str, values: ArrayLike, ndim: int = 1) -> NDArray[np.bool_]:
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


def check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise CubeError(f"confidence level must lie strictly between 0 and 1, got {level!r}")


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
    check_level(level)
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
    outcomes = as_outcomes("correct", correct)
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
