"""cube.analysis.stats, paired_tests and footrule: the tests the verdicts read (Holm, against chance, the McNemar-consistent
interval, McNemar power, the floor's Monte Carlo error), each against an independent computation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom, binomtest

from cube.analysis.footrule import footrule_noise_floor
from cube.analysis.paired_tests import mcnemar_exact, mcnemar_interval, mcnemar_power
from cube.analysis.stats import above_chance_p, above_chance_p_per_item, holm_adjust
from cube.errors import CubeError


def naive_holm(p):
    """Holm straight from its definition: reject H(i) iff every H(j) with p(j) <= p(i) has
    p(j) <= alpha / (k - rank(j)); the adjusted p is the smallest alpha at which H(i) is rejected."""
    k = len(p)
    order = sorted(range(k), key=lambda i: p[i])
    adjusted = [0.0] * k
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def test_holm_matches_its_definition_and_a_textbook_case():
    rng = np.random.default_rng(1)
    for _ in range(200):
        p = rng.uniform(0, 1, rng.integers(1, 12)) ** 3
        assert np.allclose(holm_adjust(p), naive_holm(list(p)))
    # Holm (1979)-style example: 0.01, 0.04, 0.03, 0.005 -> 0.03, 0.06, 0.06, 0.02
    assert np.allclose(holm_adjust([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    # the case: two of five cells below 0.05 unadjusted, one after Holm
    assert (holm_adjust([1e-12, 0.03, 0.4, 0.6, 0.9]) < 0.05).sum() == 1
    with pytest.raises(CubeError, match="p_values must lie in"):
        holm_adjust([0.5, 1.5])


def test_above_chance_is_scipys_one_sided_binomial_test():
    for k, n in [(302, 600), (145, 600), (161, 600), (0, 10), (10, 10), (3, 7)]:
        assert above_chance_p(k, n, 0.25) == pytest.approx(binomtest(k, n, 0.25, alternative="greater").pvalue, rel=1e-9)
    with pytest.raises(CubeError, match="n_correct"):
        above_chance_p(11, 10, 0.25)


def naive_tail(n_correct, chances):
    """P(at least n_correct right) by enumerating every right/wrong outcome of every item."""
    from itertools import product

    total = 0.0
    for outcome in product((0, 1), repeat=len(chances)):
        if sum(outcome) >= n_correct:
            total += float(np.prod([c if right else 1 - c for right, c in zip(outcome, chances)]))
    return total


def test_above_chance_per_item_is_the_poisson_binomial_tail_of_a_naive_enumeration():
    """Items of 3, 4 and 5 options (chance 1/3, 1/4, 1/5 each): every tail of the exact test equals
    the sum over all 2^n outcomes; a binomial at the mean chance is not it."""
    chances = [1 / 3, 1 / 4, 1 / 5, 1 / 3, 1 / 5, 1 / 4, 1 / 4, 1 / 2, 1 / 10, 1 / 3, 1 / 5]
    for k in range(len(chances) + 1):
        assert above_chance_p_per_item(k, chances) == pytest.approx(naive_tail(k, chances), rel=1e-12, abs=1e-15)
    mean = float(np.mean(chances))
    assert abs(above_chance_p(6, len(chances), mean) - naive_tail(6, chances)) > 1e-4
    # one option count: the binomial test itself
    assert above_chance_p_per_item(7, [0.25] * 20) == above_chance_p(7, 20, 0.25)
    with pytest.raises(CubeError, match="n_correct"):
        above_chance_p_per_item(4, [0.25, 0.5])


def test_the_mcnemar_interval_excludes_zero_exactly_when_the_exact_test_rejects():
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(20, 700))
        a = rng.random(n) < rng.uniform(0.2, 0.6)
        flip = rng.random(n) < rng.uniform(0.0, 0.15)
        b = np.where(flip, ~a, a) if rng.random() < 0.5 else np.where(flip & a, False, a)
        i = mcnemar_interval(a, b)
        test = mcnemar_exact(a, b)
        assert i.p_value == test.p_value and i.lo <= i.delta <= i.hi
        if i.b + i.c:
            assert (i.lo > 0 or i.hi < 0) == (test.p_value < 0.05), (i, test)


def test_the_mcnemar_interval_is_clopper_pearson_on_the_discordant_items():
    a = np.array([1] * 30 + [0] * 10 + [1] * 200 + [0] * 360, dtype=bool)
    b = np.array([0] * 30 + [1] * 10 + [1] * 200 + [0] * 360, dtype=bool)
    i = mcnemar_interval(a, b)
    ci = binomtest(30, 40, 0.5).proportion_ci(0.95, method="exact")
    assert i.delta == pytest.approx(20 / 600)
    assert i.lo == pytest.approx(40 / 600 * (2 * ci.low - 1)) and i.hi == pytest.approx(40 / 600 * (2 * ci.high - 1))


def test_mcnemar_power_matches_a_simulation_of_the_exact_test():
    rng = np.random.default_rng(3)
    n, rate, delta = 200, 0.15, 0.05
    pi = 0.5 * (1 + delta / rate)
    rejections = 0
    reps = 4000
    for _ in range(reps):
        d = rng.binomial(n, rate)
        k = rng.binomial(d, pi)
        p = min(1.0, 2 * binom.cdf(min(k, d - k), d, 0.5)) if d else 1.0
        rejections += p < 0.05
    assert mcnemar_power(n, rate, delta) == pytest.approx(rejections / reps, abs=0.03)
    assert mcnemar_power(600, 0.1, 0.0) < 0.05  # the test's size, not its power
    with pytest.raises(CubeError, match="needs at least that share"):
        mcnemar_power(600, 0.01, 0.025)


def test_the_floors_monte_carlo_error_is_the_standard_error_of_its_mean():
    rng = np.random.default_rng(0)
    correct = rng.random((4, 300)) < np.array([[0.3], [0.32], [0.35], [0.5]])
    floor = footrule_noise_floor(correct, B=4000, seed=1)
    assert floor.replicates == 4000
    assert floor.mean_se == pytest.approx(floor.samples.std(ddof=1) / np.sqrt(4000))
    other = footrule_noise_floor(correct, B=4000, seed=2)
    assert abs(floor.mean - other.mean) < 5 * np.hypot(floor.mean_se, other.mean_se)


def test_the_ranking_floor_does_not_depend_on_the_order_records_are_read_in():
    from cube.analysis.ranking_shift import ranking_shift
    from cube.analysis.slices import select
    from cube.config import REPO_ROOT
    from cube.records.store import read_records

    table = read_records(REPO_ROOT / "data" / "records", verify=False)
    protocol = {"label_set": "L1_halfwidth", "context": "zh_cue", "shots": 0, "order": "original"}
    a, b = select(table, scorer="M1-seq", **protocol), select(table, scorer="M6-strict", **protocol)
    shuffled = a.take(np.random.default_rng(5).permutation(a.num_rows))
    one, two = ranking_shift(a, b, B=300, seed=0), ranking_shift(shuffled, b, B=300, seed=0)
    assert np.array_equal(one.floor.samples, two.floor.samples) and one.observed == two.observed
