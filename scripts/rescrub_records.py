"""Re-scrub a records store's generations under the current leakage rules, shard by shard.

Why: the harness scrubs a generation before it writes it, under the rules of its day; when the
rules grow (issue 22, section 4: the raw form, the text as written), the archive must be brought
to what the harness would write now. Each free-text value is scrubbed exactly as the harness does
(``leakage.scrub`` against its own item and, through the index, every other item); only a shard
in which some value changes is rewritten, through ``cube.records.store.write_shard`` (temp file,
manifest entry with the new sha256 and rows, rename), under the store's writer lock, so a
concurrent ``cube run`` or ``cube merge`` into the store refuses, and a killed re-scrub leaves
every shard either old or new and the manifest consistent with each (run it again to finish).
Prints the whole store's audit before and after (hits never show text) and refuses (exit 1) if
hits remain.

    python scripts/rescrub_records.py data/records [--items CMMLU_DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cube.errors import CubeError
from cube.protocol.items import default_benchmark_root, load_cmmlu
from cube.records import leakage
from cube.records.leakage.tables import audit_parquet, open_parquet
from cube.records.schema import FREE_TEXT_COLUMNS
from cube.records.store import read_manifest, write_shard, writer_lock


def audit_store(store: Path, index: leakage.LeakageIndex) -> Counter:
    """Hits per (shard, kind) over every listed shard of ``store``."""
    counts: Counter = Counter()
    for name in sorted(read_manifest(store)["files"]):
        parquet, columns = open_parquet(store / name)
        for found in audit_parquet(parquet, columns, index, name):
            counts[(name, found.hit.kind)] += 1
    return counts


def rescrub_shard(table: pa.Table, by_uid: dict, index: leakage.LeakageIndex) -> tuple[pa.Table, int]:
    """``table`` with every free-text value scrubbed as the harness does now, and how many changed."""
    changed = 0
    for column in [c for c in FREE_TEXT_COLUMNS if c in table.column_names]:
        texts = table.column(column).to_pylist()
        uids = table.column("uid").to_pylist()
        for row, text in enumerate(texts):
            if text is None:
                continue
            item = by_uid.get(uids[row])
            if item is None:
                raise CubeError(f"row {row}: uid {uids[row]!r} is not in the item set; cannot scrub it")
            scrubbed = leakage.scrub(text, item.question, item.options, index=index).text
            if scrubbed != text:
                texts[row] = scrubbed
                changed += 1
        position = table.column_names.index(column)
        table = table.set_column(position, table.schema.field(position), pa.array(texts, type=table.schema.field(position).type))
    return table, changed


def summary(counts: Counter) -> str:
    by_kind = Counter()
    for (_, kind), n in counts.items():
        by_kind[kind] += n
    shards = len({name for name, _ in counts})
    return f"{sum(counts.values())} hit(s) in {shards} shard(s); by kind {dict(sorted(by_kind.items()))}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--items", type=Path, default=None, help="the CMMLU folder (default: cube's lookup)")
    parser.add_argument("--dry-run", action="store_true", help="report what would change, write nothing")
    args = parser.parse_args()
    items = load_cmmlu(default_benchmark_root("cmmlu", args.items), splits=("dev", "test"))
    by_uid = {item.uid: item for item in items}
    index = leakage.build_index(items)
    before = audit_store(args.store, index)
    print(f"before: {summary(before)}")
    with writer_lock(args.store):
        rewritten = 0
        for name in sorted(read_manifest(args.store)["files"]):
            table = pq.read_table(args.store / name)
            if not any(c in table.column_names for c in FREE_TEXT_COLUMNS):
                continue
            scrubbed, changed = rescrub_shard(table, by_uid, index)
            if changed:
                print(f"{'would rewrite' if args.dry_run else 'rewrite'} {name}: {changed} text(s) changed")
                if not args.dry_run:
                    write_shard(args.store, name, scrubbed)
                rewritten += 1
    after = audit_store(args.store, index)
    print(f"shards {'to rewrite' if args.dry_run else 'rewritten'}: {rewritten}; after: {summary(after)}")
    return 1 if after and not args.dry_run else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CubeError as exc:
        sys.exit(f"error: {exc}")
