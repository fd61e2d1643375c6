"""``cube release``: what must hold before records are published, and the published bundle.

``cube release audit RECORDS --items ITEMS`` scans every free-text column of every record against
the question and option texts of every benchmark item and exits 1 on any hit, so that a release
script can refuse to publish. Hits name the record (file, row, uid), the field and the character
offset, never the leaked text: the report itself is meant to be shareable.

``cube release build RECORDS --out BUNDLE`` scrubs the records against their own items, refuses
(exit 2) if the audit still finds a hit, and writes ``BUNDLE/`` and ``BUNDLE.tar.gz`` (see
``cube.release.bundle``). ``cube release verify BUNDLE [--items ITEMS]`` re-checks every checksum and,
given the items, re-runs the audit; exit 1 names each file that fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cube.errors import ConfigError

DEFAULT_PREDICTION = "data/predictions/audit_frozen.json"



def _benchmark_options(parser) -> None:
    """``--benchmark`` and ``--card``: whose items the audit and the scrub read (the registry's)."""
    parser.add_argument("--benchmark", default=None,
                        help="cmmlu (default), ceval, or your own file or folder (README: Your benchmark): the "
                             "items the scrub and the leakage audit read")
    parser.add_argument("--card", type=Path, default=None, help="your file's card (default: the one beside it)")

def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "release",
        help="check and package records for publication",
        description="Check and package records for publication.",
    )
    actions = parser.add_subparsers(dest="release_command", required=True, metavar="ACTION")
    audit = actions.add_parser(
        "audit",
        help="leakage audit: find benchmark question or option text in records",
        description=(
            "Scan every free-text column of every record against the questions and options of "
            "every benchmark item (CMMLU dev + test). Prints one line per hit (file, row, uid, "
            "field, offset; never the text) and a summary; exits 1 if any hit, 0 if clean."
        ),
    )
    audit.add_argument("records", type=Path, nargs="+",
                       help="Parquet files or folders, each read with every Parquet file below it: "
                            "`data` covers every committed store (records, reruns, harness runs, imports)")
    audit.add_argument(
        "--items", type=Path, default=None,
        help="the CMMLU folder (dev/ and test/ CSVs); default: the lookup of `cube data list`",
    )
    audit.add_argument(
        "--window", type=int, default=20,
        help="a question span this long (normalised characters) is a leak (default: 20)",
    )
    audit.add_argument(
        "--min-option-chars", type=int, default=4,
        help="options shorter than this (normalised characters) are ignored (default: 4)",
    )
    audit.add_argument(
        "--min-question-chars", type=int, default=8,
        help="a question shorter than the window counts whole if it has this many (default: 8)",
    )
    audit.add_argument(
        "--stock-items", type=int, default=10,
        help="options and short questions found in this many items or more are ignored (default: 10)",
    )
    _benchmark_options(audit)
    audit.set_defaults(func=run_audit)

    build = actions.add_parser(
        "build",
        help="scrub, audit and package records as a release bundle (folder + .tar.gz)",
        description=(
            "Scrub every free-text field against its record's own item, re-run the leakage audit "
            "against every item (any hit refuses the build, nothing is written), then write BUNDLE/ "
            "and BUNDLE.tar.gz: records, frozen prediction, MANIFEST.json, CLAIMS.md, "
            "CITATION.cff, README.md and SHA256SUMS."
        ),
    )
    build.add_argument("records", type=Path, help="a records store (folder with MANIFEST.json)")
    build.add_argument("--out", type=Path, required=True, help="the bundle folder to create")
    build.add_argument(
        "--items", type=Path, default=None,
        help="the CMMLU folder (dev/ and test/ CSVs); default: the lookup of `cube data list`",
    )
    build.add_argument("--prediction", type=Path, default=None,
                       help=f"the frozen audit prediction to ship (default: {DEFAULT_PREDICTION})")
    build.add_argument("--force", action="store_true",
                       help="replace an existing bundle and tarball")
    build.add_argument("--allow-incomplete", action="store_true",
                       help="package a store whose cells lack shards their configuration promises "
                            "(a killed or unfinished run) instead of refusing it")
    _benchmark_options(build)
    build.set_defaults(func=run_build)

    verify = actions.add_parser(
        "verify",
        help="re-check a bundle: every checksum, the records, the prediction, the leakage audit",
        description=(
            "Re-check every sha256 of SHA256SUMS (and that no file is unlisted), that the folder "
            "and the tarball beside it are one build, the records' own manifest and values, "
            "MANIFEST.json's counts and flags against the records, the prediction's content hash "
            "and, with --items, the leakage audit. Prints one line per problem naming the file; "
            "exits 1 on any, 0 if all hold. Checksums detect accidents and edits, not a forger who "
            "rewrites files and sums together (README: what the checks guarantee)."
        ),
    )
    verify.add_argument("bundle", type=Path, help="a bundle folder or its .tar.gz")
    verify.add_argument("--items", type=Path, default=None,
                        help="the CMMLU folder: also re-run the leakage audit against it")
    _benchmark_options(verify)
    verify.set_defaults(func=run_verify)


