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

Without a plan (``cube merge --plan``), the run logs say which ``--shard K/N`` each store holds:
for each model and run configuration (its ``config_hash``), every K of one N must be there once.
Two stores of shard 0/2 alone merged with rc 0 and no word, and only a later reader found the
gap; now a missing K, a K in two stores (different runs: no run-log line in common) and two
different N are refused by name before anything is written, and ``allow_incomplete`` writes a
merge that lacks some K marked incomplete (its manifest's ``incomplete`` lines, which every
reader repeats and refuses without ``--allow-incomplete``).
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


@dataclass(frozen=True)
class ShardRun:
    """One ``cube run --shard K/N`` process as a store's run log records it."""

    model: str
    config_hash: str | None  # None in run logs that predate it: all such runs of a model are one
    index: int  # K
    count: int  # N
    store: Path
    line: str  # the run-log line itself: the same line in two stores is one run copied (a merge's output)


def _shard_runs(store: Path) -> list[ShardRun]:
    runs = []
    for log in sorted(store.glob(f"*/{RUNLOG}")):
        for line in read_text(log, RecordsError, "run log").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # not ours to judge here: the merge copies run logs as they are
            index, _, count = str(entry.get("shard") or "").partition("/") if isinstance(entry, dict) else ("", "", "")
            if index.isdigit() and count.isdigit():
                runs.append(ShardRun(str(entry.get("model") or log.parent.name), entry.get("config_hash"),
                                     int(index), int(count), store, line))
    return runs


def shard_gaps(stores: Sequence[Path]) -> list[str]:
    """One line per shard K/N that the stores' run logs promise and none holds (the merge's marks);
    a K held by two different runs, or two N for one run, raises a RecordsError naming them."""
    by_run: dict[tuple[str, str | None], list[ShardRun]] = {}
    for store in stores:
        for run in _shard_runs(store):
            by_run.setdefault((run.model, run.config_hash), []).append(run)
    gaps = []
    for (model, config_hash), runs in sorted(by_run.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        what = f"{model}" + (f" (run {config_hash[:12]})" if config_hash else "")
        counts = sorted({r.count for r in runs})
        if len(counts) > 1:
            where = "; ".join(f"{r.index}/{r.count} in {r.store}" for r in sorted(runs, key=lambda r: (r.count, r.index)))
            raise RecordsError(f"{what}: shards of --shard K/N with different N ({', '.join(map(str, counts))}): "
                               f"{where}; merge the stores of one N")
        (count,) = counts
        for index in range(count):
            holders: dict[Path, set[str]] = {}
            for r in runs:
                if r.index == index:
                    holders.setdefault(r.store, set()).add(r.line)
            stores_of = list(holders)
            for i, a in enumerate(stores_of):
                for b in stores_of[i + 1:]:
                    if not holders[a] & holders[b]:
                        raise RecordsError(f"{what}: shard {index}/{count} is in both {a} and {b} (two runs of "
                                           "one shard); merge one of them")
        missing = sorted(set(range(count)) - {r.index for r in runs})
        if missing:
            gaps.append(f"{what}: shard{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(f'{k}/{count}' for k in missing)} missing from the merge")
    return gaps


def plan_merge(out: Path, sources: Sequence[Path], check_shards: bool = True,
               allow_incomplete: bool = False) -> MergePlan:
    """Every shard to copy and the output's new manifest, checked for conflicts; nothing written.

    ``check_shards``: every ``--shard K/N`` the run logs promise must be merged once (``shard_gaps``;
    a ``cube plan`` merge checks its planned shards instead); with ``allow_incomplete`` a missing K
    is a line of the manifest's ``incomplete`` mark, not an error."""
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
    if check_shards:
        gaps = shard_gaps(list(dict.fromkeys(stores)))
        if gaps and not allow_incomplete:
            more = f" (and {len(gaps) - 1} more)" if len(gaps) > 1 else ""
            raise RecordsError(f"{gaps[0]}{more}; add the missing shard's `cube run --out` folder, or merge with "
                               "--allow-incomplete for a store marked incomplete")
        if gaps:
            plan.manifest["incomplete"] = sorted({*plan.manifest.get("incomplete", []),
                                                  *(f"{gap} (cube merge --allow-incomplete)" for gap in gaps)})
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


def merge_runs(out: Path, sources: Sequence[Path], progress: bool = True, check_shards: bool = True,
               allow_incomplete: bool = False) -> MergePlan:
    """Copy every shard of ``sources`` into the store ``out``, after checking them all.

    Shards are written first (each atomically), then the manifest: a merge killed half-way
    leaves shards the manifest does not list, which the reader refuses by name, and running the
    same merge again completes it. The merge holds the output store's writer lock (a ``cube run``
    into it would otherwise lose its manifest entries to the merge's manifest), planned again
    under the lock so that nothing written meanwhile is overlooked.
    """
    from tqdm import tqdm

    from cube.records.store import writer_lock

    options = {"check_shards": check_shards, "allow_incomplete": allow_incomplete}
    plan_merge(out, sources, **options)  # every input checked before the output folder is touched
    with writer_lock(out):
        plan = plan_merge(out, sources, **options)
        for name, src in tqdm(sorted(plan.copies.items()), desc="merge", unit="shard", disable=not progress):
            atomic_write_bytes(out / name, src.read_bytes())
        for model, lines in plan.runlogs.items():
            atomic_write_text(out / model / RUNLOG, "\n".join(lines) + "\n")
        atomic_write_text(out / MANIFEST_NAME, json.dumps(plan.manifest, indent=1, sort_keys=True) + "\n")
    return plan


__all__ = ["MergePlan", "ShardRun", "merge_runs", "plan_merge", "shard_gaps"]
