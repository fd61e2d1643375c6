#!/usr/bin/env python3
"""Write a stratified sample of a benchmark's items as the CSV folder ``scripts/inspect_items_task.py``
reads (one ``<subject>.csv`` per subject: row, question, A, B, C, D, answer).

The files hold benchmark text: write them into a scratch folder (``mktemp -d``), never the repository.
Usage: ``scripts/write_inspect_items.py OUT [--benchmark cmmlu] [--split test] [--sample 24] [--seed 0] [--data DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cube.protocol.benchmarks import load_items  # noqa: E402
from cube.protocol.items import stratified_sample  # noqa: E402

LABELS = "ABCD"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="an empty scratch folder outside the repository")
    parser.add_argument("--benchmark", default="cmmlu")
    parser.add_argument("--split", default="test")
    parser.add_argument("--sample", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None, help="the benchmark's folder (default: cube's lookup)")
    args = parser.parse_args(argv)
    if args.out.resolve().is_relative_to(ROOT):
        parser.error(f"{args.out}: inside the repository; the items are benchmark text, write them to a scratch "
                     "folder (mktemp -d)")
    items = stratified_sample(load_items(args.benchmark, args.data, splits=(args.split,)), args.sample, args.seed)
    if any(len(item.options) != len(LABELS) or item.answer is None for item in items):
        parser.error("every item needs four options and an answer")
    args.out.mkdir(parents=True, exist_ok=True)
    by_subject: dict[str, list] = {}
    for item in items:
        by_subject.setdefault(item.subject, []).append(item)
    for subject, members in by_subject.items():
        with open(args.out / f"{subject}.csv", "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["row", "question", *LABELS, "answer"])
            for item in members:
                writer.writerow([item.row, item.question, *item.options, LABELS[item.answer]])
    print(f"wrote {len(items)} {args.benchmark} {args.split} items of {len(by_subject)} subjects to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
