"""``cube plan``: the jobs write exactly the single-process run's shards, and the merge takes the
plan's whole sample or refuses, naming the job to rerun.

The cut is checked through the real command line: each job's own `cube run` arguments are parsed
by `cube run`'s parser and built into a spec, whose shard files must be the job's, each file once
over the plan, all of them the single-process run's. The runs are real (SmolLM2-135M, fp32, real
CMMLU items); the Slurm test is ``test_plan_slurm.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys

from pathlib import Path

import pytest

from cube.errors import ConfigError, RecordsError
from cube.harness.run_config import RunConfig

MODEL = "smollm2-135m-instruct"


def job_spec(args: tuple[str, ...]):
    """The spec `cube run` builds from a job's arguments (its own parser, its own builder)."""
    from cube.commands import run as run_command
    from cube.harness.build import build_spec

    parser = argparse.ArgumentParser()
    run_command.register(parser.add_subparsers())
    return build_spec(RunConfig.from_cli(parser.parse_args(["run", *args])))


@pytest.mark.parametrize("chat_templates", [("none",), ("none", "model")])
def test_the_jobs_write_the_single_process_shards_each_once(benchmarks_root, chat_templates):
    from cube.harness.build import build_spec
    from cube.harness.plan import make_plan
    from cube.harness.run_spec import cell_configs, plan_jobs

    config = RunConfig(model=MODEL, sample=10, label_sets=("L1_halfwidth", "L4_circled"),
                       contexts=("zh_cue", "en_label_space"), shots=(0,), orders=("original", "shift1"),
                       scorers=("M1-seq", "M1-strict", "M2", "M6", "M6-cot", "TF"), dtype="float32", shard_size=3,
                       chat_templates=chat_templates)
    plan = make_plan([config], items_per_job=5)
    full = build_spec(config)
    expected = {f"{MODEL}/{j.filename}" for j in plan_jobs(full)}
    written: dict[str, int] = {}
    for job in plan.jobs:
        spec = job_spec(job.args)
        files = {f"{MODEL}/{j.filename}": len(j.items) for j in plan_jobs(spec)}
        assert set(files) == set(job.files), job.index
        for name in files:
            assert name not in written, f"{name} in jobs {written.get(name)} and {job.index}"
            written[name] = job.index
        for cell, value in cell_configs(spec).items():  # what the job records is the single run's
            assert value == cell_configs(full)[cell]
    assert set(written) == expected
    # 4 (context, order) groups of both label sets, + cloze/TF once per item, each in every chat form;
    # 10 items in chunks of 3 = 4 chunks, at most 5 items a job = 2 jobs per group
    assert len(plan.jobs) == 2 * (4 + 1) * len(chat_templates)
    assert sum(j.items for j in plan.jobs if "label--L1_halfwidth__zh_cue__0shot__original" in j.cells) == 10


def test_a_plan_refuses_settings_a_node_would_decide_or_that_are_the_plans():
    from cube.harness.plan import make_plan

    with pytest.raises(ConfigError, match="--dtype auto"):
        make_plan([RunConfig(model=MODEL)], items_per_job=10)
    with pytest.raises(ConfigError, match="--shard"):
        make_plan([RunConfig(model=MODEL, dtype="float32", shard=(0, 2))], items_per_job=10)
    with pytest.raises(ConfigError, match="twice"):
        make_plan([RunConfig(model=MODEL, dtype="float32")] * 2, items_per_job=10)


def test_the_paper_plan_counts_every_checkpoint_as_a_dry_run(benchmarks_root, capsys):
    from cube.cli import main

    assert main(["plan", "make", "--out", "unused", "--paper", "--dry-run", "--items-per-job", "4000",
                 "--", "--dtype", "bfloat16", "--sample", "40"]) == 0
    out = capsys.readouterr().out
    assert "qwen2.5-14b-instruct *" in out and "r1-distill-qwen-7b *" in out
    assert "nominal" in out
    # issue 45: the columns say what they count; the largest job's items is not the sample's size
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["model", "jobs", "items/job", "cells"]
    rows = [line.split() for line in lines[1:] if line.split()[1:2] and line.split()[1] == "*"]
    total = next(line.split() for line in lines if line.startswith("total "))
    assert int(total[1]) == sum(int(r[2]) for r in rows)  # jobs add up
    assert int(total[2]) == max(int(r[3]) for r in rows) <= 4000  # the largest job, within --items-per-job
    assert int(total[3]) == sum(int(r[4]) for r in rows)  # cells add up
    assert "the sample is 40 items a model" in out and "items/job, the most items one job scores" in out
    assert not Path("unused").exists()


