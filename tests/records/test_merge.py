"""Merging sharded run folders: a union of shard files, refusing to mix different runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cube.errors import RecordsError
from cube.harness.run_spec import RunSpec, plan_jobs
from cube.harness.runner import write_job_shard
from cube.protocol.items import Item
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell
from cube.records.merge import merge_runs, plan_merge
from cube.records.store import MANIFEST_NAME, read_records
from tests.record_tables import record, scores_for

# Invented items: only their uids and the job names they produce matter here.
ITEMS = tuple(Item("cmmlu", "agronomy", "test", i, f"虚构问题{i}", ("甲", "乙", "丙", "丁"), i % 4) for i in range(7))
CELLS = (Cell(LabelSet("L1", ("A", "B", "C", "D")), "zh_cue", 0),)


def spec(shard: tuple[int, int]) -> RunSpec:
    return RunSpec(model="m1", items=ITEMS, cells=CELLS, scorers=("M1-seq", "M2"), shard_size=2, shard=shard)


def write_run(folder: Path, shard: tuple[int, int], pred_shift: int = 0) -> None:
    """What a `cube run --shard K/N` process leaves: a store of one shard per job, and a run log."""
    for job in plan_jobs(spec(shard)):
        scorer = "M1-seq" if job.kind == "label" else "M2"
        rows = [record(model="m1", uid=it.uid, scorer=scorer, gold=it.answer, pred=(it.answer + pred_shift) % 4,
                       scores=scores_for((it.answer + pred_shift) % 4)) for it in job.items]
        write_job_shard(folder, "m1", job, rows)
    (folder / "m1" / "runlog.jsonl").write_text(f'{{"model": "m1", "shard": "{shard[0]}/{shard[1]}", "files": []}}\n',
                                                encoding="utf-8")


def shard_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "m1").glob("*.parquet"))}


def test_merged_shards_equal_an_unsharded_run(tmp_path):
    write_run(tmp_path / "whole", (0, 1))
    for k in range(3):
        write_run(tmp_path / f"part{k}", (k, 3))
    plan = merge_runs(tmp_path / "merged", [tmp_path / f"part{k}" for k in range(3)], progress=False)
    assert shard_bytes(tmp_path / "merged") == shard_bytes(tmp_path / "whole")
    assert len(plan.copies) == len(shard_bytes(tmp_path / "whole")) and plan.identical == 0
    log = (tmp_path / "merged" / "m1" / "runlog.jsonl").read_text(encoding="utf-8").splitlines()
    assert log == [f'{{"model": "m1", "shard": "{k}/3", "files": []}}' for k in range(3)]
    merged, whole = read_records(tmp_path / "merged"), read_records(tmp_path / "whole")  # checks sha256s
    assert merged.num_rows == whole.num_rows == 2 * len(ITEMS)  # a label and a cloze record per item
    key = ["uid", "scorer"]
    assert merged.sort_by([(k, "ascending") for k in key]).equals(whole.sort_by([(k, "ascending") for k in key]))


def test_merge_into_an_input_and_rerun_is_a_no_op(tmp_path):
    write_run(tmp_path / "a", (0, 2))
    write_run(tmp_path / "b", (1, 2))
    merge_runs(tmp_path / "a", [tmp_path / "a", tmp_path / "b"], progress=False)
    before = shard_bytes(tmp_path / "a")
    again = merge_runs(tmp_path / "a", [tmp_path / "a", tmp_path / "b"], progress=False)
    assert again.copies == {} and again.identical == len(shard_bytes(tmp_path / "b"))
    assert shard_bytes(tmp_path / "a") == before
    assert len((tmp_path / "a" / "m1" / "runlog.jsonl").read_text(encoding="utf-8").splitlines()) == 2


def test_same_shard_with_different_content_is_refused_and_nothing_written(tmp_path):
    write_run(tmp_path / "a", (0, 1))
    write_run(tmp_path / "b", (0, 1), pred_shift=1)  # another run: different predictions
    with pytest.raises(RecordsError, match=r"shard m1/.*\.parquet differs between .*a/m1.* and .*b/m1"):
        merge_runs(tmp_path / "out", [tmp_path / "a", tmp_path / "b"], progress=False)
    assert not (tmp_path / "out").exists()


def test_files_not_in_the_manifest_are_not_merged(tmp_path):
    write_run(tmp_path / "a", (0, 1))
    (tmp_path / "a" / "m1" / ".label--x--00000.parquet.123.tmp").write_bytes(b"half")
    (tmp_path / "a" / "m1" / "stray.parquet").write_bytes(b"half")
    plan = plan_merge(tmp_path / "out", [tmp_path / "a"])
    assert set(plan.copies) == {f"m1/{p.name}" for p in (tmp_path / "a" / "m1").glob("*--*.parquet")}


def test_a_shard_changed_after_its_run_is_refused(tmp_path):
    write_run(tmp_path / "a", (0, 1))
    victim = min((tmp_path / "a" / "m1").glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:-10])  # truncated
    with pytest.raises(RecordsError, match=f"{victim.name}: sha256 does not match"):
        plan_merge(tmp_path / "out", [tmp_path / "a"])
    victim.unlink()
    with pytest.raises(RecordsError, match=f"{victim.name}: listed in .* but missing"):
        plan_merge(tmp_path / "out", [tmp_path / "a"])


def test_a_merge_killed_before_its_manifest_is_completed_by_a_rerun(tmp_path):
    write_run(tmp_path / "a", (0, 2))
    write_run(tmp_path / "b", (1, 2))
    merge_runs(tmp_path / "out", [tmp_path / "a", tmp_path / "b"], progress=False)
    (tmp_path / "out" / MANIFEST_NAME).unlink()  # as if killed after the shards, before the manifest
    merge_runs(tmp_path / "out", [tmp_path / "a", tmp_path / "b"], progress=False)
    assert read_records(tmp_path / "out").num_rows == 2 * len(ITEMS)


@pytest.mark.parametrize("inputs,message", [([], "at least one"), (["missing"], "missing is not a folder"),
                                            (["empty"], "no manifest")])
def test_bad_inputs_are_records_errors(tmp_path, inputs, message):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordsError, match=message):
        plan_merge(tmp_path / "out", [tmp_path / p for p in inputs])


def test_cells_written_under_different_configurations_are_not_merged(tmp_path):
    """Each store records its cells' configurations; a merge keeps them and refuses a disagreement."""
    from cube.records.store import read_manifest, record_cells

    label, cloze = "m1/label--L1__zh_cue__0shot__original", "m1/cloze--cloze"
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        record_cells(tmp_path / name, {label: {"seed": seed}, cloze: {"seed": seed}}, ())
        write_run(tmp_path / name, (0, 2) if name == "a" else (1, 2))
    merge_runs(tmp_path / "ab", [tmp_path / "a", tmp_path / "b"], progress=False)
    assert sorted(read_manifest(tmp_path / "ab")["cells"]) == [cloze, label]
    with pytest.raises(RecordsError, match=r"cell m1/cloze--cloze was written under different .*seed 0 -> 1"):
        plan_merge(tmp_path / "out", [tmp_path / "a", tmp_path / "c"])


def test_issue32_a_merge_keeps_an_incomplete_mark(tmp_path):
    """A bundle's records built with --allow-incomplete carry the lines of the cells they lacked;
    merged with another store, the mark must not be dropped (every reader repeats it)."""
    import json

    from cube.records.store import read_manifest, unfinished_cells

    write_run(tmp_path / "a", (0, 2))
    write_run(tmp_path / "b", (1, 2))
    manifest = json.loads((tmp_path / "a" / MANIFEST_NAME).read_text())
    manifest["incomplete"] = ["m1/label--x: 1 of 2 shards, 5 of 10 items (missing e.g. m1/label--x--00001.parquet)"]
    (tmp_path / "a" / MANIFEST_NAME).write_text(json.dumps(manifest))
    merge_runs(tmp_path / "out", [tmp_path / "a", tmp_path / "b"], progress=False)
    assert unfinished_cells(read_manifest(tmp_path / "out")) == [
        "marked incomplete when written: " + manifest["incomplete"][0]]
    with pytest.raises(RecordsError, match="incomplete store: marked incomplete when written"):
        read_records(tmp_path / "out")
