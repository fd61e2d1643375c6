"""Writing files so that a crash or a kill never leaves a half-written one behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from cube.errors import WriteError


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = 0o644,
                       before_rename: Callable[[], None] | None = None) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``.

    ``before_rename`` runs once the data is safely on disk but before it becomes visible under
    ``path``: a records store lists a shard in its manifest there, so a shard never appears unlisted.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except OSError as exc:  # a full disk, a read-only folder, a folder in the way: one line, no traceback
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str | Path, text: str, mode: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def temp_files(path: str | Path) -> list[Path]:
    """The temp files that killed writes of ``path`` left behind (never visible under ``path``)."""
    import glob

    path = Path(path)
    return sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))
