"""Each statistic against an independent computation: scipy, a naive loop, or a hand value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from cube.analysis.calibration import expected_calibration_error, reliability_table
from cube.analysis.footrule import (NoiseFloor, average_ranks, footrule, footrule_has_power, footrule_multiple,
                                    footrule_noise_floor, footrule_normalisation, footrule_verdict,
                                    paired_noise_floor)
from cube.analysis.paired_tests import (clustered_bootstrap_ci, clustered_mcnemar, mcnemar_exact,
                                        paired_bootstrap_ci)
from cube.analysis.stats import (accuracy_ci, macro_accuracy_ci, macro_effective_n, stratified_wilson_interval,
                                 wilson_interval)
from cube.errors import CubeError

FAST = settings(max_examples=60, deadline=None)


def paired_outcomes(n: int, p_a: float, p_b: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random(n) < p_a, rng.random(n) < p_b


# ---------------------------------------------------------------- accuracy interval


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (0, 20), (3, 20), (10, 20), (20, 20), (517, 1234)])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_accuracy_ci_matches_scipy_wilson(k: int, n: int, level: float) -> None:
    correct = np.zeros(n, dtype=bool)
    correct[:k] = True
    acc, lo, hi = accuracy_ci(correct, level)
    ref = sps.binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
    assert acc == k / n
    assert lo == pytest.approx(ref.low, abs=1e-12)
    assert hi == pytest.approx(ref.high, abs=1e-12)


def test_wilson_interval_is_vectorised_over_subjects() -> None:
    k, n = np.array([0, 7, 30]), np.array([10, 20, 30])
    lo, hi = wilson_interval(k, n)
    for i in range(3):
        _, lo_i, hi_i = accuracy_ci(np.arange(n[i]) < k[i])
        assert (lo[i], hi[i]) == pytest.approx((lo_i, hi_i), abs=1e-15)


def test_accuracy_ci_accepts_0_1_ints_and_rejects_other_values() -> None:
    assert accuracy_ci([1, 0, 1, 1])[0] == 0.75
    with pytest.raises(CubeError, match=r"entry \(2,\) is 2"):
        accuracy_ci([1, 0, 2])
    with pytest.raises(CubeError, match="empty"):
        accuracy_ci([])
    with pytest.raises(CubeError, match="level"):
        accuracy_ci([1, 0], level=1.0)


# ---------------------------------------------------------------- macro (stratified) interval


def _root_interval(k: np.ndarray, n: np.ndarray, level: float) -> tuple[float, float]:
    """The stratified Wilson interval from its definition, by root finding (no closed form):
    the p with (mean - p)^2 = z^2 p (1 - p) sum(w_s^2 / n_s), w_s = 1 / S."""
    from scipy.optimize import brentq

    z = sps.norm.ppf(0.5 + level / 2)
    mean = float(np.mean(k / n))
    v = float(np.sum(1.0 / n)) / len(n) ** 2

    def f(p: float) -> float:
        return (mean - p) ** 2 - z * z * p * (1 - p) * v

    lo = 0.0 if mean == 0.0 else brentq(f, 0.0, mean)
    hi = 1.0 if mean == 1.0 else brentq(f, mean, 1.0)
    return lo, hi


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_macro_interval_is_the_root_of_its_defining_equation(seed: int, level: float) -> None:
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 6, size=int(rng.integers(3, 70)))
    k = rng.binomial(n, rng.uniform(0, 1, size=n.size))
    mean, lo, hi = macro_accuracy_ci(k, n, level)
    assert mean == pytest.approx(np.mean(k / n))
    assert (lo, hi) == pytest.approx(_root_interval(k, n, level), abs=1e-9)


def test_macro_interval_keeps_its_width_with_one_item_per_subject() -> None:
    """Issue 22: --sample 30 draws one item per subject; 5 of 30 right gave 0.167 [0.167, 0.167]."""
    k, n = np.array([1] * 5 + [0] * 25), np.ones(30)
    mean, lo, hi = macro_accuracy_ci(k, n)
    ref = sps.binomtest(5, 30).proportion_ci(0.95, method="wilson")  # one item each: the pooled Wilson
    assert mean == pytest.approx(5 / 30)
    assert (lo, hi) == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert hi - lo > 0.2
    # equal strata of m items: Wilson of the S * m pooled items; unequal ones: the harmonic size
    k3, n3 = np.array([0, 1, 2, 3]), np.full(4, 3)
    ref3 = sps.binomtest(6, 12).proportion_ci(0.95, method="wilson")
    assert macro_accuracy_ci(k3, n3)[1:] == pytest.approx((ref3.low, ref3.high), abs=1e-12)
    assert macro_effective_n([1, 2, 4]) == pytest.approx(9 / (1 + 1 / 2 + 1 / 4))
    lo_v, hi_v = stratified_wilson_interval(np.array([0.0, 1.0, 0.5]), np.array([5.0, 5.0, 5.0]))
    assert lo_v[0] == 0.0 < hi_v[0] and lo_v[1] < hi_v[1] == 1.0 and lo_v[2] < 0.5 < hi_v[2]


@pytest.mark.parametrize("subjects", [10, 30, 67])
@pytest.mark.parametrize("truth", ["flat", "spread", "high", "low"])
def test_macro_interval_covers_with_one_to_five_items_per_subject(subjects: int, truth: str) -> None:
    """Coverage by simulation, each replicate a fresh draw of every subject's items."""
    rng = np.random.default_rng(subjects)
    n = rng.integers(1, 6, size=subjects)
    p = {"flat": np.full(subjects, 0.25), "spread": rng.uniform(0.05, 0.95, subjects),
         "high": rng.uniform(0.8, 1.0, subjects), "low": rng.uniform(0.0, 0.15, subjects)}[truth]
    k = rng.binomial(n, p, size=(20_000, subjects))
    mean = (k / n).mean(axis=1)
    lo, hi = stratified_wilson_interval(mean, np.full(mean.size, macro_effective_n(n)))
    coverage = float(np.mean((lo <= p.mean()) & (p.mean() <= hi)))
    assert coverage >= 0.93, coverage


