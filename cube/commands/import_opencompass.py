"""``cube import opencompass``: an OpenCompass run of CMMLU or C-Eval as cube records, and the audit
of its protocol.

cube import opencompass OUTPUT_DIR --out STORE [--data DIR] [--model NAME] [--family FAMILY]
                        [--tokenizer SPEC | --no-audit] [--json]

OUTPUT_DIR is the ``-w WORK_DIR`` of ``opencompass CONFIG`` (every run below it is read) or one
``<timestamp>`` run in it. STORE is a new records folder, written whole or not at all. The audit
runs on the tokenizer the run's model config names (its ``tokenizer_path``, else ``path``).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _import_actions(subparsers):
    """The ``cube import HARNESS`` sub-commands (``cube.commands.import_lm_eval`` adds ``import``)."""
    parser = subparsers.choices.get("import")
    if parser is None:
        raise RuntimeError("cube.commands.import_lm_eval must be registered before import_opencompass")
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def register(subparsers) -> None:
    p = _import_actions(subparsers).add_parser(
        "opencompass", help="an `opencompass CONFIG -w DIR` output folder (PPL and gen modes): records + audit",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("output_dir", type=Path, help="the work dir opencompass wrote (or one run in it)")
    p.add_argument("--out", type=Path, required=True, help="the records store to create (a new folder)")
    p.add_argument("--data", type=Path, help="benchmark folder (default: the lookup of `cube data list`)")
    p.add_argument("--model", help="the records' model name (default: the model's abbr in the config)")
    p.add_argument("--family", help="the model's tokenizer family, for `cube confirm` (default: "
                                    "config/models.yaml's, for a demo model)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--tokenizer", metavar="SPEC",
                       help="audit with this tokenizer (a family name or a source spec) instead of the "
                            "model folder the run's config names")
    group.add_argument("--no-audit", action="store_true",
                       help="import without a tokenizer: no audit, no first-token ids")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cube.analysis.confirm import model_families
    from cube.commands.import_lm_eval import audit_tokenizer, one_benchmark, print_import, refuse_used_out
    from cube.protocol.benchmarks import load_items
    from cube.protocol.items import default_benchmark_root
    from cube.records.lm_eval_import import check_metadata_clean, write_store
    from cube.records.opencompass_import import (
        BENCHMARK_SPLITS,
        find_runs,
        format_report,
        import_runs,
        read_run,
        report_json,
    )

    refuse_used_out(args.out)
    runs = [read_run(path) for path in find_runs(args.output_dir)]
    benchmark = one_benchmark({d.benchmark for run_ in runs for d in run_.datasets})
    model = args.model or runs[0].model
    root = default_benchmark_root(benchmark, args.data)
    items = load_items(benchmark, root, splits=BENCHMARK_SPLITS[benchmark])
    spec = str(runs[0].model_config.get("tokenizer_path") or runs[0].model_config.get("path") or "")
    tokenizer, source = audit_tokenizer(args, spec)
    family = args.family or model_families().get(model)
    imported = import_runs(runs, items, args.model, tokenizer, family, source)
    check_metadata_clean(imported.metadata, items)
    out = write_store(args.out, imported)
    print_import(args, imported, out, tokenizer, format_report, report_json)
    return 0
