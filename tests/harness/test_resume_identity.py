"""Issue 36 §3: what a resume must agree with. ``--dtype auto`` resumes in the dtype a store was
written in; a refused resume names the option and the value that resumes it; the batch size,
which changes a record only by floating-point noise, never blocks one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cube.errors import ResumeMismatch
from cube.harness.precision import choose_dtype, recorded_dtype
from cube.harness.run_config import RunSettings
from cube.harness.resume import resume_plan
from cube.harness.run_spec import RunSpec, cell_configs, plan_jobs
from cube.harness.runner import write_job_shard
from cube.protocol.items import Item
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell
from cube.records.store import MANIFEST_NAME, read_manifest
from tests.record_tables import record, scores_for

# Invented items: only their uids and answers matter here.
ITEMS = tuple(Item("cmmlu", "agronomy", "test", i, f"虚构问题{i}", ("甲", "乙", "丙", "丁"), i % 4) for i in range(5))
CELLS = (Cell(LabelSet("L1", ("A", "B", "C", "D")), "zh_cue", 0),)


def spec(dtype: str = "float32", batch_size: int = 16, seed: int = 0) -> RunSpec:
    return RunSpec(model="m1", items=ITEMS, cells=CELLS, scorers=("M1-seq",), shard_size=2, batch_size=batch_size,
                   settings=RunSettings(dtype=dtype, dtype_reason="requested", seed=seed, device="cpu", backend="hf"))


def write_half(out, run: RunSpec) -> None:
    """A killed run: the first of its shards written, each with its cell's configuration."""
    configs = cell_configs(run)
    job = plan_jobs(run)[0]
    rows = [record(model="m1", uid=it.uid, scorer="M1-seq", gold=it.answer, pred=it.answer,
                   scores=scores_for(it.answer), dtype=run.settings.dtype) for it in job.items]
    write_job_shard(out, "m1", job, rows, configs[f"m1/{job.cell_name}"])


def test_auto_resumes_in_the_dtype_the_store_was_written_in(tmp_path):
    assert recorded_dtype(tmp_path / "K", "m1") is None  # no store: the CPU decides
    write_half(tmp_path / "K", spec("float32"))
    assert recorded_dtype(tmp_path / "K", "m1") == "float32"
    assert recorded_dtype(tmp_path / "K", "other-model") is None
    choice = choose_dtype("auto", recorded=recorded_dtype(tmp_path / "K", "m1"))
    assert choice.dtype == "float32" and "resuming" in choice.reason
    plan = resume_plan(spec(choice.dtype), tmp_path / "K")
    assert plan.done == 1 and len(plan.todo) == 2


def test_a_refused_resume_names_the_option_and_the_value_that_resumes_it(tmp_path):
    write_half(tmp_path / "K", spec("float32"))
    with pytest.raises(ResumeMismatch) as refused:
        resume_plan(spec("bfloat16"), tmp_path / "K")
    message = str(refused.value)
    assert 'dtype "float32" -> "bfloat16"' in message
    assert message.endswith("(resume it with --dtype float32, or write to a new --out)"), message
    # a difference no option undoes (here the items, drawn under another seed) says so
    other_items = replace(spec("bfloat16", seed=1), items=ITEMS[1:])
    with pytest.raises(ResumeMismatch) as refused:
        resume_plan(other_items, tmp_path / "K")
    message = str(refused.value)
    assert "seed 0 -> 1" in message and 'dtype "float32" -> "bfloat16"' in message
    assert "rerun with its original options; among them --dtype float32 --seed 0, or write to a new --out" in message


def test_the_batch_size_never_blocks_a_resume(tmp_path):
    write_half(tmp_path / "K", spec(batch_size=16))
    assert resume_plan(spec(batch_size=3), tmp_path / "K").done == 1
    assert spec(batch_size=3).config_hash() == spec(batch_size=16).config_hash()


def test_a_store_that_recorded_its_batch_size_still_resumes(tmp_path):
    """Config hash version 2 recorded the batch size in each cell; such a store resumes under any."""
    import json

    write_half(tmp_path / "K", spec())
    manifest = read_manifest(tmp_path / "K")
    for config in manifest["cells"].values():
        assert "batch_size" not in config
        config["batch_size"] = 16  # as version 2 wrote it
    (tmp_path / "K" / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    assert resume_plan(spec(batch_size=4), tmp_path / "K").done == 1
