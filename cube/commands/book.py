"""``cube book``: execute the claim notebooks and build the offline book.

cube book execute [--only NAME ...] [--param NAME=VALUE ... --as RUN] [--out DIR] [--allow-incomplete]
cube book build [--no-strict] [--out DIR]

Folders written: ``execute`` writes ``<DIR>/<run>.ipynb`` (default ``book/_executed/``; a failed
run's partial copy goes to ``<DIR>/failed/``); ``build`` writes the vega bundle and MathJax into
``build/book/`` and the site into ``<DIR>/_build/html`` (default: ``_build/html``).

The notebooks read stores with ``cube.records.store.read_records``, which refuses a store with an
incomplete cell (a killed or unfinished run): the notebook fails and ``execute`` prints the one
line saying which cell. ``--allow-incomplete`` lets them read the records present, through
``$CUBE_ALLOW_INCOMPLETE`` in the kernels' environment (the notebooks need no parameter for it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from cube.commands.extras import declare


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
                              "'extra_label_sets=[\"roman=Ⅰ,Ⅱ,Ⅲ,Ⅳ\"]' (repeatable); needs --as")
    execute.add_argument("--as", dest="run_name", metavar="RUN",
                         help="name of a reader's run with --param: written to RUN.ipynb, never over a book page")
    execute.add_argument("--out", type=Path, default=None, metavar="DIR",
                         help="folder of the executed notebooks (default book/_executed, the one the book renders)")
    execute.add_argument("--allow-incomplete", action="store_true",
                         help="let the notebooks read stores whose cells lack shards their configuration "
                              "promises (a killed or unfinished run) instead of failing")
    execute.set_defaults(func=run_execute)
    declare(execute, ("papermill", "jupytext", "ipykernel"))

    build = actions.add_parser("build", help="jupyter-book build --all, with local vega and MathJax")
    build.add_argument("--no-strict", dest="strict", action="store_false",
                       help="do not turn Sphinx warnings (e.g. a missing glue key) into errors")
    build.add_argument("--out", type=Path, default=None, metavar="DIR",
                       help="write the site to DIR/_build/html (default: _build/html in the repository)")
    build.set_defaults(func=run_build)
    declare(build, ("jupyter_book",))


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


def reader_label_set_summary(overrides: dict) -> list[str]:
    """One line per label set of a reader's own (``--param extra_label_sets=[...]``): which
    tokenizer families it degenerates for at the default cue, from the tokenizers alone, so that a
    reader's run says its finding without the notebook being opened."""
    extra = overrides.get("extra_label_sets") or []
    if not extra:
        return []
    from cube.protocol.label_sets import parse_label_set
    from cube.protocol.prompts import load_contexts
    from cube.tokenizers.families import audit_families, wanted_sources

    label_sets = [parse_label_set(spec) for spec in extra]
    offline, _, skipped = wanted_sources(None, {}, {})
    cells = audit_families(offline, label_sets, load_contexts(["zh_cue"]))
    lines = []
    for label_set in label_sets:
        mine = [c for c in cells if c.label_set == label_set.name]
        degenerate = [c.family for c in mine if c.degenerate]
        distinct = [c.family for c in mine if not c.degenerate]
        lines.append(f"your label set {label_set.name} ({','.join(label_set.labels)}) at zh_cue: DEGEN for "
                     f"{', '.join(degenerate) or 'no family'}; distinct for {', '.join(distinct) or 'no family'}"
                     f" ({len(skipped)} families without an offline tokenizer not audited)")
    return lines


def run_execute(args: argparse.Namespace) -> int:
    if not getattr(args, "allow_incomplete", False):
        return _execute(args)
    import os

    from cube.records.store import ALLOW_INCOMPLETE_ENV

    before = os.environ.get(ALLOW_INCOMPLETE_ENV)
    os.environ[ALLOW_INCOMPLETE_ENV] = "1"  # inherited by every notebook kernel started meanwhile
    try:
        return _execute(args)
    finally:
        if before is None:
            os.environ.pop(ALLOW_INCOMPLETE_ENV, None)
        else:
            os.environ[ALLOW_INCOMPLETE_ENV] = before


def _execute(args: argparse.Namespace) -> int:
    from papermill.exceptions import PapermillExecutionError

    from cube.paper.execution import execute_notebook, missing_data
    from cube.paper.plan import EXECUTED_DIR, load_plan, reader_run, select_runs

    out_dir = args.out if args.out is not None else EXECUTED_DIR
    overrides = parse_params(args.param)
    plan = load_plan()
    runs = reader_run(plan, select_runs(plan, args.only), overrides, args.run_name)
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
        if args.run_name:  # a reader's own run: its finding in one line per label set of theirs
            for line in reader_label_set_summary(overrides):
                print(line)
    print(f"{len(runs)} notebook run(s) in {time.perf_counter() - total:.1f} s")
    return 0


def run_build(args: argparse.Namespace) -> int:
    from cube.config import REPO_ROOT
    from cube.errors import ConfigError
    from cube.paper.book import build_book, html_dir, prepare_assets
    from cube.paper.execution import missing_outputs
    from cube.paper.plan import EXECUTED_DIR, load_plan

    missing = missing_outputs(load_plan(), EXECUTED_DIR)
    if missing:
        raise ConfigError(f"{shown(missing[0])} is missing: run `cube book execute` first")
    start = time.perf_counter()
    prepare_assets()
    proc = build_book(REPO_ROOT, strict=args.strict, out=args.out)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        print(f"cube: jupyter-book build failed (exit {proc.returncode}) after {seconds:.1f} s", file=sys.stderr)
        return 1
    print(f"built {shown(html_dir(args.out).resolve())}/index.html in {seconds:.1f} s")
    example = build_example_report(html_dir(args.out))
    if example is not None:
        print(f"built the example report {shown(example)} from the archived records")
    return 0


EXAMPLE_REPORT = "report"  # the book's example `cube report`, at <site>/report/ (book/reproduce.md links it)
EXAMPLE_NOTEBOOKS = "book/_report"  # its executed pages and report.json, for nbval in `make test`


def build_example_report(site):
    """``cube report data/records`` into the site, so the book links a report a reader can open:
    the archived records' analysis by the same code a user's store gets."""
    from cube.config import REPO_ROOT
    from cube.report.analysis import analyse
    from cube.report.site import build_report

    records = REPO_ROOT / "data" / "records"
    if not (records / "MANIFEST.json").is_file():
        return None
    import contextlib

    with contextlib.chdir(REPO_ROOT):  # the pages name the store as a reader's clone does: data/records
        analysis = analyse(["data/records"], title="Example report: the archived records")
        return build_report(analysis, Path(site).resolve() / EXAMPLE_REPORT, keep=REPO_ROOT / EXAMPLE_NOTEBOOKS)
