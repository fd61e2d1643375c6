"""``cube plan``: a sharded run as jobs for a scheduler (Slurm), run, watched and merged by the plan.

    cube plan make --out PLAN --models a,b [--items-per-job N] [--dry-run] -- [cube run options]
    cube plan make --out PLAN --paper --dry-run      # the paper's 18 checkpoints x its protocol
    sbatch PLAN/slurm.sh                             # one array task per job; resubmit to resume
    cube plan run PLAN --job K | --all               # what each task runs (any launcher, or locally)
    cube plan status PLAN                            # which jobs are complete, which to rerun
    cube merge OUT --plan PLAN                       # every planned shard once, or nothing
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from cube.commands.options import comma_list
from cube.errors import ConfigError

# The paper's protocol as this repository reads its page (shared/references, the paper's page):
# 4 label sets, M1-seq, M1-strict, M2-M5 cloze and M6 generation for the label-scoring
# checkpoints, M6 alone for the generation-only ones, CMMLU's test split.
PAPER_LABEL_SETS = ("L1_halfwidth", "L2_fullwidth", "L3_ganzhi", "L4_circled")
PAPER_SCORERS = {"label": ("M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "M6"), "generation": ("M6",)}
INDEX_VARIABLES = ("SLURM_ARRAY_TASK_ID", "PBS_ARRAY_INDEX", "SGE_TASK_ID", "LSB_JOBINDEX")


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="a sharded run as jobs for Slurm (or any launcher); run, status",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="plan_command", required=True, metavar="ACTION")
    make = sub.add_parser("make", help="write the plan: jobs, the shards each must write, a Slurm array script")
    make.add_argument("--out", type=Path, required=True, help="the plan folder (plan.json, slurm.sh, jobs/)")
    make.add_argument("--models", type=comma_list("--models"), help="model specs, comma-separated")
    make.add_argument("--paper", action="store_true",
                      help="the paper's 18 checkpoints (config/models.yaml) under its protocol")
    make.add_argument("--items-per-job", type=int, default=2000,
                      help="at most this many items in one job (default 2000); whole shards of --shard-size")
    make.add_argument("--dry-run", action="store_true",
                      help="print the jobs and what they need; write nothing (models not here are counted "
                           "from a demo model's items and cells)")
    make.add_argument("run_args", nargs=argparse.REMAINDER,
                      help="after --: `cube run` options every job shares (not --model, --out, --shard)")
    make.set_defaults(func=run_make)
    run = sub.add_parser("run", help="run one job of a plan (its array task), or all of them one after another")
    run.add_argument("plan", type=Path)
    which = run.add_mutually_exclusive_group()
    which.add_argument("--job", type=int, help="the job's index (default: $SLURM_ARRAY_TASK_ID or --index-env)")
    which.add_argument("--all", action="store_true", help="every job not complete yet, one after another")
    run.add_argument("--index-env", help="the variable your launcher sets to the task index")
    run.set_defaults(func=run_job)
    status = sub.add_parser("status", help="which jobs are complete and which to rerun (exit 1 if any)")
    status.add_argument("plan", type=Path)
    status.set_defaults(func=run_status)


def run_configs(args: argparse.Namespace):
    """(the RunConfig of each model, the plan's notes): the `cube run` options after ``--``, parsed by
    `cube run`'s parser; under ``--paper``, a reasoning checkpoint's thinking handling is read from its
    template (``cube.harness.reasoning``) and noted."""
    from cube.commands import run as run_command
    from cube.harness.run_config import RunConfig

    extra = list(args.run_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    for option in ("--model", "--out", "--shard"):
        if any(a == option or a.startswith(option + "=") for a in extra):
            raise ConfigError(f"{option} is the plan's to set for each job: leave it out of the run options")
    parser = argparse.ArgumentParser(prog="cube plan make -- ")
    run_command.register(parser.add_subparsers())
    if args.paper == bool(args.models):
        raise ConfigError("give --models a,b,... or --paper (the paper's checkpoints), not both")
    if args.paper:
        from cube.harness.reasoning import paper_thinking
        from cube.models_config import tokenizer_families, study_checkpoints

        runs, notes, families = [], {}, tokenizer_families()
        for name, checkpoint in study_checkpoints().items():
            scorers = ",".join(PAPER_SCORERS[checkpoint.role])
            label_sets = ",".join(PAPER_LABEL_SETS if checkpoint.role == "label" else PAPER_LABEL_SETS[:1])
            thinking = paper_thinking(checkpoint, families[checkpoint.family], extra)
            if thinking is not None:
                notes[name] = thinking.note
            namespace = parser.parse_args(["run", "--model", name, "--out", "-", "--scorers", scorers,
                                           "--label-sets", label_sets, *(thinking.run_args if thinking else ()),
                                           *extra])
            runs.append(replace(RunConfig.from_cli(namespace), out=None))
        return runs, notes
    runs = []
    for model in args.models:
        namespace = parser.parse_args(["run", "--model", model, "--out", "-", *extra])
        config = RunConfig.from_cli(namespace)
        runs.append(replace(config, out=None, data=config.data.resolve() if config.data else None))
    return runs, {}


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def print_plan(plan, out=None) -> None:
    """Per model: jobs, the largest job's items, cells, records, disk and the largest job's memory
    and GPU memory; a last line says what each column counts. The items column was headed
    ``items`` and its total was the sample's size, beside rows that gave the largest job's: read
    together, they seemed to say that each model scored fewer items than the run."""
    out = out if out is not None else sys.stdout  # read at call time: a caller may have replaced it
    print(f"{'model':<32} {'jobs':>5} {'items/job':>9} {'cells':>5} {'records':>10} {'disk':>10} "
          f"{'memory/job':>11} {'GPU/job':>9}", file=out)
    totals = [0, 0, 0, 0, 0]
    for model in plan.models:
        jobs = [j for j in plan.jobs if j.model == model]
        cells = {c for j in jobs for c in j.cells}
        rows = sum(j.rows for j in jobs)
        disk = sum(j.resources.disk_bytes for j in jobs)
        memory = max(j.resources.memory_bytes for j in jobs)
        gpu = max((j.resources.gpu_memory_bytes or 0) for j in jobs) or None
        mark = " *" if model in plan.stand_ins else ""
        largest = max(j.items for j in jobs)
        print(f"{model + mark:<32} {len(jobs):>5} {largest:>9} {len(cells):>5} {rows:>10,} "
              f"{_size(disk):>10} {_size(memory):>11} {_size(gpu):>9}", file=out)
        totals = [totals[0] + len(jobs), max(totals[1], largest), totals[2] + len(cells), totals[3] + rows,
                  totals[4] + disk]
    print(f"{'total':<32} {totals[0]:>5} {totals[1]:>9} {totals[2]:>5} {totals[3]:>10,} {_size(totals[4]):>10}",
          file=out)
    print(f"columns: jobs, the model's array tasks; items/job, the most items one job scores (whole chunks of "
          f"--shard-size, for its cells); the sample is {plan.n_items} items a model; cells, the cells a model "
          "writes (label, generation, cloze, judgement); records, the rows they write; memory/job and GPU/job, "
          "the largest job's", file=out)
    if plan.stand_ins:
        print(f"* not here: planned from {len(plan.stand_ins)} stand-in(s) with a demo model's items and cells; "
              "sizes from the name (nominal)", file=out)
    for note in plan.notes.values():
        print(f"thinking: {note}", file=out)
    for formula in sorted({j.resources.formula for j in plan.jobs}):
        print(f"estimates: {formula}; weights: {plan.jobs[0].resources.weights}"
              + (" (and likewise for each model)" if len(plan.models) > 1 else ""), file=out)


def run_make(args: argparse.Namespace) -> int:
    from cube.harness.plan import SLURM_SCRIPT, make_plan, write_plan

    runs, notes = run_configs(args)
    plan = make_plan(runs, args.items_per_job, dry_run=args.dry_run, notes=notes)
    print_plan(plan)
    if args.dry_run:
        return 0
    if plan.stand_ins:
        raise ConfigError(f"model {plan.stand_ins[0]!r} is not here, so its jobs cannot be pinned: "
                          "fetch it or name a local folder (cube run --model), or use --dry-run")
    write_plan(plan, args.out)
    print(f"wrote {args.out / 'plan.json'}: {len(plan.jobs)} jobs; submit with: sbatch {args.out / SLURM_SCRIPT} "
          f"(or: cube plan run {args.out} --all)", file=sys.stderr)
    return 0


def task_index(args: argparse.Namespace) -> int:
    """--job, else the launcher's index variable (--index-env, or Slurm's, PBS's, SGE's, LSF's)."""
    if args.job is not None:
        return args.job
    names = [args.index_env] if args.index_env else list(INDEX_VARIABLES)
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"${name} is {value!r}, not a job index") from None
    raise ConfigError(f"no job index: give --job K or --all, or set {' or '.join('$' + n for n in names)}")


