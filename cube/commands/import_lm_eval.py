"""``cube import lm-eval``: another harness's run as cube records, and the audit of its protocol.

cube import lm-eval OUTPUT_DIR --out STORE [--benchmark cmmlu|ceval] [--data DIR] [--model NAME]
                    [--family FAMILY] [--tokenizer SPEC | --no-audit] [--json]

OUTPUT_DIR is what ``lm_eval --log_samples --output_path OUTPUT_DIR`` wrote. STORE is a new records
folder: written whole or not at all. The audit runs on the tokenizer the run's model args name
(``--tokenizer`` gives another: a family of config/models.yaml or any source spec of ``cube audit``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "import", help="import another harness's run as records (lm-evaluation-harness, OpenCompass)",
        description="Import another harness's run as cube records.",
    )
    actions = parser.add_subparsers(dest="import_command", required=True, metavar="HARNESS")
    p = actions.add_parser(
        "lm-eval", help="an `lm_eval --log_samples --output_path` folder: records + audit of its protocol",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("output_dir", type=Path, help="the folder lm_eval --output_path wrote")
    p.add_argument("--out", type=Path, required=True, help="the records store to create (a new folder)")
    p.add_argument("--benchmark", choices=("cmmlu", "ceval"),
                   help="the benchmark of the docs (default: from lm-eval's dataset of each task)")
    p.add_argument("--data", type=Path, help="benchmark folder (default: the lookup of `cube data list`)")
    p.add_argument("--model", help="the records' model name (default: the last part of pretrained=)")
    p.add_argument("--family", help="the model's tokenizer family, for `cube confirm` (default: "
                                    "config/models.yaml's, for a demo model)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--tokenizer", metavar="SPEC",
                       help="audit with this tokenizer (a family name or a source spec) instead of the "
                            "one the run's model args name")
    group.add_argument("--no-audit", action="store_true",
                       help="import without a tokenizer: no audit, no first-token ids, no M1-strict")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def audit_tokenizer(args: argparse.Namespace, default_spec: str):
    """(tokenizer, its source spec), or (None, None) with --no-audit; a failure names the spec.

    ``--tokenizer`` overrides ``default_spec`` (what the run itself names); a family name of
    config/models.yaml means that family's offline source. Every ``cube import`` audits this way.
    """
    from cube.errors import CubeError, HarnessImportError
    from cube.models_config import models_config
    from cube.tokenizers.sources import resolve_source

    if args.no_audit:
        return None, None
    families = models_config().families
    spec = args.tokenizer or default_spec
    family = families.get(spec)  # a family name, else a source spec of its own
    source = family.offline.as_dict() if family is not None and family.offline else {"spec": spec}
    try:
        return resolve_source(source), source["spec"]
    except CubeError as exc:
        raise HarnessImportError(
            f"cannot load the tokenizer {spec!r} for the audit ({exc}); give one with --tokenizer "
            "SPEC or import with --no-audit"
        ) from None


def refuse_used_out(out: Path) -> None:
    """An import writes a new store: an existing file or non-empty folder is refused first."""
    from cube.errors import HarnessImportError

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HarnessImportError(f"--out {out} exists and is not an empty folder; give a new one")


def one_benchmark(benchmarks: set[str]) -> str:
    from cube.errors import HarnessImportError

    if len(benchmarks) != 1:
        raise HarnessImportError(f"the run mixes benchmarks ({', '.join(sorted(benchmarks))}); "
                                 "import one benchmark at a time")
    return next(iter(benchmarks))


def print_import(args: argparse.Namespace, imported, out, tokenizer, format_report, report_json) -> None:
    """The import's report, as text or ``--json``; a run imported without the audit says so."""
    if args.json:
        print(json.dumps(report_json(imported, out), ensure_ascii=False, indent=1, default=str))
    else:
        print(format_report(imported, out))
    if tokenizer is None:
        print("audit not run (--no-audit)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from cube.analysis.confirm import model_families
    from cube.protocol.items import default_benchmark_root, load_items
    from cube.records.lm_eval_import import (
        BENCHMARK_SPLITS,
        benchmark_of,
        check_metadata_clean,
        find_results,
        format_report,
        import_runs,
        model_name,
        read_run,
        report_json,
        tokenizer_spec,
        write_store,
    )

    refuse_used_out(args.out)
    runs = [read_run(path) for path in find_results(args.output_dir)]
    benchmark = one_benchmark({benchmark_of(task, args.benchmark) for run_ in runs for task in run_.tasks})
    root = default_benchmark_root(benchmark, args.data)
    items = load_items(benchmark, root, splits=BENCHMARK_SPLITS[benchmark])
    tokenizer, source = audit_tokenizer(args, tokenizer_spec(runs[0])) if not args.no_audit else (None, None)
    model = model_name(runs[0], args.model)
    family = args.family or model_families().get(model)
    imported = import_runs(runs, items, args.model, tokenizer, family, source)
    check_metadata_clean(imported.metadata, items)
    out = write_store(args.out, imported)
    print_import(args, imported, out, tokenizer, format_report, report_json)
    return 0
