"""``cube report``: how much a model's score depends on the protocol, as an offline site.

cube report STORE [STORE ...] --out DIR [--title TEXT] [--reference FIELD=VALUE,...]
                  [--allow-incomplete] [--show-items BENCHMARK] [--keep-notebooks DIR]

Reads stores of ``cube run`` (any backend or model source, a user's benchmark file included),
merged plans and imported runs (lm-eval, OpenCompass, EvalScope, inspect), computes the paper's
analysis of them once (the functions ``cube rescore``, ``cube confirm`` and ``cube explain`` use)
and builds a browsable offline site at ``DIR/index.html``: summary, the audit against observed
ties, protocol sensitivity (paired, exact, Holm-adjusted), calibration, subjects and categories,
rankings and harness gaps, the items that flip, provenance. A section the records cannot support
is one line saying which ``cube run`` options would produce it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="the paper's protocol-sensitivity analysis of your stores, as an offline site",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("stores", nargs="+", metavar="STORE", help="records folders (each holds MANIFEST.json)")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="the site's folder (new, empty, or an earlier report, which is replaced)")
    parser.add_argument("--title", default=None, help="the site's title")
    parser.add_argument("--reference", default=None, metavar="FIELD=VALUE,...",
                        help="the reference cell every other is compared with, e.g. scorer=M1-seq,label_set=L1_halfwidth "
                             "(fields: scorer, label_set, cue, shots, order, chat_template; default: the paper's "
                             "standard protocol where the stores hold it)")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="report on stores whose cells lack shards their run promises (a killed run); "
                             "every page is then marked incomplete")
    parser.add_argument("--show-items", metavar="BENCHMARK", default=None,
                        help="quote the flipped items' text, read now from this local benchmark (a registered name "
                             "or your file); the site then holds benchmark text and must not be published")
    parser.add_argument("--keep-notebooks", type=Path, default=None, metavar="DIR",
                        help="also keep the executed pages (.ipynb) and report.json in DIR")
    from cube.commands.extras import declare

    # the analysis reads records (pyarrow, scipy); the site is the book's stack
    declare(parser, ("pyarrow", "scipy", "papermill", "jupytext", "ipykernel", "jupyter_book", "altair"))
    parser.set_defaults(func=run)


def report_command(store: str | Path) -> str:
    """The ``cube report`` line ``cube run`` and ``cube plan status`` print for their store."""
    import shlex

    out = Path(store).with_name(Path(store).name + "-report")
    return f"cube report {shlex.quote(str(store))} --out {shlex.quote(str(out))}"


def run(args: argparse.Namespace) -> int:
    from cube.report.analysis import analyse
    from cube.report.site import build_report, check_out

    start = time.perf_counter()
    check_out(args.out)
    for store in args.stores:
        if Path(args.out).resolve() == Path(store).resolve():
            from cube.errors import ConfigError

            raise ConfigError(f"--out {args.out} is one of the stores; give the report a folder of its own")
    analysis = analyse(args.stores, title=args.title, reference=args.reference,
                       allow_incomplete=args.allow_incomplete, show_items=args.show_items,
                       progress=sys.stderr.isatty())
    index = build_report(analysis, args.out, keep=args.keep_notebooks)
    print(analysis.summary)
    for line in analysis.incomplete:
        print(f"WARNING: incomplete: {line}")
    if analysis.show_items:
        print("WARNING: the site quotes benchmark items (--show-items): do not publish it")
    print(f"report: {index} ({time.perf_counter() - start:.1f} s)")
    return 0
