"""``cube credit``: exam scoring rules that are not accuracy (THPT 2025 partial-credit ladder).

cube credit expected --scheme ladder|additive|FILE.yaml
cube credit baseline config/exams/thpt2025_standard.yaml
cube credit best-fixed KEY.csv [--scheme ladder] [--part-i-points 0.25]
cube credit percentile HIST.csv [SCORE] [--reach PERCENTILE]
cube credit gap JUDGMENTS.csv [--scheme ladder] [--summary]
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "credit",
        help="exam scoring rules beyond accuracy: partial-credit ladder, baselines, percentiles",
        description=__doc__.splitlines()[0],
    )
    actions = parser.add_subparsers(dest="credit_action", required=True, metavar="ACTION")

    expected = actions.add_parser(
        "expected", help="expected group score of a uniform random guesser (exact)"
    )
    expected.add_argument(
        "--scheme", default="ladder", help="ladder, additive, or a YAML file (default: ladder)"
    )
    expected.set_defaults(func=run_expected)

    baseline = actions.add_parser("baseline", help="random-guess baseline of a whole exam")
    baseline.add_argument("exam", help="exam-structure YAML, e.g. config/exams/thpt2025_math.yaml")
    baseline.set_defaults(func=run_baseline)

    best = actions.add_parser(
        "best-fixed", help="best constant answer string against an official key"
    )
    best.add_argument("key", help="CSV with columns part,question,statement,key")
    best.add_argument("--scheme", default="ladder", help="Part II scheme (default: ladder)")
    best.add_argument(
        "--part-i-points", default="0.25", help="points per Part I question (default: 0.25)"
    )
    best.set_defaults(func=run_best_fixed)

    percentile = actions.add_parser(
        "percentile", help="percentile rank of a score in a cohort histogram (mid-point)"
    )
    percentile.add_argument("histogram", help="CSV with columns score,count")
    percentile.add_argument("score", nargs="?", help="the score to place")
    percentile.add_argument(
        "--reach", metavar="PERCENTILE", help="also print the lowest score reaching this rank"
    )
    percentile.set_defaults(func=run_percentile)

    gap = actions.add_parser("gap", help="additive − scheme credit from statement judgments")
    gap.add_argument("judgments", help="CSV with columns group_id,statement,gold,predicted[,model], "
                     "or a records folder holding TF (true/false judgement) records from `cube run`")
    gap.add_argument("--scheme", default="ladder", help="scheme to compare (default: ladder)")
    gap.add_argument("--summary", action="store_true", help="omit the per-group lines")
    gap.set_defaults(func=run_gap)


def _number(text: str, what: str):
    from cube.analysis.credit import to_fraction

    return to_fraction(text, what)


def run_expected(args: argparse.Namespace) -> int:
    from cube.analysis.credit import (
        additive_scheme,
        correct_count_distribution,
        decimal_text,
        exact_text,
        expected_score,
        resolve_scheme,
    )

    scheme = resolve_scheme(args.scheme)
    k = scheme.statements
    value = expected_score(scheme)
    additive = expected_score(additive_scheme(k, scheme.max_points))
    dist = correct_count_distribution(k)
    print(
        f"scheme {scheme.name}: {k} statements, points for 0..{k} correct: {scheme.points_text()}"
    )
    print(
        "P(j correct) for a uniform guesser: " + ", ".join(f"{j}: {p}" for j, p in enumerate(dist))
    )
    print(f"expected score per group: {exact_text(value)}")
    print(
        f"as a share of the group's maximum ({decimal_text(scheme.max_points)} points): "
        f"{decimal_text(100 * value / scheme.max_points, 4)}%"
    )
    print(f"additive would pay {exact_text(additive)}; gap {exact_text(additive - value)}")
    return 0


def run_baseline(args: argparse.Namespace) -> int:
    from cube.analysis.credit import decimal_text, exact_text, load_exam, random_guess_baseline

    exam = load_exam(args.exam)
    base = random_guess_baseline(exam)
    total = exam.total_points
    print(f"exam: {exam.name}")
    print(
        f"  Part I:   {exam.part_i_questions} x {decimal_text(exam.part_i_points)} points, "
        f"{exam.part_i_options} options: {exact_text(base.part_i)}"
    )
    print(
        f"  Part II:  {exam.part_ii_groups} groups, scheme {exam.part_ii_scheme.name}: "
        f"{exact_text(base.part_ii)}"
    )
    print(
        f"  Part III: {exam.part_iii_questions} x {decimal_text(exam.part_iii_points)} points, "
        f"no options: {exact_text(base.part_iii)}"
    )
    print(
        f"random-guess baseline: {decimal_text(base.total)} points out of {decimal_text(total)} "
        f"({decimal_text(100 * base.total / total, 4)}%); exact {exact_text(base.total)}"
    )
    return 0


def run_best_fixed(args: argparse.Namespace) -> int:
    from cube.analysis.credit import (
        best_fixed_answers,
        decimal_text,
        expected_score,
        read_answer_key,
        resolve_scheme,
    )
    from cube.errors import ConfigError

    scheme = resolve_scheme(args.scheme)
    part_i_points = _number(args.part_i_points, "--part-i-points")
    if part_i_points < 0:
        raise ConfigError(f"--part-i-points {args.part_i_points!r} is negative")
    key = read_answer_key(args.key, statements=scheme.statements)
    best = best_fixed_answers(key, scheme, part_i_points)
    guess = len(key.part_i) * part_i_points / len(key.options) + key.part_ii.shape[
        0
    ] * expected_score(scheme)
    n_i, n_ii = len(key.part_i), key.part_ii.shape[0]
    string = " + ".join(x for x in (best.letter, best.pattern_text) if x)
    print(f"best fixed answer string: {string}")
    if best.letter:
        print(
            f"  Part I:  {best.letter} for all {n_i} questions: {best.part_i_correct} right, "
            f"{decimal_text(best.part_i_score)} points"
        )
    if best.pattern is not None:
        counts = " ".join(f"{j}:{int(c)}" for j, c in enumerate(best.part_ii_distribution))
        print(
            f"  Part II: {best.pattern_text} for all {n_ii} groups ({scheme.name}): "
            f"{decimal_text(best.part_ii_score)} points; groups by statements right {counts}"
        )
    share = 100 * best.total / best.max_points
    print(
        f"score: {decimal_text(best.total)} of {decimal_text(best.max_points)} points on this key "
        f"({decimal_text(share, 2)}%); a uniform random guess expects {decimal_text(guess)}"
    )
    return 0


def run_percentile(args: argparse.Namespace) -> int:
    from cube.analysis.credit import decimal_text, percentile_rank, read_histogram, score_for_percentile
    from cube.errors import ConfigError

    if args.score is None and args.reach is None:
        raise ConfigError("give a SCORE to place, --reach PERCENTILE, or both")
    score = _number(args.score, "SCORE") if args.score is not None else None
    target = _number(args.reach, "--reach") if args.reach is not None else None
    hist = read_histogram(args.histogram)
    needed = score_for_percentile(hist, target) if target is not None else None
    print(f"cohort: {hist.total} candidates, {len(hist.scores)} listed scores (mid-point ranks)")
    if score is not None:
        rank = percentile_rank(hist, score)
        print(f"score {decimal_text(score)}: percentile rank {decimal_text(rank, 2)}")
    if target is not None and needed is None:
        print(
            f"percentile {decimal_text(target)}: no listed score reaches it; only a score "
            f"above {decimal_text(hist.scores[-1])} (rank 100) would"
        )
    elif target is not None:
        print(
            f"percentile {decimal_text(target)}: needs a score of {decimal_text(needed)} "
            f"(rank {decimal_text(percentile_rank(hist, needed), 2)})"
        )
    return 0


def run_gap(args: argparse.Namespace) -> int:
    from cube.analysis.credit import credit_gap, decimal_text, exact_text, read_judgments, resolve_scheme

    scheme = resolve_scheme(args.scheme)
    if Path(args.judgments).is_dir():  # harness records: TF rows, one group per item
        from cube.analysis.credit import judgments_from_records
        from cube.records.store import read_records

        counts = judgments_from_records(read_records(args.judgments))
    else:
        counts = {model: j.counts(scheme.statements, source=str(args.judgments))
                  for model, j in read_judgments(args.judgments).items()}
    reports = {model: credit_gap(c, scheme) for model, c in counts.items()}
    k = scheme.statements
    for model, rep in reports.items():
        print(f"model {model}: {len(rep.group_ids)} groups of {k} statements, scheme {scheme.name}")
        if not args.summary:
            width = max(len("group"), *(len(str(g)) for g in rep.group_ids))
            print(f"  {'group':<{width}}  right  {scheme.name:>8}  additive  gap")
            for g, c, s, a, d in zip(
                rep.group_ids, rep.correct, rep.scheme_points, rep.additive_points, rep.gap
            ):
                print(
                    f"  {str(g):<{width}}  {int(c)}/{k}    {decimal_text(s):>8}  "
                    f"{decimal_text(a):>8}  {decimal_text(d)}"
                )
        counts = " ".join(f"{j}:{int(c)}" for j, c in enumerate(rep.count_distribution))
        print(f"  groups by statements right: {counts}")
        print(f"  statement accuracy: {exact_text(rep.statement_accuracy)}")
        print(f"  mean {scheme.name} score per group: {exact_text(rep.mean_scheme)}")
        print(f"  mean additive score per group: {exact_text(rep.mean_additive)}")
        print(f"  mean gap (additive - {scheme.name}): {exact_text(rep.mean_gap)}")
    return 0
