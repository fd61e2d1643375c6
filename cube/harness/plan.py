"""A run at the paper's scale as a list of jobs: each one `cube run --shard K/N`, every setting pinned.

Why a plan: the paper scored 18 checkpoints x its protocol on a cluster. What a lab has for that
is a scheduler (Slurm), not a home-made queue, and what goes wrong there is silent: a task dies
or is run twice, a node runs another software version, and a merge that stops at the first
missing file scores a shorter sample (OpenCompass's eval task does). So the plan fixes, before
any job runs, which shard files every job must write, with how many rows, under which cell
configuration, and ``cube merge --plan`` accepts nothing else (``check_planned_stores``).

How the work is cut: by protocol cell first, by items second. A job takes every label set of
one (answer context, shots, order) of one model, so an item's question is still scored once
for all its label sets in one prefix tree; the passes that run once per item whatever the
cells (cloze, chain of thought) are jobs of their own. The items of a job group are split into
whole chunks of ``shard_size`` (contiguous item ranges, one shard file each) dealt to N jobs by
``--shard K/N``, so one item's labels are never split and first-token scoring stays one
forward per item. The decomposition is checked when the plan is made: the jobs' shard files
must be exactly the single-process run's, each once, under the same cell configurations.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from cube.atomic import atomic_write_text
from cube.errors import ConfigError
from cube.harness.run_config import RunConfig

PLAN_FILE = "plan.json"
PLAN_SUM = "plan.json.sha256"
JOBS_DIR = "jobs"
LOGS_DIR = "logs"
SLURM_SCRIPT = "slurm.sh"
PLAN_VERSION = 1
# Bytes a record takes in a Parquet shard: 99 B on data/records (49,876 records in 4.9 MB, most of
# them log-likelihood records); 400 B leaves room for generations, which carry their text.
BYTES_PER_RECORD = 400
# What a job needs besides the weights: the interpreter, torch, activations, the items.
MEMORY_OVERHEAD = 2 << 30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class JobResources:
    """What one job needs, estimated from the weights and the records it writes (``basis`` says how)."""

    disk_bytes: int
    memory_bytes: int
    gpu_memory_bytes: int | None  # None on a CPU device
    weights: str  # how the weights' size was found
    formula: str  # how the rest was estimated


@dataclass(frozen=True)
class PlannedJob:
    """One `cube run`: its arguments and everything it must leave in its own store."""

    index: int
    model: str
    args: tuple[str, ...]  # the `cube run` arguments, --out included
    out: str  # the job's store, relative to the plan folder
    cells: tuple[str, ...]  # the cell names (``<kind>--<cell>``) it writes
    files: dict[str, int]  # ``<model>/<shard file>`` -> rows
    items: int  # distinct items it scores
    config_hash: str
    resources: JobResources

    @property
    def rows(self) -> int:
        return sum(self.files.values())

    def command(self) -> str:
        return shlex.join(["cube", "run", *self.args])


@dataclass(frozen=True)
class Plan:
    """Every job of a sharded run, with what the merge must find (``cell_configs``)."""

    version: int
    code_sha256: str  # cube's source the plan was made with; every job must run the same
    settings: dict[str, dict]  # model -> its run's settings, as RunConfig.to_log records them (no out, shard)
    models: tuple[str, ...]
    n_items: int
    cell_configs: dict[str, dict]  # ``<model>/<cell>`` -> the configuration each job must record
    jobs: tuple[PlannedJob, ...]
    stand_ins: tuple[str, ...] = ()  # models planned without their files (dry run only): no identity
    # model -> why its jobs run as they do where the plan chose a setting for it (the paper's reasoning
    # checkpoints' thinking, cube.harness.reasoning); printed by `cube plan make`, kept in plan.json
    notes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Plan:
        try:
            raw = json.loads(text)
            if raw.get("version") != PLAN_VERSION:
                raise ConfigError(f"{where}: plan version {raw.get('version')!r}; this cube reads version "
                                  f"{PLAN_VERSION} (make the plan again with `cube plan`)")
            jobs = tuple(PlannedJob(**{**j, "args": tuple(j["args"]), "cells": tuple(j["cells"]),
                                       "resources": JobResources(**j["resources"])}) for j in raw["jobs"])
            return cls(**{**raw, "models": tuple(raw["models"]), "jobs": jobs,
                          "stand_ins": tuple(raw.get("stand_ins", ()))})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{where}: not a cube plan ({type(exc).__name__}: {exc})") from None

    def job(self, index: int) -> PlannedJob:
        if not 0 <= index < len(self.jobs):
            raise ConfigError(f"job {index} is not in this plan: it has jobs 0 to {len(self.jobs) - 1}")
        return self.jobs[index]


# ---- cube's own code, as one digest --------------------------------------------------------

def code_sha256() -> str:
    """A digest of every source file of the ``cube`` package: the code version a job ran.

    ``cube.__version__`` does not change with each commit; the files do. Two jobs of one plan
    run under another digest only if cube's code differs between them, which the merge refuses.
    """
    import cube

    root = Path(cube.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# ---- what a model needs ---------------------------------------------------------------------

def weight_bytes(model: str, dtype: str) -> tuple[int, str]:
    """The model's weights in ``dtype`` and how that was found: its stored files, else its name."""
    from cube.harness.model_spec import parameter_count
    from cube.harness.models import model_dir

    per = DTYPE_BYTES.get(dtype, 4)
    folder = model_dir(model)
    stored = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if stored:
        params = parameter_count(folder)
        return params * per, f"{params / 1e9:.3g}B parameters counted in its safetensors"
    match = re.search(r"(\d+(?:\.\d+)?)b\b", model.lower().replace("_", "-"))
    if match:
        params = int(float(match.group(1)) * 1e9)
        return params * per, f"{match.group(1)}B parameters, nominal (from the name; its files were not read)"
    return 0, "unknown: neither its files nor its name give a size"


