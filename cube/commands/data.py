"""``cube data``: get the benchmarks (``fetch``), see where each is read from (``list``), re-check
an installed one (``verify``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("data", help="fetch benchmark data (CMMLU, C-Eval) and show where it is read from")
    sub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")

    f = sub.add_parser("fetch", help="download (or take --from) a benchmark's official release, verify it, "
                                     "and install it into the data home")
    f.add_argument("benchmark", help="cmmlu or ceval")
    f.add_argument("--from", dest="source", type=Path,
                   help="a local archive (zip, tar.gz) or folder in the official layout, instead of the URL")
    f.add_argument("--sha256", help="the archive's sha256 as its publisher gives it (where config pins none)")
    f.add_argument("--force", action="store_true", help="reinstall even if already installed")
    f.add_argument("--if-missing", action="store_true",
                   help="do nothing where cube already finds the benchmark (any place `cube data list` "
                        "looks in; what `make test` runs before the tests)")
    f.set_defaults(func=fetch)

    ls = sub.add_parser("list", help="each benchmark: where cube reads it from, and the data home")
    ls.set_defaults(func=list_benchmarks)

    v = sub.add_parser("verify", help="re-hash every file of an installed benchmark")
    v.add_argument("benchmark")
    v.set_defaults(func=verify)


def fetch(args: argparse.Namespace) -> int:
    from cube.errors import ChecksumError, SourceError
    from cube.protocol.data import fetch as fetch_release
    from cube.protocol.data import release
    from cube.protocol.items import data_home

    release(args.benchmark)  # an unknown name fails before anything is read or downloaded
    if args.source is not None and not args.source.exists():
        raise SourceError(f"--from {args.source}: no such file or folder")
    if args.if_missing and (found := _found(args.benchmark)) is not None:
        print(f"{args.benchmark}: found in {found}; nothing to fetch", file=sys.stderr)
        return 0
    try:
        target = fetch_release(args.benchmark, data_home(), args.source, args.sha256, args.force)
    except SourceError as exc:
        if not args.if_missing or isinstance(exc, ChecksumError):
            raise
        raise SourceError(f"{args.benchmark} is not on this machine, and {exc}") from None
    from cube.protocol.data import installed_manifest

    manifest = installed_manifest(target)
    print(f"{args.benchmark}: {len(manifest['files'])} files verified and installed in {target} "
          f"(from {manifest['source']})", file=sys.stderr)
    return 0


def _found(benchmark: str) -> Path | None:
    """Where cube already reads ``benchmark`` from, or None where a fetch is needed.

    Cheap on purpose (no file is hashed: each load checks its CSVs anyway), since ``make test``
    asks it on every run. ``CUBE_BENCHMARKS`` set without the benchmark is an error, not a reason
    to fetch: the loaders would keep reading the folder it names, never the data home.
    """
    import os

    from cube.errors import ItemsError
    from cube.protocol.items import find_benchmark_root

    root = find_benchmark_root(benchmark)
    if root is None and os.environ.get("CUBE_BENCHMARKS"):
        raise ItemsError(f"CUBE_BENCHMARKS={os.environ['CUBE_BENCHMARKS']} has no {benchmark}/ folder; point "
                         f"it at a folder that holds one, or unset it to fetch {benchmark} into the data home")
    return root


def list_benchmarks(args: argparse.Namespace) -> int:
    from cube.protocol.benchmarks import BENCHMARKS
    from cube.protocol.data import installed_manifest
    from cube.protocol.items import data_home, find_benchmark_root

    print(f"data home: {data_home()} ($CUBE_DATA; remove a benchmark's folder there to clear it)")
    for name in BENCHMARKS:
        root = find_benchmark_root(name)
        if root is None:
            print(f"{name}: not found (get it with `cube data fetch {name}`)")
            continue
        manifest = installed_manifest(root)
        how = f"installed by cube data fetch from {manifest['source']}" if manifest else "not installed by cube"
        print(f"{name}: {root} ({how})")
    print("your own file: cube run --benchmark PATH (.jsonl/.csv/.parquet, or a folder of dev/val/test files; "
          "README: Your benchmark)")
    return 0


def verify(args: argparse.Namespace) -> int:
    from cube.protocol.data import release, verify_installed
    from cube.protocol.items import data_home

    release(args.benchmark)
    n = verify_installed(data_home() / args.benchmark)
    print(f"{args.benchmark}: {n} files match the sha256 recorded when they were fetched", file=sys.stderr)
    return 0
