"""The manifest of a benchmark folder that ``cube data fetch`` installed: its name and its reader.

Two sides read it: the fetch (``cube.protocol.data``), which writes it and then parses the new
folder with the loaders, and the loaders (``cube.protocol.items``), which check every CSV against
it on each load. Held here, below both, the loaders need not import the fetch that imports them.
"""

from __future__ import annotations

import json
from pathlib import Path

from cube.errors import ItemsError

MANIFEST_NAME = "MANIFEST.json"


def installed_manifest(root: Path) -> dict | None:
    """The manifest of a folder ``cube data fetch`` installed; None for any other folder."""
    path = Path(root) / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        files = manifest["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not an object")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ItemsError(f"{path}: unreadable data manifest ({exc})") from None
    except RecursionError:  # JSON nested 200,000 deep
        raise ItemsError(f"{path}: unreadable data manifest (nested too deep to parse)") from None
    return manifest


def file_sha256s(root: Path) -> dict[str, str] | None:
    """What the loaders check each CSV against: the install's manifest, keyed by relative path."""
    manifest = installed_manifest(root)
    return None if manifest is None else dict(manifest["files"])


__all__ = ["MANIFEST_NAME", "installed_manifest", "file_sha256s"]
