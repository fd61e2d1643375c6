"""Exact exam scoring: closed forms against brute force, keys, histograms and the gap."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cube.analysis import credit
from cube.analysis.credit import CreditScheme
from cube.config import config_dir
from cube.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "credit"
LADDER = (Fraction(0), Fraction(1, 10), Fraction(1, 4), Fraction(1, 2), Fraction(1))


@pytest.fixture(scope="module")
def ladder() -> CreditScheme:
    return credit.resolve_scheme("ladder")


def brute_force_expected(points, p=Fraction(1, 2)) -> Fraction:
    """Average credit over every right/wrong outcome of k statements, weighted by probability."""
    k = len(points) - 1
    total = Fraction(0)
    for outcome in itertools.product((0, 1), repeat=k):
        right = sum(outcome)
        total += p**right * (1 - p) ** (k - right) * points[right]
    return total


# --- schemes -------------------------------------------------------------------------------


def test_frozen_schemes_are_the_thpt_tables():
    named = credit.load_named_schemes()
    assert named["ladder"].points == LADDER
    assert named["additive"].points == tuple(Fraction(j, 4) for j in range(5))


def test_uniform_guesser_on_the_ladder_matches_all_16_outcomes(ladder):
    # Against every key: a guesser's 16 equally likely responses, scored one by one.
    for key in itertools.product((True, False), repeat=4):
        scores = [
            LADDER[sum(k == r for k, r in zip(key, response))]
            for response in itertools.product((True, False), repeat=4)
        ]
        assert sum(scores, Fraction(0)) / 16 == Fraction(49, 160)
    assert credit.expected_score(ladder) == Fraction(49, 160)
    assert credit.expected_score(credit.resolve_scheme("additive")) == Fraction(1, 2)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.fractions(min_value=0, max_value=3, max_denominator=20), min_size=1, max_size=6
    ),
    p=st.fractions(min_value=0, max_value=1, max_denominator=12),
)
def test_closed_form_matches_enumeration_for_any_monotone_table(steps, p):
    points = tuple(itertools.accumulate([Fraction(0)] + [s for s in steps]))
    if points[-1] == 0:
        points = points[:-1] + (Fraction(1),)
    scheme = CreditScheme("random", points)
    assert credit.expected_score(scheme, p) == brute_force_expected(points, p)
    assert sum(credit.correct_count_distribution(scheme.statements, p)) == 1


def test_gap_table_is_additive_minus_scheme(ladder):
    assert credit.gap_table(ladder) == (0, Fraction(3, 20), Fraction(1, 4), Fraction(1, 4), 0)


@pytest.mark.parametrize(
    "points, message",
    [
        ([0.1, 0.2, 0.5], "must start at 0"),
        ([0, 0.5, 0.25, 1], "not monotone"),
        ([0], "at least 2"),
        ([0, 0, 0], "pays nothing"),
        ([0, "half", 1], "points[1]"),
    ],
)
def test_scheme_validation(points, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        credit.scheme_from_data({"points": points}, "bad", "my.yaml")


def test_scheme_length_must_match_its_statement_count():
    with pytest.raises(ConfigError, match=r"my.yaml: .*3 statements need 4"):
        credit.scheme_from_data({"statements": 3, "points": [0, 0.5, 1]}, "bad", "my.yaml")


def test_scheme_file_reads_decimals_exactly(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("points: [0, 0.10, 0.30, 0.70, 1]\n", encoding="utf-8")
    scheme = credit.resolve_scheme(str(path))
    assert scheme.points == (0, Fraction(1, 10), Fraction(3, 10), Fraction(7, 10), 1)
    assert scheme.name == "s"
    three = credit.resolve_scheme(str(FIXTURES / "scheme_three.yaml"))
    assert (three.name, three.statements) == ("three_step", 3)
    assert credit.expected_score(three) == brute_force_expected(three.points) == Fraction(5, 16)


def test_scheme_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("points: [0, .inf]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.yaml line 1.*not a finite number"):
        credit.resolve_scheme(str(bad))
    bad.write_text("pionts: [0, 1]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown key\(s\) pionts"):
        credit.resolve_scheme(str(bad))
    with pytest.raises(ConfigError, match="unknown scheme 'laddr'"):
        credit.resolve_scheme("laddr")
    with pytest.raises(ConfigError, match="scheme file not found"):
        credit.resolve_scheme(str(tmp_path / "missing.yaml"))


def test_text_forms():
    assert credit.exact_text(Fraction(49, 160)) == "49/160 = 0.30625"
    assert credit.exact_text(Fraction(1, 3)) == "1/3 ≈ 0.333333"
    assert credit.exact_text(Fraction(10)) == "10"
    assert credit.decimal_text(Fraction(109, 40)) == "2.725"
    assert credit.decimal_text(Fraction(0)) == "0"


# --- exams ---------------------------------------------------------------------------------


def test_shipped_exam_baselines(ladder):
    group = brute_force_expected(LADDER)
    standard = credit.load_exam(config_dir() / "exams" / "thpt2025_standard.yaml")
    math = credit.load_exam("thpt2025_math")
    assert standard.total_points == math.total_points == 10
    assert (standard.part_i_questions, standard.part_ii_groups, standard.part_iii_questions) == (
        24,
        4,
        0,
    )
    assert (math.part_i_questions, math.part_ii_groups, math.part_iii_questions) == (12, 4, 6)
    assert math.part_iii_points == Fraction(1, 2)
    std = credit.random_guess_baseline(standard)
    assert std.total == 24 * Fraction(1, 4) / 4 + 4 * group == Fraction(109, 40)
    mth = credit.random_guess_baseline(math)
    assert mth.part_iii == 0
    assert mth.total == 12 * Fraction(1, 4) / 4 + 4 * group == Fraction(79, 40)


def test_exam_parts_must_add_up(tmp_path):
    path = tmp_path / "exam.yaml"
    path.write_text(
        "total_points: 10\npart_I: {questions: 20, points: 0.25}\n"
        "part_II: {groups: 4, scheme: ladder}\n",
        encoding="utf-8",
    )
    with pytest.raises(
        ConfigError, match=r"exam.yaml: the parts add up to 9 points, not total_points 10"
    ):
        credit.load_exam(path)
    path.write_text(
        "total_points: 1\npart_I: {questions: 4, points: 0.25, option: 4}\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"part_I has unknown key\(s\) option"):
        credit.load_exam(path)


def test_exam_with_a_scheme_file_next_to_it():
    exam = credit.load_exam(FIXTURES / "exam_small.yaml")
    assert exam.part_ii_scheme.points == LADDER
    assert exam.max_points == Fraction(11, 2)


# --- best fixed answer string ---------------------------------------------------------------


def naive_best_fixed(key: credit.AnswerKey, points, part_i_points=Fraction(1, 4)):
    """Score every (letter, pattern) string on the whole exam question by question."""
    best = None
    for letter in key.options:
        for pattern in itertools.product((True, False), repeat=len(points) - 1):
            score = sum((part_i_points for answer in key.part_i if answer == letter), Fraction(0))
            for group in key.part_ii:
                score += points[sum(bool(a) == b for a, b in zip(group, pattern))]
            if best is None or score > best[0]:
                best = (score, letter, pattern)
    return best


def test_best_fixed_on_a_small_invented_exam(ladder):
    key = credit.read_answer_key(FIXTURES / "key_small.csv")
    assert key.part_i == ("A", "B", "B", "C", "B", "D")
    assert key.part_ii.tolist()[2] == [True, False, True, False]  # written as T/F in the file
    best = credit.best_fixed_answers(key, ladder)
    assert (best.letter, best.pattern_text) == ("B", "ĐSSĐ")
    assert (best.part_i_score, best.part_ii_score, best.total) == (
        Fraction(3, 4),
        Fraction(9, 4),
        3,
    )
    assert best.part_ii_distribution.tolist() == [0, 0, 1, 0, 2]
    assert best.max_points == Fraction(9, 2)
    assert naive_best_fixed(key, LADDER) == (3, "B", (True, False, False, True))


def test_best_fixed_matches_naive_search_on_random_keys(ladder):
    rng = np.random.default_rng(5)
    for _ in range(20):
        key = credit.AnswerKey(
            part_i_questions=tuple(map(str, range(24))),
            part_i=tuple(rng.choice(list("ABCD"), size=24)),
            part_ii_questions=("1", "2", "3", "4"),
            part_ii=rng.random((4, 4)) < rng.random(),
            options=("A", "B", "C", "D"),
        )
        best = credit.best_fixed_answers(key, ladder)
        score, letter, _ = naive_best_fixed(key, LADDER)
        assert best.total == score
        assert best.letter == letter


def test_key_imbalance_can_beat_the_random_baseline(ladder):
    # Every group true-true-false-false: the constant ĐĐSS earns every Part II point.
    truth = np.tile([True, True, False, False], (4, 1))
    key = credit.AnswerKey((), (), ("1", "2", "3", "4"), truth, ("A", "B", "C", "D"))
    best = credit.best_fixed_answers(key, ladder)
    assert best.pattern_text == "ĐĐSS" and best.total == 4


def write_key(tmp_path, body: str) -> Path:
    path = tmp_path / "key.csv"
    path.write_text("part,question,statement,key\n" + body, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "II,1,a,Đ\nII,1,b,S\nII,1,c,S\n",
            r"key.csv line 2: Part II question '1' has 3 statement\(s\), "
            r"needs exactly 4 \(missing d\)",
        ),
        ("II,1,a,Đ\nII,1,b,X\n", r"key.csv line 3 column key: unknown statement value 'X'"),
        ("II,1,a,Đ\nII,1,a,S\n", r"key.csv line 3: .*statement 'a' repeats line 2"),
        ("II,1,e,Đ\n", r"key.csv line 2: Part II statement 'e' is not one of a/b/c/d"),
        ("I,1,,E\n", r"key.csv line 2: Part I key 'E' is not one of A/B/C/D"),
        ("I,1,,A\nI,1,,B\n", r"key.csv line 3: Part I question '1' repeats line 2"),
        ("III,1,,5\n", r"key.csv line 2: unknown part 'III'"),
        ("", r"key.csv: the key has no rows"),
        ("I,1,,A\nII,2\n", r"key.csv line 3: 2 fields, fewer than the header's 4"),  # a short row
    ],
)
def test_bad_keys_name_the_row(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message):
        credit.read_answer_key(write_key(tmp_path, body))


def test_key_missing_column(tmp_path):
    path = tmp_path / "key.csv"
    path.write_text("part,question,key\nI,1,A\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"key.csv: missing column\(s\) statement"):
        credit.read_answer_key(path)


# --- cohort placement -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def hist() -> credit.ScoreHistogram:
    return credit.read_histogram(FIXTURES / "hist_small.csv")


@pytest.mark.parametrize(
    "score, rank",
    [(4, 0), (5, 5), (6, 20), (6.5, 30), (7, 50), (9, 95), (10, 100)],
)
def test_mid_point_percentile_on_a_hand_made_histogram(hist, score, rank):
    # 10 at 5, 20 at 6, 40 at 7, 20 at 8, 10 at 9: e.g. PR(7) = 100 * (30 + 40/2) / 100 = 50.
    assert credit.percentile_rank(hist, credit.to_fraction(score, "score")) == rank


def test_percentile_agrees_with_scipy_mean_kind(hist):
    stats = pytest.importorskip("scipy.stats")
    cohort = np.repeat([float(s) for s in hist.scores], hist.counts)
    for score in (4.5, 5, 6, 7.25, 8, 9, 9.5):
        ours = float(credit.percentile_rank(hist, Fraction(str(score))))
        assert ours == pytest.approx(stats.percentileofscore(cohort, score, kind="mean"))


def test_mid_point_ranks_average_to_fifty(hist):
    ranks = [credit.percentile_rank(hist, s) * int(c) for s, c in zip(hist.scores, hist.counts)]
    assert sum(ranks) / hist.total == 50


@pytest.mark.parametrize(
    "target, score", [(0, 5), (5, 5), (20, 6), (50, 7), (51, 8), (95, 9), (96, None)]
)
def test_score_needed_for_a_percentile(hist, target, score):
    assert credit.score_for_percentile(hist, Fraction(target)) == score


def test_percentile_out_of_range(hist):
    with pytest.raises(ConfigError, match="outside"):
        credit.score_for_percentile(hist, Fraction(101))


@pytest.mark.parametrize(
    "body, message",
    [
        ("5,10\nseven,3\n", r"h.csv line 3 column score: 'seven' is not a number"),
        ("5,10\n6,-2\n", r"h.csv line 3 column count: '-2' is negative"),
        ("5,1.5\n", r"h.csv line 2 column count: '1.5' is not a whole number"),
        ("5,10\n5.0,2\n", r"h.csv line 3: score '5.0' already listed \(2\)"),
        ("5,0\n", r"no candidates"),
        ("5,1e23\n", r"h.csv line 2 column count: '1e23' is more candidates than a histogram can hold"),
        ("5,9223372036854775807\n6,1\n", r"h.csv: the counts total more candidates than"),
    ],
)
def test_bad_histograms_name_the_row(tmp_path, body, message):
    path = tmp_path / "h.csv"
    path.write_text("score,count\n" + body, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        credit.read_histogram(path)


# --- the gap --------------------------------------------------------------------------------


def test_equal_accuracy_different_ladder_scores(ladder):
    models = credit.read_judgments(FIXTURES / "judgments_two_models.csv")
    spread = credit.credit_gap(models["spread"].counts(4), ladder)
    lumped = credit.credit_gap(models["lumped"].counts(4), ladder)
    assert spread.statement_accuracy == lumped.statement_accuracy == Fraction(1, 2)
    assert spread.mean_additive == lumped.mean_additive == Fraction(1, 2)
    assert (spread.mean_scheme, lumped.mean_scheme) == (Fraction(1, 4), Fraction(1, 2))
    assert (spread.mean_gap, lumped.mean_gap) == (Fraction(1, 4), 0)
    assert spread.count_distribution.tolist() == [0, 0, 2, 0, 0]
    assert lumped.count_distribution.tolist() == [1, 0, 0, 0, 1]
    assert lumped.group_ids.tolist() == ["g1", "g2"] and lumped.correct.tolist() == [4, 0]


def test_gap_per_group_matches_a_naive_computation(ladder):
    rng = np.random.default_rng(0)
    n_groups = 200
    groups = np.repeat([f"q{i}" for i in range(n_groups)], 4)
    statements = np.tile(list("abcd"), n_groups)
    gold = rng.random(len(groups)) < 0.5
    predicted = np.where(rng.random(len(groups)) < 0.7, gold, ~gold)
    order = rng.permutation(len(groups))  # rows need not be grouped
    counts = credit.count_correct(
        groups[order], gold[order], predicted[order], 4, statements[order]
    )
    report = credit.credit_gap(counts, ladder)
    for gid, c, gap in zip(report.group_ids, report.correct, report.gap):
        mask = groups == gid
        right = int((gold[mask] == predicted[mask]).sum())
        assert c == right
        assert gap == Fraction(right, 4) - LADDER[right]
    assert report.mean_gap == sum(report.gap, Fraction(0)) / n_groups
    assert report.statement_accuracy == Fraction(int((gold == predicted).sum()), len(groups))


def test_rows_api_matches_the_csv_route(ladder):
    models = credit.read_judgments(FIXTURES / "judgments_two_models.csv")
    j = models["spread"]
    rows = [
        (g, s, bool(t), bool(p))
        for g, s, t, p in zip(j.group_ids, j.statement_ids, j.gold, j.predicted)
    ]
    via_rows = credit.count_correct_rows(rows, 4)
    assert via_rows.group_ids.tolist() == ["g1", "g2"]
    assert via_rows.correct.tolist() == j.counts(4).correct.tolist() == [2, 2]


def test_judgment_errors_name_the_row(tmp_path):
    path = tmp_path / "j.csv"
    path.write_text(
        "group_id,statement,gold,predicted\ng1,a,Đ,S\ng1,b,S,S\ng1,c,Đ,Đ\ng2,a,S,S\n"
        "g2,b,S,S\ng2,c,S,S\ng2,d,S,S\n",
        encoding="utf-8",
    )
    with pytest.raises(
        ConfigError,
        match=r"j.csv line 2: group 'g1' has 3 statement\(s\); every group needs exactly 4",
    ):
        credit.read_judgments(path)["j"].counts(4, source=str(path))
    path.write_text("group_id,statement,gold,predicted\ng1,a,yes,S\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"j.csv line 2 column gold: unknown statement value 'yes'"
    ):
        credit.read_judgments(path)
    with pytest.raises(ConfigError, match=r"group 'g' lists statement 'a' twice"):
        credit.count_correct(["g"] * 4, [True] * 4, [True] * 4, 4, statement_ids=list("abca"))
    with pytest.raises(ConfigError, match="gold must be booleans"):
        credit.count_correct(["g"] * 4, ["True"] * 4, [True] * 4, 4)


def test_scheme_and_judgments_must_agree_on_k(ladder):
    counts = credit.count_correct(["g"] * 3, [True] * 3, [True] * 3, 3)
    with pytest.raises(ConfigError, match="groups of 4 statements, the judgments have 3"):
        credit.credit_gap(counts, ladder)
