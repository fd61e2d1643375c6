"""scripts/write_inspect_items.py: the CSV folder scripts/inspect_items_task.py reads, from cube's items."""

from __future__ import annotations

import csv
import importlib.util

import pytest

from cube.config import REPO_ROOT
from cube.protocol.benchmarks import load_items
from cube.protocol.items import stratified_sample

CEVAL = REPO_ROOT / "tests" / "fixtures" / "ceval"


def _script():
    spec = importlib.util.spec_from_file_location("write_inspect_items", REPO_ROOT / "scripts" / "write_inspect_items.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sample_is_written_one_csv_per_subject_as_the_items_are(tmp_path):
    assert _script().main([str(tmp_path / "items"), "--benchmark", "ceval", "--split", "val", "--sample", "4",
                           "--data", str(CEVAL)]) == 0
    expected = stratified_sample(load_items("ceval", CEVAL, splits=("val",)), 4, 0)
    written = []
    for path in sorted((tmp_path / "items").glob("*.csv")):
        with open(path, encoding="utf-8", newline="") as f:
            written += [(path.stem, int(r["row"]), r["question"], tuple(r[k] for k in "ABCD"), r["answer"])
                        for r in csv.DictReader(f)]
    assert sorted(written) == sorted((i.subject, i.row, i.question, i.options, "ABCD"[i.answer]) for i in expected)


def test_a_folder_inside_the_repository_is_refused(capsys):
    with pytest.raises(SystemExit):
        _script().main([str(REPO_ROOT / "data" / "items"), "--benchmark", "ceval", "--data", str(CEVAL)])
    assert "inside the repository" in capsys.readouterr().err
    assert not (REPO_ROOT / "data" / "items").exists()