def job_resources(model: str, config: RunConfig, rows: int, basis_cache: dict) -> JobResources:
    if model not in basis_cache:
        basis_cache[model] = weight_bytes(model, config.dtype)
    weights, basis = basis_cache[model]
    gpu = None
    if config.device.startswith("cuda"):
        gpu = int(weights * 1.2) + (1 << 30)  # weights + activations and KV of one batch, with a margin
    return JobResources(disk_bytes=rows * BYTES_PER_RECORD, memory_bytes=weights + MEMORY_OVERHEAD,
                        gpu_memory_bytes=gpu, weights=basis,
                        formula=f"memory = weights + 2 GiB; disk = {BYTES_PER_RECORD} B a record"
                                + ("; GPU memory = 1.2 x weights + 1 GiB" if gpu is not None else ""))


# ---- the plan ---------------------------------------------------------------------------------

STAND_IN = "smollm2-135m-instruct"  # a demo model: its items and cells stand in for an absent model's


def _spec_for(config: RunConfig, dry_run: bool, stand_ins: dict):
    """The model's full spec; in a dry run, a model whose files are not here gets a demo model's,
    renamed, with no identity (``Plan.stand_ins`` names it)."""
    from cube.harness.build import build_spec

    def build(config: RunConfig):
        # Planned here, run on the cluster's nodes: the device is checked where the job runs.
        spec = build_spec(replace(config, device="cpu"))
        return replace(spec, settings=replace(spec.settings, device=config.device))

    try:
        return build(config), False
    except ConfigError:
        if not dry_run or config.model == STAND_IN:
            raise
    key = json.dumps({k: v for k, v in config.to_log().items() if k not in ("model", "out")}, sort_keys=True)
    if key not in stand_ins:
        stand_ins[key] = build(replace(config, model=STAND_IN))
    spec = stand_ins[key]
    return replace(spec, model=config.model, settings=replace(spec.settings, model_sha256=None, model_files=None, model_source=None)), True


