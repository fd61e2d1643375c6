"""Rescoring checked against naive Python loops over the records and scipy's references."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest, rankdata

from cube.analysis.calibration import calibration
from cube.analysis.paired_slices import regression_table
from cube.analysis.ranking_shift import correct_matrix, ranking_shift
from cube.analysis.rescore import rescore
from cube.analysis.slices import CELL_COLUMNS, select
from cube.analysis.footrule import footrule_noise_floor
from cube.errors import ConfigError
from cube.protocol.taxonomy import Taxonomy
from tests.record_tables import record, scores_for, slice_in, table

SUBJECTS = ("agronomy", "anatomy", "ancient_chinese", "arts")
# A made-up taxonomy: anatomy sits in two categories, agronomy and arts form a named subset.
TAXONOMY = Taxonomy(
    "custom",
    {"agronomy": ("Other",), "anatomy": ("STEM", "Other"), "ancient_chinese": ("Social Science",),
     "arts": ("Humanities",)},
    {"Special": frozenset({"agronomy", "arts"})},
    Path("made-up"),
)


def random_records(seed: int = 0, models=("m1", "m2"), scorers=("M1-seq", "M6-strict")):
    rng = np.random.default_rng(seed)
    recs = []
    for model in models:
        for scorer in scorers:
            for subject in SUBJECTS:
                for row in range(int(rng.integers(3, 12))):
                    gold = int(rng.integers(0, 4))
                    if scorer.startswith("M6") and rng.random() < 0.1:
                        pred = -1
                    else:
                        pred = gold if rng.random() < 0.6 else (gold + 1) % 4
                    recs.append(record(model=model, scorer=scorer,
                                       uid=f"cmmlu/{subject}/test/{row}", gold=gold, pred=pred,
                                       scores=scores_for(max(pred, 0))))
    return recs


def cell_of(rec):
    return tuple(rec[c] for c in CELL_COLUMNS)


def wilson(k, n):
    ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return ci.low, ci.high


def stratified_wilson(ks, ns, level=0.95):
    """The macro interval from its definition, by root finding: the p with
    (mean - p)^2 = z^2 p(1 - p) sum(1 / n_s) / S^2 (Yan & Su's stratified Wilson, equal weights)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    z = norm.ppf(0.5 + level / 2)
    mean = sum(k / n for k, n in zip(ks, ns)) / len(ns)
    v = sum(1 / n for n in ns) / len(ns) ** 2

    def f(p):
        return (mean - p) ** 2 - z * z * p * (1 - p) * v

    return (0.0 if mean == 0 else brentq(f, 0.0, mean)), (1.0 if mean == 1 else brentq(f, mean, 1.0))


def naive_subject_counts(recs):
    counts = defaultdict(lambda: [0, 0, 0])
    for r in recs:
        c = counts[(cell_of(r), r["subject"])]
        c[0] += 1
        c[1] += r["correct"]
        c[2] += r["parse_failed"]
    return counts


def test_subject_level_matches_a_naive_count_and_scipy_wilson():
    recs = random_records()
    rows = rescore(table(recs), "subject").rows.to_pylist()
    counts = naive_subject_counts(recs)
    assert len(rows) == len(counts)
    for row in rows:
        n, k, failed = counts[(tuple(row[c] for c in CELL_COLUMNS), row["group"])]
        assert (row["n"], row["n_correct"], row["n_parse_failed"]) == (n, k, failed)
        assert row["accuracy"] == pytest.approx(k / n)
        assert (row["ci_lo"], row["ci_hi"]) == pytest.approx(wilson(k, n), abs=1e-9)
        assert row["parse_failure_rate"] == pytest.approx(failed / n)


def test_category_micro_and_macro_with_a_two_category_subject():
    recs = random_records(seed=3)
    rows = rescore(table(recs), "category", taxonomy=TAXONOMY).rows.to_pylist()
    counts = naive_subject_counts(recs)
    members = defaultdict(list)  # (cell, group) -> subject counts
    for (cell, subject), c in counts.items():
        for group in TAXONOMY.categories[subject]:
            members[(cell, group)].append(c)
        for group, subjects in TAXONOMY.groups.items():
            if subject in subjects:
                members[(cell, group)].append(c)
    assert len(rows) == 2 * len(members)
    for row in rows:
        subjects = members[(tuple(row[c] for c in CELL_COLUMNS), row["group"])]
        n, k = sum(s[0] for s in subjects), sum(s[1] for s in subjects)
        assert row["n_subjects"] == len(subjects) and row["n"] == n
        if row["aggregation"] == "micro":
            assert row["accuracy"] == pytest.approx(k / n)
            assert (row["ci_lo"], row["ci_hi"]) == pytest.approx(wilson(k, n), abs=1e-9)
        else:
            ps = [s[1] / s[0] for s in subjects]
            mean = sum(ps) / len(ps)
            assert row["accuracy"] == pytest.approx(mean)
            lo, hi = stratified_wilson([s[1] for s in subjects], [s[0] for s in subjects])
            assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((lo, hi), abs=1e-9)
    other = [r for r in rows if r["group"] == "Other" and r["aggregation"] == "micro"]
    assert all(r["n_subjects"] == 2 for r in other)  # agronomy and the two-category anatomy


def test_macro_interval_has_width_with_one_item_per_subject():
    """Issue 22: `--sample 30` scores one item per subject; the macro interval was [0.167, 0.167]."""
    subjects = [f"s{i:02d}" for i in range(30)]
    recs = [record(uid=f"cmmlu/{s}/test/0", gold=0, pred=0 if i < 5 else 1, scores=scores_for(0 if i < 5 else 1))
            for i, s in enumerate(subjects)]
    flat = Taxonomy("flat", {s: ("All",) for s in subjects}, {}, Path("made-up"))
    rows = rescore(table(recs), "category", taxonomy=flat).rows.to_pylist()
    macro = next(r for r in rows if r["aggregation"] == "macro")
    assert macro["accuracy"] == pytest.approx(5 / 30)
    assert macro["ci_hi"] - macro["ci_lo"] > 0.2
    assert (macro["ci_lo"], macro["ci_hi"]) == pytest.approx(wilson(5, 30), abs=1e-12)  # one item each
    overall = rescore(table(recs), "overall").rows.to_pylist()
    assert all(r["ci_lo"] < r["accuracy"] < r["ci_hi"] for r in overall)


def test_overall_pools_every_subject():
    recs = random_records(seed=5)
    rows = rescore(table(recs), "overall").rows.to_pylist()
    per_cell = defaultdict(lambda: [0, 0])
    for r in recs:
        per_cell[cell_of(r)][0] += 1
        per_cell[cell_of(r)][1] += r["correct"]
    micro = [r for r in rows if r["aggregation"] == "micro"]
    assert len(micro) == len(per_cell) == 4
    for row in micro:
        n, k = per_cell[tuple(row[c] for c in CELL_COLUMNS)]
        assert (row["n"], row["n_correct"], row["group"]) == (n, k, "all")


def test_default_taxonomy_is_the_benchmarks_own():
    rows = rescore(table(random_records()), "category").rows.to_pylist()
    groups = {r["group"] for r in rows}
    assert "China-specific" in groups  # ancient_chinese carries CMMLU's flag
    assert groups <= {"STEM", "Humanities", "Social Science", "Other", "China-specific"}


def test_parse_failures_count_as_not_correct_and_warn_above_two_percent():
    def generation(model, failures):
        return [record(model=model, scorer="M6-strict", uid=f"cmmlu/agronomy/test/{i}",
                       pred=-1 if i < failures else 0, scores=scores_for(0)) for i in range(100)]

    recs = generation("over", 3) + generation("at", 2)
    recs += [record(model="mcq", uid=f"cmmlu/agronomy/test/{i}") for i in range(10)]
    result = rescore(table(recs), "overall")
    assert len(result.warnings) == 1
    assert "parse failures 3.0% (3/100) exceed 2%" in result.warnings[0]
    assert "model=over" in result.warnings[0]
    row = next(r for r in result.rows.to_pylist() if r["model"] == "over")
    assert row["n_correct"] == 97 and row["n_parse_failed"] == 3
    assert row["accuracy"] == pytest.approx(0.97)


def test_tie_share_is_reported_per_cell_and_a_mostly_tied_cell_warns():
    """Issue 36 §4: a degenerate cell (every label one token id) decides by tie-break; its share of
    tied decisions is in every row, and above half the cell gets a warning naming it."""
    tied = [-1.0, -1.0, -1.0, -1.0]  # every option one score: the first one wins the tie-break

    def cell(model, n_tied, n=10):
        return [record(model=model, uid=f"cmmlu/{SUBJECTS[i % 2]}/test/{i}", pred=0,
                       scores=tied if i < n_tied else scores_for(0)) for i in range(n)]

    recs = cell("degenerate", 6) + cell("half", 5) + cell("clean", 0)
    for level in ("subject", "overall"):
        result = rescore(table(recs), level)
        for r in result.rows.to_pylist():  # a naive count of the records behind each row
            mine = [x for x in recs if x["model"] == r["model"]
                    and (level == "overall" or x["subject"] == r["group"])]
            assert r["n_tied"] == sum(x["tied"] for x in mine)
            assert r["tie_rate"] == pytest.approx(r["n_tied"] / len(mine))
        assert len(result.warnings) == 1
        assert "tie-breaks decide 60.0% (6/10)" in result.warnings[0]
        assert "model=degenerate" in result.warnings[0]


def test_select_filters_each_field_with_one_or_many_values():
    data = table(random_records())
    assert select(data).num_rows == data.num_rows
    both = select(data, model=["m1", "m2"], scorer="M1-seq")
    assert set(both.column("scorer").to_pylist()) == {"M1-seq"}
    assert select(data, shots=[5]).num_rows == 0
    assert select(data, shots="0").num_rows == data.num_rows
    with pytest.raises(ConfigError, match="cannot slice on 'subject'"):
        select(data, subject="arts")
    with pytest.raises(ConfigError, match="unknown level"):
        rescore(data, "item")
    with pytest.raises(ConfigError, match="no records"):
        rescore(select(data, model="nobody"))


# --- regression table ---------------------------------------------------------------------------


def test_regression_table_sorted_worst_first_with_scipy_pvalues():
    rng = np.random.default_rng(7)
    recs_a, recs_b = [], []
    drift = {"agronomy": -0.4, "anatomy": 0.2, "ancient_chinese": 0.0, "arts": -0.1}
    for subject in SUBJECTS:
        for row in range(30):
            uid = f"cmmlu/{subject}/test/{row}"
            right_a = rng.random() < 0.6
            right_b = rng.random() < 0.6 + drift[subject]
            recs_a.append(record(model="v1", uid=uid, pred=0 if right_a else 1,
                                 scores=scores_for(0 if right_a else 1)))
            recs_b.append(record(model="v2", uid=uid, pred=0 if right_b else 1,
                                 scores=scores_for(0 if right_b else 1)))
    recs_b.append(record(model="v2", uid="cmmlu/arts/test/99"))  # only in B: left out
    result = regression_table(table(recs_a), table(recs_b))
    rows = result.rows.to_pylist()
    deltas = [r["delta"] for r in rows]
    assert deltas == sorted(deltas)
    assert rows[0]["subject"] == "agronomy"
    assert result.only_a == 0 and result.only_b == 1
    for row in rows:
        a = [r["correct"] for r in recs_a if r["subject"] == row["subject"]]
        b = [r["correct"] for r in recs_b if r["subject"] == row["subject"]][:30]
        discordant_a = sum(x and not y for x, y in zip(a, b))
        discordant_b = sum(y and not x for x, y in zip(a, b))
        assert (row["a_only_right"], row["b_only_right"]) == (discordant_a, discordant_b)
        assert row["delta"] == pytest.approx(sum(b) / 30 - sum(a) / 30)
        expected = (binomtest(discordant_a, discordant_a + discordant_b, 0.5).pvalue
                    if discordant_a + discordant_b else 1.0)
        assert row["p_value"] == pytest.approx(expected)
    assert result.overall["n"] == 120
    for row in [*rows, result.overall]:
        assert row["delta_lo"] <= row["delta"] <= row["delta_hi"]
        # the interval is the exact McNemar test's own: it excludes 0 exactly when p < 0.05
        assert (row["delta_lo"] > 0 or row["delta_hi"] < 0) == (row["p_value"] < 0.05)
    by_subject = sorted(rows, key=lambda r: r["subject"])
    naive = sorted((r["p_value"], r["subject"]) for r in by_subject)
    k = len(naive)
    running = 0.0
    for rank, (p, subject) in enumerate(naive):  # Holm from its definition
        running = max(running, min(1.0, (k - rank) * p))
        assert next(r["p_holm"] for r in rows if r["subject"] == subject) == pytest.approx(running)
    again = regression_table(table(recs_a), table(recs_b))
    assert again.rows.to_pylist() == rows


def naive_ece(probs, gold, n_bins=10):
    total, n = 0.0, len(gold)
    for m in range(n_bins):
        lo, hi = m / n_bins, (m + 1) / n_bins
        members = [i for i, p in enumerate(probs)
                   if (lo < max(p) <= hi) or (m == 0 and max(p) == 0.0)]
        if members:
            acc = sum(int(np.argmax(probs[i])) == gold[i] for i in members) / len(members)
            conf = sum(max(probs[i]) for i in members) / len(members)
            total += len(members) / n * abs(acc - conf)
    return total


def test_calibration_per_cell_matches_a_naive_ece():
    rng = np.random.default_rng(11)
    recs = []
    for model in ("m1", "m2"):
        for row in range(40):
            probs = rng.dirichlet([1.0, 1.0, 1.0, 1.0])
            gold = int(rng.integers(0, 4))
            pred = int(np.argmax(probs))
            recs.append(record(model=model, uid=f"cmmlu/arts/test/{row}", gold=gold, pred=pred,
                               scores=np.log(probs).tolist(), probs=probs.tolist()))
    recs.append(record(model="m1", scorer="M6-strict", pred=-1))  # generation: left out
    rows = calibration(table(recs)).to_pylist()
    assert [(r["model"], r["scorer"], r["n"]) for r in rows] == [("m1", "M1-seq", 40),
                                                                  ("m2", "M1-seq", 40)]
    for row in rows:
        mine = [r for r in recs if r["model"] == row["model"] and r["scorer"] == "M1-seq"]
        probs = [np.float32(r["probs"]).astype(np.float64) for r in mine]
        probs = [p / p.sum() for p in probs]
        assert row["ece"] == pytest.approx(naive_ece(probs, [r["gold"] for r in mine]))


def test_regression_needs_one_cell_per_slice():
    data = table(random_records())
    with pytest.raises(ConfigError, match=r"slice A holds \d+ records for \d+ items; it spans 4"):
        regression_table(data, select(data, model="m1", scorer="M1-seq"))


# --- rankings -----------------------------------------------------------------------------------


def ranking_records(seed: int, abilities: dict[str, float], n_items: int = 60):
    rng = np.random.default_rng(seed)
    recs = []
    for model, p in abilities.items():
        for row in range(n_items):
            right = rng.random() < p
            recs.append(record(model=model, uid=f"cmmlu/arts/test/{row}",
                               pred=0 if right else 2, scores=scores_for(0 if right else 2)))
    return recs


def test_correct_matrix_drops_items_a_model_lacks():
    recs = ranking_records(0, {"a": 0.5, "b": 0.7}, n_items=10)
    recs = [r for r in recs if not (r["model"] == "a" and r["uid"].endswith("/3"))]
    matrix = correct_matrix(table(recs))
    assert matrix.models == ["a", "b"] and len(matrix.uids) == 9
    assert "cmmlu/arts/test/3" not in matrix.uids
    lookup = {(r["model"], r["uid"]): r["correct"] for r in recs}
    for i, m in enumerate(matrix.models):
        assert matrix.correct[i].tolist() == [lookup[(m, u)] for u in matrix.uids]


def test_ranking_shift_matches_a_naive_footrule():
    models = {"a": 0.3, "b": 0.5, "c": 0.6, "d": 0.8}
    protocol_a = table(ranking_records(1, models))
    protocol_b = table(ranking_records(2, {"a": 0.8, "b": 0.5, "c": 0.6, "d": 0.3}))
    shift = ranking_shift(protocol_a, protocol_b, B=40, seed=3)
    hits = []
    for t in (protocol_a, protocol_b):
        per_model = defaultdict(int)
        for r in t.to_pylist():
            per_model[r["model"]] += r["correct"]
        hits.append([per_model[m] for m in sorted(models)])
    ra, rb = rankdata([-h for h in hits[0]]), rankdata([-h for h in hits[1]])
    assert shift.observed == pytest.approx(np.abs(ra - rb).sum() / (4 * 4 // 2))
    def in_uid_order(t):  # the floor draws items in uid order, whatever order the records came in
        m = correct_matrix(t)
        return m.correct[:, np.argsort(m.uids)]

    floor_a = footrule_noise_floor(in_uid_order(protocol_a), B=40, seed=3)
    floor_b = footrule_noise_floor(in_uid_order(protocol_b), B=40, seed=3)
    np.testing.assert_array_equal(shift.floor_a.samples, floor_a.samples)  # both on the same draws
    np.testing.assert_array_equal(shift.floor_b.samples, floor_b.samples)
    np.testing.assert_array_equal(shift.floor.samples, np.maximum(floor_a.samples, floor_b.samples))
    assert shift.multiple_of_mean == pytest.approx(shift.observed / shift.floor.mean)
    assert shift.normalisation == "n = 4 models, normalised by ⌊n²/2⌋ = 8"


# --- one precision per paired comparison ---------------------------------------------------------




def test_a_pair_of_two_precisions_is_refused_unless_allowed_and_then_says_so():
    from cube.analysis.paired_slices import pair, regression_table
    from cube.errors import PrecisionMismatch

    bf16, fp32 = slice_in("bfloat16", "en_prompt_space", flips={1}), slice_in("float32", "en_label_space", flips={2, 3})
    with pytest.raises(PrecisionMismatch, match=r"slice A was scored in bfloat16 and slice B in float32.*--allow-mixed-precision"):
        pair(bf16, fp32)
    with pytest.raises(PrecisionMismatch):
        regression_table(bf16, fp32)
    allowed = regression_table(bf16, fp32, allow_mixed_precision=True)
    assert allowed.precision == "mixed: A bfloat16, B float32"
    assert (allowed.overall["a_only_right"], allowed.overall["b_only_right"]) == (2, 1)  # the same test, told
    same = pair(bf16, slice_in("bfloat16", "en_label_space"))
    assert same.precision == "bfloat16"
    # a slice that records no precision (an import) cannot be checked, and says so
    assert pair(slice_in(None, "a"), slice_in(None, "b")).precision == "not recorded"


def test_a_side_that_records_no_precision_is_named_never_taken_for_the_others():
    """Issue 48: a pair with one side's records saying no precision was printed as the other's one
    precision; 'not recorded' is a value of its own, named in the pair, and a slice mixing it
    with a recorded precision is two precisions."""
    from cube.analysis.paired_slices import pair
    from cube.errors import PrecisionMismatch

    assert pair(slice_in("bfloat16", "a"), slice_in(None, "b")).precision == "A bfloat16, B not recorded"
    assert pair(slice_in(None, "a"), slice_in("float32", "b")).precision == "A not recorded, B float32"
    import pyarrow as pa

    half = pa.concat_tables([slice_in("bfloat16", "a").slice(0, 4), slice_in(None, "a").slice(4, 4)])
    with pytest.raises(PrecisionMismatch, match=r"slice A was scored in bfloat16\+not recorded and slice B in bfloat16"):
        pair(half, slice_in("bfloat16", "b"))