def run_audit(args: argparse.Namespace) -> int:
    from cube.records import leakage
    from cube.records.leakage.tables import audit_parquet, open_parquet, parquet_files

    for name in ("window", "min_option_chars", "min_question_chars", "stock_items"):
        if getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} must be at least 1, got {getattr(args, name)}")
    # every file of every store named, each once (a store inside another named folder is one store)
    files = list(dict.fromkeys(path for records in args.records for path in parquet_files(records)))
    sources = [(path, *open_parquet(path)) for path in files]

    root, items, _ = _benchmark(args.benchmark, args.items, args.card)
    index = leakage.build_index(
        items,
        window=args.window,
        min_option_chars=args.min_option_chars,
        min_question_chars=args.min_question_chars,
        stock_items=args.stock_items,
    )

    n_hits = n_rows = n_fields = 0
    for path, parquet, columns in sources:
        for found in audit_parquet(parquet, columns, index, str(path)):
            n_hits += 1
            hit = found.hit
            print(
                f"LEAK {path}:{found.row} uid={found.uid} field={found.column} offset={hit.offset} "
                f"chars={hit.n_chars} kind={hit.kind}{f' encoding={hit.encoding}' if hit.encoding else ''} "
                f"item={hit.item_uid}"
            )
        n_rows += parquet.metadata.num_rows
        n_fields += parquet.metadata.num_rows * len(columns)
    verdict = "FAIL" if n_hits else "clean"
    print(
        f"leakage audit {verdict}: {n_hits} hit(s) in {n_rows:,} records ({n_fields:,} text fields, "
        f"{len(sources)} file(s)) against {index.n_items:,} items from {root}; {index.thresholds()}"
    )
    return 1 if n_hits else 0


def _benchmark(benchmark: str | None, root: Path | None, card: Path | None = None):
    """(where, every item of every split it holds, the licence notes a bundle adds) of ``--benchmark``
    (default CMMLU), by the registry; the notes are a user's file's own (its card's), none for a
    registered benchmark, whose notes every bundle lists."""
    from cube.protocol.benchmarks import BENCHMARKS, resolve

    bench = resolve(benchmark or "cmmlu", card)
    where = bench.root(root)
    extra = {} if bench.name in BENCHMARKS else {bench.name: bench.licence_note()}
    return where, bench.load(where, bench.present_splits(where)), extra


def run_build(args: argparse.Namespace) -> int:
    import time

    from cube.config import FROZEN_PREDICTION
    from cube.release.bundle import build_bundle

    start = time.perf_counter()
    prediction = args.prediction if args.prediction is not None else FROZEN_PREDICTION
    _, items, licences = _benchmark(args.benchmark, args.items, args.card)
    result = build_bundle(args.records, args.out, items, prediction,
                          force=args.force, allow_incomplete=args.allow_incomplete, licences=licences)
    s = result.scrub
    print(
        f"bundle {result.bundle} ({result.n_files} files) and {result.tarball}: "
        f"{result.n_records:,} records; scrub changed {s.n_changed:,} of {s.n_texts:,} texts "
        f"({s.n_spans:,} spans, {s.n_chars:,} chars); leakage audit clean against "
        f"{result.n_items_audited:,} items; {time.perf_counter() - start:.1f} s"
    )
    for line in result.incomplete:
        print(f"INCOMPLETE {line}")
    if result.incomplete:
        print(f"bundle INCOMPLETE: built with --allow-incomplete; {len(result.incomplete)} cell(s) short, marked in "
              "its MANIFEST.json, README.md and records/MANIFEST.json (every reader says so)")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from cube.release.bundle import verify_bundle

    given = args.items is not None or args.benchmark is not None
    items = _benchmark(args.benchmark, args.items, args.card)[1] if given else None
    report = verify_bundle(args.bundle, items)
    for problem in report.problems:
        print(f"FAIL {problem}")
    if report.ok:
        audit = (f"leakage audit clean against {report.n_items_audited:,} items"
                 if report.n_items_audited is not None else "leakage audit not run: give the items the records were made "
                 "on, --items CMMLU_FOLDER or --benchmark FILE for your own file")
        print(f"bundle OK: {report.n_files} files match {args.bundle}/SHA256SUMS; "
              f"{report.n_records:,} records valid; {audit}")
        for line in report.incomplete:
            print(f"INCOMPLETE {line}")
        if report.incomplete:  # checks hold (exit 0), but what the records say is partial: said last
            print(f"bundle INCOMPLETE: built with --allow-incomplete; {len(report.incomplete)} cell(s) lack "
                  "records their run promised, so their accuracies cover only the records present")
        return 0
    print(f"bundle FAILED: {len(report.problems)} problem(s) in {args.bundle}")
    return 1
