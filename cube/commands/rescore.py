"""``cube rescore``: accuracy of any protocol slice from stored records, without a model.

cube rescore RECORDS [--scorer S] [--label-set L] [--shots N] [--order O] [--context C]
                     [--model M] [--level subject|category|overall] [--taxonomy cmmlu|ceval]
                     [--versus FIELD=VALUE ...] [--versus-records DIR] [--calibration]
                     [--items BENCHMARK] [--no-verify] [--allow-incomplete] [--json]

Every filter may be repeated to allow several values. With ``--versus`` it prints the
per-subject regression table from the slice (A) to the same slice with the given fields
replaced (B), worst subject first, with exact McNemar p-values and paired-bootstrap intervals.
With ``--calibration`` it prints the expected calibration error of each scored cell instead.

A store whose cells are short of what their configurations promise (a killed or unfinished run)
is rescored, with a warning per incomplete cell: printed, and in the JSON's ``warnings``.
"""

from __future__ import annotations

import argparse
import json
import sys

from cube.analysis.cell_table import (COLUMNS_MEAN, rate, share, shows_thinking, thinking_header, thinking_shares,
                                      with_noise_marks)
from cube.commands.extras import declare
from cube.commands.options import comma_list, parse_comma_list
from cube.commands.store_options import (add_allow_incomplete, add_common_options, incomplete_warnings, items_option,
                                         load)

SLICE_OPTIONS = (
    ("model", "--model"), ("scorer", "--scorer"), ("label_set", "--label-set"),
    ("shots", "--shots"), ("order", "--order"), ("context", "--context"),
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "rescore",
        help="accuracy with 95%% intervals of any slice of stored records (no model needed)",
        description=__doc__.splitlines()[0], epilog=COLUMNS_MEAN.replace("%", "%%"),
    )
    parser.add_argument("records", help="records folder (holds MANIFEST.json)")
    for dest, flag in SLICE_OPTIONS:
        parser.add_argument(flag, dest=dest, action="extend", metavar=dest.upper(),
                            type=comma_list(flag, int if dest == "shots" else str),
                            help=f"keep only these {'shots' if dest == 'shots' else dest.replace('_', ' ') + 's'} "
                                 "(comma-separated; repeatable)")
    parser.add_argument("--level", choices=("subject", "category", "overall"), default="overall")
    parser.add_argument("--taxonomy", choices=("cmmlu", "ceval"), default=None,
                        help="subject categories (default: each benchmark's own; a file of yours: its category "
                             "column, read from --items FILE or the file its run read)")
    parser.add_argument("--versus", nargs="+", metavar="FIELD=VALUE",
                        help="regression table against the slice with these fields replaced; FIELD one of "
                             f"{', '.join(dest for dest, _ in SLICE_OPTIONS)}, e.g. --versus label_set=L4_circled")
    parser.add_argument("--allow-mixed-precision", action="store_true",
                        help="with --versus: compare slices scored in different precisions (refused "
                             "otherwise: bf16 against fp32 can flip the discordant items); the output says so")
    parser.add_argument("--versus-records", metavar="DIR",
                        help="take the --versus slice from another records folder")
    parser.add_argument("--calibration", action="store_true",
                        help="expected calibration error (10 equal-width bins) per cell")
    add_common_options(parser)
    # accepted as confirm, explain and release build accept it: rescore reads an incomplete store
    # anyway (with a warning per cell), so a script can pass the flag to every reader alike
    add_allow_incomplete(parser)
    parser.set_defaults(func=run)
    declare(parser, ("pyarrow",))


def _versus_filters(pairs: list[str], base: dict) -> dict:
    from cube.analysis.slices import SLICE_FIELDS
    from cube.errors import ConfigError

    out = dict(base)
    for pair in pairs:
        field, sep, value = pair.partition("=")
        field = field.replace("-", "_")
        if not sep or field not in SLICE_FIELDS or not value:
            raise ConfigError(f"--versus {pair!r}: expected FIELD=VALUE with FIELD one of "
                              f"{', '.join(SLICE_FIELDS)}")
        out[field] = parse_comma_list(value, f"--versus {field}", int if field == "shots" else str)
    return out


def _cell_title(row: dict) -> str:
    return (f"== {row['model']} | {row['scorer']} | {row['label_set']} | {row['context']} | "
            f"{row['shots']}-shot | {row['order']} ({row['benchmark']})")


def format_rows(rows: list[dict]) -> str:
    lines, title = [], None
    width = max([len(str(r["group"])) for r in rows] + [5])
    thinking = shows_thinking(rows)
    for r in rows:
        if _cell_title(r) != title:
            title = _cell_title(r)
            lines.append(title)
            lines.append(f"{'group':<{width}}  {'level':<8} {'agg':<6} {'n':>6} {'acc':>6}  "
                         f"{'95% CI':<15} {'chance':>6} {'parse-fail':>10} {'tied':>6} {'in-noise':>8}"
                         + (thinking_header() if thinking else ""))
        lines.append(
            f"{r['group']:<{width}}  {r['level']:<8} {r['aggregation']:<6} {r['n']:>6} "
            f"{r['accuracy']:>6.3f}  [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] {rate(r.get('chance')):>6} "
            f"{r['parse_failure_rate']:>10.1%} {r['tie_rate']:>6.1%} {share(r.get('within_noise_rate')):>8}"
            + (thinking_shares(r) if thinking else "")
        )
    return "\n".join(lines)


