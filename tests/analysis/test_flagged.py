"""cube.analysis.flagged: the pooled M1-strict vs M1-seq comparison in the flagged cells."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from cube.analysis.confirm import confirm
from cube.analysis.flagged import flagged_cells, scorer_gap, select_cells
from cube.config import REPO_ROOT
from cube.errors import ConfigError
from cube.tokenizers.audit import read_prediction
from tests.record_tables import record, scores_for, table

PREDICTION = REPO_ROOT / "data" / "predictions" / "audit_frozen.json"


def rec(model, label_set, scorer, row, correct, context="zh_cue", shots=0, gold=1):
    pred = gold if correct else (gold + 1) % 4
    return record(model=model, label_set=label_set, context=context, scorer=scorer, shots=shots,
                  uid=f"cmmlu/arts/test/{row}", gold=gold, pred=pred, scores=scores_for(pred))


def outcomes(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random(n) < 0.3, rng.random(n) < 0.6


def test_scorer_gap_pools_cells_item_by_item_like_a_naive_pairing():
    recs, a_all, b_all = [], [], []
    for i, (model, ls, shots) in enumerate([("m1", "L2_fullwidth", 0), ("m1", "L2_fullwidth", 5),
                                             ("m2", "L4_circled", 0)]):
        a, b = outcomes(i, 23)
        for row in range(23):
            recs.append(rec(model, ls, "M1-strict", row, a[row], shots=shots))
            if row != 7:  # an unpaired record: left out of both accuracies
                recs.append(rec(model, ls, "M1-seq", row, b[row], shots=shots))
        keep = np.arange(23) != 7
        a_all.append(a[keep])
        b_all.append(b[keep])
    # records outside the chosen cells (another label set, another scorer) must not count
    recs += [rec("m1", "L1_halfwidth", "M1-strict", r, False) for r in range(5)]
    recs += [rec("m1", "L2_fullwidth", "M2", r, True) for r in range(5)]
    a, b = np.concatenate(a_all), np.concatenate(b_all)

    gap = scorer_gap(table(recs), [("m1", "L2_fullwidth", "zh_cue"), ("m2", "L4_circled", "zh_cue")])
    assert (gap.n, gap.n_cells) == (a.size, 2)
    assert gap.acc_a == pytest.approx(a.mean()) and gap.acc_b == pytest.approx(b.mean())
    assert gap.gain == pytest.approx(b.mean() - a.mean())
    assert gap.gain_lo <= gap.gain <= gap.gain_hi
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    assert (gap.mcnemar.b, gap.mcnemar.c) == (only_a, only_b)
    assert gap.mcnemar.p_value == pytest.approx(binomtest(only_a, only_a + only_b, 0.5).pvalue)


def test_select_cells_keeps_exactly_the_named_cells():
    recs = [rec("m1", "L2_fullwidth", "M1-strict", 0, True),
            rec("m1", "L2_fullwidth", "M1-strict", 0, True, context="en_label_space"),
            rec("m2", "L2_fullwidth", "M1-seq", 0, True)]
    got = select_cells(table(recs), [("m1", "L2_fullwidth", "zh_cue"), ("m2", "L2_fullwidth", "zh_cue")])
    assert list(zip(got.column("model").to_pylist(), got.column("context").to_pylist())) == [
        ("m1", "zh_cue"), ("m2", "zh_cue")]
    assert select_cells(table(recs), []).num_rows == 0


def test_scorer_gap_clusters_the_pairs_by_item_when_cells_share_items():
    # five models answer the same 40 items alike: 200 pairs but 40 independent items
    a, b = outcomes(3, 40)
    recs = []
    for model in ("m1", "m2", "m3", "m4", "m5"):
        for row in range(40):
            recs.append(rec(model, "L4_circled", "M1-strict", row, a[row]))
            recs.append(rec(model, "L4_circled", "M1-seq", row, b[row]))
    cells = [(m, "L4_circled", "zh_cue") for m in ("m1", "m2", "m3", "m4", "m5")]
    gap = scorer_gap(table(recs), cells, B=2000, seed=1)
    once = scorer_gap(table(recs[:80]), cells[:1], B=2000, seed=1)  # one model: one pair per item
    assert (gap.n, gap.n_items, gap.clustered_mcnemar.n_clusters) == (200, 40, 40)
    assert gap.mcnemar.p_value < once.mcnemar.p_value / 30  # the pooled test counts 200 pairs
    assert gap.clustered_mcnemar.p_value == pytest.approx(once.clustered_mcnemar.p_value, rel=1e-12)
    assert gap.clustered_gain.delta == pytest.approx(gap.gain)
    assert (gap.clustered_gain.lo, gap.clustered_gain.hi) == pytest.approx(
        (once.clustered_gain.lo, once.clustered_gain.hi), abs=1e-12)
    assert gap.clustered_gain.hi - gap.clustered_gain.lo > 2 * (gap.gain_hi - gap.gain_lo)


def test_scorer_gap_without_a_pair_names_the_scorers():
    recs = [rec("m1", "L2_fullwidth", "M1-strict", 0, True)]
    with pytest.raises(ConfigError, match="both a M1-strict and a M1-seq"):
        scorer_gap(table(recs), [("m1", "L2_fullwidth", "zh_cue")])
    with pytest.raises(ConfigError, match="no M1-strict or M1-seq records"):
        scorer_gap(table(recs), [("m9", "L2_fullwidth", "zh_cue")])


def test_flagged_cells_are_the_observed_cells_predicted_degen():
    # smollm2 (family smollm2): the frozen audit calls L2 DEGEN and L1 defined under zh_cue
    tied = [-1.0, -1.0, -1.0, -1.0]
    recs = [record(model="smollm2-135m-instruct", scorer="M1-strict", label_set="L2_fullwidth",
                   uid=f"cmmlu/arts/test/{r}", scores=tied, tie_groups="0=1=2=3", gold=0, pred=0)
            for r in range(3)]
    recs += [record(model="smollm2-135m-instruct", scorer="M1-strict", label_set="L1_halfwidth",
                    uid=f"cmmlu/arts/test/{r}", scores=scores_for(1), gold=1, pred=1) for r in range(3)]
    report = confirm(table(recs), read_prediction(PREDICTION), {"smollm2-135m-instruct": "smollm2"})
    assert report.confirmed == report.predicted == 2
    assert flagged_cells(report) == [("smollm2-135m-instruct", "L2_fullwidth", "zh_cue")]


def test_tiebreak_outcomes_count_what_a_loop_over_the_records_finds():
    from cube.analysis.flagged import tiebreak_outcomes

    rng = np.random.default_rng(3)
    recs, expected = [], [0, 0, 0, 0, 0]
    for row in range(40):
        scores = [-1.0 - rng.integers(0, 3) * 0.5 for _ in range(4)]
        scores[3] = scores[2]  # options 2 and 3 always share a score, as 丙=丁 do
        gold = int(rng.integers(0, 4))
        pred = int(np.argmax(scores)) if row != 5 else 3  # row 5: not the first-option rule
        recs.append(record(model="m", scorer="M1-strict", label_set="L3_ganzhi", gold=gold, pred=pred,
                           uid=f"cmmlu/arts/test/{row}", scores=scores, tie_groups="2=3"))
        top = [i for i, s in enumerate(scores) if s == max(scores)]
        expected[0] += 1
        expected[1] += len(top) > 1
        expected[2] += len(top) > 1 and gold in top
        expected[3] += len(top) > 1 and gold in top and pred == gold
        expected[4] += pred == top[0]
    recs.append(rec("m", "L3_ganzhi", "M1-seq", 0, True))  # another scorer: not counted
    got = tiebreak_outcomes(table(recs), ("m", "L3_ganzhi", "zh_cue"))
    assert [got.n, got.n_top_shared, got.n_decided, got.n_decided_right, got.n_first_of_top] == expected
    assert got.n_first_of_top == 39 and got.n_decided > 0
    with pytest.raises(ConfigError, match="no M1-strict records in cell m / L1_halfwidth / zh_cue"):
        tiebreak_outcomes(table(recs), ("m", "L1_halfwidth", "zh_cue"))
