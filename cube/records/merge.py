"""Joining the record stores of a sharded run (``cube run --shard K/N``) into one store.

Each shard process writes a records store (``cube.records.store``): ``DIR/<model>/<job>.parquet``
files listed with their sha256 in ``DIR/MANIFEST.json``. Job file names are fixed by (kind, cell,
chunk), so the processes of one run never write the same name and a merge is a union of files.
A name found twice must therefore have the same sha256 (a shard re-run, or the merge re-run):
a different one means two different runs were mixed, and the merge refuses by name before
writing anything. Every input file is checked against its own manifest first, so a file changed
or half-written after its run is refused, not copied. Run logs (``runlog.jsonl``) are
concatenated, each line once.

The output may be one of the inputs (merge the others into it); re-running a merge is a no-op.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cube.atomic import atomic_write_bytes, atomic_write_text
from cube.checksums import sha256_file
from cube.files import read_text
from cube.errors import RecordsError
from cube.records.schema import RUNLOG_NAME, SCHEMA_VERSION
from cube.records.store import MANIFEST_NAME, config_differences, read_manifest

RUNLOG = RUNLOG_NAME


@dataclass
class MergePlan:
    copies: dict[str, Path] = field(default_factory=dict)  # shard name (model/file) -> source file
    identical: int = 0  # shards found more than once with the same sha256
    manifest: dict[str, Any] = field(default_factory=dict)  # the output's manifest after the merge
    runlogs: dict[str, list[str]] = field(default_factory=dict)  # model -> merged run-log lines


def _checked_manifest(store: Path) -> dict[str, Any]:
    """A store's manifest, after checking that every listed file is there with its sha256."""
    manifest = read_manifest(store)
    for name, entry in sorted(manifest["files"].items()):
        path = store / name
        if not path.is_file():
            raise RecordsError(f"{path}: listed in {store / MANIFEST_NAME} but missing (resume that run first)")
        if sha256_file(path) != entry["sha256"]:
            raise RecordsError(f"{path}: sha256 does not match {store / MANIFEST_NAME} (changed after writing)")
    return manifest


def _merged_metadata(into: dict[str, Any], other: dict[str, Any], where: Path) -> None:
    for key, value in other.items():
        if key in into and into[key] != value:
            raise RecordsError(f"{where / MANIFEST_NAME}: metadata {key!r} is {value!r}, another input has {into[key]!r}")
        into[key] = value


def plan_merge(out: Path, sources: Sequence[Path]) -> MergePlan:
    """Every shard to copy and the output's new manifest, checked for conflicts; nothing written."""
    if not sources:
        raise RecordsError("merge needs at least one input folder")
    for src in sources:
        if not src.is_dir():
            raise RecordsError(f"merge input {src} is not a folder")
    if out.exists() and not out.is_dir():
        raise RecordsError(f"merge output {out} is not a folder")
    stores = [out] if (out / MANIFEST_NAME).exists() else []
    stores += [s for s in sources if s.resolve() != out.resolve()]
    plan = MergePlan(manifest={"schema_version": SCHEMA_VERSION, "synthetic": None, "metadata": {}, "files": {},
                               "cells": {}})
    first_seen: dict[str, Path] = {}
    for store in stores:
        manifest = _checked_manifest(store)
        synthetic = bool(manifest.get("synthetic"))
        if plan.manifest["synthetic"] is None:
            plan.manifest["synthetic"] = synthetic
        elif plan.manifest["synthetic"] != synthetic:
            raise RecordsError(f"{store / MANIFEST_NAME}: cannot merge simulated records with real ones")
        _merged_metadata(plan.manifest["metadata"], manifest.get("metadata") or {}, store)
        if manifest.get("incomplete"):  # a copy of an incomplete store (a bundle's records) stays marked
            plan.manifest["incomplete"] = sorted({*plan.manifest.get("incomplete", []), *manifest["incomplete"]})
        for cell, config in sorted((manifest.get("cells") or {}).items()):
            known = plan.manifest["cells"].setdefault(cell, config)
            if known != config:  # the shards' sha256s may agree so far, their configurations do not
                raise RecordsError(f"cell {cell} was written under different configurations in {store} and "
                                   f"another input: {'; '.join(config_differences(known, config))}")
        for name, entry in sorted(manifest["files"].items()):
            known = plan.manifest["files"].get(name)
            if known is None:
                plan.manifest["files"][name] = entry
                first_seen[name] = store / name
                if store != out:
                    plan.copies[name] = store / name
            elif known["sha256"] == entry["sha256"]:
                plan.identical += 1
            else:
                raise RecordsError(
                    f"shard {name} differs between {first_seen[name]} and {store / name}: "
                    "these folders come from different runs"
                )
    plan.manifest["synthetic"] = bool(plan.manifest["synthetic"])
    for model in sorted({name.split("/", 1)[0] for name in plan.manifest["files"]}):
        lines: list[str] = []
        for store in [out, *sources]:
            log = store / model / RUNLOG
            if log.is_file():
                for line in read_text(log, RecordsError, "run log").splitlines():
                    if line.strip() and line not in lines:
                        lines.append(line)
        if lines:
            plan.runlogs[model] = lines
    return plan


def merge_runs(out: Path, sources: Sequence[Path], progress: bool = True) -> MergePlan:
    """Copy every shard of ``sources`` into the store ``out``, after checking them all.

    Shards are written first (each atomically), then the manifest: a merge killed half-way
    leaves shards the manifest does not list, which the reader refuses by name, and running the
    same merge again completes it. The merge holds the output store's writer lock (a ``cube run``
    into it would otherwise lose its manifest entries to the merge's manifest), planned again
    under the lock so that nothing written meanwhile is overlooked.
    """
    from tqdm import tqdm

    from cube.records.store import writer_lock

    plan_merge(out, sources)  # every input checked before the output folder is touched
    with writer_lock(out):
        plan = plan_merge(out, sources)
        for name, src in tqdm(sorted(plan.copies.items()), desc="merge", unit="shard", disable=not progress):
            atomic_write_bytes(out / name, src.read_bytes())
        for model, lines in plan.runlogs.items():
            atomic_write_text(out / model / RUNLOG, "\n".join(lines) + "\n")
        atomic_write_text(out / MANIFEST_NAME, json.dumps(plan.manifest, indent=1, sort_keys=True) + "\n")
    return plan


__all__ = ["MergePlan", "merge_runs", "plan_merge"]
