"""``cube import HARNESS``: another harness's run as cube records, and the audit of its protocol.

cube import HARNESS OUTPUT_DIR --out STORE [--benchmark cmmlu|ceval] [--data DIR] [--model NAME]
                    [--family FAMILY] [--tokenizer SPEC | --no-audit] [--json]

HARNESS is one of ``cube.importers.registry``'s (lm-eval: what ``lm_eval --log_samples
--output_path OUTPUT_DIR`` wrote; opencompass: the ``-w WORK_DIR`` of ``opencompass CONFIG`` or one
run in it). STORE is a new records folder: written whole or not at all. The audit runs on the
tokenizer the run names (``--tokenizer`` gives another: a family of config/models.yaml or any
source spec of ``cube audit``). Every harness goes through the same steps (``run``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path


def register(subparsers) -> None:
    from cube.importers.registry import IMPORTERS

    parser = subparsers.add_parser(
        "import", help=f"import another harness's run as records ({', '.join(IMPORTERS)})",
        description="Import another harness's run as cube records.",
    )
    actions = parser.add_subparsers(dest="import_command", required=True, metavar="HARNESS")
    for importer in IMPORTERS.values():
        p = actions.add_parser(importer.name, help=importer.help,
                               description=f"cube import {importer.name}: {importer.help}")
        p.add_argument("output_dir", type=Path, help=importer.folder_help)
        p.add_argument("--out", type=Path, required=True, help="the records store to create (a new folder)")
        if importer.benchmark_option:
            p.add_argument("--benchmark", choices=("cmmlu", "ceval"),
                           help="the benchmark of the docs (default: from the harness's dataset of each task)")
        p.add_argument("--data", type=Path, help="benchmark folder (default: the lookup of `cube data list`)")
        p.add_argument("--model", help=importer.model_help)
        p.add_argument("--family", help="the model's tokenizer family, for `cube confirm` (default: "
                                        "config/models.yaml's, for a demo model)")
        if importer.audits:
            group = p.add_mutually_exclusive_group()
            group.add_argument("--tokenizer", metavar="SPEC",
                               help="audit with this tokenizer (a family name or a source spec) instead of the "
                                    "one the run names")
            group.add_argument("--no-audit", action="store_true",
                               help="import without a tokenizer: no audit, no first-token ids (nor the records "
                                    "that need them)")
        p.add_argument("--json", action="store_true", help="print the report as JSON")
        p.set_defaults(func=run, importer=importer.name, tokenizer=None, no_audit=not importer.audits)


def audit_tokenizer(args: argparse.Namespace, default_spec: str | None, where: str):
    """(tokenizer, its source spec), or (None, None) with --no-audit; a failure names the spec.

    ``--tokenizer`` overrides ``default_spec`` (what the run itself names); a family name of
    config/models.yaml means that family's offline source.
    """
    from cube.errors import CubeError, HarnessImportError
    from cube.models_config import models_config
    from cube.tokenizers.sources import resolve_source

    if args.no_audit:
        return None, None
    spec = args.tokenizer or default_spec
    if not spec:
        raise HarnessImportError(f"{where} name no tokenizer; give --tokenizer SPEC (or --no-audit)")
    family = models_config().families.get(spec)  # a family name, else a source spec of its own
    source = family.offline.as_dict() if family is not None and family.offline else {"spec": spec}
    try:
        return resolve_source(source), source["spec"]
    except CubeError as exc:
        raise HarnessImportError(
            f"cannot load the tokenizer {spec!r} for the audit ({exc}); give one with --tokenizer "
            "SPEC or import with --no-audit"
        ) from None


def run(args: argparse.Namespace) -> int:
    from cube.analysis.confirm import model_families
    from cube.errors import HarnessImportError
    from cube.importers.contract import BENCHMARK_SPLITS, check_metadata_clean, refuse_used_out, write_store
    from cube.importers.registry import IMPORTERS
    from cube.protocol.items import default_benchmark_root, load_items
    from cube.records.degeneracy import degeneracy_report, degenerate_cells

    importer = IMPORTERS[args.importer]
    refuse_used_out(args.out)
    read = importer.read(args.output_dir, getattr(args, "benchmark", None))
    root = default_benchmark_root(read.benchmark, args.data)
    items = load_items(read.benchmark, root, splits=BENCHMARK_SPLITS[read.benchmark])
    tokenizer, source = audit_tokenizer(args, read.tokenizer_spec, read.where)
    model = args.model or read.model
    if not model:
        raise HarnessImportError(f"{read.where} name no model; give --model NAME")
    family = args.family or model_families().get(model)
    imported = importer.run(read.runs, items, args.model, tokenizer, family, source)
    check_metadata_clean(imported.metadata, items)
    out = write_store(args.out, imported)
    cells = degenerate_cells(imported.rows)
    if args.json:
        report = {**importer.report_json(imported, out),
                  "degenerate_scores": [{**asdict(c), "findings": c.findings()} for c in cells if c.findings()]}
        print(json.dumps(report, ensure_ascii=False, indent=1, default=str))
    else:
        print(importer.format_report(imported, out))
        print("\n".join(degeneracy_report(cells)))
    if tokenizer is None and importer.audits:
        print("audit not run (--no-audit)", file=sys.stderr)
    return 0