def _units(spec) -> list:
    """The single-process spec cut into specs of one (context, shots, order) each, plus the once-
    per-item passes: together they write exactly the single process's shards (checked by the caller)."""
    from cube.protocol.scorers import PASSES, SCORERS

    def scorers_of(cells_kind: str) -> tuple[str, ...]:
        return tuple(s for s in spec.scorers if SCORERS[s].pass_kind and PASSES[SCORERS[s].pass_kind].cells == cells_kind)

    each, per_label_set, once = scorers_of("each"), scorers_of("label_set_shots"), scorers_of("none")
    # The runner writes a label-set-and-shots pass under the last cell of that label set, shots and chat form.
    chosen = {(c.label_set.name, c.shots, c.chat): c for c in spec.cells}
    groups: dict[tuple, list] = {}
    for cell in spec.cells:
        groups.setdefault((cell.context, cell.shots, cell.order, cell.chat), []).append(cell)
    units = []
    for cells in groups.values():
        scorers = each + (per_label_set if any(chosen.get((c.label_set.name, c.shots, c.chat)) == c for c in cells) else ())
        if scorers:
            units.append(replace(spec, cells=tuple(cells), scorers=scorers))
    if once:  # once per item in each chat form of the cells (cube.protocol.chat)
        firsts = {c.chat: c for c in reversed(spec.cells)}
        units += [replace(spec, cells=(firsts[chat],), scorers=once) for chat in dict.fromkeys(c.chat for c in spec.cells)]
    return units


def _unit_args(config: RunConfig, unit, shard: tuple[int, int], out: str) -> tuple[str, ...]:
    """The `cube run` arguments of one job: the run's own, narrowed to the unit's cells and scorers."""
    from cube.protocol.chat import NO_CHAT, thinking_of

    cells = unit.cells
    modes = tuple(dict.fromkeys(thinking_of(c.chat) for c in cells if c.chat != NO_CHAT))
    job = replace(config, label_sets=tuple(dict.fromkeys(c.label_set.name for c in cells)),
                  contexts=tuple(dict.fromkeys(c.context for c in cells)),
                  shots=tuple(dict.fromkeys(c.shots for c in cells)),
                  orders=tuple(dict.fromkeys(c.order for c in cells)),
                  # a chat form with its thinking mode (model+nothink) is --chat-template model --thinking off
                  chat_templates=tuple(dict.fromkeys(NO_CHAT if c.chat == NO_CHAT else "model" for c in cells)),
                  thinking=modes if modes and None not in modes else None,
                  scorers=tuple(unit.scorers), shard=shard, out=Path(out))
    args = shlex.split(job.command_line())[2:]
    if config.data is not None:
        args += ["--data", str(config.data)]
    return tuple(args)