# ---------------------------------------------------------------- McNemar


def discordant(b: int, c: int, concordant: int = 3) -> tuple[np.ndarray, np.ndarray]:
    a = np.array([True] * b + [False] * c + [True] * concordant + [False] * concordant)
    bb = np.array([False] * b + [True] * c + [True] * concordant + [False] * concordant)
    return a, bb


@pytest.mark.parametrize(
    "b,c,p,mid",
    [
        (0, 0, 1.0, 1.0),  # no discordant pairs: no evidence
        (0, 5, 2 / 32, 1 / 32),  # 2 * P(X=0); mid-p: half of that
        (1, 4, 12 / 32, 7 / 32),  # 2 * (1 + 5)/32; mid-p: (6 + 1)/32
        (3, 3, 1.0, 1.0),
    ],
)
def test_mcnemar_hand_cases(b: int, c: int, p: float, mid: float) -> None:
    a, bb = discordant(b, c)
    exact = mcnemar_exact(a, bb)
    assert (exact.b, exact.c) == (b, c)
    assert exact.p_value == pytest.approx(p, abs=1e-15)
    assert mcnemar_exact(a, bb, mid_p=True).p_value == pytest.approx(mid, abs=1e-15)


@pytest.mark.parametrize(
    "b,c", [(1, 0), (7, 2), (2, 7), (40, 61), (300, 250), (5000, 4800), (0, 60)]
)
def test_mcnemar_matches_scipy_binomtest(b: int, c: int) -> None:
    a, bb = discordant(b, c, concordant=11)
    result = mcnemar_exact(a, bb)
    reference = sps.binomtest(b, b + c, 0.5).pvalue
    assert result.p_value == pytest.approx(reference, rel=1e-9, abs=1e-300)
    assert result.statistic == b / (b + c)
    m, n = min(b, c), b + c
    mid_ref = min(1.0, 2 * (sps.binom.cdf(m, n, 0.5) - 0.5 * sps.binom.pmf(m, n, 0.5)))
    assert mcnemar_exact(a, bb, mid_p=True).p_value == pytest.approx(mid_ref, rel=1e-9, abs=1e-300)


def test_mcnemar_is_symmetric_in_the_two_protocols() -> None:
    a, b = paired_outcomes(500, 0.6, 0.55, seed=3)
    ab, ba = mcnemar_exact(a, b), mcnemar_exact(b, a)
    assert (ab.b, ab.c) == (ba.c, ba.b)
    assert ab.p_value == ba.p_value


