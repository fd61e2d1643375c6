"""The book's plan of notebook executions, checked against the notebooks' sources.

The notebooks live as MyST markdown in ``notebooks/``; ``config/notebooks.yaml`` lists each
execution (one notebook may run several times with different parameters), and a reader may add
a run of their own (``cube book execute --param ... --as NAME``). This module reads and checks
that plan (:func:`load_plan`: unique names, known keys, every parameter declared in the
notebook's ``parameters`` cell) and the notebook sources it needs for that check. It stands
alone because the plan is read without running anything: the release bundle, the book build and
the tests read it, and only :mod:`cube.paper.execution` runs it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cube.config import REPO_ROOT, config_dir, load_yaml
from cube.errors import ConfigError

EXECUTED_DIR = REPO_ROOT / "book" / "_executed"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
PLAN_KEYS = ("name", "source", "parameters", "requires", "title", "summary")


@dataclass(frozen=True)
class NotebookRun:
    """One execution: a notebook source, the parameters it runs with, the output's name."""

    name: str
    source: Path
    parameters: dict[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()  # benchmarks whose items the notebook reads (not only records)
    title: str | None = None  # the page's own heading, for a run under other parameters
    summary: str | None = None  # its opening sentence: what this run shows that the base page does not

    def output(self, out_dir: str | Path = EXECUTED_DIR) -> Path:
        return Path(out_dir) / f"{self.name}.ipynb"


# ---- the plan -----------------------------------------------------------------------------------

def load_plan(path: str | Path | None = None) -> list[NotebookRun]:
    """The executions listed in ``config/notebooks.yaml`` (or ``path``), checked up front.

    Names become file names and must be unique; every source must exist and every parameter must
    be declared in the notebook's ``parameters`` cell, so a typo fails here, not as a silently
    ignored papermill injection.
    """
    path = Path(path) if path else config_dir() / "notebooks.yaml"
    raw = load_yaml(path)
    entries = raw.get("notebooks") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a non-empty list under 'notebooks'")
    runs: list[NotebookRun] = []
    for i, entry in enumerate(entries):
        where = f"{path} notebooks[{i}]"
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("source"):
            raise ConfigError(f"{where}: each entry needs a 'name' and a 'source'")
        unknown = sorted(set(map(str, entry)) - set(PLAN_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(PLAN_KEYS))}")
        name = str(entry["name"])
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: name {name!r} must be letters, digits, '_', '-' or '.'")
        if any(r.name == name for r in runs):
            raise ConfigError(f"{where}: name {name!r} is used twice")
        source = Path(entry["source"])
        source = source if source.is_absolute() else REPO_ROOT / source
        parameters = entry.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ConfigError(f"{where}: 'parameters' must be a mapping")
        requires = entry.get("requires") or []
        from cube.protocol.benchmarks import BENCHMARKS

        if not isinstance(requires, list) or any(r not in BENCHMARKS for r in requires):
            raise ConfigError(f"{where}: 'requires' must list benchmarks among {', '.join(BENCHMARKS)}, got {requires!r}")
        if parameters and not entry.get("title"):
            # two pages with one heading are two identical entries in navigation and search
            raise ConfigError(f"{where}: a run with parameters needs its own 'title'")
        run = NotebookRun(name, source, dict(parameters), tuple(requires),
                          entry.get("title") or None, entry.get("summary") or None)
        check_parameters(run)
        runs.append(run)
    return runs


def select_runs(plan: list[NotebookRun], only: Iterable[str] | None) -> list[NotebookRun]:
    """The runs named in ``only``: by run name, else by notebook (every run of that source)."""
    wanted = list(only or [])
    if not wanted:
        return plan
    chosen = []
    for name in wanted:
        hits = [r for r in plan if r.name == name] or [r for r in plan if r.source.stem == name]
        if not hits:
            raise ConfigError(f"unknown notebook {name!r}; known: {', '.join(r.name for r in plan)}")
        chosen += [r for r in hits if r not in chosen]
    return chosen


def with_parameters(run: NotebookRun, overrides: dict[str, Any], name: str | None = None) -> NotebookRun:
    """The same run with some parameters replaced (``cube book execute --param``).

    ``name`` makes it a reader's run of its own (``--as NAME``), titled after it, so that it is
    written beside the book's pages and never over one of them.
    """
    if name is not None and not _NAME.fullmatch(name):
        raise ConfigError(f"run name {name!r} must be letters, digits, '_', '-' or '.'")
    title = run.title
    if name is not None:
        title = f"{base_heading(read_myst_notebook(run.source)) or run.name}: a reader's run ({name})"
    updated = NotebookRun(name or run.name, run.source, {**run.parameters, **overrides}, run.requires,
                          title, run.summary if name is None else None)
    check_parameters(updated)
    return updated


def reader_run(plan: list[NotebookRun], runs: list[NotebookRun], overrides: dict[str, Any],
               name: str | None) -> list[NotebookRun]:
    """The runs ``cube book execute`` performs when a reader passes ``--param`` (and ``--as``).

    A run whose parameters differ from the plan's is a reader's run: it must be named, and the
    name must not be one of the book's, so the paper's pages are never overwritten by it.
    """
    if name is not None and not overrides:
        raise ConfigError(f"--as {name}: a reader's run is one with --param; without one, run the plan as it is")
    if not overrides:
        return runs
    if name is None:
        raise ConfigError("--param makes a reader's run: name it with --as NAME (it is written to NAME.ipynb, "
                          "never over the book's pages)")
    if any(r.name == name for r in plan):
        raise ConfigError(f"--as {name}: {name!r} is one of the book's runs (config/notebooks.yaml); choose another name")
    if len(runs) != 1:
        raise ConfigError(f"--as {name} names one run, but --only selects {len(runs)}; select exactly one")
    return [with_parameters(runs[0], overrides, name)]


# ---- notebooks ----------------------------------------------------------------------------------

def read_myst_notebook(source: str | Path):
    """A MyST-markdown notebook as an nbformat notebook; its front matter must name a kernel."""
    import jupytext

    source = Path(source)
    if not source.is_file():
        raise ConfigError(f"notebook not found: {source}")
    nb = jupytext.read(source, fmt="md:myst")
    kernel = nb.metadata.get("kernelspec", {}).get("name")
    if not kernel:
        raise ConfigError(f"{source}: the front matter has no kernelspec (papermill needs one)")
    return nb


def declared_parameters(nb, source: str | Path = "notebook") -> set[str]:
    """Names assigned in the cell tagged ``parameters`` (read, not executed)."""
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ConfigError(f"{source}: needs exactly one cell tagged 'parameters', found {len(cells)}")
    try:
        tree = ast.parse(cells[0].source)
    except SyntaxError as exc:
        raise ConfigError(f"{source}: the parameters cell does not parse (line {exc.lineno})") from None
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def check_parameters(run: NotebookRun) -> None:
    declared = declared_parameters(read_myst_notebook(run.source), run.source)
    unknown = sorted(set(run.parameters) - declared)
    if unknown:
        raise ConfigError(
            f"{run.name}: parameter {unknown[0]!r} is not in {run.source.name}'s parameters cell "
            f"(declared: {', '.join(sorted(declared))})"
        )


def base_heading(nb) -> str | None:
    """The notebook's first level-1 heading (its page title)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return None