def cube(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "cube", *args], capture_output=True, text=True)
    if check and result.returncode:
        raise AssertionError(f"cube {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}")
    return result


RUN_OPTIONS = ("--sample", "6", "--label-sets", "L1_halfwidth,L4_circled", "--dtype", "float32",
               "--shard-size", "3", "--batch-size", "4")


@pytest.fixture(scope="module")
def ran_plan(tmp_path_factory, benchmarks_root):
    """A plan of 2 jobs run locally (`cube plan run --all`), and the same protocol in one process."""
    root = tmp_path_factory.mktemp("plan")
    cube("plan", "make", "--out", str(root / "plan"), "--models", MODEL, "--items-per-job", "3", "--", *RUN_OPTIONS)
    cube("plan", "run", str(root / "plan"), "--all")
    cube("run", "--model", MODEL, "--out", str(root / "single"), *RUN_OPTIONS)
    return root


def records(store: Path):
    from cube.records.store import read_records

    table = read_records(store, verify=True)
    keys = ["model", "uid", "scorer", "label_set", "context", "shots", "order"]
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def test_merged_plan_equals_the_single_process_run(ran_plan, tmp_path):
    status = cube("plan", "status", str(ran_plan / "plan"))
    assert "2 of 2 jobs complete" in status.stdout
    assert "then report: cube report OUT --out OUT-report" in status.stdout
    cube("merge", str(tmp_path / "merged"), "--plan", str(ran_plan / "plan"))
    assert records(tmp_path / "merged") == records(ran_plan / "single")
    merged = json.loads((tmp_path / "merged" / "MANIFEST.json").read_text())
    single = json.loads((ran_plan / "single" / "MANIFEST.json").read_text())
    assert merged["files"] == single["files"]  # the same shard files, byte for byte (sha256)
    assert merged["cells"] == single["cells"]
    # the merged plan's report is the single run's, number for number
    from dataclasses import replace

    from cube.report import analyse

    assert analyse([tmp_path / "merged"], replicates=50).cells == [
        replace(c, store=str(tmp_path / "merged")) for c in analyse([ran_plan / "single"], replicates=50).cells]


def copy_plan(ran_plan: Path, tmp_path: Path) -> Path:
    plan = tmp_path / "plan"
    shutil.copytree(ran_plan / "plan", plan)
    return plan


def edit_manifest(store: Path, change) -> None:
    path = store / "MANIFEST.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def refused(plan: Path, tmp_path: Path) -> str:
    result = cube("merge", str(tmp_path / "merged"), "--plan", str(plan), check=False)
    assert result.returncode == 2
    assert not (tmp_path / "merged").exists()  # nothing written
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_gap_is_refused_naming_the_job_to_rerun(ran_plan, tmp_path):
    plan = copy_plan(ran_plan, tmp_path)
    name = next(iter(json.loads((plan / "jobs/0001/MANIFEST.json").read_text())["files"]))
    (plan / "jobs/0001" / name).unlink()
    edit_manifest(plan / "jobs/0001", lambda m: m["files"].pop(name))
    line = refused(plan, tmp_path)
    assert "job 1 is incomplete" in line and "--job 1" in line and "sbatch --array=1 " in line


def test_a_duplicate_shard_is_refused(ran_plan, tmp_path):
    plan = copy_plan(ran_plan, tmp_path)
    files = json.loads((plan / "jobs/0000/MANIFEST.json").read_text())["files"]
    name = next(iter(files))
    shutil.copy(plan / "jobs/0000" / name, plan / "jobs/0001" / name)
    edit_manifest(plan / "jobs/0001", lambda m: m["files"].__setitem__(name, files[name]))
    line = refused(plan, tmp_path)
    assert f"job 1 holds {name}, which is job 0's shard (a duplicate)" in line


def test_a_job_of_another_configuration_is_refused(ran_plan, tmp_path):
    plan = copy_plan(ran_plan, tmp_path)
    shutil.rmtree(plan / "jobs/0001")
    args = json.loads((plan / "plan.json").read_text())["jobs"][1]["args"]
    args = [a if a != "float32" else "bfloat16" for a in args]
    args[args.index("--out") + 1] = str(plan / "jobs/0001")
    cube("run", *args)
    line = refused(plan, tmp_path)
    assert "job 1 wrote" in line and "dtype" in line and "bfloat16" in line


