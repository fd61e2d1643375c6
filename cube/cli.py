"""The ``cube`` console command: one subcommand per module in ``cube.commands``.

Every CubeError becomes one line on stderr and exit status 2; nothing else is caught.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cube import __version__
from cube.errors import CubeError

# Each module defines ``register(subparsers)``, which adds its parser and sets ``func``.
COMMAND_MODULES = [
    "cube.commands.audit",
    "cube.commands.data",
    "cube.commands.credit",
    "cube.commands.release",
    "cube.commands.run",
    "cube.commands.rescore",
    "cube.commands.confirm",
    "cube.commands.simulate",
    "cube.commands.book",
    "cube.commands.merge",
    "cube.commands.smoke",
    "cube.commands.import_lm_eval",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cube", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"cube {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CubeError as exc:
        print(f"cube: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cube: interrupted", file=sys.stderr)
        return 130
