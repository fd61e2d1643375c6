"""File checksums: every verified download, cache hit, record shard and bundle file uses this one."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks so large GGUF files never sit in memory."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