def make_plan(runs: Sequence[RunConfig], items_per_job: int, dry_run: bool = False,
              notes: dict[str, str] | None = None) -> Plan:
    """The jobs of every run in ``runs`` (one per model), each at most ``items_per_job`` items of one unit.

    A model that cannot be resolved here is planned, in a dry run only, from a demo model's items
    and cells, and named in ``stand_ins``: its jobs are counted, its identity is not known.
    """
    from cube.harness.run_spec import cell_configs, plan_jobs
    from cube.records.store import rows_per_item

    if items_per_job < 1:
        raise ConfigError(f"--items-per-job {items_per_job} must be at least 1")
    if not runs:
        raise ConfigError("the plan names no model: give --models")
    models = [r.model for r in runs]
    repeated = next((m for i, m in enumerate(models) if m in models[:i]), None)
    if repeated:
        raise ConfigError(f"--models names {repeated!r} twice")
    for config in runs:
        if config.dtype == "auto":
            raise ConfigError("--dtype auto decides on each machine, so two nodes of one plan could differ: "
                              "give --dtype float32 or --dtype bfloat16")
        if config.shard != (0, 1):
            raise ConfigError("--shard is the plan's to choose: leave it out")
    jobs: list[PlannedJob] = []
    configs: dict[str, dict] = {}
    stood_in: list[str] = []
    specs: dict = {}
    sizes: dict = {}
    n_items = 0
    for config in runs:
        spec, is_stand_in = _spec_for(config, dry_run, specs)
        if is_stand_in:
            stood_in.append(config.model)
        # the store's model folder: the spec's name (a folder model's is its folder's name, not --model's path;
        # the plan of one failed with a KeyError on its cells)
        model = spec.model if not is_stand_in else config.model
        n_items = max(n_items, len(spec.items))
        full_configs = cell_configs(spec)
        full_files = {f"{model}/{j.filename}" for j in plan_jobs(replace(spec, shard=(0, 1)))}
        configs.update(full_configs)
        seen: dict[str, int] = {}
        n_chunks = math.ceil(len(spec.items) / spec.shard_size)
        for unit in _units(spec):
            for key, value in cell_configs(unit).items():
                if full_configs.get(key) != value:
                    raise ConfigError(f"plan: the job of {key} would record another configuration than the "
                                      "single-process run (a bug in the plan's cut; run without a plan)")
            n_jobs = min(n_chunks, max(1, math.ceil(len(spec.items) / items_per_job)))
            for k in range(n_jobs):
                shard_jobs = plan_jobs(replace(unit, shard=(k, n_jobs)))
                files = {}
                for j in shard_jobs:
                    name = f"{model}/{j.filename}"
                    if name in seen or name not in full_files:
                        raise ConfigError(f"plan: {name} would be written twice, or outside the single-process "
                                          "run (a bug in the plan's cut; run without a plan)")
                    seen[name] = len(jobs)
                    files[name] = (rows_per_item(full_configs[f"{model}/{j.cell_name}"]) or 0) * len(j.items)
                index = len(jobs)
                out = f"{JOBS_DIR}/{index:04d}"
                jobs.append(PlannedJob(
                    index=index, model=model, args=_unit_args(config, unit, (k, n_jobs), out), out=out,
                    cells=tuple(dict.fromkeys(j.cell_name for j in shard_jobs)), files=files,
                    items=len({i.uid for j in shard_jobs for i in j.items}), config_hash=unit.config_hash(),
                    resources=job_resources(config.model, config, sum(files.values()), sizes)))
        missing = sorted(full_files - set(seen))
        if missing:
            raise ConfigError(f"plan: no job writes {missing[0]} (a bug in the plan's cut; run without a plan)")
    settings = {config.model: {k: v for k, v in config.to_log().items() if k not in ("model", "out", "shard")}
                for config in runs}
    return Plan(version=PLAN_VERSION, code_sha256=code_sha256(), settings=settings, models=tuple(models),
                n_items=n_items, cell_configs=configs, jobs=tuple(jobs), stand_ins=tuple(stood_in),
                notes=dict(notes or {}))


# ---- the plan folder --------------------------------------------------------------------------

def write_plan(plan: Plan, folder: Path) -> None:
    """``plan.json`` with its sha256 beside it, and the Slurm array script; refuses another plan's folder."""
    folder.mkdir(parents=True, exist_ok=True)
    existing = folder / PLAN_FILE
    text = plan.to_json()
    if existing.exists() and existing.read_text(encoding="utf-8") != text:
        raise ConfigError(f"{folder} holds another plan already: give a new folder (or remove {existing})")
    atomic_write_text(existing, text)
    atomic_write_text(folder / PLAN_SUM, hashlib.sha256(text.encode()).hexdigest() + "\n")
    (folder / LOGS_DIR).mkdir(exist_ok=True)
    script = folder / SLURM_SCRIPT
    atomic_write_text(script, slurm_script(plan, folder))
    script.chmod(0o755)


