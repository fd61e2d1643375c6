"""The store's manifest and its locks: reading it, and holding it while a writer updates it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:  # POSIX: lock the manifest while updating it; elsewhere one writer at a time
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

from cube.atomic import atomic_write_text
from cube.errors import RecordsError, StoreBusy
from cube.files import read_json
from cube.records.schema import SCHEMA_VERSION
from cube.records.store.layout import (
    MANIFEST_LOCK,
    MANIFEST_NAME,
    MODEL_NAME,
    SHARD_FILE,
    WRITER_LOCK,
)


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The store's manifest, checked for shape and schema version."""
    if Path(directory).exists() and not Path(directory).is_dir():
        raise RecordsError(f"{directory} is not a folder; a records store is a folder holding {MANIFEST_NAME}")
    path = Path(directory) / MANIFEST_NAME
    if not path.exists():
        raise RecordsError(f"{path}: no manifest; not a records store")
    manifest = read_json(path, RecordsError, "manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise RecordsError(f"{path}: manifest has no 'files' object")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise RecordsError(
            f"{path}: schema_version {version!r} is not {SCHEMA_VERSION!r}; "
            "these records need the cube version that wrote them"
        )
    for name, entry in manifest["files"].items():
        _check_entry_name(name, path)
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise RecordsError(f"{path}: file entry {name!r} has no sha256")
    cells = manifest.get("cells", {})
    if not isinstance(cells, dict) or not all(isinstance(c, dict) for c in cells.values()):
        raise RecordsError(f"{path}: 'cells' must map each cell to its configuration object")
    incomplete = manifest.get("incomplete", [])
    if not isinstance(incomplete, list) or not all(isinstance(line, str) for line in incomplete):
        raise RecordsError(f"{path}: 'incomplete' must be a list of lines (the cells its source lacked)")
    return manifest


def _check_entry_name(name: str, where: Path) -> None:
    """A listed file is ``<model>/<file>.parquet`` inside the store: never ``..``, absolute, hidden."""
    parts = name.split("/")
    if len(parts) != 2 or not MODEL_NAME.match(parts[0]) or not SHARD_FILE.match(parts[1]):
        raise RecordsError(
            f"{where}: file entry {name!r} is not '<model>/<file>.parquet' (it would point outside the store)"
        )


def _empty_manifest() -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "synthetic": False, "metadata": {}, "files": {}}

@contextmanager
def manifest_lock(directory: Path) -> Iterator[None]:
    """Serialise manifest updates between processes (e.g. harness shards run in parallel)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / MANIFEST_LOCK, "a+") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh, fcntl.LOCK_UN)

def create_store(directory: str | Path) -> None:
    """An empty store (a manifest listing nothing) where there is none yet, so that a run killed
    before its first shard leaves a folder ``cube run`` recognises as its own."""
    directory = Path(directory)
    with manifest_lock(directory):
        if not (directory / MANIFEST_NAME).exists():
            atomic_write_text(directory / MANIFEST_NAME, json.dumps(_empty_manifest(), indent=1, sort_keys=True) + "\n")


@contextmanager
def writer_lock(directory: str | Path) -> Iterator[None]:
    """Hold the store's writer lock: one writing run per store, for the whole run.

    Why: shard writes are atomic each, but two runs of one cell into one store interleave their
    manifest entries and renames (A lists, B lists and renames, A renames over B), and a second
    run's start-up cleanup would delete the first one's temp files in flight. An exclusive
    ``flock`` on ``DIR/.writer.lock``, taken without waiting, makes the second run refuse at once
    with the holder's pid (which the holder writes into the file). The kernel drops the lock when
    its holder dies, however it dies, so a killed run never leaves a store locked. Re-entrant
    within a process (``cube run`` holds it from its checks to its run log, and ``runner.run``
    takes it again). Parallel ``cube run --shard K/N`` processes write one store each and are
    joined by ``cube merge``.
    """
    directory = Path(directory)
    key = str(directory.resolve())
    if key in _WRITER_LOCKS:
        _WRITER_LOCKS[key] += 1
        try:
            yield
        finally:
            _WRITER_LOCKS[key] -= 1
        return
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                raise StoreBusy(
                    f"{directory}: another process (pid {holder if holder.isdigit() else 'unknown'}) is writing "
                    f"to this store (it holds {WRITER_LOCK}); wait for it to finish, or write to another --out"
                ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _WRITER_LOCKS[key] = 1
        try:
            yield
        finally:
            del _WRITER_LOCKS[key]
    finally:
        os.close(fd)  # closing the descriptor releases the flock


_WRITER_LOCKS: dict[str, int] = {}  # store -> depth of this process's writer_lock on it
