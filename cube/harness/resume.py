"""What a run into a store has left to do, and the store's refusals of a run that is not a resume.

A re-run with other arguments must not be taken for a resume: the store's manifest records, per
cell, everything that decides its records (``cube.harness.run_spec.cell_configs``), and a run
whose cells disagree is refused in one line naming the fields; a changed model file or benchmark
file is named as such (``check_model_files``, ``check_benchmark_file``). A resume re-checks each
shard it would skip (sha256, rows) and runs a broken one again (``resume_plan``). Stores written
before cells were recorded (the archive's older cells in ``data/records``) stay readable, but a
run into their models' folders is refused: it could not be checked, so it goes to a new
``--out`` and is joined with ``cube merge``.

Why a module of its own: all of it is decided from the store and the spec before a model loads
(``cube run`` plans the resume under the writer lock, then loads the model), and none of it
scores anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cube.atomic import temp_files
from cube.errors import RecordsError
from cube.harness.run_spec import STORE_FIELDS, Job, RunSpec, cell_configs, plan_jobs


@dataclass(frozen=True)
class ResumePlan:
    """What a run into a store has left to do, and why each listed shard it reruns is broken."""

    todo: list[Job]
    done: int
    broken: list[str]  # one line per listed shard that failed its check and is run again
    unfinished: frozenset[str] = frozenset()  # done shards (job filenames) no finished run's log lists


def finished_shards(out: Path, model: str) -> set[str]:
    """The shard files (job filenames) a finished run of ``model`` logged in ``out``.

    A killed run logs nothing, so a done shard missing here was written by a run that never
    finished: the call it was part of may have been cut short (``job_groups``). A log line that
    cannot be read vouches for nothing (the readers report a damaged log; here it only costs a
    chunk scored again)."""
    from cube.records.provenance import logged_files, read_run_logs

    try:
        entries = read_run_logs(out)
    except RecordsError:
        return set()
    names: set[str] = set()
    for entry in entries:
        if entry.get("model") != model:
            continue
        try:
            names.update(name.split("/", 1)[1] for name in logged_files(entry) if name.startswith(f"{model}/"))
        except RecordsError:
            continue
    return names


def resume_plan(spec: RunSpec, out: Path) -> ResumePlan:
    """The jobs left to run, after refusing a store written under another configuration.

    A job is done when the manifest lists its shard and the shard passes
    ``cube.records.store.shard_problem``: the file is there, its sha256 is the manifest's, and
    its rows are the manifest's and what the cell promises. Any other listed shard (a kill
    between the manifest entry and the rename, a truncated or edited file) is run again, and
    named in ``broken``. Costs one sha256 and one read with the reader's checks per listed shard
    of this run (about 3 ms a shard: 1.4 s for the 460 shards of ``data/records``, README).
    """
    from cube.records.store import MANIFEST_NAME, check_cells, read_manifest, rows_per_item, shard_problem

    from cube.harness.served_resume import check_served_identity

    configs = cell_configs(spec)
    check_model_files(out, spec)
    check_served_identity(out, spec)  # a changed --revision named as such, not as a digest
    check_benchmark_file(out, spec)
    check_cells(out, configs, STORE_FIELDS)
    listed = read_manifest(out)["files"] if (out / MANIFEST_NAME).exists() else {}
    jobs = plan_jobs(spec)
    todo, broken = [], []
    for job in jobs:
        name = f"{spec.model}/{job.filename}"
        if name not in listed:
            todo.append(job)
            continue
        config = configs[f"{spec.model}/{job.cell_name}"]
        per = rows_per_item(config)
        problem = shard_problem(out, name, listed[name], per * len(job.items) if per else None,
                                config.get("dtype") or None)
        if problem is not None:
            todo.append(job)
            broken.append(f"{out / name}: {problem}; running it again")
    pending = {job.filename for job in todo}
    logged = finished_shards(out, spec.model) if len(todo) < len(jobs) else set()
    unfinished = frozenset(j.filename for j in jobs if j.filename not in pending and j.filename not in logged)
    return ResumePlan(todo, len(jobs) - len(todo), broken, unfinished)


def check_model_files(out: Path, spec: RunSpec) -> None:
    """Refuse a resume after a file the model's load reads changed, in one line naming the file.

    The cell configurations record each file's sha256 (``RunSettings.model_files``); the generic
    check would only say that the identity digest differs."""
    from cube.errors import ResumeMismatch
    from cube.records.store import MANIFEST_NAME, read_manifest

    now = spec.settings.recorded().get("model_files")
    if now is None or not (out / MANIFEST_NAME).exists():
        return
    manifest = read_manifest(out)
    listed = manifest.get("files") or {}
    for key, recorded in sorted((manifest.get("cells") or {}).items()):
        before = recorded.get("model_files")
        if not key.startswith(f"{spec.model}/") or not isinstance(before, dict):
            continue
        if not any(name.startswith(f"{key}--") for name in listed):
            continue  # a configuration without records binds nothing
        for name in sorted(set(before) | set(now)):
            if before.get(name) != now.get(name):
                was, is_ = before.get(name), now.get(name)
                change = ("is new" if was is None else "is gone" if is_ is None
                          else f"changed (sha256 {was[:12]}... -> {is_[:12]}...)")
                raise ResumeMismatch(f"{out}: model file {name} {change} since cell {key} was written; "
                                     "resume with the files it was written with, or write to a new --out")


def check_benchmark_file(out: Path, spec: RunSpec) -> None:
    """Refuse a resume after the user's benchmark file (or its card) changed, in one line naming
    ``--benchmark``: the items' uid and question hash would not show a changed option or answer."""
    from cube.errors import ResumeMismatch
    from cube.records.store import MANIFEST_NAME, read_manifest

    now = spec.settings.benchmark_sha256
    if not (out / MANIFEST_NAME).exists():
        return
    manifest = read_manifest(out)
    listed = manifest.get("files") or {}
    for key, recorded in sorted((manifest.get("cells") or {}).items()):
        if not key.startswith(f"{spec.model}/") or not any(name.startswith(f"{key}--") for name in listed):
            continue
        before = recorded.get("benchmark_sha256")
        if before != now and (before is not None or now is not None):
            what = (f"--benchmark {spec.settings.benchmark} changed (sha256 {str(before)[:12]}... -> {str(now)[:12]}...)"
                    if before is not None and now is not None else
                    "--benchmark is not the one it was written with (a registered benchmark and a file differ)")
            raise ResumeMismatch(f"{out}: {what} since cell {key} was written; resume with the file it was "
                                 "written with, or write to a new --out")


def pending_jobs(spec: RunSpec, out: Path) -> tuple[list[Job], int]:
    """``(jobs left to run, jobs done)`` of :func:`resume_plan`."""
    plan = resume_plan(spec, out)
    return plan.todo, plan.done


def clean_temp_files(spec: RunSpec, out: Path) -> list[Path]:
    """Remove what killed writes of this spec's own shards left.

    Only this spec's own shard names, and only under the store's writer lock (``run`` holds it):
    no other run can be writing the store then, so no live process's temp file is removed.
    """
    removed = []
    for job in plan_jobs(spec):
        for tmp in temp_files(out / spec.model / job.filename):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed
