"""The options of the commands that read a records store, and the read they ask for.

``cube rescore``, ``cube confirm`` and ``cube explain`` read stores alike: ``--items`` checks every
qhash against an item set, ``--no-verify`` skips the checksums, ``--json`` prints JSON, and
``--allow-incomplete`` reads a store a killed run left short, with one warning per short cell. The
options, the read and those warnings are shared by the commands, so they live beside the shared
option parser (:mod:`cube.commands.options`) rather than in one command that the others import.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", metavar="BENCHMARK[/SPLITS]",
                        help="check every qhash against this item set, e.g. cmmlu/test, or your own file or "
                             "folder (README: Your benchmark), e.g. runs/quiz.jsonl or runs/quiz/dev,test")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip the sha256 check of each file against the manifest")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_allow_incomplete(parser: argparse.ArgumentParser) -> None:
    """``--allow-incomplete``, for the readers that refuse an incomplete store by default."""
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="read a store whose cells lack shards their configuration promises (a killed "
                             "or unfinished run) instead of refusing it")


def items_option(value: str) -> tuple[str, tuple[str, ...]]:
    """``--items``' (benchmark, splits): a registered name with ``/SPLITS`` (``cmmlu/test``), or a
    user's file or folder, whole or with ``/SPLITS`` after it; splits comma-separated, default test.
    A path is told by existing (a name's ``/`` would otherwise cut ``runs/quiz.jsonl`` at ``runs``)."""
    if Path(value).exists():
        return value, ("test",)
    base, sep, splits = value.rpartition("/")
    if not (sep and Path(base).exists()):
        base, _, splits = value.partition("/")
    return base, tuple(s for s in splits.split(",") if s) or ("test",)


def load(path: str, args: argparse.Namespace, columns=(), allow_incomplete: bool | None = None):
    """Read a records folder with the checks the options ask for.

    ``allow_incomplete`` None takes ``--allow-incomplete`` where the command has it (else refuses).
    """
    from cube.records.store import read_records

    items = None
    if args.items:
        from cube.protocol.benchmarks import load_items

        benchmark, splits = items_option(args.items)
        items = load_items(benchmark, splits=splits)
    if allow_incomplete is None:
        allow_incomplete = bool(getattr(args, "allow_incomplete", False))
    return read_records(path, verify=not args.no_verify, items=items, columns=columns,
                        progress=sys.stderr.isatty(), allow_incomplete=allow_incomplete)


def incomplete_warnings(path: str) -> list[str]:
    """One warning per cell of the store short of what its configuration promises."""
    from cube.records.store import read_manifest, unfinished_cells

    return [f"WARNING: incomplete cell (a killed or unfinished run?): {line}; its accuracies cover only the "
            "records present" for line in unfinished_cells(read_manifest(path))]
