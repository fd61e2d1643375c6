"""``cube book``: execute the claim notebooks and build the offline book.

cube book execute [--only NAME ...] [--param NAME=VALUE ...]
cube book build [--no-strict]
"""

from __future__ import annotations

import argparse
import sys
import time


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "book", help="execute the claim notebooks (papermill) and build the book (Jupyter Book)",
        description=__doc__.splitlines()[0],
    )
    actions = parser.add_subparsers(dest="book_action", required=True, metavar="ACTION")

    execute = actions.add_parser(
        "execute", help="run the notebooks of config/notebooks.yaml into book/_executed/"
    )
    execute.add_argument("--only", action="append", default=[], metavar="NAME",
                         help="a run name, or a notebook name for all its runs (repeatable)")
    execute.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                         help="override a notebook parameter; VALUE is YAML/JSON, e.g. "
                              "'extra_label_sets=[\"roman=Ⅰ,Ⅱ,Ⅲ,Ⅳ\"]' (repeatable)")
    execute.set_defaults(func=run_execute)

    build = actions.add_parser("build", help="jupyter-book build --all, with local vega and MathJax")
    build.add_argument("--no-strict", dest="strict", action="store_false",
                       help="do not turn Sphinx warnings (e.g. a missing glue key) into errors")
    build.set_defaults(func=run_build)


def parse_params(items: list[str]) -> dict:
    """``NAME=VALUE`` pairs, each VALUE read as YAML (so JSON, numbers, lists and null work)."""
    import yaml

    from cube.errors import ConfigError

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--param {item!r} must look like NAME=VALUE")
        try:
            out[name.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--param {item!r}: the value is not valid YAML/JSON") from None
    return out


def shown(path) -> str:
    """A path relative to the repository when it is inside it (shorter messages)."""
    from cube.config import REPO_ROOT

    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def run_execute(args: argparse.Namespace) -> int:
    from papermill.exceptions import PapermillExecutionError

    from cube.book import EXECUTED_DIR, execute_notebook, load_plan, missing_data, select_runs, with_parameters

    out_dir = EXECUTED_DIR
    overrides = parse_params(args.param)
    runs = select_runs(load_plan(), args.only)
    if overrides:
        runs = [with_parameters(r, overrides) for r in runs]
    total = time.perf_counter()
    for run in runs:
        start = time.perf_counter()
        reason = missing_data(run)
        if reason is not None:
            print(f"[skip] {run.name}: {reason}", file=sys.stderr)
        try:
            out = execute_notebook(run, out_dir)
        except PapermillExecutionError as exc:
            evalue = (exc.evalue or "").splitlines()[0] if exc.evalue else ""
            print(f"cube: notebook {run.name} failed in cell {exc.exec_count}: {exc.ename}: {evalue} "
                  f"(partial run: {shown(out_dir / 'failed' / f'{run.name}.ipynb')})", file=sys.stderr)
            return 1
        print(f"executed {run.name} -> {shown(out)} ({time.perf_counter() - start:.1f} s)")
    print(f"{len(runs)} notebook run(s) in {time.perf_counter() - total:.1f} s")
    return 0


def run_build(args: argparse.Namespace) -> int:
    from cube.book import EXECUTED_DIR, HTML_DIR, build_book, load_plan, missing_outputs, prepare_assets
    from cube.config import REPO_ROOT
    from cube.errors import ConfigError

    missing = missing_outputs(load_plan(), EXECUTED_DIR)
    if missing:
        raise ConfigError(f"{shown(missing[0])} is missing: run `cube book execute` first")
    start = time.perf_counter()
    prepare_assets()
    proc = build_book(REPO_ROOT, strict=args.strict)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        print(f"cube: jupyter-book build failed (exit {proc.returncode}) after {seconds:.1f} s", file=sys.stderr)
        return 1
    print(f"built {shown(HTML_DIR)}/index.html in {seconds:.1f} s")
    return 0
