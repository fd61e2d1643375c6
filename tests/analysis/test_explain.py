"""cube.analysis.explain: each factor planted alone is named with the whole gap; the factors sum
to the gap exactly; the paired statistics against scipy; the selector grammar's one-line errors.

Stores are written with the repo's own writer (write_records) and read back through read_records,
so the decomposition sees what a reader of a real store sees. Only invented values.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binomtest

from cube.analysis.explain import FACTORS, explain_slices
from cube.analysis.explain_causes import NOT_IDENTIFIABLE
from cube.analysis.explain_selectors import parse_slice
from cube.errors import ConfigError
from cube.records.store import read_records, write_records
from tests.record_tables import record, scores_for, table

# 3 subjects of unequal size, so that micro and macro differ
SUBJECT_SIZES = {"agronomy": 4, "anatomy": 8, "astronomy": 12}
UIDS = [f"cmmlu/{s}/test/{i}" for s, n in SUBJECT_SIZES.items() for i in range(n)]
TOKENS = {"first_token_ids": [49, 50, 51, 52], "n_tokens": [1, 1, 1, 1]}


def outcome_records(right: dict[str, bool], **fields) -> list[dict]:
    """One record per uid: right -> pred is gold (0), else pred 1; distinct scores (no tie)."""
    recs = []
    for uid, ok in right.items():
        pred = 0 if ok else 1
        recs.append(record(uid=uid, pred=pred, scores=scores_for(pred), **fields))
    return recs


def tied_records(uids, **fields) -> list[dict]:
    """A degenerate first-token cell: every option scores the same, the first option wins."""
    return [record(uid=u, pred=0, scores=[-1.0] * 4, tie_groups="0=1=2=3", **fields) for u in uids]


def pattern(seed: int, p: float = 0.5, uids=UIDS) -> dict[str, bool]:
    rng = np.random.default_rng(seed)
    return {u: bool(x) for u, x in zip(uids, rng.random(len(uids)) < p)}


def shifted(right: dict[str, bool], up: int = 5, down: int = 2) -> dict[str, bool]:
    """``right`` with ``up`` wrong items made right and ``down`` right ones made wrong: a gap of
    (up - down) items with discordance both ways."""
    wrong = [u for u, ok in right.items() if not ok][:up]
    lost = [u for u, ok in right.items() if ok][:down]
    return {u: (True if u in wrong else False if u in lost else ok) for u, ok in right.items()}


def store(tmp_path, name: str, recs: list[dict]) -> str:
    write_records(tmp_path / name, table(recs))
    return str(tmp_path / name)


def explained(a: str, b: str):
    return explain_slices(parse_slice(a), parse_slice(b), B=500)


def acc(values) -> Fraction:
    values = list(values)
    return Fraction(sum(values), len(values))


def macro(right: dict[str, bool]) -> Fraction:
    by = {}
    for uid, ok in right.items():
        by.setdefault(uid.split("/")[1], []).append(ok)
    return sum((acc(v) for v in by.values()), Fraction(0)) / len(by)


def assert_named_alone(e, name: str) -> None:
    """The whole gap on ``name``, every other factor 0 in every order, and the gap non-zero."""
    assert e.gap != 0
    assert sum((f.share for f in e.factors), Fraction(0)) == e.gap
    for f in e.factors:
        expected = e.gap if f.name == name else Fraction(0)
        assert (f.share, f.low, f.high) == (expected, expected, expected), (f.name, f)
    assert e.factor(name).status == ("unattributed" if name == "remainder" else "identified")


# --------------------------------------------------------------------------------------------
# Each factor alone
# --------------------------------------------------------------------------------------------


def test_a_pair_with_no_difference_explains_zero(tmp_path):
    path = store(tmp_path, "s", outcome_records(pattern(0), **TOKENS))
    e = explained(path, path)
    assert e.gap == 0 and e.n_common == len(UIDS)
    assert all((f.share, f.low, f.high, f.items) == (0, 0, 0, 0) for f in e.factors)
    # the store records no precision: its factors are unknown, never "no difference" (issue 45)
    assert {f.name: f.status for f in e.factors if f.status != "no difference"} == {
        "precision_noise": "unknown: a side did not record it", "precision": "unknown: a side did not record it"}
    assert e.prompt_diff == [] and e.table2x2["only_a"] == e.table2x2["only_b"] == 0


def test_sample_alone(tmp_path):
    right = pattern(1)
    extra = {f"cmmlu/anatomy/test/{i}": True for i in range(8, 20)}
    a = store(tmp_path, "a", outcome_records(right, **TOKENS))
    b = store(tmp_path, "b", outcome_records({**right, **extra}, **TOKENS))
    e = explained(a, b)
    assert_named_alone(e, "sample")
    assert e.gap == acc([*right.values(), *extra.values()]) - acc(right.values())
    assert (e.n_a, e.n_b, e.n_common) == (24, 36, 24)
    assert e.common_a == e.common_b == acc(right.values())


def test_aggregation_alone(tmp_path):
    right = pattern(2)
    path = store(tmp_path, "s", outcome_records(right, **TOKENS))
    e = explained(f"{path}:agg=micro", f"{path}:agg=macro")
    assert_named_alone(e, "aggregation")
    assert e.gap == macro(right) - acc(right.values())


def test_parse_failures_alone(tmp_path):
    right = pattern(3, 0.8)
    failing = [u for u, ok in right.items() if ok][:5]
    gen = dict(scorer="M6-strict", scores=[float("nan")] * 4)
    a_recs = [record(uid=u, pred=0 if ok else 1, probs=[1.0, 0, 0, 0] if ok else [0, 1.0, 0, 0], **gen)
              for u, ok in right.items()]
    b_recs = [record(uid=u, pred=-1, probs=[0.0] * 4, **gen) if u in failing else r
              for u, r in zip(right, a_recs)]
    e = explained(store(tmp_path, "a", a_recs), store(tmp_path, "b", b_recs))
    assert_named_alone(e, "parse_failure")
    assert e.gap == Fraction(-5, 24) and e.factor("parse_failure").items == 5


def test_generations_cut_while_thinking_are_the_thinking_factor_not_parse_failures(tmp_path):
    """A reasoning checkpoint under two token budgets: the items B lost because their generations ran
    out inside the thinking block (and one closed its block without an answer) are the thinking
    factor's, with each side's outcome counts; a plain parse failure beside them stays its own."""
    right = pattern(3, 0.8)
    ok_uids = [u for u, ok in right.items() if ok]
    cut, closed, plain = ok_uids[:4], ok_uids[4:5], ok_uids[5:7]
    gen = dict(scorer="M6-strict", scores=[float("nan")] * 4)
    a_recs = [record(uid=u, pred=0 if ok else 1, probs=[1.0, 0, 0, 0] if ok else [0, 1.0, 0, 0],
                     thinking="answered", **gen) for u, ok in right.items()]
    outcome = {**{u: "truncated_in_thinking" for u in cut}, **{u: "no_answer_after_thinking" for u in closed},
               **{u: "none" for u in plain}}
    b_recs = [record(uid=u, pred=-1, probs=[0.0] * 4, thinking=outcome[u], **gen) if u in outcome else r
              for u, r in zip(right, a_recs)]
    e = explained(store(tmp_path, "a", a_recs), store(tmp_path, "b", b_recs))
    assert e.gap == Fraction(-7, 24)
    assert (e.factor("thinking").items, e.factor("parse_failure").items) == (5, 2)
    assert (e.factor("thinking").share, e.factor("parse_failure").share) == (Fraction(-5, 24), Fraction(-2, 24))
    assert e.factor("thinking").detail == ("A answered 24; B none 2, answered 17, truncated_in_thinking 4, "
                                           "no_answer_after_thinking 1")
    # a store written before schema 3 does not say: its failures stay parse failures, its detail "not recorded"
    old = [{k: v for k, v in r.items()} | {"thinking": None} for r in b_recs]
    e = explained(store(tmp_path, "a2", [r | {"thinking": None} for r in a_recs]), store(tmp_path, "b2", old))
    assert (e.factor("thinking").items, e.factor("parse_failure").items) == (0, 7)
    assert e.factor("thinking").detail == "A not recorded; B not recorded"


def test_tie_breaks_in_a_degenerate_cell_alone(tmp_path):
    """A first-token cell where all labels share a token against the full-sequence scorer: the
    scorer differs too, but every discordant item was decided by the tie-break."""
    right = pattern(4)
    a = tied_records(UIDS, scorer="M1-strict", **TOKENS)  # gold 0: right exactly where gold is first
    b = outcome_records(right, scorer="M1-seq", **TOKENS)
    path = store(tmp_path, "s", a + b)
    e = explained(f"{path}:scorer=M1-strict", f"{path}:scorer=M1-seq")
    assert_named_alone(e, "tie_break")
    assert e.gap == acc(right.values()) - 1
    assert e.factor("scorer_normalisation").status == "differs; changes no item's outcome"


def test_prompt_bytes_alone(tmp_path):
    """答案： + A against 答案：\\n + A: the text differs, the label and its tokens do not."""
    a = outcome_records(pattern(5), context="zh_cue", **TOKENS)
    b = outcome_records(shifted(pattern(5)), context="zh_cue_newline", **TOKENS)
    path = store(tmp_path, "s", a + b)
    e = explained(f"{path}:context=zh_cue", f"{path}:context=zh_cue_newline")
    assert_named_alone(e, "prompt_bytes")
    assert e.protocol["label_tokenization"]["status"] == "same"
    assert any("答案：" in line and "\\n" in line for line in e.prompt_diff)
    assert not any(ch in "".join(e.prompt_diff) for ch in "的是")  # header lines are unchanged: not shown


def test_shots_are_exemplars_not_prompt_bytes(tmp_path):
    """0 against 5 shots of one template: the exemplars carry the gap; the rest of the prompt is
    byte for byte the same (the exemplars' slot taken out)."""
    a = outcome_records(pattern(7), shots=0, **TOKENS)
    b = outcome_records(shifted(pattern(7)), shots=5, **TOKENS)
    path = store(tmp_path, "s", a + b)
    e = explained(f"{path}:shots=0", f"{path}:shots=5")
    assert_named_alone(e, "exemplars")
    assert e.protocol["prompt_bytes"]["status"] == "same"
    assert e.protocol["exemplars"]["a"].startswith("0-shot; none") and "answer label" in e.protocol["exemplars"]["b"]


def test_label_tokenization_alone_space_in_the_label(tmp_path):
    """'Answer:' + ' A' against 'Answer: ' + 'A': the same text, the space on the other side."""
    a = outcome_records(pattern(9), context="en_label_space", first_token_ids=[330, 389, 340, 422],
                        n_tokens=[1] * 4)
    b = outcome_records(shifted(pattern(9)), context="en_prompt_space", **TOKENS)
    path = store(tmp_path, "s", a + b)
    e = explained(f"{path}:context=en_label_space", f"{path}:context=en_prompt_space")
    assert_named_alone(e, "label_tokenization")
    assert e.protocol["prompt_bytes"]["status"] == "same" and e.prompt_diff == []


def test_label_tokenization_alone_tokenized_apart(tmp_path):
    a = outcome_records(pattern(11), context="en_prompt_space", **TOKENS)
    b = outcome_records(shifted(pattern(11)), context="en_prompt_space_separate", first_token_ids=[32, 33, 34, 35],
                        n_tokens=[1] * 4)
    path = store(tmp_path, "s", a + b)
    e = explained(f"{path}:context=en_prompt_space", f"{path}:context=en_prompt_space_separate")
    assert_named_alone(e, "label_tokenization")


def test_scorer_normalisation_alone(tmp_path):
    a = outcome_records(pattern(13), scorer="M1-seq", **TOKENS)
    b = outcome_records(shifted(pattern(13)), scorer="M1-strict", **TOKENS)
    path = store(tmp_path, "s", a + b)
    e = explained(f"{path}:scorer=M1-seq", f"{path}:scorer=M1-strict")
    assert_named_alone(e, "scorer_normalisation")
    assert "first token" in e.factor("scorer_normalisation").detail


def test_the_same_protocol_leaves_a_remainder_that_says_so(tmp_path):
    e = explained(store(tmp_path, "a", outcome_records(pattern(15), **TOKENS)),
                  store(tmp_path, "b", outcome_records(shifted(pattern(15)), **TOKENS)))
    assert_named_alone(e, "remainder")
    assert "same protocol" in e.factor("remainder").detail


def test_two_protocol_differences_at_once_are_not_identifiable(tmp_path):
    """L1 (A B C D) against L2 (full-width): the options' labels and the label tokens both change."""
    a = outcome_records(pattern(17), label_set="L1_halfwidth", **TOKENS)
    b = outcome_records(shifted(pattern(17)), label_set="L2_fullwidth", first_token_ids=[9, 10, 11, 12], n_tokens=[1] * 4)
    path = store(tmp_path, "s", a + b)
    e = explained(f"{path}:label_set=L1_halfwidth", f"{path}:label_set=L2_fullwidth")
    assert_named_alone(e, "remainder")
    assert e.factor("remainder").detail.startswith(NOT_IDENTIFIABLE)
    assert e.factor("prompt_bytes").status == e.factor("label_tokenization").status == NOT_IDENTIFIABLE


# --------------------------------------------------------------------------------------------
# Everything at once: exact sums, the order effect, the statistics
# --------------------------------------------------------------------------------------------


@pytest.fixture
def mixed(tmp_path):
    """A: 24 items, M1-strict, ties on agronomy; B: 22 of them and 10 more, M1-seq, macro."""
    right_a, right_b = pattern(20, 0.4), pattern(21, 0.6)
    a = [r for r in tied_records(UIDS[:4], scorer="M1-strict", **TOKENS)]
    a += outcome_records({u: right_a[u] for u in UIDS[4:]}, scorer="M1-strict", **TOKENS)
    kept = {u: right_b[u] for u in UIDS[2:]}
    kept.update({UIDS[2]: False, UIDS[3]: False})  # two of A's tie-broken (right) items B gets wrong
    extra = {f"cmmlu/astronomy/test/{i}": i % 3 == 0 for i in range(12, 22)}
    b = outcome_records({**kept, **extra}, scorer="M1-seq", **TOKENS)
    path_a, path_b = store(tmp_path, "a", a), store(tmp_path, "b", b)
    return explained(f"{path_a}:agg=micro", f"{path_b}:agg=macro"), path_a, path_b


def test_factors_sum_to_the_gap_exactly_in_every_order(mixed):
    e, path_a, path_b = mixed
    a = read_records(path_a)
    b = read_records(path_b)
    right_a = dict(zip(a.column("uid").to_pylist(), a.column("correct").to_pylist()))
    right_b = dict(zip(b.column("uid").to_pylist(), b.column("correct").to_pylist()))
    assert e.score_a == acc(right_a.values()) and e.score_b == macro(right_b)
    assert e.gap == macro(right_b) - acc(right_a.values())
    assert sum((f.share for f in e.factors), Fraction(0)) == e.gap
    assert [f.name for f in e.factors] == list(FACTORS)
    # the fixed path, by hand: drop A's own items, then re-weight by subject, then B's outcomes
    common = [u for u in right_a if u in right_b]
    # B's items with A's outcomes where A has them: the state after the sample step
    state = {u: right_a.get(u, ok) for u, ok in right_b.items()}
    assert e.factor("sample").share == acc(state.values()) - acc(right_a.values())
    assert e.factor("aggregation").share == macro(state) - acc(state.values())
    assert e.factor("tie_break").items > 0 and e.factor("scorer_normalisation").items > 0
    assert e.n_common == len(common)
    for f in e.factors:
        assert f.low <= f.share <= f.high
    assert e.factor("sample").low < e.factor("sample").high  # sample and aggregation interact here
    outcome_part = sum((f.share for f in e.factors if f.name not in ("sample", "aggregation")), Fraction(0))
    assert sum((s["carried"] for s in e.subjects), Fraction(0)) == outcome_part


def test_paired_table_and_mcnemar_against_scipy(mixed):
    e, path_a, path_b = mixed
    a, b = read_records(path_a), read_records(path_b)
    right_a = dict(zip(a.column("uid").to_pylist(), a.column("correct").to_pylist()))
    right_b = dict(zip(b.column("uid").to_pylist(), b.column("correct").to_pylist()))
    pairs = [(right_a[u], right_b[u]) for u in right_a if u in right_b]
    counts = {"both_right": sum(x and y for x, y in pairs), "only_a": sum(x and not y for x, y in pairs),
              "only_b": sum(y and not x for x, y in pairs), "both_wrong": sum(not (x or y) for x, y in pairs)}
    assert e.table2x2 == counts
    expected = binomtest(counts["only_a"], counts["only_a"] + counts["only_b"], 0.5).pvalue
    assert e.mcnemar_p == pytest.approx(expected, rel=1e-12)
    delta = (counts["only_b"] - counts["only_a"]) / len(pairs)
    assert e.bootstrap["delta"] == pytest.approx(delta)
    assert e.bootstrap["lo"] <= delta <= e.bootstrap["hi"]


def test_the_order_effect_is_the_spread_over_every_order(mixed):
    """low and high are the extremes of 6 paths that each telescope: recompute two by hand."""
    e, path_a, path_b = mixed
    a, b = read_records(path_a), read_records(path_b)
    right_a = dict(zip(a.column("uid").to_pylist(), a.column("correct").to_pylist()))
    right_b = dict(zip(b.column("uid").to_pylist(), b.column("correct").to_pylist()))
    first = macro(right_a) - acc(right_a.values())  # aggregation first: A's items and outcomes
    last = macro(right_b) - acc(right_b.values())  # aggregation last: B's items and outcomes
    f = e.factor("aggregation")
    assert len({first, last, f.share}) == 3  # this pair has an order effect
    assert f.low == min(first, last, f.share, f.low) and f.high == max(first, last, f.share, f.high)
    assert e.factor("sample").low < e.factor("sample").high

def test_a_different_question_under_one_uid_is_refused(tmp_path):
    a = outcome_records(pattern(32))
    b = [dict(r, qhash="0" * 16) if i == 0 else r for i, r in enumerate(outcome_records(pattern(32)))]
    with pytest.raises(ConfigError, match="not the same question"):
        explained(store(tmp_path, "a", a), store(tmp_path, "b", b))



def test_the_largest_score_difference_only_on_byte_equal_prompts(tmp_path):
    a = outcome_records(pattern(40), **TOKENS)
    b = [dict(r, scores=[s - 0.25 if i == 2 else s for i, s in enumerate(r["scores"])],
              probs=None) for r in a]
    b = [record(**{k: v for k, v in r.items() if k not in ("probs", "tied", "correct", "parse_failed")})
         for r in b]
    e = explained(store(tmp_path, "a", a), store(tmp_path, "b", b))
    assert e.gap == 0 and e.max_score_difference == 0.25
    other = outcome_records(pattern(40), context="zh_cue_newline", **TOKENS)
    assert explained(store(tmp_path, "a2", a), store(tmp_path, "b2", other)).max_score_difference is None


def opencompass_metadata(subjects, differs: int = 0) -> dict:
    """The manifest metadata `cube import opencompass` writes, for PPL datasets (invented prompt)."""
    def template(label):
        return {"begin": "</E>", "round": [
            {"role": "HUMAN", "prompt": "以下是单项选择题。\n题目：{question}\nA. {A}\nB. {B}\nC. {C}\nD. {D}"},
            {"role": "BOT", "prompt": f"答案是: {label}"}]}
    datasets = {f"cmmlu-{s}@ppl": {
        "context": f"oc-ppl-{s[:4]}", "mode": "ppl", "shots": 0,
        "config": {"infer_cfg": {"ice_template": {"template": {x: template(x) for x in "ABCD"}}}},
        "audit": {"n_decision_differs_from_summed_loglik": differs}} for s in subjects}
    return {"source": "opencompass", "opencompass": {"datasets": datasets, "audit": {"cell": {"verdict": "max1tok"}}}}


@pytest.mark.parametrize("differs", [0, 1])
def test_opencompass_ppl_against_cube(tmp_path, differs):
    """Its whole-prompt PPL decides as the summed log-likelihood where its import's audit says so
    (then the prompt alone differs); where it does not, the scorer is a second difference."""
    right = pattern(42)
    oc = [dict(r, context=f"oc-ppl-{r['subject'][:4]}")
          for r in outcome_records(shifted(right), scorer="OC-ppl", **TOKENS)]
    write_records(tmp_path / "oc", table(oc), metadata=opencompass_metadata(SUBJECT_SIZES, differs))
    cube = store(tmp_path, "cube", outcome_records(right, **TOKENS))
    e = explained(f"{cube}:scorer=M1-seq", f"{tmp_path / 'oc'}:context=oc-ppl-*")
    assert e.protocol["prompt_bytes"]["status"] == "differs"
    assert e.protocol["label_tokenization"]["status"] == "same"  # the same label tokens in the records
    assert any("{{turn}}答案是: {{label}}" in line for line in e.prompt_diff)
    assert not any("</E>" in line or "{question}" in line for line in e.prompt_diff)
    if differs:
        assert e.protocol["scorer_normalisation"]["status"] == "differs"
        assert_named_alone(e, "remainder")
    else:
        assert "decides every item as M1-seq" in e.factor("scorer_normalisation").detail
        assert e.factor("scorer_normalisation").status == "same decisions, by its store's audit"
        assert_named_alone(e, "prompt_bytes")


def test_an_aggregation_or_sample_that_changes_no_score_says_it_differs(tmp_path):
    """One item per subject: micro and macro are equal; an extra item of the same accuracy."""
    right = {f"cmmlu/{s}/test/0": i % 2 == 0 for i, s in enumerate(["agronomy", "anatomy", "arts", "astronomy"])}
    path = store(tmp_path, "s", outcome_records(right, **TOKENS))
    e = explained(f"{path}:agg=micro", f"{path}:agg=macro")
    assert e.gap == 0 and e.factor("aggregation").status == "differs; changes no score here"
    more = store(tmp_path, "m", outcome_records({**right, "cmmlu/arts/test/1": True, "cmmlu/arts/test/2": False},
                                                **TOKENS))
    e = explained(path, more)
    assert e.gap == 0 and e.factor("sample").status == "differs; changes no score here"
    assert "the label tokens in the records: same" in e.factor("label_tokenization").detail


# --------------------------------------------------------------------------------------------
# Precision (issues 32 §1 and 33 §1)
# --------------------------------------------------------------------------------------------


def _store_in(tmp_path, name: str, recs: list[dict], dtype: str) -> str:
    """A store whose manifest records its cell's precision, as ``cube run`` writes it."""
    from cube.records.store.cells import record_cells

    record_cells(tmp_path / name, {"m1/label--L1_halfwidth__zh_cue__0shot__original": {
        "kind": "label", "model": "m1", "scorers": ["M1-seq"], "label_set": "L1_halfwidth",
        "context": "zh_cue", "shots": 0, "order": "original", "dtype": dtype}}, ())
    return store(tmp_path, name, recs)


def _explained_recorded(a: str, b: str):
    """The cell configuration names no shard plan (n_items, shard_size): read what is present."""
    return explain_slices(parse_slice(a), parse_slice(b), B=500, allow_incomplete=True)


def _close(uid: str, pred: int) -> dict:
    """A decision by a margin of 0.1: inside bf16's measured noise, far outside fp32's."""
    scores = [-1.0, -1.1, -3.0, -4.0] if pred == 0 else [-1.1, -1.0, -3.0, -4.0]
    return record(uid=uid, pred=pred, scores=scores, **TOKENS)


def test_precision_is_named_when_the_slices_differ_in_it_and_close_flips_are_noise(tmp_path):
    from cube.analysis.noise import DECISION_NOISE

    assert DECISION_NOISE["float32"] < 0.1 < DECISION_NOISE["bfloat16"]
    right = pattern(3)
    flipped = shifted(right, up=4, down=1)
    changed = [u for u in UIDS if right[u] != flipped[u]]
    noisy = set(changed[:2])  # two of the flips are close calls on both sides
    a = [(_close(u, 0 if right[u] else 1) if u in noisy else
          record(uid=u, pred=0 if right[u] else 1, scores=scores_for(0 if right[u] else 1), **TOKENS)) for u in UIDS]
    b = [(_close(u, 0 if flipped[u] else 1) if u in noisy else
          record(uid=u, pred=0 if flipped[u] else 1, scores=scores_for(0 if flipped[u] else 1), **TOKENS))
         for u in UIDS]
    e = _explained_recorded(_store_in(tmp_path, "fp32", a, "float32"), _store_in(tmp_path, "bf16", b, "bfloat16"))
    assert e.protocol["precision"] == {"status": "differs", "a": "float32", "b": "bfloat16"}
    assert sum((f.share for f in e.factors), Fraction(0)) == e.gap  # still exactly the gap
    noise, precision = e.factor("precision_noise"), e.factor("precision")
    assert noise.items == 2 and precision.items == len(changed) - 2
    assert e.factor("remainder").items == 0  # precision is the one protocol difference: named
    gained = lambda us: Fraction(sum(1 if flipped[u] else -1 for u in us), len(UIDS))  # noqa: E731
    assert noise.share == gained(noisy) and precision.share == gained(set(changed) - noisy)
    # one precision on both sides: the close flips are still noise, the rest the unexplained remainder
    e = _explained_recorded(_store_in(tmp_path, "bf16a", a, "bfloat16"), _store_in(tmp_path, "bf16b", b, "bfloat16"))
    assert e.protocol["precision"]["status"] == "same"
    assert e.factor("precision_noise").items == 2 and e.factor("remainder").items == len(changed) - 2



def test_issue45_a_precision_one_side_did_not_record_is_unknown_not_no_difference(tmp_path):
    """A store whose manifest says no precision (a server, an import) against one in float32: the
    precision and its noise read "no difference", which nothing recorded can show."""
    from cube.analysis.explain import UNKNOWN

    recs = [record(uid=u, pred=0, scores=scores_for(0), **TOKENS) for u in UIDS]
    e = _explained_recorded(store(tmp_path, "unrecorded", recs), _store_in(tmp_path, "fp32", recs, "float32"))
    assert e.protocol["precision"]["status"] == "unknown"
    assert e.factor("precision").status == UNKNOWN and e.factor("precision_noise").status == UNKNOWN
    assert e.factor("precision_noise").detail == "A precision not recorded, B float32: margin <= 3.3e-05"
    both = _explained_recorded(_store_in(tmp_path, "a32", recs, "float32"), _store_in(tmp_path, "b32", recs, "float32"))
    assert both.factor("precision").status == both.factor("precision_noise").status == "no difference"


# The extractor, exemplar content and degenerate sides (issue 34 §3, §4)
# --------------------------------------------------------------------------------------------

NAN4 = [float("nan")] * 4


def _generations(right: dict[str, bool], scorer: str, texts: dict[str, str], failed=(), **fields) -> list[dict]:
    """Generation records: pred gold (0) where right, 1 where wrong, -1 (no answer read) in ``failed``."""
    out = []
    for u, ok in right.items():
        pred = -1 if u in failed else (0 if ok else 1)
        probs = [0.0] * 4 if pred < 0 else [float(i == pred) for i in range(4)]  # as record_row writes one
        out.append(record(uid=u, scorer=scorer, scores=NAN4, probs=probs, generation=texts[u], pred=pred, **fields))
    return out


def test_one_generation_read_by_two_extractors_is_the_extractor_alone(tmp_path):
    """M6-strict against M6-lenient on the very same texts: every flip is the extractor's, parse
    failures of the strict reader included, and the share is the plain difference of accuracies."""
    texts = {u: f"generation {i}" for i, u in enumerate(UIDS)}
    strict = pattern(11)
    lenient = shifted(strict, up=6, down=1)
    failed = set([u for u in UIDS if not strict[u]][:3])
    a = _generations(strict, "M6-strict", texts, failed)
    b = _generations(lenient, "M6-lenient", texts)
    path = store(tmp_path, "g", a + b)
    e = explained(f"{path}:scorer=M6-strict", f"{path}:scorer=M6-lenient")
    assert e.gap == Fraction(sum(lenient.values()) - sum(strict.values()), len(UIDS))  # naive accuracies
    assert_named_alone(e, "extractor")
    assert e.factor("extractor").items == sum(strict[u] != lenient[u] for u in UIDS)
    assert e.factor("parse_failure").items == 0  # the same text: the strict reader's failure is the extractor's
    assert e.protocol["extractor"]["status"] == "differs"
    assert e.protocol["label_tokenization"]["status"] == "not applicable"
    assert e.protocol["scorer_normalisation"]["status"] == "same"


def test_different_generations_are_not_the_extractors(tmp_path):
    """Other texts on side B (another run): a flip is not the extractor's alone; a parse failure
    stays a parse failure."""
    strict = pattern(12)
    lenient = shifted(strict, up=5, down=2)
    a = _generations(strict, "M6-strict", {u: f"run one {u}" for u in UIDS}, {[u for u in UIDS if not strict[u]][0]})
    b = _generations(lenient, "M6-lenient", {u: f"run two {u}" for u in UIDS})
    path = store(tmp_path, "g", a + b)
    e = explained(f"{path}:scorer=M6-strict", f"{path}:scorer=M6-lenient")
    assert sum((f.share for f in e.factors), Fraction(0)) == e.gap
    assert e.factor("parse_failure").items >= 1
    assert e.factor("extractor").items == sum(strict[u] != lenient[u] for u in UIDS) - e.factor("parse_failure").items
    # the one protocol difference the records show is the extractor: it carries the rest, with no item
    # of both texts equal (that identification is stronger, and is not claimed here)
    assert "very same generation" not in e.factor("extractor").detail


def test_exemplar_content_alone_is_named(tmp_path):
    """Two sides alike but for what their 5 exemplars show (an explanation or the answer alone)."""
    from cube.analysis.explain import explain
    from cube.analysis.explain_causes import Side
    from cube.importers.contract import EXEMPLARS_ANSWER, EXEMPLARS_EXPLANATION, ScoringProtocol, exemplars_of

    right = pattern(13)
    a = read_records(store(tmp_path, "a", outcome_records(right, shots=5, **TOKENS)))
    b = read_records(store(tmp_path, "b", outcome_records(shifted(right), shots=5, **TOKENS)))

    def side(table_, content):
        protocol = ScoringProtocol("h", "{{exemplars}}Q: {{Question}}\n答案：", "", "in_context", "sum", None,
                                   exemplars=exemplars_of(5, content), chat_template="none")
        return Side("s", table_, "micro", protocol)

    e = explain(side(a, EXEMPLARS_ANSWER), side(b, EXEMPLARS_EXPLANATION), B=200)
    assert_named_alone(e, "exemplars")
    assert "解析" in e.protocol["exemplars"]["b"] and "解析" not in e.protocol["exemplars"]["a"]
    # not recorded on one side: optional, so the flips are the remainder's, not exemplars'
    e = explain(side(a, EXEMPLARS_ANSWER), side(b, None), B=200)
    assert e.factor("exemplars").share == 0 and e.factor("remainder").share == e.gap


def test_a_side_that_is_mostly_ties_is_flagged_with_its_count(tmp_path, capsys):
    """A degenerate first-token cell against a sound one: explain says so, with the count, in its
    table and its JSON (the degeneracy checks every import reports)."""
    from cube.cli import main

    a = tied_records(UIDS, label_set="L4_circled")
    b = outcome_records(pattern(14), **TOKENS)
    path = store(tmp_path, "t", a + b)
    e = explained(f"{path}:label_set=L4_circled", f"{path}:label_set=L1_halfwidth")
    assert any(w.startswith("WARNING: A ") and f"MOSTLY TIES: {len(UIDS)}/{len(UIDS)}" in w for w in e.warnings)
    assert not any(w.startswith("WARNING: B ") for w in e.warnings)
    assert main(["explain", f"{path}:label_set=L4_circled", f"{path}:label_set=L1_halfwidth",
                 "--bootstrap", "100", "--allow-incomplete"]) == 0
    assert f"MOSTLY TIES: {len(UIDS)}/{len(UIDS)}" in capsys.readouterr().out


def test_two_chat_templates_are_the_same_only_where_both_digests_say_so(tmp_path):
    """Two sides both shown in a chat template: a kind alone ("model") does not make them the same
    template. Recorded digests that differ name the chat template alone; a side without one (a
    server's template) leaves it unknown, and the flips are the remainder's, not the template's."""
    from cube.analysis.explain import explain
    from cube.analysis.explain_causes import Side
    from cube.importers.contract import ScoringProtocol

    right = pattern(15)
    a = read_records(store(tmp_path, "a", outcome_records(right, **TOKENS)))
    b = read_records(store(tmp_path, "b", outcome_records(shifted(right), **TOKENS)))

    def side(table_, digest):
        shown = f"model (template sha256 {digest[:12]}...)" if digest else "model (the server's)"
        protocol = ScoringProtocol("h", "Q: {{Question}}\n答案：", "", "in_context", "sum", None,
                                   chat_template=shown, chat_template_sha256=digest, exemplars="none")
        return Side("s", table_, "micro", protocol)

    one, other = "1" * 64, "2" * 64
    e = explain(side(a, one), side(b, other), B=200)
    assert_named_alone(e, "chat_template")
    assert e.protocol["chat_template"]["status"] == "differs"
    e = explain(side(a, one), side(b, one), B=200)
    assert e.protocol["chat_template"]["status"] == "same" and e.factor("chat_template").share == 0
    e = explain(side(a, one), side(b, None), B=200)
    assert e.protocol["chat_template"]["status"] == "unknown"
    assert e.factor("chat_template").share == 0 and e.factor("remainder").share == e.gap


def test_agg_harness_compares_the_numbers_each_harness_reports(tmp_path):
    """``agg=harness``: OpenCompass reports a benchmark as the mean of its subjects (its summary's
    naive_average), cube as the records' mean. The gap is then the one between the two printed
    numbers, and the aggregation carries what the averaging alone changes."""
    right = pattern(45)  # micro and macro differ
    oc = [dict(r, context=f"oc-ppl-{r['subject'][:4]}")
          for r in outcome_records(shifted(right), scorer="OC-ppl", **TOKENS)]
    write_records(tmp_path / "oc", table(oc), metadata=opencompass_metadata(SUBJECT_SIZES))
    cube = store(tmp_path, "cube", outcome_records(right, **TOKENS))
    e = explained(f"{cube}:scorer=M1-seq,agg=harness", f"{tmp_path / 'oc'}:context=oc-ppl-*,agg=harness")
    assert (e.aggregation_a, e.aggregation_b) == ("micro", "macro")
    assert e.score_a == acc(right.values()) and e.score_b == macro(shifted(right))
    assert e.gap == macro(shifted(right)) - acc(right.values())
    assert sum((f.share for f in e.factors), Fraction(0)) == e.gap
    # on A's items (all common) with A's outcomes: micro to macro is the aggregation's share
    assert e.factor("aggregation").share == macro(right) - acc(right.values()) != 0
    # the same pair under one aggregation: no aggregation factor
    assert explained(f"{cube}:scorer=M1-seq", f"{tmp_path / 'oc'}:context=oc-ppl-*").factor("aggregation").share == 0


def test_agg_harness_on_a_store_that_does_not_say_is_refused(tmp_path):
    recs = outcome_records(pattern(44), **TOKENS)
    write_records(tmp_path / "x", table(recs), metadata={"source": "elsewhere", "elsewhere": {}})
    with pytest.raises(ConfigError, match=r"agg=harness, but its store does not say how elsewhere averages"):
        explained(f"{tmp_path / 'x'}:agg=harness", str(tmp_path / "x"))


def test_issue45_each_separating_advice_names_a_command_and_options_it_has():
    """The remainder's advice named "a cue of its own" whatever differed (a scorer's normalisation
    included); each factor's advice now names the command and options that vary it alone."""
    import argparse
    import re

    from cube.analysis.explain_causes import PROTOCOL_FACTORS, SEPARATE_BY
    from cube.cli import build_parser

    assert set(SEPARATE_BY) == set(PROTOCOL_FACTORS)
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for factor, advice in SEPARATE_BY.items():
        command = re.match(r"cube (\w+)", advice).group(1)
        options = {o for a in commands[command]._actions for o in a.option_strings}
        named = set(re.findall(r"--[a-z-]+", advice))
        assert named and named <= options, (factor, named - options)
    assert "cue" not in SEPARATE_BY["scorer_normalisation"]


def test_a_cube_cell_on_a_users_file_shows_its_own_template_and_option_count(tmp_path):
    """explain rendered CMMLU's exam template with all ten labels for any cube cell; a cell made on
    a user's English file shows the file's own format (en_mcq, or its card's lines) and as many
    options as its items have, and a user's file that is not at hand shows no prompt, not CMMLU's."""
    import json as json_

    from cube.analysis.explain_protocol import describe
    from cube.protocol.benchmarks import resolve

    path = tmp_path / "quiz.jsonl"
    path.write_text(json_.dumps({"question": "What is 2 + 2?", "choices": ["3", "4", "5"], "answer": 1}) + "\n",
                    encoding="utf-8")
    cell = {"model": "m", "benchmark": "quiz", "scorer": "M1-seq", "label_set": "A10_halfwidth",
            "context": "en_label_space", "shots": 0, "order": "original"}
    english = describe({}, cell, templates=resolve(str(path)).templates(), n_options=3).prompt
    assert english == ("The following are multiple choice questions (with answers) about {{subject}}.\n\n"
                       "{{Question}}\nA. {{A}}\nB. {{B}}\nC. {{C}}\nAnswer:")
    (tmp_path / "quiz.card.yaml").write_text('language: en\noption: "({label}) {text}\\n"\n', encoding="utf-8")
    carded = describe({}, cell, templates=resolve(str(path)).templates(), n_options=3).prompt
    assert "(A) {{A}}\n(B) {{B}}\n(C) {{C}}\n" in carded and "D" not in carded.split("{{C}}")[1]
    assert describe({}, cell).prompt is None  # the file not at hand: unknown, never CMMLU's template
