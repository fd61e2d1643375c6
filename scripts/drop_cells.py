"""Drop whole cells of one model from a records store: their shards, manifest entries and run-log lines.

Used once per re-sampled subset (session 4: the chain-of-thought and 5-shot subsets rerun with
``--within 600``): drop the old cell here, then ``cube merge STORE STORE NEW`` adds the new one.
A run-log line is dropped only when every shard it wrote belongs to a dropped cell, and refused
(nothing written) when it wrote some of both.

    python scripts/drop_cells.py data/records smollm2-135m-instruct label--L1_halfwidth__zh_cue__5shot__original
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cube.atomic import atomic_write_text
from cube.errors import RecordsError
from cube.records.provenance import logged_files
from cube.records.schema import RUNLOG_NAME


def drop_cells(store: Path, model: str, cells: list[str]) -> None:
    manifest_path = store / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    doomed = sorted(name for name in manifest["files"]
                    if name.startswith(f"{model}/") and name.rsplit("--", 1)[0].split("/", 1)[1] in cells)
    found = {name.rsplit("--", 1)[0].split("/", 1)[1] for name in doomed}
    if found != set(cells):
        raise RecordsError(f"{model}: no shards of cell(s) {sorted(set(cells) - found)} in {store}")
    log_path = store / model / RUNLOG_NAME
    kept_lines = []
    for line in log_path.read_text(encoding="utf-8").splitlines():
        files = set(logged_files(json.loads(line))) if line.strip() else set()
        ours = files & set(doomed)
        if ours and ours != files:
            raise RecordsError(f"{log_path}: a run wrote shards of dropped and kept cells alike")
        if not ours:
            kept_lines.append(line)
    for name in doomed:
        del manifest["files"][name]
    for cell in cells:
        manifest.get("cells", {}).pop(f"{model}/{cell}", None)
    atomic_write_text(log_path, "".join(line + "\n" for line in kept_lines))
    atomic_write_text(manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    for name in doomed:
        (store / name).unlink()
    print(f"{model}: dropped {len(doomed)} shards of {', '.join(cells)}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    drop_cells(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
