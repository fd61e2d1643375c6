"""The stores a report is made of: each checked for completeness, then read with its noise marks.

Every store's manifest is read, and an incomplete cell refused, before any record is
(``check_stores``); then each store's records are read with the within-noise marks ``cube
rescore`` makes (``load_stores``). A model name two stores share (cube's run and an import of
the same model) is kept by the first store and suffixed with the harness in the others, so that
each cell stays one store's.

Why a module of its own: reading the stores is the one step of the report that touches disk
records; every section is computed from what it returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cube.errors import ConfigError


@dataclass(frozen=True)
class LoadedStore:
    """One store as the report reads it: its records (models renamed where two stores share one)."""

    path: Path
    harness: str
    manifest: dict[str, Any]
    table: pa.Table
    renamed: dict[str, str]  # the report's model name -> the store's


def harness_of(manifest: Mapping[str, Any]) -> str:
    """The harness that wrote a store: an importer's label, else cube."""
    from cube.importers.registry import importer_of

    importer = importer_of(manifest.get("metadata") or {})
    return importer.label if importer is not None else "cube"


def check_stores(paths: Sequence[str | Path], allow_incomplete: bool) -> list[str]:
    """Every store's manifest read, and one line per incomplete cell; refused without
    ``allow_incomplete`` before any record is read."""
    from cube.records.store import read_manifest, unfinished_cells

    if not paths:
        raise ConfigError("cube report needs at least one store (a folder holding MANIFEST.json)")
    incomplete = []
    seen = set()
    for path in paths:
        resolved = Path(path).resolve()
        if resolved in seen:
            raise ConfigError(f"{path}: given twice; give each store once")
        seen.add(resolved)
        if not Path(path).is_dir():
            raise ConfigError(f"{path}: no such store (a folder holding MANIFEST.json, written by cube run, "
                              "cube merge or cube import)")
        for line in unfinished_cells(read_manifest(path)):
            incomplete.append(f"{path}: {line}")
    if incomplete and not allow_incomplete:
        more = f" (and {len(incomplete) - 1} more)" if len(incomplete) > 1 else ""
        raise ConfigError(f"incomplete store: {incomplete[0]}{more}; finish the run (re-run its command: it resumes) "
                          "or pass --allow-incomplete for a report marked incomplete on every page")
    return incomplete


def load_stores(paths: Sequence[str | Path], allow_incomplete: bool, progress: bool = False) -> list[LoadedStore]:
    """Each store's records (with ``probs`` and the within-noise marks ``cube rescore`` makes).

    A model name two stores share (cube's run and an import of the same model) is kept by the
    first store and suffixed with the harness in the others, so that each cell stays one store's."""
    from cube.analysis.noise import cell_dtypes, mark_within_noise
    from cube.records.store import read_manifest, read_records

    loaded: list[LoadedStore] = []
    taken: set[str] = set()
    for path in paths:
        manifest = read_manifest(path)
        harness = harness_of(manifest)
        table = read_records(path, verify=True, columns=("probs",), allow_incomplete=allow_incomplete,
                             progress=progress)
        table = mark_within_noise(table, cell_dtypes(manifest))
        models = sorted(set(pc.unique(table.column("model")).to_pylist()))
        renamed = {}
        for model in models:
            name = model if model not in taken else f"{model} ({harness}, {Path(path).name})"
            renamed[name] = model
            taken.add(name)
        if any(k != v for k, v in renamed.items()):
            back = {v: k for k, v in renamed.items()}
            field = table.schema.field("model")  # its type and nullability kept: the sections join stores' tables
            column = pa.array([back[m] for m in table.column("model").to_pylist()], field.type)
            table = table.set_column(table.column_names.index("model"), field, column)
        loaded.append(LoadedStore(Path(path), harness, manifest, table, renamed))
    return loaded


__all__ = ["LoadedStore", "check_stores", "harness_of", "load_stores"]
