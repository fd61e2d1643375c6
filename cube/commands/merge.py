"""``cube merge OUT DIR1 DIR2 ...``: join the record folders of ``cube run --shard K/N`` processes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cube.commands.extras import declare


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "merge", help="join the record folders of sharded `cube run --shard K/N` processes",
        description="Copy every record shard of the input folders into OUT; a shard name found twice "
                    "must have identical bytes, and every --shard K/N the inputs' run logs name must be there "
                    "once (each K of one N), else nothing is written.",
    )
    p.add_argument("out", type=Path, help="output folder (may be one of the inputs)")
    p.add_argument("inputs", type=Path, nargs="*", help="`cube run --out` folders of the shard processes")
    p.add_argument("--plan", type=Path, help="a `cube plan` folder: merge its jobs' stores, each checked against "
                   "the plan (every planned shard once, one configuration, one code and software version)")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="merge although a --shard K/N the inputs' run logs promise is missing; the store is "
                        "marked incomplete, and every reader says so (and refuses it without --allow-incomplete)")
    p.set_defaults(func=run)
    declare(p, ("pyarrow",))


def run(args: argparse.Namespace) -> int:
    from cube.errors import ConfigError
    from cube.records.merge import merge_runs

    inputs = list(args.inputs)
    if args.plan is not None:
        from cube.harness.plan import check_planned_stores, read_plan

        if inputs:
            raise ConfigError("--plan takes the inputs from the plan: give OUT and --plan only")
        inputs = check_planned_stores(read_plan(args.plan), args.plan)
    elif not inputs:
        raise ConfigError("give the `cube run --out` folders to merge, or --plan PLAN")
    plan = merge_runs(args.out, inputs, check_shards=args.plan is None, allow_incomplete=args.allow_incomplete)
    print(f"copied {len(plan.copies)} shards into {args.out} ({plan.identical} already there, identical)",
          file=sys.stderr)
    for line in plan.manifest.get("incomplete") or []:
        print(f"WARNING: {args.out} is marked incomplete: {line}", file=sys.stderr)
    return 0
