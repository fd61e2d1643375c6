"""``cube simulate``: write a SYNTHETIC records cube at the paper's scale (for benchmarks/tests).

cube simulate OUT [--fraction 1.0] [--seed 0] [--prediction data/predictions/audit_frozen.json]

18 sim-<checkpoint> models x 12,925 synthetic items x 11 protocol cells (about 2.56 M records at
fraction 1). The generative model is documented in cube/analysis/simulate.py; the manifest says
``synthetic: true``. Never report these numbers as results.
"""

from __future__ import annotations

import argparse
import sys

from cube.commands.options import random_seed


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="write a synthetic records cube (marked synthetic) for benchmarks and checks",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("out", help="new folder to write the records to")
    parser.add_argument("--fraction", type=float, default=1.0,
                        help="share of the 12,925 items to keep (default: 1.0)")
    parser.add_argument("--seed", type=random_seed(), default=0)
    parser.add_argument("--prediction", default=None,
                        help="frozen audit prediction whose DEGEN cells get ties "
                             "(default: data/predictions/audit_frozen.json)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cube.analysis.simulate import DEFAULT_PREDICTION, simulate

    summary = simulate(args.out, fraction=args.fraction, seed=args.seed,
                       prediction=args.prediction or DEFAULT_PREDICTION,
                       progress=sys.stderr.isatty())
    print(f"wrote SYNTHETIC records to {args.out}: {summary['records']:,} records = "
          f"{summary['models']} models x {summary['items']:,} items x {summary['cells']} cells")
    return 0