def test_other_code_or_an_edited_plan_is_refused(ran_plan, tmp_path):
    plan = copy_plan(ran_plan, tmp_path)
    marker = plan / "jobs/0000.job.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "code_sha256": "0" * 64}))
    assert "job 0 ran under other cube code" in refused(plan, tmp_path)
    text = (plan / "plan.json").read_text()
    (plan / "plan.json").write_text(text.replace('"n_items": 6', '"n_items": 5'))
    result = cube("plan", "status", str(plan), check=False)
    assert result.returncode == 2 and "edited after `cube plan` wrote it" in result.stderr


def test_a_job_index_comes_from_the_launcher(ran_plan, tmp_path, monkeypatch):
    from cube.commands.plan import task_index

    args = argparse.Namespace(job=None, index_env=None)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    assert task_index(args) == 1
    monkeypatch.setenv("MY_INDEX", "x")
    with pytest.raises(ConfigError, match=r"\$MY_INDEX is 'x'"):
        task_index(replace_namespace(args, index_env="MY_INDEX"))
    result = cube("plan", "run", str(ran_plan / "plan"), "--job", "7", check=False)
    assert result.returncode == 2 and "job 7 is not in this plan: it has jobs 0 to 1" in result.stderr


def replace_namespace(namespace: argparse.Namespace, **changes) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(namespace), **changes})


def test_a_complete_plan_reruns_nothing(ran_plan):
    result = cube("plan", "run", str(ran_plan / "plan"), "--all")
    assert "2 of 2 jobs complete; running 0" in result.stderr





@pytest.mark.parametrize("forged_out", ["../outside", "/tmp/elsewhere", "jobs/0000/../../../outside", "jobs/0001"])
def test_a_forged_plan_cannot_send_a_jobs_store_outside_the_plan_folder(tmp_path, forged_out):
    """Issue 48: plan.json rewritten together with its sha256 made a job write where it said."""
    import hashlib

    from cube.harness.plan import PLAN_SUM, JobResources, Plan, PlannedJob, read_plan, write_plan

    job = PlannedJob(index=0, model=MODEL, args=("--model", MODEL, "--out", "jobs/0000"), out="jobs/0000",
                     cells=(), files={}, items=0, config_hash="0" * 64,
                     resources=JobResources(0, 0, None, "none", "none"))
    folder = tmp_path / "plan"
    write_plan(Plan(version=1, code_sha256="0" * 64, settings={}, models=(MODEL,), n_items=0, cell_configs={},
                    jobs=(job,)), folder)
    assert read_plan(folder).jobs[0].out == "jobs/0000"
    text = (folder / "plan.json").read_text().replace('"out": "jobs/0000"', json.dumps({"out": forged_out})[1:-1])
    (folder / "plan.json").write_text(text)
    (folder / PLAN_SUM).write_text(hashlib.sha256(text.encode()).hexdigest() + "\n")
    with pytest.raises(ConfigError, match=r"job 0 writes its store at .*, not 'jobs/0000' under the plan folder"):
        read_plan(folder)


from tests.harness.test_chat_cells import qwen3_no_template, qwen3_thinking  # noqa: E402,F401 - fixtures


@pytest.mark.registry
@pytest.mark.parametrize("thinking, scorers", [(("off", "on"), ("M6", "M6-cot")), (("off",), ("M1-seq", "M2", "M6"))])
def test_a_plan_of_thinking_cells_writes_the_single_process_shards(benchmarks_root, qwen3_thinking, thinking, scorers):
    """--thinking off,on (issue 49) in a plan: each job is `cube run --chat-template model --thinking MODE`
    (a chat form such as model+nothink is no --chat-template value), and the jobs write the single run's shards."""
    from cube.harness.build import build_spec
    from cube.harness.plan import make_plan
    from cube.harness.run_spec import cell_configs, plan_jobs

    config = RunConfig(model=str(qwen3_thinking), sample=4, chat_templates=("none", "model"), thinking=thinking,
                       scorers=scorers, dtype="float32", shard_size=2)
    plan = make_plan([config], items_per_job=4)
    full = build_spec(config)
    name = qwen3_thinking.name
    written = set()
    for job in plan.jobs:
        spec = job_spec(job.args)
        files = {f"{name}/{j.filename}" for j in plan_jobs(spec)}
        assert files == set(job.files) and not files & written
        written |= files
        for cell, value in cell_configs(spec).items():
            assert value == cell_configs(full)[cell]
    assert written == {f"{name}/{j.filename}" for j in plan_jobs(full)}
    assert any("@chat+nothink" in f for f in written) and any("zh_cue__" in f for f in written)
