#!/usr/bin/env python3
"""Check that cube's imports follow the flow (no import circles, no stage imports a later one) and that no module outgrows 600 lines without a reason.

Every ``import``/``from ... import`` of a cube module counts, wherever it stands: a function-level
import closes a circle just as surely (it runs later, but the two modules still cannot be read,
tested or moved apart), and a lazy import of a later stage is still a dependency against the flow.
Nothing is imported or run: the modules are read with ``ast``.

A module over ``MAX_LINES`` lines usually holds two concerns (issue 50). One that must stay whole
says why in a line near its top (within its first ``REASON_WITHIN`` lines)::

    # Longer than 600 lines: <why it cannot be split by concern>

and is then only counted, not refused.

Usage: ``scripts/check_imports.py [ROOT]`` (default: this checkout). Exit 0 when clean; otherwise
one line per problem and exit 1.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# The flow, earliest first: a module may import its own stage and earlier ones, never a later one.
# ``records`` stands before the harness: it is the format the harness writes and every later stage
# reads, so reading a store must never need the harness. ``importers`` stand beside the harness: a
# run's records come from one or the other. The first stage is what every stage shares.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("shared", ("cube", "cube.errors", "cube.atomic", "cube.checksums", "cube.files", "cube.config",
                "cube.models_config")),
    ("protocol", ("cube.protocol",)),
    ("tokenizers", ("cube.tokenizers",)),
    ("records", ("cube.records",)),
    ("harness", ("cube.harness", "cube.importers")),
    ("analysis", ("cube.analysis",)),
    ("paper", ("cube.paper",)),
    ("report", ("cube.report",)),
    ("release", ("cube.release",)),
    ("commands", ("cube.commands", "cube.cli", "cube.__main__")),
)

# Known exceptions, each with the issue that removes it: (importer, imported). An entry whose
# import is gone is itself reported, so that the list only ever shrinks.
ALLOWED: frozenset[tuple[str, str]] = frozenset({
    # (none left: issue 25's circle 1, records.provenance -> harness.runner, is gone with the
    # run-log migration, scripts/migrate_run_logs.py)
})


MAX_LINES = 600
REASON_WITHIN = 30
REASON_MARK = "# Longer than 600 lines:"


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int


def module_files(root: Path, package: str = "cube") -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported_modules(node: ast.AST, module: str, is_package: bool, known: Mapping[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [_known_prefix(alias.name, known) for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    # ``from cube.x import y`` imports the module cube.x.y where there is one, else a name of cube.x.
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else _known_prefix(base, known)
            for alias in node.names]


def _known_prefix(name: str, known: Mapping[str, Path]) -> str:
    parts = name.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts)


def import_edges(modules: Mapping[str, Path]) -> list[Edge]:
    """Every import of one cube module by another, module level and function level alike."""
    edges = set()
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _imported_modules(node, module, path.name == "__init__.py", modules):
                if target and target != module:
                    edges.add(Edge(module, target, node.lineno))
    return sorted(edges, key=lambda e: (e.importer, e.imported, e.line))


def stage_of(module: str, stages: Iterable[tuple[str, tuple[str, ...]]] = STAGES) -> int:
    """The position of a module's stage in the flow (the longest matching prefix decides).

    A prefix holds its submodules too, except the bare root package, which is only itself.
    """
    best, index = -1, None
    for i, (_, prefixes) in enumerate(stages):
        for prefix in prefixes:
            inside = "." in prefix and module.startswith(prefix + ".")
            if (module == prefix or inside) and len(prefix) > best:
                best, index = len(prefix), i
    if index is None:
        raise SystemExit(f"check_imports: module {module!r} belongs to no stage; add it to STAGES")
    return index


def against_the_flow(edges: Iterable[Edge], stages=STAGES) -> list[Edge]:
    return [e for e in edges if stage_of(e.imported, stages) > stage_of(e.importer, stages)]


def circles(edges: Iterable[Edge]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan), each sorted, in sorted order."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.imported)
        graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []

    def visit(start: str) -> None:  # iterative: a deep import chain must not hit the recursion limit
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def problems(root: Path, allowed: frozenset[tuple[str, str]] = ALLOWED, stages=STAGES) -> list[str]:
    """One line per circle and per import against the flow, leaving out the allowed imports."""
    modules = module_files(root)
    every = import_edges(modules)
    edges = [e for e in every if (e.importer, e.imported) not in allowed]
    present = {(e.importer, e.imported) for e in every}
    out = [f"allowed but gone: {a} -> {b}; delete it from ALLOWED" for a, b in sorted(allowed - present)]
    for group in circles(edges):
        members = set(group)
        ties = [f"{e.importer}:{e.line} -> {e.imported}" for e in edges
                if e.importer in members and e.imported in members]
        out.append(f"circle of {len(group)}: {', '.join(group)} ({'; '.join(ties)})")
    names = [name for name, _ in stages]
    for e in against_the_flow(edges, stages):
        out.append(f"against the flow: {e.importer}:{e.line} ({names[stage_of(e.importer, stages)]}) "
                   f"imports {e.imported} ({names[stage_of(e.imported, stages)]})")
    return out


def too_long(root: Path, max_lines: int = MAX_LINES) -> list[str]:
    """One line per module over ``max_lines`` lines that does not say near its top why it stays whole."""
    out = []
    for module, path in sorted(module_files(root).items()):
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) <= max_lines:
            continue
        reason = next((line.strip()[len(REASON_MARK):].strip() for line in lines[:REASON_WITHIN]
                       if line.strip().startswith(REASON_MARK)), "")
        if not reason:
            out.append(f"too long: {module} ({path.relative_to(root).as_posix()}) has {len(lines)} lines, over {max_lines}: split it by "
                       f"concern, or write why it stays whole in a line '{REASON_MARK} ...' within its first "
                       f"{REASON_WITHIN} lines")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout holding cube/ (default: this one)")
    args = parser.parse_args(argv)
    if not (args.root / "cube").is_dir():
        print(f"check_imports: {args.root} holds no cube/ package", file=sys.stderr)
        return 2
    found = problems(args.root) + too_long(args.root)
    for line in found:
        print(line)
    n = len(module_files(args.root))
    if found:
        print(f"{len(found)} problem(s) in {n} modules", file=sys.stderr)
        return 1
    print(f"imports follow the flow: {n} modules, 0 circles, 0 imports of a later stage, none over {MAX_LINES} "
          "lines without a reason"
          + (f" ({len(ALLOWED)} allowed: {', '.join(' -> '.join(a) for a in sorted(ALLOWED))})" if ALLOWED else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
