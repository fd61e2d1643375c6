"""``cube smoke``: the seconds-long end-to-end check (``make smoke-test``).

cube smoke [--records data/sample] [--prediction data/predictions/audit_frozen.json]

Prints one verdict line per step (PASS/FAIL and its numbers) and exits 1 when any step fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "smoke",
        help="seconds-long end-to-end check of the headline story on the committed sample",
        description=(
            "Materialise the sample records (sha256, schema, values), recompute the tokenizer "
            "audit from the offline tokenizers and compare it with the frozen prediction, "
            "confirm that exactly the DEGEN cells tie under first-token scoring, and that the "
            "full-sequence scorer separates the labels there. Exit 1 if any step fails."
        ),
    )
    parser.add_argument("--records", type=Path, default=None,
                        help="a records store (default: data/sample)")
    parser.add_argument("--prediction", type=Path, default=None,
                        help="the frozen audit prediction (default: data/predictions/audit_frozen.json)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cube.paper.smoke import DEFAULT_PREDICTION, DEFAULT_RECORDS, format_verdicts, run_smoke

    result = run_smoke(args.records or DEFAULT_RECORDS, args.prediction or DEFAULT_PREDICTION)
    print(format_verdicts(result))
    return 0 if result.passed else 1