def read_plan(folder: Path) -> Plan:
    """The plan in ``folder``, checked against the sha256 recorded when it was written."""
    from cube.files import read_text

    path = Path(folder) / PLAN_FILE
    if not path.is_file():
        raise ConfigError(f"no plan at {path}: make one with `cube plan --out {folder} ...`")
    data = read_text(path, ConfigError, "plan").encode("utf-8")
    recorded = (Path(folder) / PLAN_SUM).read_text(encoding="utf-8").strip() if (Path(folder) / PLAN_SUM).is_file() else ""
    if hashlib.sha256(data).hexdigest() != recorded:
        raise ConfigError(f"{path}: its sha256 does not match {PLAN_SUM} (edited after `cube plan` wrote it): "
                          "make the plan again")
    plan = Plan.from_json(data.decode("utf-8"), str(path))
    for job in plan.jobs:  # a plan rewritten with its sha256 must not send a job's store elsewhere
        want = f"{JOBS_DIR}/{job.index:04d}"
        if job.out != want or list(job.args).count("--out") != 1:
            raise ConfigError(f"{path}: job {job.index} writes its store at {job.out!r}, not {want!r} under the plan "
                              "folder (a plan forged with its sha256?): make the plan again with `cube plan`")
    if [job.index for job in plan.jobs] != list(range(len(plan.jobs))):
        raise ConfigError(f"{path}: its jobs are not numbered 0 to {len(plan.jobs) - 1} in order: make the plan "
                          "again with `cube plan`")
    return plan


def plan_sha256(folder: Path) -> str:
    return (Path(folder) / PLAN_SUM).read_text(encoding="utf-8").strip()


def slurm_script(plan: Plan, folder: Path) -> str:
    """A job array, one task per job, each running ``cube plan run FOLDER --job $SLURM_ARRAY_TASK_ID``.

    Resubmitting the same script (or ``--array=K`` for the jobs ``cube plan status`` names) reruns
    only what is missing: each task is a `cube run` that resumes its own store.
    """
    folder = Path(folder).resolve()
    memory_mb = max((j.resources.memory_bytes for j in plan.jobs), default=0) // (1 << 20) + 1
    gpu = any(j.resources.gpu_memory_bytes for j in plan.jobs)
    lines = [
        "#!/bin/bash",
        f"# {len(plan.jobs)} jobs of the plan in {folder} (cube plan); resubmit to rerun what is missing.",
        "#SBATCH --job-name=cube-plan",
        f"#SBATCH --array=0-{len(plan.jobs) - 1}",
        f"#SBATCH --output={folder / LOGS_DIR}/%A_%a.log",
        "#SBATCH --cpus-per-task=1",
        f"#SBATCH --mem={memory_mb}M",
    ]
    if gpu:
        lines.append("#SBATCH --gres=gpu:1")
    python = shlex.quote(sys.executable)
    lines += ["set -euo pipefail",
              f'exec {python} -m cube plan run {shlex.quote(str(folder))} --job "${{SLURM_ARRAY_TASK_ID}}"', ""]
    return "\n".join(lines)


def job_marker(folder: Path, job: PlannedJob) -> Path:
    """Beside the job's store (not in it: `cube run --out` wants a store or an empty folder)."""
    return Path(folder) / f"{job.out}.job.json"


# ---- what the jobs left ---------------------------------------------------------------------

def rerun_hint(folder: Path, jobs: Sequence[int]) -> str:
    listed = ",".join(str(j) for j in jobs)
    return (f"cube plan run {folder} --job {jobs[0]}" if len(jobs) == 1 else f"cube plan run {folder} --all") + \
        f", or sbatch --array={listed} {Path(folder) / SLURM_SCRIPT}"


