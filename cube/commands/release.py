"""``cube release``: what must hold before records are published.

``cube release audit RECORDS --items ITEMS`` scans every free-text column of every record against
the question and option texts of every benchmark item and exits 1 on any hit, so that a release
script can refuse to publish. Hits name the record (file, row, uid), the field and the character
offset, never the leaked text: the report itself is meant to be shareable.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cube.errors import ConfigError, CubeError

# String columns that identify a record rather than carry model output: never scanned. Every other
# string column is free text; scanning an identifier costs only time, skipping text would hide leaks.
ID_COLUMNS = frozenset(
    {"uid", "qhash", "benchmark", "subject", "split", "model", "label_set", "scorer", "context",
     "protocol", "template", "backend"}
)
_BATCH_ROWS = 65_536


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
    audit.add_argument("records", type=Path, help="a Parquet file or a folder of Parquet files")
    audit.add_argument(
        "--items", type=Path, default=None,
        help="the CMMLU folder (dev/ and test/ CSVs); default: ../shared/benchmarks/cmmlu",
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
    audit.set_defaults(func=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    from cube import leakage
    from cube.items import default_benchmark_root, load_cmmlu

    for name in ("window", "min_option_chars", "min_question_chars", "stock_items"):
        if getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} must be at least 1, got {getattr(args, name)}")
    sources = [(path, *_text_columns(path)) for path in parquet_files(args.records)]

    root = args.items if args.items is not None else default_benchmark_root("cmmlu")
    items = load_cmmlu(root, splits=("dev", "test"))
    index = leakage.build_index(
        items,
        window=args.window,
        min_option_chars=args.min_option_chars,
        min_question_chars=args.min_question_chars,
        stock_items=args.stock_items,
    )

    n_hits = n_rows = n_fields = 0
    for path, parquet, columns in sources:
        for row, uid, column, hit in _audit_file(parquet, columns, index):
            n_hits += 1
            print(
                f"LEAK {path}:{row} uid={uid} field={column} offset={hit.offset} "
                f"chars={hit.n_chars} kind={hit.kind} item={hit.item_uid}"
            )
        n_rows += parquet.metadata.num_rows
        n_fields += parquet.metadata.num_rows * len(columns)
    verdict = "FAIL" if n_hits else "clean"
    print(
        f"leakage audit {verdict}: {n_hits} hit(s) in {n_rows:,} records ({n_fields:,} text fields, "
        f"{len(sources)} file(s)) against {index.n_items:,} items from {root}; {index.thresholds()}"
    )
    return 1 if n_hits else 0


def parquet_files(records: Path) -> list[Path]:
    """RECORDS as a list of files: the file itself, or every ``*.parquet`` below the folder."""
    if records.is_file():
        return [records]
    if records.is_dir():
        files = sorted(records.rglob("*.parquet"))
        if not files:
            raise CubeError(f"no *.parquet files in {records}")
        return files
    raise CubeError(f"records not found: {records}")


def _text_columns(path: Path):
    """(opened file, free-text column names); refuses files whose text the audit could not see."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
    except (OSError, pa.ArrowException) as exc:
        raise CubeError(f"cannot read Parquet file {path}: {str(exc).splitlines()[0]}") from None
    if "uid" not in schema.names:
        raise CubeError(f"{path} has no 'uid' column to name the records by")
    columns = []
    for field in schema:
        if field.name in ID_COLUMNS:
            continue
        if _is_string(field.type):
            columns.append(field.name)
        elif _holds_strings(field.type):
            raise CubeError(
                f"{path} column {field.name!r} is {field.type}: the audit scans top-level string "
                "columns only; store that text as one string column per field"
            )
    return parquet, columns


def _is_string(type_) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    return pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_)


def _holds_strings(type_) -> bool:
    """Whether a nested type (list, struct, map) has a string anywhere inside."""
    if _is_string(type_):
        return True
    return any(_holds_strings(type_.field(k).type) for k in range(getattr(type_, "num_fields", 0)))


def _audit_file(parquet, columns: list[str], index):
    """(row, uid, column, hit) for every hit in one file, in row batches."""
    from tqdm import tqdm

    from cube import leakage

    if not columns:
        return
    first_row = 0
    with tqdm(total=parquet.metadata.num_rows, unit="rec", desc="audit", disable=None) as progress:
        for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=["uid", *columns]):
            uids = batch.column("uid").to_pylist()
            for column in columns:
                texts = ["" if t is None else t for t in batch.column(column).to_pylist()]
                for hit in leakage.audit_texts(texts, index):
                    yield first_row + hit.text, uids[hit.text], column, hit
            first_row += batch.num_rows
            progress.update(batch.num_rows)
