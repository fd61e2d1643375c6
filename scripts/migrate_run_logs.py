"""Give each old run-log line of a records store the ``files`` list it lacks, once (issue 25, circle 1).

A run-log line vouches for the shards its run left (``cube.records.provenance.logged_files``), so a
cell whose shards later go missing is reported. Lines written before runs logged their ``files``
were re-planned from their logged scorers, cells, item count and shard size on every store read,
which made every read of ``cube.records`` import the harness's planner. This script does that
re-planning once and writes the result into the line, so that ``records/`` no longer needs it:

    python scripts/migrate_run_logs.py data/records data/sample

Every other byte of a line stays as it was (the list is inserted before the line's closing brace,
and the line is re-parsed to check that nothing else changed); lines that already list their
files, or are not a harness run's (no item count or scorers: they vouch for nothing), are kept
as they are; a line whose plan disagrees with the jobs it says it ran and skipped is refused, and
nothing of that log is written. Run logs are not in a store's manifest (which lists its record
shards and cell configurations), so no sha256 changes there. Running it again changes nothing.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from cube.atomic import atomic_write_text
from cube.errors import RecordsError
from cube.files import read_text
from cube.records.schema import RUNLOG_NAME

DEFAULT_SHARD_SIZE = 50  # what `cube run` used when these lines were written and logged no --shard-size


def planned_files(entry: dict) -> list[str] | None:
    """The shard files an old line's run planned, or None for a line that vouches for nothing.

    Re-planned as the runner plans (``cube.harness.run_spec.plan_jobs``) from the logged scorers,
    cells, item count, shard size (the logged command's ``--shard-size``, else the default) and
    shard, and checked against the number of jobs the line says it ran and skipped.
    """
    from cube.harness.run_spec import RunSpec, plan_jobs
    from cube.protocol.label_sets import LabelSet
    from cube.protocol.prompts import Cell
    from cube.records.provenance import _cell_parts as cell_parts  # the logged cell key's one parser

    from cube.records.store.manifest import MAX_CELL_ITEMS

    model = entry.get("model")
    if not isinstance(entry.get("n_items"), int) or not entry.get("scorers"):
        return None
    if not 0 <= entry["n_items"] <= MAX_CELL_ITEMS:  # 10**12 built a tuple of that many before
        raise RecordsError(f"n_items {entry['n_items']} is not from 0 to {MAX_CELL_ITEMS:,}")
    if not isinstance(entry["scorers"], list) or not isinstance(entry.get("cells", []), list):
        raise RecordsError("'scorers' and 'cells' are not lists")
    command = shlex.split(str(entry.get("command") or ""))
    size = int(command[command.index("--shard-size") + 1]) if "--shard-size" in command else DEFAULT_SHARD_SIZE
    k, n = (int(x) for x in str(entry.get("shard", "0/1")).split("/"))
    cells = tuple(Cell(LabelSet(ls, ("A", "B")), ctx, shots, order)
                  for ls, ctx, shots, order in (cell_parts(c, model) for c in entry.get("cells", [])))
    spec = RunSpec(model=str(model), items=(None,) * entry["n_items"], cells=cells,
                   scorers=tuple(entry["scorers"]), shard_size=size)
    jobs = plan_jobs(replace(spec, shard=(k, n)))
    if len(jobs) != int(entry.get("jobs_run") or 0) + int(entry.get("jobs_skipped") or 0):
        raise RecordsError(f"run log of {model!r}: a line's {len(jobs)} planned shards do not match the "
                           "jobs it ran and skipped")
    return [f"{model}/{job.filename}" for job in jobs]


def migrate_line(line: str) -> str:
    """``line`` (one JSON object, no newline) with its ``files`` list added, if it lacks one."""
    entry = json.loads(line)
    if not isinstance(entry, dict):
        raise RecordsError(f"a {type(entry).__name__}, not a JSON object")
    if "files" in entry:
        return line
    files = planned_files(entry)
    if files is None:
        return line
    body = line.rstrip()
    if not body.endswith("}"):
        raise RecordsError(f"run log line of {entry.get('model')!r} does not end in '}}'")
    migrated = body[:-1] + ', "files": ' + json.dumps(files, ensure_ascii=False) + "}" + line[len(body):]
    if json.loads(migrated) != {**entry, "files": files}:
        raise RecordsError(f"run log line of {entry.get('model')!r}: adding its files changed other fields")
    return migrated


def migrate_store(store: Path) -> int:
    """Migrate every model's run log in ``store`` (each written via temp file and rename); lines changed."""
    changed = 0
    for path in sorted(store.glob(f"*/{RUNLOG_NAME}")):
        text = read_text(path, RecordsError, "run log")  # a regular file, bounded
        lines = text.split("\n")  # the last element is what follows the final newline ("" normally)
        migrated = []
        for number, line in enumerate(lines, start=1):
            try:
                migrated.append(migrate_line(line) if line.strip() else line)
            except (RecordsError, ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                # one line naming the line, for any damage: nothing of this log is written
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise RecordsError(f"{path}:{number}: not a run-log line this script can migrate ({reason}); "
                                   "nothing of this log was written") from None
        n = sum(a != b for a, b in zip(lines, migrated))
        if n:
            atomic_write_text(path, "\n".join(migrated))
            print(f"{path}: {n} of {sum(1 for x in lines if x.strip())} lines given their files")
        changed += n
    return changed


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        for folder in sys.argv[1:]:
            migrate_store(Path(folder))
    except RecordsError as exc:
        sys.exit(f"migrate_run_logs: {exc}")
