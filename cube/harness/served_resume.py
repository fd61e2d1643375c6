"""A resume through a server whose options changed: refused naming the option and both values.

A served model's identity (``RunSettings.model_sha256``) digests the server's URL, the model id and
the ``--revision`` the user declares; a resume with another ``--revision`` was refused by the
generic cell check as ``model_sha256 3f2a... -> 9c1b...``, a digest no user can read back to the
flag. The run log of the run that wrote the cell names each value, so the refusal can say
``--revision v1 -> v2``.
"""

from __future__ import annotations

import json
from pathlib import Path

from cube.errors import ResumeMismatch

# RunSettings' server fields that are options of `cube run --backend openai` (the model id is
# --model, which names the cells themselves: another id writes other cells).
SERVED_OPTIONS = (("served_revision", "--revision"), ("server_url", "--base-url"))


def check_served_identity(out: Path, spec) -> None:
    """Refuse, naming the option and both values, a served run whose server options differ from
    those of the run that wrote this model's cells in ``out``; silent where they agree, where the
    model is loaded here, or where no finished run logged them (the cell check then refuses)."""
    from cube.records.schema import RUNLOG_NAME
    from cube.records.store import MANIFEST_NAME, read_manifest

    settings = spec.settings
    if settings.server_url is None or not (out / MANIFEST_NAME).exists():
        return
    manifest = read_manifest(out)
    listed = manifest.get("files") or {}
    written = {config.get("model_sha256") for key, config in (manifest.get("cells") or {}).items()
               if key.startswith(f"{spec.model}/") and any(name.startswith(f"{key}--") for name in listed)}
    written.discard(settings.model_sha256)
    log = out / spec.model / RUNLOG_NAME
    if not written or not log.is_file():
        return
    for line in reversed(log.read_text(encoding="utf-8").splitlines()):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("model_sha256") not in written:
            continue
        for field, option in SERVED_OPTIONS:
            before, now = entry.get(field), getattr(settings, field)
            if before != now:
                shown = "(not given)" if before is None else before
                raise ResumeMismatch(
                    f"{out}: {option} {shown} -> {'(not given)' if now is None else now}: this store's "
                    f"{spec.model} cells were scored with {option} {shown}; resume with "
                    + (f"{option} {before}" if before is not None else f"no {option}") + ", or write to a new --out")
        return
