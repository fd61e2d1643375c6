"""``cube merge OUT DIR1 DIR2 ...``: join the record folders of ``cube run --shard K/N`` processes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "merge", help="join the record folders of sharded `cube run --shard K/N` processes",
        description="Copy every record shard of the input folders into OUT; a shard name found twice "
                    "must have identical bytes, else nothing is written.",
    )
    p.add_argument("out", type=Path, help="output folder (may be one of the inputs)")
    p.add_argument("inputs", type=Path, nargs="+", help="`cube run --out` folders of the shard processes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cube.records.merge import merge_runs

    plan = merge_runs(args.out, args.inputs)
    print(f"copied {len(plan.copies)} shards into {args.out} ({plan.identical} already there, identical)",
          file=sys.stderr)
    return 0