def test_mcnemar_rejects_unaligned_items() -> None:
    with pytest.raises(CubeError, match="correct_a has 3 items, correct_b has 2"):
        mcnemar_exact([True, False, True], [True, False])


# ---------------------------------------------------------------- paired bootstrap


def naive_paired_bootstrap(a: np.ndarray, b: np.ndarray, B: int, level: float, seed: int):
    rng = np.random.default_rng(seed)
    n = a.size
    deltas = []
    for _ in range(B):
        idx = rng.integers(0, n, n)
        deltas.append(a[idx].mean() - b[idx].mean())
    alpha = 1 - level
    return np.quantile(deltas, [alpha / 2, 1 - alpha / 2]), np.std(deltas)


def test_paired_bootstrap_agrees_with_index_resampling() -> None:
    a, b = paired_outcomes(400, 0.62, 0.55, seed=11)
    delta, lo, hi = paired_bootstrap_ci(a, b, B=20_000, seed=1)
    (ref_lo, ref_hi), _ = naive_paired_bootstrap(a, b, B=4000, level=0.95, seed=2)
    assert delta == pytest.approx(a.mean() - b.mean(), abs=1e-15)
    assert lo == pytest.approx(ref_lo, abs=0.006)
    assert hi == pytest.approx(ref_hi, abs=0.006)


def test_paired_bootstrap_width_matches_the_closed_form_variance() -> None:
    # Var of the bootstrap mean of d in {-1, 0, 1}: (p+ + p- - (p+ - p-)^2) / N.
    a, b = paired_outcomes(2000, 0.7, 0.65, seed=5)
    n_plus, n_minus, n = np.sum(a & ~b), np.sum(~a & b), a.size
    sd = math.sqrt((n_plus / n + n_minus / n - ((n_plus - n_minus) / n) ** 2) / n)
    delta, lo, hi = paired_bootstrap_ci(a, b, B=20_000, level=0.95, seed=0)
    assert (hi - lo) / (2 * 1.959964 * sd) == pytest.approx(1.0, abs=0.03)
    assert lo < delta < hi


def test_paired_bootstrap_is_seeded_and_degenerate_when_identical() -> None:
    a, b = paired_outcomes(300, 0.5, 0.5, seed=7)
    assert paired_bootstrap_ci(a, b, B=500, seed=4) == paired_bootstrap_ci(a, b, B=500, seed=4)
    assert paired_bootstrap_ci(a, b, B=500, seed=4) != paired_bootstrap_ci(a, b, B=500, seed=5)
    assert paired_bootstrap_ci(a, a.copy(), B=200) == (0.0, 0.0, 0.0)


def test_paired_bootstrap_rejects_bad_replicate_count() -> None:
    with pytest.raises(CubeError, match="B must be >= 1"):
        paired_bootstrap_ci([True], [False], B=0)


# ---------------------------------------------------------------- calibration


def naive_ece_and_counts(probs: np.ndarray, labels: np.ndarray, n_bins: int, binning: str):
    """Item-by-item loop, written from the documented bin conventions."""
    conf = [max(row) for row in probs.tolist()]
    hit = [int(np.argmax(row)) == int(y) for row, y in zip(probs, labels)]
    n = len(conf)
    members: list[list[int]] = [[] for _ in range(n_bins)]
    if binning == "width":
        edges = np.linspace(0, 1, n_bins + 1)
        for i, c in enumerate(conf):
            for m in range(n_bins):
                lo, hi = edges[m], edges[m + 1]
                inside = (lo <= c <= hi) if m == 0 else (lo < c <= hi)
                if inside:
                    members[m].append(i)
                    break
    else:
        order = sorted(range(n), key=lambda i: conf[i])
        pos = 0
        for m in range(n_bins):
            size = n // n_bins + (1 if m < n % n_bins else 0)
            members[m] = order[pos : pos + size]
            pos += size
    ece = 0.0
    for group in members:
        if group:
            acc = sum(hit[i] for i in group) / len(group)
            mean_conf = sum(conf[i] for i in group) / len(group)
            ece += len(group) / n * abs(acc - mean_conf)
    return ece, [len(g) for g in members]