def job_argv(folder: Path, job) -> list[str]:
    """The job's `cube run` arguments with its store under ``folder``."""
    argv = list(job.args)
    argv[argv.index("--out") + 1] = str(Path(folder).resolve() / job.out)
    return argv


def mark_job(folder: Path, plan, job) -> None:
    """Record, beside the job's store, which plan and which code ran it (the merge checks both)."""
    from cube.atomic import atomic_write_text
    from cube.harness.plan import code_sha256, job_marker, plan_sha256

    code = code_sha256()
    if code != plan.code_sha256:
        raise ConfigError(f"cube's code differs from the plan's (code sha256 {code[:12]}..., the plan's "
                          f"{plan.code_sha256[:12]}...): run every job of a plan with one cube, or make a new plan")
    marker = job_marker(folder, job)
    record = {"plan_sha256": plan_sha256(folder), "code_sha256": code, "job": job.index}
    if marker.is_file():
        from cube.files import read_json

        if read_json(marker, what="job marker") != record:
            raise ConfigError(f"{marker}: job {job.index}'s store was started under another plan or code: "
                              f"remove {folder / job.out} and {marker}, then rerun the job")
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(marker, json.dumps(record, sort_keys=True) + "\n")


def run_job(args: argparse.Namespace) -> int:
    from cube.harness.plan import job_states, read_plan

    plan = read_plan(args.plan)
    if args.all:
        states = job_states(plan, args.plan)
        todo = [job for job, problem in zip(plan.jobs, states) if problem]
        print(f"{len(plan.jobs) - len(todo)} of {len(plan.jobs)} jobs complete; running {len(todo)}", file=sys.stderr)
        for job in todo:
            mark_job(args.plan, plan, job)
            print(f"job {job.index}: {job.command()}", file=sys.stderr)
            status = subprocess.call([sys.executable, "-m", "cube", "run", *job_argv(args.plan, job)])
            if status:
                print(f"job {job.index} exited {status}; rerun: cube plan run {args.plan} --all", file=sys.stderr)
                return status
        return 0
    job = plan.job(task_index(args))
    mark_job(args.plan, plan, job)
    print(f"job {job.index} of {len(plan.jobs)}: {job.command()}", file=sys.stderr)
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "cube", "run", *job_argv(args.plan, job)])
    return 0  # not reached


def run_status(args: argparse.Namespace) -> int:
    from cube.harness.plan import job_states, read_plan, rerun_hint

    plan = read_plan(args.plan)
    states = job_states(plan, args.plan)
    for job, problem in zip(plan.jobs, states):
        cells = ", ".join(job.cells) if len(job.cells) <= 2 else f"{job.cells[0]} and {len(job.cells) - 1} more"
        print(f"job {job.index:>4} {job.model} {cells} ({job.items} items): {problem or 'complete'}")
    bad = [i for i, problem in enumerate(states) if problem]
    print(f"{len(plan.jobs) - len(bad)} of {len(plan.jobs)} jobs complete"
          + (f"; rerun: {rerun_hint(args.plan, bad)}" if bad else f"; merge: cube merge OUT --plan {args.plan}, then report: cube report OUT --out OUT-report"))
    return 1 if bad else 0
