"""``cube confirm``: check the frozen tokenizer-audit prediction against stored records.

cube confirm RECORDS --prediction data/predictions/audit_frozen.json [--family MODEL=FAMILY ...]
                     [--items BENCHMARK] [--no-verify] [--allow-incomplete] [--json]

Prints the model x label set confirmation matrix ("N/N confirmed"), a sentence for every
mismatch, and the partial-collision analysis. Exit status 0 when every predicted cell is
confirmed, 1 when any is not (2 for bad input, as for every command). A store with an incomplete
cell (a killed or unfinished run) is refused unless ``--allow-incomplete``: a confirmation on
part of a sample is not the one the prediction was frozen for.
"""

from __future__ import annotations

import argparse
import json
import sys

from cube.commands.extras import declare
from cube.commands.store_options import add_allow_incomplete, add_common_options, load


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "confirm",
        help="confirmation matrix: observed M1-strict ties vs the frozen audit prediction",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("records", help="records folder (holds MANIFEST.json)")
    parser.add_argument("--prediction", default=None,
                        help="frozen prediction from `cube audit --freeze` (default: the study's, "
                             "data/predictions/audit_frozen.json, shipped with cube: found from any folder)")
    parser.add_argument("--run-audit", action="store_true",
                        help="check each model against the audit its own `cube run` made on its tokenizer before "
                             "the weights loaded (logged in the run log), instead of --prediction")
    parser.add_argument("--family", nargs="+", metavar="MODEL=FAMILY", default=[],
                        help="tokenizer family of a model not in config/models.yaml")
    add_common_options(parser)
    add_allow_incomplete(parser)
    parser.set_defaults(func=run)
    declare(parser, ("pyarrow",))


def nothing_predicted(records, report, prediction, families) -> str:
    """Why none of a store's cells has a prediction to check, and what to give so one has."""
    from cube.analysis.confirm import predicted_cells

    models = sorted({c.observed.model for c in report.cells})
    known = sorted({family for family, *_ in predicted_cells(prediction)})
    unnamed = [m for m in models if m not in families]
    if unnamed:
        why = f"the tokenizer family of {', '.join(unnamed)} is unknown"
    else:
        why = "the prediction has none of its (family, label set, cue) cells"
    return (f"{records}: nothing to confirm: {why}; name it with --family MODEL=FAMILY (the prediction's "
            f"families: {', '.join(known)}), or freeze an audit of its own tokenizer (`cube audit --tokenizer "
            "NAME=path/to/tokenizer.json --freeze FILE`) and pass --prediction FILE --family MODEL=NAME")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cube.analysis.confirm import (
        confirm,
        format_effects,
        format_report,
        model_families,
        partial_cells,
        report_json,
        tiebreak_effects,
    )
    from cube.commands.store_options import incomplete_warnings
    from cube.errors import ConfigError
    from cube.records.store import read_manifest
    from cube.tokenizers.audit import read_prediction

    extra = {}
    for pair in args.family:
        model, sep, family = pair.partition("=")
        if not sep or not model or not family:
            raise ConfigError(f"--family {pair!r}: expected MODEL=FAMILY")
        extra[model] = family
    table = load(args.records, args)
    incomplete = incomplete_warnings(args.records)  # read at all only with --allow-incomplete
    for warning in incomplete:
        print(warning, file=sys.stderr)
    if args.run_audit:
        from cube.analysis.confirm import run_audit_prediction

        prediction, families = run_audit_prediction(args.records)
        families.update(extra)
    else:
        from cube.config import FROZEN_PREDICTION

        prediction = read_prediction(Path(args.prediction) if args.prediction else FROZEN_PREDICTION)
        families = model_families(read_manifest(args.records), extra)
    report = confirm(table, prediction, families)
    if not report.cells:
        raise ConfigError(f"{args.records}: no M1-strict records; nothing to confirm (run with --scorers M1-strict, "
                          "the first-token scorer whose ties the audit predicts)")
    if report.predicted == 0:  # every cell unpredicted: a 0/0 is no confirmation
        raise ConfigError(nothing_predicted(args.records, report, prediction, families))
    effects = tiebreak_effects(table, [c.observed for c in partial_cells(report)])
    if args.json:
        print(json.dumps(report_json(report, effects) | {"warnings": incomplete}, ensure_ascii=False, indent=1))
    else:
        print(format_report(report))
        print(format_effects(effects))
        for warning in incomplete:
            print(warning)
    return 0 if not report.mismatches else 1
