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
from cube.records.schema import SCHEMAS, SCHEMA_VERSION
from cube.records.store.layout import (
    MANIFEST_LOCK,
    MANIFEST_NAME,
    MODEL_NAME,
    SHARD_FILE,
    WRITER_LOCK,
)


# The most items one cell may promise: C-Eval and CMMLU hold about 14,000 and 11,600 questions.
MAX_CELL_ITEMS = 10_000_000


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The store's manifest, checked for shape and schema version."""
    if Path(directory).exists() and not Path(directory).is_dir():
        raise RecordsError(f"{directory} is not a folder; a records store is a folder holding {MANIFEST_NAME}")
    path = Path(directory) / MANIFEST_NAME
    if not path.exists():
        raise RecordsError(f"{path}: no manifest; not a records store")
    manifest = read_json(path, RecordsError, "manifest")
    if isinstance(manifest, dict) and "bundle_schema" in manifest and "files" not in manifest:
        raise RecordsError(f"{directory} is a release bundle, not a records store: its records are "
                           f"{Path(directory) / 'records'} (check the bundle with `cube release verify {directory}`)")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise RecordsError(f"{path}: manifest has no 'files' object")
    version = manifest.get("schema_version")
    if version not in SCHEMAS:  # an older store's shards are read forward
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
    for key, config in cells.items():
        # every reader plans a cell's shards from these two: n_items 10**12 planned 10**12 shards
        for name, low in (("n_items", 0), ("shard_size", 1)):
            value = config.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not low <= value <= MAX_CELL_ITEMS):
                raise RecordsError(f"{path}: cell {str(key)[:80]!r} has {name} {str(value)[:24]}, not a whole "
                                   f"number from {low} to {MAX_CELL_ITEMS:,} (the manifest was edited or damaged)")
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
    """Serialise manifest updates between processes (e.g. harness shards run in parallel).

    The lock file is opened without following a link (``O_NOFOLLOW``): in a store received from
    someone else, ``.manifest.lock`` may be a symlink to any file of the user's.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / MANIFEST_LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o644)
    except OSError as exc:
        raise RecordsError(f"{path}: cannot open the store's lock file ({_lock_reason(exc)})") from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _lock_reason(exc: OSError) -> str:
    import errno

    if exc.errno == errno.ELOOP:
        return "it is a symbolic link, which cube never writes through; remove the link"
    return exc.strerror or str(exc)

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
    ``flock`` on the store's folder itself, taken without waiting, makes the second run refuse at
    once. The lock is on the folder, not on a file in it: a ``.writer.lock`` that a store received
    from someone else holds as a symlink was opened through the link and truncated the user's
    file to write a pid into it, and deleting the file during a run let a second writer lock a new
    one. The holder's pid, for the refusal's message, is written to ``DIR/.writer.lock`` by
    renaming a temp file over it (a rename replaces a link, never writes through it) and read
    without following a link. The kernel drops the lock when its holder dies, however it dies, so
    a killed run never leaves a store locked. Re-entrant within a process (``cube run`` holds it
    from its checks to its run log, and ``runner.run`` takes it again). Parallel ``cube run
    --shard K/N`` processes write one store each and are joined by ``cube merge``.
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
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _lock_holder(directory / WRITER_LOCK)
                raise StoreBusy(
                    f"{directory}: another process (pid {holder}) is writing to this store (it holds the "
                    "store's writer lock); wait for it to finish, or write to another --out"
                ) from None
        atomic_write_text(directory / WRITER_LOCK, f"{os.getpid()}\n")
        _WRITER_LOCKS[key] = 1
        try:
            yield
        finally:
            del _WRITER_LOCKS[key]
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _lock_holder(path: Path) -> str:
    """The pid the lock's holder wrote, read without following a link; 'unknown' if none."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return "unknown"
    try:
        text = os.read(fd, 32).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    finally:
        os.close(fd)
    return text if text.isdigit() else "unknown"


_WRITER_LOCKS: dict[str, int] = {}  # store -> depth of this process's writer_lock on it