def random_option_probs(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(k, 0.6), size=n)
    if k == 4 and n >= 3:  # exact bin edges and a certain answer, where conventions matter
        probs[:3] = [[0.5, 0.5, 0, 0], [1, 0, 0, 0], [0.3, 0.7, 0, 0]]
    labels = rng.integers(0, k, n)
    labels[: n // 2] = probs[: n // 2].argmax(axis=1)  # some skill, so accuracy varies by bin
    return probs, labels


@pytest.mark.parametrize("binning", ["width", "mass"])
@pytest.mark.parametrize("n,k,n_bins", [(257, 4, 10), (100, 4, 7), (40, 2, 15), (5, 4, 10)])
def test_ece_matches_naive_loop(binning: str, n: int, k: int, n_bins: int) -> None:
    probs, labels = random_option_probs(n, k, seed=n + k)
    ece = expected_calibration_error(probs, labels, n_bins=n_bins, binning=binning)
    ref, ref_counts = naive_ece_and_counts(probs, labels, n_bins, binning)
    assert ece == pytest.approx(ref, abs=1e-12)
    assert reliability_table(probs, labels, n_bins, binning)["count"].tolist() == ref_counts


def test_width_bins_are_right_closed_except_the_first() -> None:
    probs = np.array([[0.5, 0.5], [1.0, 0.0], [0.55, 0.45], [0.6, 0.4]])
    table = reliability_table(probs, np.array([0, 0, 0, 1]), n_bins=10)
    # 0.5 -> (0.4, 0.5]; 0.55 and 0.6 -> (0.5, 0.6]; 1.0 -> (0.9, 1.0].
    assert table["count"].tolist() == [0, 0, 0, 0, 1, 2, 0, 0, 0, 1]
    assert table["accuracy"][5] == 0.5
    assert table["confidence"][5] == pytest.approx(0.575)
    assert np.isnan(table["accuracy"][0])
    assert table["bin_lo"][4] == pytest.approx(0.4) and table["bin_hi"][4] == pytest.approx(0.5)


def calibrated_items(groups: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Each group: top-option probability c = k/20 on 20*j items, exactly a fraction c right."""
    probs, labels = [], []
    for k, j in groups:
        c, size = k / 20, 20 * j
        n_right = k * j
        probs += [[c] + [(1 - c) / 3] * 3] * size
        labels += [0] * n_right + [1] * (size - n_right)
    return np.array(probs), np.array(labels)


@FAST
@given(
    groups=st.lists(st.tuples(st.integers(6, 20), st.integers(1, 4)), min_size=1, max_size=6),
    n_bins=st.integers(1, 20),
)
def test_ece_is_zero_when_perfectly_calibrated_width_bins(groups, n_bins: int) -> None:
    # A bin mixing several calibrated groups is still calibrated: acc and conf are the same
    # count-weighted mean of the groups' c.
    probs, labels = calibrated_items(groups)
    assert expected_calibration_error(probs, labels, n_bins, "width") == pytest.approx(0, abs=1e-12)


@FAST
@given(ks=st.sets(st.integers(6, 20), min_size=1, max_size=6), j=st.integers(1, 4))
def test_ece_is_zero_when_perfectly_calibrated_mass_bins(ks: set[int], j: int) -> None:
    # Equal-size groups with distinct confidences: one equal-mass bin per group.
    probs, labels = calibrated_items([(k, j) for k in ks])
    assert expected_calibration_error(probs, labels, len(ks), "mass") == pytest.approx(0, abs=1e-12)


@FAST
@given(n=st.integers(1, 300), n_bins=st.integers(1, 30), seed=st.integers(0, 2**16))
def test_equal_mass_bins_have_equal_counts(n: int, n_bins: int, seed: int) -> None:
    probs, labels = random_option_probs(n, 4, seed)
    counts = reliability_table(probs, labels, n_bins, "mass")["count"]
    assert counts.sum() == n
    assert counts.max() - counts.min() <= 1
    if n % n_bins == 0:
        assert set(counts.tolist()) == {n // n_bins}


def test_mass_bin_edges_are_the_confidence_range_covered() -> None:
    probs, labels = random_option_probs(200, 4, seed=9)
    table = reliability_table(probs, labels, 4, "mass")
    assert np.all(table["bin_lo"] <= table["confidence"])
    assert np.all(table["confidence"] <= table["bin_hi"])
    assert np.all(table["bin_hi"][:-1] <= table["bin_lo"][1:])


def test_calibration_rejects_bad_input_naming_the_row() -> None:
    good = np.array([[0.7, 0.3], [0.4, 0.6]])
    with pytest.raises(CubeError, match="probs row 1 sums to 1.2"):
        expected_calibration_error(np.array([[0.7, 0.3], [0.6, 0.6]]), np.array([0, 1]))
    with pytest.raises(CubeError, match=r"probs row 0, option 0: 1.5 is not a probability"):
        expected_calibration_error(np.array([[1.5, -0.5], [0.4, 0.6]]), np.array([0, 1]))
    with pytest.raises(CubeError, match="labels row 1: gold index 2"):
        expected_calibration_error(good, np.array([0, 2]))
    with pytest.raises(CubeError, match="binning must be 'width' or 'mass'"):
        expected_calibration_error(good, np.array([0, 1]), binning="mean")  # type: ignore[arg-type]
    with pytest.raises(CubeError, match="n_bins"):
        expected_calibration_error(good, np.array([0, 1]), n_bins=0)


# ---------------------------------------------------------------- ranks and footrule

scores_strategy = st.lists(st.integers(0, 5), min_size=1, max_size=12)


@FAST
@given(scores=scores_strategy)
def test_average_ranks_match_scipy_rankdata(scores: list[int]) -> None:
    s = np.array(scores)
    np.testing.assert_array_equal(average_ranks(s), sps.rankdata(-s, method="average"))


@FAST
@given(rows=st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=8))
def test_average_ranks_batched_equals_row_by_row(rows: list[list[int]]) -> None:
    s = np.array(rows)
    batched = average_ranks(s)
    for i, row in enumerate(s):
        np.testing.assert_array_equal(batched[i], sps.rankdata(-row, method="average"))


def test_average_ranks_hand_case() -> None:
    # Highest is rank 1; the two tied at 0.5 share ranks 2 and 3.
    assert average_ranks([0.9, 0.5, 0.1, 0.5]).tolist() == [1.0, 2.5, 4.0, 2.5]


def test_footrule_hand_case() -> None:
    assert footrule([1, 2, 3], [2, 1, 3]) == 2 / 4
    assert footrule([1, 2, 3, 4], [4, 3, 2, 1]) == 8 / 8


@FAST
@given(perm=st.permutations(list(range(1, 11))), n=st.integers(2, 10), data=st.data())
def test_footrule_properties_on_permutations(perm: list[int], n: int, data) -> None:
    ra = np.array([r for r in perm if r <= n], dtype=float)
    rb = np.array(data.draw(st.permutations(list(range(1, n + 1)))), dtype=float)
    assert footrule(ra, rb) == footrule(rb, ra)
    assert footrule(ra, ra) == 0.0
    assert footrule(ra, n + 1 - ra) == 1.0
    assert 0.0 <= footrule(ra, rb) <= 1.0


@FAST
@given(a=st.lists(st.integers(0, 3), min_size=2, max_size=9), data=st.data())
def test_footrule_on_average_ranks_with_ties_stays_in_unit_interval(a: list[int], data) -> None:
    b = data.draw(st.lists(st.integers(0, 3), min_size=len(a), max_size=len(a)))
    f = footrule(average_ranks(a), average_ranks(b))
    assert 0.0 <= f <= 1.0
    assert f == footrule(average_ranks(b), average_ranks(a))


def test_footrule_rejects_mismatched_or_single_models() -> None:
    with pytest.raises(CubeError, match="same models"):
        footrule([1, 2, 3], [1, 2])
    with pytest.raises(CubeError, match="at least 2 models"):
        footrule([1], [1])


# ---------------------------------------------------------------- noise floor


def naive_noise_floor(correct: np.ndarray, B: int, seed: int) -> np.ndarray:
    """One replicate at a time: gather the resampled items, rank with scipy, sum by hand."""
    rng = np.random.default_rng(seed)
    m, n = correct.shape
    out = []
    for _ in range(B):
        idx_a = rng.integers(0, n, n)
        idx_b = rng.integers(0, n, n)
        ra = sps.rankdata(-correct[:, idx_a].mean(axis=1), method="average")
        rb = sps.rankdata(-correct[:, idx_b].mean(axis=1), method="average")
        out.append(sum(abs(x - y) for x, y in zip(ra, rb)) / (m * m // 2))
    return np.array(out)


def latent_ability_outcomes(abilities: list[float], n_items: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(size=n_items)
    logits = np.array(abilities)[:, None] - difficulty[None, :]
    return rng.random(logits.shape) < 1 / (1 + np.exp(-logits))


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_noise_floor_equals_naive_loop_with_same_seed(chunk: int) -> None:
    correct = latent_ability_outcomes([0.0, 0.1, 0.1, 0.3, -0.2], n_items=60, seed=2)
    correct[4] = correct[3]  # an exact tie in every resample
    floor = footrule_noise_floor(correct, B=50, seed=13, chunk=chunk)
    ref = naive_noise_floor(correct, B=50, seed=13)
    np.testing.assert_allclose(floor.samples, ref, rtol=0, atol=1e-15)
    assert floor.mean == pytest.approx(ref.mean(), abs=1e-15)
    assert floor.p95 == pytest.approx(np.quantile(ref, 0.95), abs=1e-15)


def test_noise_floor_reflects_how_separable_the_models_are() -> None:
    separated = latent_ability_outcomes([-3.0, -1.5, 0.0, 1.5, 3.0], n_items=2000, seed=0)
    assert footrule_noise_floor(separated, B=200).p95 == 0.0
    exchangeable = latent_ability_outcomes([0.0] * 5, n_items=2000, seed=0)
    assert footrule_noise_floor(exchangeable, B=200).mean > 0.2
    same_model = np.repeat(exchangeable[:1], 5, axis=0)  # identical outcomes tie in every resample
    assert footrule_noise_floor(same_model, B=20).mean == 0.0


def test_noise_floor_rejects_a_single_model() -> None:
    with pytest.raises(CubeError, match="at least 2 models"):
        footrule_noise_floor(np.ones((1, 10), dtype=bool))


def test_footrule_multiple_hand_cases() -> None:
    floor = NoiseFloor(mean=0.05, p95=0.1, samples=np.array([]))
    assert footrule_multiple(0.3, floor) == pytest.approx((6.0, 3.0))
    zero = NoiseFloor(mean=0.0, p95=0.0, samples=np.zeros(3))
    assert footrule_multiple(0.2, zero) == (math.inf, math.inf)
    assert all(math.isnan(x) for x in footrule_multiple(0.0, zero))
    with pytest.raises(CubeError, match="observed footrule"):
        footrule_multiple(1.5, floor)


@pytest.mark.parametrize("k, n", [(0, 5), (5, 5), (0, 1), (7, 7), (0, 1000)])
def test_wilson_interval_contains_the_boundary_proportion_exactly(k, n):
    acc, lo, hi = accuracy_ci(np.array([True] * k + [False] * (n - k)))
    assert lo <= acc <= hi
    assert (lo == 0.0) if k == 0 else (hi == 1.0)


# ---------------------------------------------------------------- paired noise floor and power


def test_paired_floor_scores_both_protocols_on_the_same_draws() -> None:
    correct_a = latent_ability_outcomes([0.0, 0.1, 0.1, 0.3], n_items=60, seed=4)
    correct_a[3] = correct_a[2]  # an exact tie under A: a wide floor
    correct_b = latent_ability_outcomes([-2.0, 0.0, 1.0, 2.5], n_items=60, seed=5)  # separated
    paired = paired_noise_floor(correct_a, correct_b, B=50, seed=13, chunk=7)
    # the naive loop draws two index vectors per replicate whatever the protocol: the same draws
    ref_a, ref_b = naive_noise_floor(correct_a, 50, 13), naive_noise_floor(correct_b, 50, 13)
    np.testing.assert_allclose(paired.a.samples, ref_a, rtol=0, atol=1e-15)
    np.testing.assert_allclose(paired.b.samples, ref_b, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(paired.joint.samples, np.maximum(ref_a, ref_b))
    assert paired.joint.p95 == pytest.approx(np.quantile(np.maximum(ref_a, ref_b), 0.95), abs=1e-15)
    assert paired.a.p95 > paired.b.p95  # the two protocols' floors differ, so A's alone is not neutral
    swapped = paired_noise_floor(correct_b, correct_a, B=50, seed=13)
    np.testing.assert_array_equal(swapped.joint.samples, paired.joint.samples)  # symmetric in A and B


def test_paired_floor_rejects_protocols_on_different_items() -> None:
    with pytest.raises(CubeError, match=r"correct_a is \(3, 10\), correct_b is \(3, 9\)"):
        paired_noise_floor(np.ones((3, 10), bool), np.ones((3, 9), bool))


def brute_force_footrules(n: int) -> np.ndarray:
    """Every normalised footrule between the identity and a permutation of n models."""
    import itertools

    ident = np.arange(n)
    return np.array([np.abs(np.array(p) - ident).sum() for p in itertools.permutations(ident)]) / (n * n // 2)


@pytest.mark.parametrize("n, share_at_max", [(2, 1 / 2), (3, 1 / 2), (4, 1 / 6), (5, 1 / 6), (6, 1 / 20), (8, 0.0)])
def test_few_models_put_more_than_5_percent_of_random_rankings_at_the_largest_footrule(n, share_at_max):
    # why few models have no power: exchangeable models rank at random, and the reversal (the
    # largest footrule, 1 after normalisation) is at least 5% of the permutations of up to 7
    moved = brute_force_footrules(n)
    assert moved.max() == 1.0
    if share_at_max:
        assert np.mean(moved == 1.0) == pytest.approx(share_at_max)
    else:
        assert np.mean(moved == 1.0) < 0.05


@pytest.mark.parametrize("n_models", [3, 4])
def test_a_floor_whose_p95_is_the_largest_footrule_leaves_no_power(n_models: int) -> None:
    exchangeable = latent_ability_outcomes([0.0] * n_models, n_items=2000, seed=1)
    floor = footrule_noise_floor(exchangeable, B=400, seed=0)
    assert floor.p95 == 1.0 and not footrule_has_power(floor)
    text = footrule_verdict(1.0, floor, n_models)
    assert text.startswith(f"no power at n = {n_models}") and "not beyond" not in text
    separated = latent_ability_outcomes([-3.0, 0.0, 3.0, 6.0][:n_models], n_items=2000, seed=0)
    tight = footrule_noise_floor(separated, B=100)
    assert footrule_has_power(tight)
    assert footrule_verdict(0.5, tight, n_models) == "beyond the floor's 95th percentile"
    assert footrule_verdict(0.0, tight, n_models) == "within the floor"


def test_footrule_normalisation_names_n_and_the_divisor() -> None:
    assert footrule_normalisation(4) == "n = 4 models, normalised by ⌊n²/2⌋ = 8"
    assert footrule_normalisation(5) == "n = 5 models, normalised by ⌊n²/2⌋ = 12"
    assert all(brute_force_footrules(n).max() * (n * n // 2) == n * n // 2 for n in (2, 3, 4, 5, 6))


# ---------------------------------------------------------------- pairs that repeat an item


def clustered_pairs(n_items: int, per_item: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs from ``per_item`` cells that share each item's difficulty (as cells of one item do)."""
    rng = np.random.default_rng(seed)
    easy = rng.random(n_items) < 0.5
    a = rng.random((n_items, per_item)) < np.where(easy, 0.7, 0.2)[:, None]
    b = rng.random((n_items, per_item)) < np.where(easy, 0.85, 0.25)[:, None]
    items = np.repeat(np.arange(n_items), per_item)
    return a.ravel(), b.ravel(), np.array([f"cmmlu/x/test/{i}" for i in items])


def naive_clustered_mcnemar(a, b, clusters):
    d = {}
    for x, y, k in zip(a, b, clusters):
        d[k] = d.get(k, 0) + int(x and not y) - int(y and not x)
    total, square = sum(d.values()), sum(v * v for v in d.values())
    return total * total / square


def test_clustered_mcnemar_with_one_pair_per_item_is_mcnemars_chi_square() -> None:
    a, b = paired_outcomes(400, 0.55, 0.45, seed=8)
    got = clustered_mcnemar(a, b, np.arange(400))
    n_b, n_c = int((a & ~b).sum()), int((~a & b).sum())
    chi2 = (n_b - n_c) ** 2 / (n_b + n_c)
    assert (got.b, got.c, got.n_clusters) == (n_b, n_c, 400)
    assert got.statistic == pytest.approx(chi2, rel=1e-12)
    assert got.p_value == pytest.approx(sps.chi2.sf(chi2, df=1), rel=1e-12)


def test_clustered_mcnemar_matches_a_loop_over_items() -> None:
    a, b, items = clustered_pairs(120, 5, seed=2)
    got = clustered_mcnemar(a, b, items)
    assert got.statistic == pytest.approx(naive_clustered_mcnemar(a, b, items), rel=1e-12)
    assert got.n_clusters == 120


def test_repeating_every_pair_shrinks_the_pooled_p_but_not_the_clustered_one() -> None:
    a, b = paired_outcomes(300, 0.5, 0.43, seed=11)
    items = np.arange(300)
    k = 5
    a_k, b_k, items_k = np.repeat(a, k), np.repeat(b, k), np.repeat(items, k)
    assert mcnemar_exact(a_k, b_k).p_value < mcnemar_exact(a, b).p_value / 100
    once, repeated = clustered_mcnemar(a, b, items), clustered_mcnemar(a_k, b_k, items_k)
    assert repeated.statistic == pytest.approx(once.statistic, rel=1e-12)
    assert repeated.p_value == pytest.approx(once.p_value, rel=1e-12)
    boot_once = clustered_bootstrap_ci(a, b, items, B=2000, seed=4)
    boot_rep = clustered_bootstrap_ci(a_k, b_k, items_k, B=2000, seed=4)
    assert (boot_rep.lo, boot_rep.hi, boot_rep.p_value) == pytest.approx(
        (boot_once.lo, boot_once.hi, boot_once.p_value), abs=1e-12)
    _, naive_lo, naive_hi = paired_bootstrap_ci(a_k, b_k, B=2000, seed=4)
    assert boot_rep.hi - boot_rep.lo > 2 * (naive_hi - naive_lo)  # about sqrt(5) wider


def test_clustered_mcnemar_without_discordant_evidence_is_p_1() -> None:
    same = clustered_mcnemar([True, False, True], [True, False, True], ["x", "y", "z"])
    assert (same.b, same.c, same.p_value) == (0, 0, 1.0)
    balanced = clustered_mcnemar([True, False], [False, True], ["x", "x"])  # one item, +1 and -1
    assert balanced.p_value == 1.0


def naive_clustered_bootstrap(a, b, clusters, B, level, seed):
    keys = sorted(set(clusters))
    members = {k: np.flatnonzero(clusters == k) for k in keys}
    rng = np.random.default_rng(seed)
    deltas = []
    for _ in range(B):
        drawn = np.concatenate([members[keys[i]] for i in rng.integers(0, len(keys), len(keys))])
        deltas.append(a[drawn].mean() - b[drawn].mean())
    alpha = 1 - level
    return np.quantile(deltas, [alpha / 2, 1 - alpha / 2]), np.array(deltas)


@pytest.mark.parametrize("chunk", [1, 13, 256])
def test_clustered_bootstrap_agrees_with_resampling_items_by_hand(chunk: int) -> None:
    a, b, items = clustered_pairs(40, 3, seed=6)
    items[:9] = items[0]  # clusters of unequal size
    got = clustered_bootstrap_ci(a, b, items, B=300, level=0.9, seed=21, chunk=chunk)
    (lo, hi), deltas = naive_clustered_bootstrap(a, b, items, 300, 0.9, 21)
    assert (got.lo, got.hi) == pytest.approx((lo, hi), abs=1e-12)
    delta = a.mean() - b.mean()
    assert got.delta == pytest.approx(delta, abs=1e-15)
    p = (1 + np.sum(np.abs(deltas - delta) >= abs(delta) - 1e-12)) / 301
    assert got.p_value == pytest.approx(p, abs=1e-12)
    assert (got.n_pairs, got.n_clusters) == (120, 38)


def test_clustered_bootstrap_spread_matches_the_cluster_robust_standard_error() -> None:
    a, b, items = clustered_pairs(300, 4, seed=9)
    got = clustered_bootstrap_ci(a, b, items, B=20_000, seed=1)
    d = a.astype(float) - b.astype(float)
    delta = d.mean()
    sums = np.array([(d[items == k] - delta).sum() for k in np.unique(items)])
    se = np.sqrt((sums ** 2).sum()) / d.size  # linearised (sandwich) standard error of a ratio
    z = sps.norm.ppf(0.975)
    assert (got.hi - got.lo) / (2 * z) == pytest.approx(se, rel=0.05)


def test_clustered_statistics_reject_misaligned_clusters() -> None:
    with pytest.raises(CubeError, match="clusters must name one item per pair: 3 pairs, 2 clusters"):
        clustered_mcnemar([True, False, True], [True, True, True], ["x", "y"])
    with pytest.raises(CubeError, match="clusters must name one item per pair"):
        clustered_bootstrap_ci([True, False], [True, True], ["x"])
