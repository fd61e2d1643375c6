"""Non-additive exam scoring: what an exam would award, as opposed to what accuracy reports.

Benchmarks built from human exams keep the questions and drop the scoring rule. The 2025 THPT
exam (Vietnam, Decision 764/QĐ-BGDĐT) scores a Part II group of four true/false statements as a
whole, on a convex ladder: 3 of 4 right earns 0.50 where per-statement accuracy would pay 0.75.
This module holds the scoring rules as data and the few exact computations the paper needs:

* the gap between additive and scheme credit, per group and on average, from statement-level
  judgments, together with the distribution of correct counts (equal accuracy, unequal credit);
* the expected score of a uniform random guesser, in closed form over the binomial;
* the random-guess baseline of a whole exam, from an exam-structure file;
* the best constant answer string against an official key;
* the percentile rank of a score in a published cohort histogram.

All arithmetic is exact (``fractions.Fraction``): decimals in YAML and CSV files are read from
their written text, so ``0.10`` is exactly 1/10 and no total drifts by a float ulp.
"""

from cube.analysis.credit.numbers import (
    HALF,
    MAX_EXPONENT,
    decimal_text,
    exact_text,
    load_exact_yaml,
    to_fraction,
)
from cube.analysis.credit.schemes import (
    CreditScheme,
    additive_scheme,
    correct_count_distribution,
    expected_score,
    gap_table,
    load_named_schemes,
    resolve_scheme,
    scheme_from_data,
    validate_points,
)
from cube.analysis.credit.judgments import (
    CreditGap,
    GroupCounts,
    JUDGMENT_COLUMNS,
    Judgments,
    count_correct,
    count_correct_rows,
    credit_gap,
    judgments_from_records,
    parse_truth,
    read_judgments,
)
from cube.analysis.credit.exams import (
    AnswerKey,
    ExamStructure,
    FixedAnswer,
    KEY_COLUMNS,
    PartScores,
    best_fixed_answers,
    load_exam,
    pattern_scores,
    random_guess_baseline,
    read_answer_key,
    resolve_exam_path,
    truth_pattern_text,
)
from cube.analysis.credit.cohort import (
    MAX_CANDIDATES,
    ScoreHistogram,
    histogram_from_pairs,
    percentile_rank,
    read_histogram,
    score_for_percentile,
)

__all__ = [
    "HALF", "MAX_EXPONENT", "decimal_text", "exact_text", "load_exact_yaml", "to_fraction",
    "CreditScheme", "additive_scheme", "correct_count_distribution", "expected_score", "gap_table",
    "load_named_schemes", "resolve_scheme", "scheme_from_data", "validate_points", "CreditGap",
    "GroupCounts", "JUDGMENT_COLUMNS", "Judgments", "count_correct", "count_correct_rows",
    "credit_gap", "judgments_from_records", "parse_truth", "read_judgments", "AnswerKey",
    "ExamStructure", "FixedAnswer", "KEY_COLUMNS", "PartScores", "best_fixed_answers", "load_exam",
    "pattern_scores", "random_guess_baseline", "read_answer_key", "resolve_exam_path",
    "truth_pattern_text", "MAX_CANDIDATES", "ScoreHistogram", "histogram_from_pairs",
    "percentile_rank", "read_histogram", "score_for_percentile",
]
