"""``scripts/migrate_run_logs.py``: old run-log lines get their ``files`` once, every other byte kept (issue 25)."""

import importlib.util
import json
import shutil

import pytest

from cube.config import REPO_ROOT
from cube.errors import RecordsError
from cube.records.provenance import logged_files, read_run_logs
from cube.records.store import read_manifest

spec = importlib.util.spec_from_file_location("migrate_run_logs", REPO_ROOT / "scripts" / "migrate_run_logs.py")
migrate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(migrate)

OLD = {"model": "m1", "benchmark": "cmmlu", "n_items": 5, "scorers": ["M1-seq", "M2"], "shard": "0/1",
       "cells": ["L1_halfwidth|zh_cue|0shot|original", "L4_circled|zh_cue|0shot|original"],
       "command": "cube run --model m1 --shard-size 2 --out x", "jobs_run": 7, "jobs_skipped": 2,
       "versions": {"torch": "2.13.0+cpu"}, "wall_s": 1.5}


def test_an_old_line_gets_the_files_its_run_planned_and_keeps_every_other_byte(tmp_path):
    store = tmp_path / "store"
    (store / "m1").mkdir(parents=True)
    hand = '{"model": "m1", "wall_s": 1.0}'  # no item count or scorers: vouches for nothing, kept
    new = json.dumps({"model": "m1", "files": ["m1/x--00000.parquet"]})
    old = json.dumps(OLD, ensure_ascii=False)
    log = store / "m1" / "runlog.jsonl"
    log.write_text("\n".join([hand, old, new]) + "\n", encoding="utf-8")
    assert migrate.migrate_store(store) == 1
    lines = log.read_text(encoding="utf-8").split("\n")
    assert lines[0] == hand and lines[2] == new and lines[3] == ""
    # 5 items in shards of 2: chunks 0, 1, 2; two label cells and the cloze cell: 9 shards, named by hand
    cells = ["label--L1_halfwidth__zh_cue__0shot__original", "label--L4_circled__zh_cue__0shot__original",
             "cloze--cloze"]
    files = [f"m1/{cell}--{chunk:05d}.parquet" for cell in cells for chunk in range(3)]
    assert lines[1] == old[:-1] + ', "files": ' + json.dumps(files) + "}"
    assert sorted(logged_files(json.loads(lines[1]))) == sorted(files)
    before = log.read_bytes()
    assert migrate.migrate_store(store) == 0 and log.read_bytes() == before  # once only


def test_a_line_whose_plan_disagrees_with_its_jobs_is_refused_and_nothing_written(tmp_path):
    store = tmp_path / "store"
    (store / "m1").mkdir(parents=True)
    log = store / "m1" / "runlog.jsonl"
    text = json.dumps(OLD) + "\n" + json.dumps({**OLD, "jobs_run": 3}) + "\n"
    log.write_text(text, encoding="utf-8")
    with pytest.raises(RecordsError, match=r"m1/runlog.jsonl:2: .*run log of 'm1': a line's 9 planned shards"):
        migrate.migrate_store(store)
    assert log.read_text(encoding="utf-8") == text


def test_the_archive_is_migrated_and_each_line_vouches_for_its_own_runs_shards(tmp_path):
    """The committed stores were migrated: nothing is left to do, and each line lists as many
    shards as it says it ran and skipped, all of them in the store's manifest."""
    for name in ("records", "sample"):
        archive = REPO_ROOT / "data" / name
        copy = tmp_path / name
        shutil.copytree(archive, copy)
        assert migrate.migrate_store(copy) == 0
        listed = read_manifest(archive)["files"]
        for entry in read_run_logs(archive):
            files = logged_files(entry)
            assert len(files) == entry["jobs_run"] + entry["jobs_skipped"] and set(files) <= set(listed)


@pytest.mark.parametrize("line, reason", [
    ("[1, 2]", "a list, not a JSON object"),
    ('{"model": "m1", "n_items": 1000000000000, "scorers": ["M1-seq"]}', "n_items 1000000000000"),  # a 10**12 tuple
    ('{"model": "m1", "n_items": 5, "scorers": 5}', "'scorers' and 'cells' are not lists"),
    ('{"model": "m1", "n_items": 5, "scorers": ["M1-seq"], "shard": "x"}', "not a run-log line"),
    ("{not json", "not a run-log line"),
])
def test_issue32_a_bad_line_is_one_line_naming_it_and_nothing_is_written(tmp_path, line, reason):
    store = tmp_path / "store"
    (store / "m1").mkdir(parents=True)
    log = store / "m1" / "runlog.jsonl"
    text = json.dumps(OLD) + "\n" + line + "\n"
    log.write_text(text, encoding="utf-8")
    with pytest.raises(RecordsError, match=r"m1/runlog.jsonl:2: ") as caught:
        migrate.migrate_store(store)
    assert reason in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
    assert log.read_text(encoding="utf-8") == text
