"""The provenance section: what wrote each store (its run logs' models, sources and commands, or
an import's manifest), and the digest of the cube sources that built the report.

Why a module of its own: the one section about the records' origin rather than their numbers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from cube.report.model import StoreProvenance
from cube.report.stores import LoadedStore


def provenance_section(stores: Sequence[LoadedStore]) -> list[StoreProvenance]:
    from cube.records.provenance import read_run_logs, run_command

    out = []
    for store in stores:
        models, commands = [], []
        for entry in read_run_logs(store.path):
            chat = entry.get("chat_template") if isinstance(entry.get("chat_template"), dict) else {}
            models.append({k: str(v) for k, v in {
                "model": entry.get("model"), "identity (sha256)": entry.get("model_sha256"),
                "source": entry.get("model_source"), "backend": entry.get("backend"),
                "server": entry.get("server_url"), "dtype": entry.get("dtype"), "device": entry.get("device"),
                "chat template sha256": chat.get("sha256"), "cube": (entry.get("versions") or {}).get("cube"),
                "configuration": entry.get("config_hash")}.items() if v is not None})
            commands.append(run_command(entry, out=str(store.path)))
        if not models:  # an import: the records' models, and what its manifest says of the run
            meta = store.manifest.get("metadata") or {}
            models = [{"model": m, "imported from": store.harness, "source": str(meta.get("source"))}
                      for m in sorted(set(store.renamed.values()))]
        out.append(StoreProvenance(str(store.path), store.harness, str(store.manifest.get("schema_version")),
                                   models, list(dict.fromkeys(commands))))
    return out


def code_digest() -> str:
    """sha256 over cube's own Python sources (path and bytes, sorted): the code that built the report."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


__all__ = ["code_digest", "provenance_section"]