def format_regression(regression) -> str:
    rows = regression.rows.to_pylist()
    width = max([len(r["subject"]) for r in rows] + [7])
    lines = [f"{'subject':<{width}}  {'n':>5} {'acc A':>6} {'acc B':>6} {'delta':>7} "
             f"{'95% CI':<17} {'A-only':>6} {'B-only':>6} {'McNemar p':>10}"]
    for r in [*rows, {"subject": "OVERALL", **regression.overall}]:
        lines.append(f"{r['subject']:<{width}}  {r['n']:>5} {r['acc_a']:>6.3f} {r['acc_b']:>6.3f} "
                     f"{r['delta']:>+7.3f} [{r['delta_lo']:+.3f}, {r['delta_hi']:+.3f}] "
                     f"{r['a_only_right']:>6} {r['b_only_right']:>6} {r['p_value']:>10.3g}")
    if regression.only_a or regression.only_b:
        lines.append(f"(items only in A: {regression.only_a}; only in B: {regression.only_b}; "
                     "left out)")
    return "\n".join(lines)


def no_match(table, filters: dict) -> str:
    """Why a slice is empty, and what to ask for instead: the values the store holds of each
    option that was given, or that the store holds nothing yet."""
    if table.num_rows == 0:
        return ("the store holds no records yet (a run that wrote no shard); run `cube run ... --out` into it "
                "first, or give the folder a finished run wrote")
    held, flags = [], []
    for field, wanted in filters.items():
        if field in table.column_names:
            values = sorted({v for v in table.column(field).to_pylist() if v is not None}, key=str)
            if not set(wanted) & set(values):
                held.append(f"{field} {', '.join(map(str, values))}")
                flags.append("--" + field.replace("_", "-"))
    if not held:
        return (f"no records match {filters}: the store holds each value, but not in one cell; "
                "leave one of the options out to see which cells there are")
    return (f"no records match {filters}: the store holds {'; '.join(held)}; choose from those "
            f"({', '.join(flags)}), or leave the option out for all")


def run(args: argparse.Namespace) -> int:
    from cube.analysis.calibration import calibration
    from cube.analysis.paired_slices import regression_table
    from cube.analysis.rescore import rescore
    from cube.analysis.slices import filters_from, select
    from cube.errors import ConfigError

    table = load(args.records, args, columns=("probs",) if args.calibration else (), allow_incomplete=True)
    incomplete = incomplete_warnings(args.records)
    if args.versus_records:
        incomplete += incomplete_warnings(args.versus_records)
    for warning in incomplete:
        print(warning, file=sys.stderr)
    filters = filters_from(vars(args))
    sliced = select(table, **filters)
    if sliced.num_rows == 0:
        raise ConfigError(f"{args.records}: {no_match(table, filters)}")

    if args.versus:
        other = load(args.versus_records, args, allow_incomplete=True) if args.versus_records else table
        other_filters = _versus_filters(args.versus, filters)
        other_slice = select(other, **other_filters)
        regression = regression_table(sliced, other_slice, allow_mixed_precision=args.allow_mixed_precision)
        if args.json:
            print(json.dumps({"a": filters, "b": other_filters, "warnings": incomplete,
                              "precision": regression.precision,
                              "rows": regression.rows.to_pylist(), "overall": regression.overall,
                              "only_a": regression.only_a, "only_b": regression.only_b},
                             ensure_ascii=False, indent=1))
        else:
            print(f"A: {filters}\nB: {other_filters}\nprecision: {regression.precision}")
            print(format_regression(regression))
        return 0

    if args.calibration:
        rows = calibration(sliced).to_pylist()
        if args.json:
            print(json.dumps({"filters": filters, "warnings": incomplete, "rows": rows}, ensure_ascii=False,
                             indent=1))
        else:
            for r in rows:
                print(f"{_cell_title(r)}: ECE {r['ece']:.4f} over {r['n']} items")
        return 0

    taxonomy = args.taxonomy
    if args.level == "category" and taxonomy is None:  # a user's file: its own category column
        from cube.analysis.store_file import store_taxonomy

        taxonomy = store_taxonomy(args.records, items_option(args.items)[0] if args.items else None) or None
    result = rescore(with_noise_marks(sliced, args.records), level=args.level, taxonomy=taxonomy)
    warnings = incomplete + result.warnings
    for warning in result.warnings:
        print(warning, file=sys.stderr)
    if args.json:
        print(json.dumps({"filters": filters, "level": args.level, "warnings": warnings,
                          "rows": result.rows.to_pylist()}, ensure_ascii=False, indent=1))
    else:
        print(format_rows(result.rows.to_pylist()))
        for warning in warnings:
            print(warning)
        print(COLUMNS_MEAN)
    return 0