def job_problem(plan: Plan, folder: Path, job: PlannedJob, owners: dict[str, int]) -> str | None:
    """Why job ``job``'s store cannot be merged as the plan's (None: it can), in one clause.

    Checked: the marker ``cube plan run`` wrote (this plan, this code), every planned shard listed
    with its sha256 and the rows its cell promises, no shard of another job or of no job, and
    every cell under the plan's configuration (model identity, dtype, items, templates, ...).
    """
    from cube.files import read_json
    from cube.records.store import MANIFEST_NAME, config_differences, read_manifest, shard_problem

    folder = Path(folder)
    store = folder / job.out
    marker = job_marker(folder, job)
    if not (store / MANIFEST_NAME).is_file():
        return f"has no records at {store}"
    if not marker.is_file():
        return f"was not run by `cube plan run` ({marker} is missing)"
    ran = read_json(marker, what="job marker")
    if not isinstance(ran, dict) or ran.get("plan_sha256") != plan_sha256(folder):
        return f"ran under another plan ({marker})"
    if ran.get("code_sha256") != plan.code_sha256:
        return (f"ran under other cube code (code sha256 {str(ran.get('code_sha256'))[:12]}..., the plan's "
                f"{plan.code_sha256[:12]}...)")
    manifest = read_manifest(store)
    listed = manifest.get("files") or {}
    for name in sorted(listed):
        if name not in job.files:
            other = owners.get(name)
            if other is not None:
                return f"holds {name}, which is job {other}'s shard (a duplicate)"
            return f"holds {name}, which no job of the plan writes"
    missing = [name for name in job.files if name not in listed]
    if missing:
        return f"is incomplete: {len(missing)} of {len(job.files)} shards missing (e.g. {missing[0]})"
    for name, rows in job.files.items():
        problem = shard_problem(store, name, listed[name], rows)
        if problem:
            return f"has a broken shard {name}: {problem}"
    if job.model not in plan.stand_ins:
        for cell, config in sorted((manifest.get("cells") or {}).items()):
            expected = plan.cell_configs.get(cell)
            if expected is None:
                return f"records a cell {cell} that the plan does not have"
            if config != expected:
                return (f"wrote {cell} under another configuration than the plan's: "
                        f"{'; '.join(config_differences(expected, config))}")
    return None


def job_versions(folder: Path, job: PlannedJob) -> dict | None:
    """The software versions the job's run log records (its last line: the run that finished it)."""
    from cube.files import read_json_lines
    from cube.records.schema import RUNLOG_NAME

    log = Path(folder) / job.out / job.model / RUNLOG_NAME
    if not log.is_file():
        return None
    lines = [value for _, value in read_json_lines(log, what="run log") if isinstance(value, dict)]
    return lines[-1].get("versions") if lines else None


def job_states(plan: Plan, folder: Path) -> list[str | None]:
    """Each job's problem (None: complete and the plan's), in job order."""
    owners = {name: job.index for job in plan.jobs for name in job.files}
    return [job_problem(plan, folder, job, owners) for job in plan.jobs]


def check_planned_stores(plan: Plan, folder: Path) -> list[Path]:
    """The job stores of a complete plan, in job order; else one line naming the jobs to rerun.

    A gap, a duplicate shard, a shard of another configuration, other code or other software
    versions between the jobs of one model: each is refused here, before the merge writes
    anything, so the merged store is the plan's whole sample or nothing.
    """
    from cube.errors import RecordsError

    folder = Path(folder)
    if plan.stand_ins:
        raise RecordsError(f"{folder}: a dry-run plan (no files for {', '.join(plan.stand_ins)}) cannot be merged")
    states = job_states(plan, folder)
    bad = [i for i, problem in enumerate(states) if problem]
    if bad:
        first = bad[0]
        more = f" ({len(bad)} jobs to rerun: {','.join(map(str, bad))})" if len(bad) > 1 else ""
        raise RecordsError(f"job {first} {states[first]}{more}; rerun it: {rerun_hint(folder, bad)}")
    by_model: dict[str, tuple[int, dict | None]] = {}
    for job in plan.jobs:
        versions = job_versions(folder, job)
        if job.model in by_model and by_model[job.model][1] != versions:
            other, theirs = by_model[job.model]
            diff = sorted(k for k in set(versions or {}) | set(theirs or {})
                          if (versions or {}).get(k) != (theirs or {}).get(k))
            raise RecordsError(f"job {job.index} ran under other software than job {other} of {job.model} "
                               f"({', '.join(diff) or 'versions'} differ); rerun it where job {other} ran: "
                               f"{rerun_hint(folder, [job.index])}")
        by_model.setdefault(job.model, (job.index, versions))
    return [folder / job.out for job in plan.jobs]


__all__ = ["check_planned_stores", "job_states", "rerun_hint", "BYTES_PER_RECORD", "JOBS_DIR", "JobResources", "PLAN_FILE", "Plan", "PlannedJob", "SLURM_SCRIPT",
           "code_sha256", "job_marker", "make_plan", "plan_sha256", "read_plan", "slurm_script", "weight_bytes",
           "write_plan"]
