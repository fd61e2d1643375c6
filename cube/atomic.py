"""Writing files so that a crash or a kill never leaves a half-written one behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = 0o644,
                       before_rename: Callable[[], None] | None = None) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``.

    ``before_rename`` runs once the data is safely on disk but before it becomes visible under
    ``path``: a records store lists a shard in its manifest there, so a shard never appears unlisted.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str | Path, text: str, mode: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)
