"""``scripts/drop_cells.py``: replacing an archived cell drops its shards, manifest entries and run-log lines."""

import importlib.util
import json

import pytest

from cube.config import REPO_ROOT
from cube.errors import RecordsError
from cube.records.store import read_records
from tests.records.test_merge import write_run

spec = importlib.util.spec_from_file_location("drop_cells", REPO_ROOT / "scripts" / "drop_cells.py")
drop_cells_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(drop_cells_module)


def _store_with_two_logged_cells(tmp_path):
    store = tmp_path / "store"
    write_run(store, (0, 1))
    names = sorted(f"m1/{p.name}" for p in (store / "m1").glob("*.parquet"))
    label = [n for n in names if n.startswith("m1/label--")]
    cloze = [n for n in names if n.startswith("m1/cloze--")]
    assert label and cloze
    lines = [{"model": "m1", "shard": "0/1", "files": label}, {"model": "m1", "shard": "0/1", "files": cloze}]
    (store / "m1" / "runlog.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return store, label, cloze


def test_a_dropped_cell_leaves_a_store_that_verifies_without_it(tmp_path):
    store, label, cloze = _store_with_two_logged_cells(tmp_path)
    rows = read_records(store).num_rows
    cell = label[0].split("/", 1)[1].rsplit("--", 1)[0]
    drop_cells_module.drop_cells(store, "m1", [cell])
    left = read_records(store, verify=True)  # no "cells incomplete": the run-log line went too
    assert left.num_rows < rows and set(left.column("scorer").to_pylist()) == {"M2"}
    assert sorted(f"m1/{p.name}" for p in (store / "m1").glob("*.parquet")) == cloze
    assert [json.loads(x)["files"] for x in (store / "m1" / "runlog.jsonl").read_text().splitlines()] == [cloze]


def test_a_run_log_line_spanning_dropped_and_kept_cells_refuses_and_writes_nothing(tmp_path):
    store, label, cloze = _store_with_two_logged_cells(tmp_path)
    (store / "m1" / "runlog.jsonl").write_text(json.dumps({"model": "m1", "shard": "0/1", "files": label + cloze}) + "\n")
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    cell = label[0].split("/", 1)[1].rsplit("--", 1)[0]
    with pytest.raises(RecordsError, match="dropped and kept cells alike"):
        drop_cells_module.drop_cells(store, "m1", [cell])
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before
    with pytest.raises(RecordsError, match=r"no shards of cell\(s\) \['label--nope'\]"):
        drop_cells_module.drop_cells(store, "m1", ["label--nope"])
