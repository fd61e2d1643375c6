"""Scorers against hand-computed values and a naive pure-Python reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cube.protocol.scorers import (
    PASSES,
    SCORERS,
    TIE_BREAK,
    ContinuationScores,
    Scorer,
    decide,
    m1_seq,
    m1_strict,
    m2_sum,
    m3_mean,
    m4_per_byte,
    m5_pmi,
    markdown_table,
    option_distribution,
    tie_groups,
)

LP = [np.array([-1.0, -2.0]), np.array([-0.5]), np.array([-3.0, 0.0]), np.array([-0.1, -0.2, -0.3])]
TEXTS = ["北京", "A", "é!", "上海市"]  # 6, 1, 3 and 9 UTF-8 bytes
UNCOND = [
    np.array([-2.0, -2.0]),
    np.array([-0.25]),
    np.array([-1.0, -1.0]),
    np.array([-1.0, -1.0, -1.0]),
]


def test_m1_seq_and_m2_are_sums():
    np.testing.assert_allclose(m1_seq(LP), [-3.0, -0.5, -3.0, -0.6])
    np.testing.assert_allclose(m2_sum(LP), [-3.0, -0.5, -3.0, -0.6])


def test_m3_is_the_mean_per_token():
    np.testing.assert_allclose(m3_mean(LP), [-1.5, -0.5, -1.5, -0.2])


def test_m4_divides_by_utf8_bytes_not_characters():
    np.testing.assert_allclose(m4_per_byte(LP, TEXTS), [-3.0 / 6, -0.5 / 1, -3.0 / 3, -0.6 / 9])


def test_m5_subtracts_the_unconditional_log_probability():
    np.testing.assert_allclose(m5_pmi(LP, UNCOND), [1.0, -0.25, -1.0, 2.4])


def test_m1_strict_ties_labels_sharing_a_first_token_by_construction():
    # Labels 0 and 2 share first token 10: their logprobs differ only by batch noise.
    result = m1_strict([-1.0, -2.0, -1.0000001, -3.0], [10, 11, 10, 12])
    assert result.pred == 0
    assert result.tied is True
    assert result.tie_groups == ((0, 2),)
    assert result.scores[0] == result.scores[2] == -1.0
    assert result.tie_break == TIE_BREAK


def test_m1_strict_reports_tie_groups_even_when_they_do_not_win():
    result = m1_strict([-0.1, -2.0, -2.0, -3.0], [5, 6, 6, 7])
    assert (result.pred, result.tied, result.tie_groups) == (0, False, ((1, 2),))


def test_m1_strict_tie_break_is_the_first_label_in_order():
    result = m1_strict([-3.0, -1.0, -2.0, -1.0], [1, 2, 3, 2])
    assert (result.pred, result.tied, result.tie_groups) == (1, True, ((1, 3),))


def test_exactly_equal_scores_of_distinct_tokens_are_flagged_tied():
    result = m1_strict([-1.0, -1.0, -2.0, -3.0], [1, 2, 3, 4])
    assert (result.pred, result.tied, result.tie_groups) == (0, True, ())


def test_tie_groups_keep_first_appearance_order():
    assert tie_groups(["x", "y", "x", "y", "z", "x"]) == ((0, 2, 5), (1, 3))
    assert tie_groups([1, 2, 3]) == ()


def test_option_distribution_is_a_softmax():
    np.testing.assert_allclose(
        option_distribution(np.log([1.0, 2.0, 3.0, 4.0])), [0.1, 0.2, 0.3, 0.4]
    )


def test_option_distribution_survives_very_negative_scores():
    probs = option_distribution(np.array([-1e4, -1e4 - math.log(3.0), -np.inf]))
    np.testing.assert_allclose(probs, [0.75, 0.25, 0.0])


def test_option_distribution_matches_scipy_row_by_row():
    special = pytest.importorskip("scipy.special")
    scores = np.random.default_rng(0).normal(scale=30.0, size=(50, 4)) - 200.0
    np.testing.assert_allclose(
        option_distribution(scores), special.softmax(scores, axis=-1), rtol=1e-12
    )
    np.testing.assert_allclose(option_distribution(scores).sum(axis=-1), 1.0)


def test_option_distribution_rejects_rows_without_a_finite_score():
    with pytest.raises(ValueError, match="finite"):
        option_distribution(np.array([-np.inf, -np.inf]))


def test_decide_rejects_nan():
    with pytest.raises(ValueError, match="NaN score at option 2"):
        decide(np.array([-1.0, -2.0, np.nan]))


def test_empty_continuations_are_rejected():
    with pytest.raises(ValueError, match="option 1"):
        m3_mean([np.array([-1.0]), np.array([])])
    with pytest.raises(ValueError, match="empty option text"):
        m4_per_byte([np.array([-1.0])], [""])


# --- the registry -------------------------------------------------------------------------------


def _options(lps, ids, texts, uncond=None):
    uncond = uncond or [None] * len(lps)
    return [ContinuationScores(i, lp, t, u) for lp, i, t, u in zip(lps, ids, texts, uncond)]


def test_registry_names_and_what_each_scorer_reads():
    # cube's own scorers first; imports may add their own after them (M4-char, lm-eval's acc_norm)
    assert list(SCORERS)[:10] == ["M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "M6", "M6-cot", "TF", "M4-char"]
    assert {name: s.reads for name, s in list(SCORERS.items())[:10]} == {
        "M1-seq": "label", "M1-strict": "label", "M2": "cloze", "M3": "cloze", "M4": "cloze", "M5": "cloze",
        "M6": "generation", "M6-cot": "generation", "TF": "judgement", "M4-char": "imported",
    }
    assert {name: s.pass_kind for name, s in list(SCORERS.items())[:10]} == {
        "M1-seq": "label", "M1-strict": "label", "M2": "cloze", "M3": "cloze", "M4": "cloze", "M5": "cloze",
        "M6": "gen", "M6-cot": "cot", "TF": "tf", "M4-char": None,
    }
    assert [s.name for s in SCORERS.values() if s.needs_unconditional] == ["M5"]
    assert all(s.pass_kind is None for s in list(SCORERS.values())[10:])  # imports have no cube pass
    for entry in SCORERS.values():  # every pass a scorer reads exists, and reads what the scorer says
        assert entry.pass_kind is None or PASSES[entry.pass_kind].reads == entry.reads


def test_registry_scorers_on_hand_computed_options():
    ids = [[7, 8], [9], [3, 4], [5, 6, 1]]
    options = _options(LP, ids, TEXTS, UNCOND)
    expected = {
        "M1-seq": ([-3.0, -0.5, -3.0, -0.6], 1),
        "M1-strict": ([-1.0, -0.5, -3.0, -0.1], 3),
        "M2": ([-3.0, -0.5, -3.0, -0.6], 1),
        "M3": ([-1.5, -0.5, -1.5, -0.2], 3),
        "M4": ([-0.5, -0.5, -1.0, -0.6 / 9], 3),
        "M5": ([1.0, -0.25, -1.0, 2.4], 3),
    }
    for name, (scores, pred) in expected.items():
        result = SCORERS[name](options)
        np.testing.assert_allclose(result.scores, scores, err_msg=name)
        assert (result.pred, result.tied, result.tie_groups) == (pred, False, ()), name


def test_registry_m1_seq_ties_identical_token_sequences():
    # Two labels that a normalising tokenizer maps to the same tokens score the same tokens.
    options = _options(
        [[-0.7], [-0.70001], [-2.0], [-3.0]], [[42], [42], [43], [44]], ["A", "Ａ", "C", "D"]
    )
    result = SCORERS["M1-seq"](options)
    assert (result.pred, result.tied, result.tie_groups) == (0, True, ((0, 1),))


def test_registry_m1_strict_reads_only_the_first_token():
    options = _options(
        [[-0.2, -9.0], [-0.3, -0.1], [-5.0], [-6.0]], [[1, 2], [1, 3], [4], [5]], "ABCD"
    )
    strict = SCORERS["M1-strict"](options)
    assert (strict.pred, strict.tied, strict.tie_groups) == (0, True, ((0, 1),))
    assert SCORERS["M1-seq"](options).pred == 1


def test_m5_without_unconditional_logprobs_is_refused():
    with pytest.raises(ValueError, match=r"option\(s\) \[0, 1, 2, 3\]"):
        SCORERS["M5"](_options(LP, [[1, 2], [3], [4, 5], [6, 7, 8]], TEXTS))


def test_continuation_scores_validates_lengths():
    with pytest.raises(ValueError, match="2 token ids, 1 logprobs"):
        ContinuationScores([1, 2], [-1.0], "x")
    with pytest.raises(ValueError, match="1 unconditional logprobs, 2 tokens"):
        ContinuationScores([1, 2], [-1.0, -2.0], "x", [-1.0])


def _naive(name, options):
    """Pure-Python reference: math.fsum and explicit loops."""
    if name == "M1-strict":
        return [o.logprobs[0] for o in options]
    sums = [math.fsum(o.logprobs) for o in options]
    if name in ("M1-seq", "M2"):
        return sums
    if name == "M3":
        return [s / len(o.logprobs) for s, o in zip(sums, options)]
    if name == "M4":
        return [s / len(o.text.encode("utf-8")) for s, o in zip(sums, options)]
    return [s - math.fsum(o.unconditional_logprobs) for s, o in zip(sums, options)]


def test_registry_matches_a_naive_reference_on_random_inputs():
    rng = np.random.default_rng(0)
    alphabet = "答案北京ABCDé①甲 "
    for _ in range(200):
        options = []
        for k in range(4):
            n = int(rng.integers(1, 6))
            text = "".join(rng.choice(list(alphabet), size=int(rng.integers(1, 8))))
            ids = [1000 * k + j for j in range(n)]  # distinct: no ties by construction
            options.append(
                ContinuationScores(ids, -rng.exponential(size=n), text, -rng.exponential(size=n))
            )
        for name, scorer in SCORERS.items():
            if scorer.reads not in ("label", "cloze"):
                continue  # the continuation scorers: the others read no ContinuationScores
            reference = _naive(name, options)
            result = scorer(options)
            np.testing.assert_allclose(result.scores, reference, rtol=1e-12, err_msg=name)
            assert result.pred == int(np.argmax(reference))
            np.testing.assert_allclose(
                option_distribution(result.scores),
                [math.exp(r) / math.fsum(math.exp(x) for x in reference) for r in reference],
                rtol=1e-9,
            )


# --- the table's other entries, and what is derived from the table ----------------------------


def test_m4_char_divides_each_logged_total_by_its_characters():
    totals = [-6.0, -1.5, -2.0, -0.5]
    choices = ["北京", "A", "", "上海市"]  # 2, 1, 0 (counted as 1) and 3 characters
    result = SCORERS["M4-char"].score(totals, choices)
    assert result.scores.tolist() == [-3.0, -1.5, -2.0, -0.5 / 3]
    assert (result.pred, result.tied, result.tie_groups) == (3, False, ())
    with pytest.raises(ValueError, match="3 log-likelihoods but 4 choices"):
        SCORERS["M4-char"].score(totals[:3], choices)


def test_tf_answers_with_the_statement_judged_most_true_first_in_order():
    result = SCORERS["TF"].score([-0.5, 1.25, 1.25, -3.0])
    assert (result.pred, result.tied) == (1, True)
    assert result.scores.tolist() == [-0.5, 1.25, 1.25, -3.0]


def test_m6_reads_one_generation_with_both_extractors_in_record_order():
    entry = SCORERS["M6"]
    assert entry.records == ("M6-strict", "M6-lenient")
    labels, shown = ("A", "B", "C", "D"), ["北京", "上海", "广州", "深圳"]
    assert entry.score("答案：C", labels, shown) == (2, 2)
    assert entry.score("我选B", labels, shown) == (None, 1)  # only the lenient rules read 选X
    assert entry.score("不知道", labels, shown) == (None, None)


def test_an_entry_names_a_known_pass_and_writes_records():
    with pytest.raises(ValueError, match="unknown pass 'nope'"):
        Scorer("M9", "cloze", ("M9",), "x", lambda options: None, "nope")
    with pytest.raises(ValueError, match="writes no records"):
        Scorer("M9", "cloze", (), "x", lambda options: None, "cloze")


def test_the_docs_scorer_tables_are_the_generated_one():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = markdown_table()
    assert table.count("\n") == len(SCORERS) + 2  # a header, a rule, one row per entry
    for name in ("notebooks/guide/09_scoring.md", "book/method.md"):
        assert table in (root / name).read_text(encoding="utf-8"), (
            f"{name}'s scorer table is not the generated one: run scripts/write_scorer_table.py")


def test_the_cli_reads_the_table_without_pyarrow():
    """`cube run --help` lists the table's run scorers; building the parser imports no pyarrow
    (the tokenizer audit's install has none), so the help reads cube.protocol.scorers."""
    import subprocess
    import sys

    code = ("import sys; from cube.cli import build_parser; build_parser(); "
            "print('pyarrow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"
    from cube.commands.run import scorers_help
    from cube.protocol.scorers import run_scorers

    assert run_scorers()[:9] == ("M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "M6", "M6-cot", "TF")
    assert ",".join(run_scorers()) in scorers_help()


def test_top_logprobs_scores_an_absent_label_at_the_floor_tied_with_other_absent_ones():
    from cube.protocol.scorers import score_top_logprobs

    present = score_top_logprobs([-1.0, None, -0.5, None], -3.0)  # a present label decides exactly
    assert present.pred == 2 and not present.tied and list(present.scores) == [-1.0, -3.0, -0.5, -3.0]
    assert present.tie_groups == ((1, 3),)
    absent = score_top_logprobs([None, None, None, None], -3.0)  # the log cannot order them: a recorded tie
    assert absent.pred == 0 and absent.tied and absent.tie_groups == ((0, 1, 2, 3),)
    with pytest.raises(ValueError, match="below the top-K floor"):
        score_top_logprobs([-4.0, None, -1.0, -2.0], -3.0)
