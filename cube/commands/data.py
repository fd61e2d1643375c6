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
    f.set_defaults(func=fetch)

    ls = sub.add_parser("list", help="each benchmark: where cube reads it from, and the data home")
    ls.set_defaults(func=list_benchmarks)

    v = sub.add_parser("verify", help="re-hash every file of an installed benchmark")
    v.add_argument("benchmark")
    v.set_defaults(func=verify)


def fetch(args: argparse.Namespace) -> int:
    from cube.protocol.data import fetch as fetch_release
    from cube.protocol.data import release
    from cube.protocol.items import data_home

    release(args.benchmark)  # an unknown name fails before anything is read or downloaded
    if args.source is not None and not args.source.exists():
        from cube.errors import SourceError

        raise SourceError(f"--from {args.source}: no such file or folder")
    target = fetch_release(args.benchmark, data_home(), args.source, args.sha256, args.force)
    from cube.protocol.data import installed_manifest

    manifest = installed_manifest(target)
    print(f"{args.benchmark}: {len(manifest['files'])} files verified and installed in {target} "
          f"(from {manifest['source']})", file=sys.stderr)
    return 0


def list_benchmarks(args: argparse.Namespace) -> int:
    from cube.protocol.data import installed_manifest, releases
    from cube.protocol.items import data_home, find_benchmark_root

    print(f"data home: {data_home()} ($CUBE_DATA; remove a benchmark's folder there to clear it)")
    for name in releases():
        root = find_benchmark_root(name)
        if root is None:
            print(f"{name}: not found (get it with `cube data fetch {name}`)")
            continue
        manifest = installed_manifest(root)
        how = f"installed by cube data fetch from {manifest['source']}" if manifest else "not installed by cube"
        print(f"{name}: {root} ({how})")
    return 0


def verify(args: argparse.Namespace) -> int:
    from cube.protocol.data import release, verify_installed
    from cube.protocol.items import data_home

    release(args.benchmark)
    n = verify_installed(data_home() / args.benchmark)
    print(f"{args.benchmark}: {n} files match the sha256 recorded when they were fetched", file=sys.stderr)
    return 0
