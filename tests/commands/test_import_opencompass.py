"""``cube import opencompass``: the report, --json, and one-line errors with nothing written."""

from __future__ import annotations

import json
import shutil

import pytest

from cube import cli
from cube.records.store import read_records
from tests.records.test_opencompass_import import MODEL, UIDS, write_oc_run


@pytest.fixture(scope="module")
def items(cmmlu_items):
    return cmmlu_items(("dev", "test"))


@pytest.fixture
def run(monkeypatch, capsys, benchmarks_root):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.import_lm_eval", "cube.commands.import_opencompass"])

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["import", "opencompass", *argv, "--data", str(benchmarks_root / "cmmlu")])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_import_reports_each_dataset_and_the_audit(run, tmp_path, items):
    write_oc_run(tmp_path / "work", items, UIDS, "ppl", ppls=[[1.5, 1.2, 1.3, 1.4], [1.0, 1.1, 1.3, 1.4]])
    code, out, err = run(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--tokenizer", "smollm2")
    assert code == 0, err
    assert out.startswith(f"imported 2 predictions of 2 dataset(s), model {MODEL}: 2 records")
    assert "label cell ('答案是:' + ' ' + A-D): max1tok" in out and "degenerate cells: none" in out
    assert "PPL over the whole prompt" in out and "of equal length" in out
    assert read_records(tmp_path / "store").num_rows == 2


def test_json_report(run, tmp_path, items):
    write_oc_run(tmp_path / "work", items, UIDS[:1], "gen", generations=["The answer"])
    code, out, err = run(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--no-audit", "--json")
    assert code == 0, err
    report = json.loads(out)
    d = report["datasets"]["cmmlu-computer_security@gen"]
    assert report["records"] == 3 and d["accuracy"] == d["reproduced_accuracy"] == 0.0
    assert d["n_parse_failed"] == {"M6-oc": 1, "M6-strict": 1, "M6-lenient": 1}


def _truncated(run_dir):
    path = next((run_dir / "predictions").rglob("*.json"))
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _no_config(run_dir):
    shutil.rmtree(run_dir / "configs")


@pytest.mark.parametrize("make, kwargs, message", [
    (_truncated, {}, "not valid JSON at line 1 (a truncated predictions file?)"),
    (_no_config, {}, "no dumped config (*.py)"),
    (None, {"kind": "MMLUDataset"}, "is MMLUDataset, not C-Eval or CMMLU"),
    (None, {"model": "../../elsewhere"}, "model abbr '../../elsewhere' is not a plain name"),
])
def test_bad_input_is_one_line_and_writes_nothing(run, tmp_path, items, make, kwargs, message):
    run_dir = write_oc_run(tmp_path / "work", items, UIDS[:1], "ppl", **kwargs)
    if make is not None:
        make(run_dir)
    code, out, err = run(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--no-audit")
    assert code != 0 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "store").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".store")]


def test_a_model_name_with_dot_dot_given_on_the_command_line_is_refused(run, tmp_path, items):
    write_oc_run(tmp_path / "work", items, UIDS[:1], "ppl")
    code, _, err = run(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--no-audit", "--model", "../x")
    assert code != 0 and "model abbr '../x' is not a plain name" in err
    assert not (tmp_path / "store").exists()


def test_a_generation_import_says_its_parse_failures_and_why_strict_fails(run, tmp_path, items):
    """Issue 36 §6: the report said `M6-strict 1, M6-lenient 0` without saying these were parse
    failures, or why cube's strict extractor fails on every OpenCompass generation (a bare ` A`),
    and printed a label-cell audit for a run that scores no label."""
    write_oc_run(tmp_path / "work", items, UIDS[:1], "gen", generations=[" A"])
    code, out, err = run(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--tokenizer", "smollm2")
    assert code == 0, err
    assert "parse failures (generations no answer was read from): OpenCompass's first_capital_postprocess 0/1, " \
           "cube's M6-strict 1/1, M6-lenient 0/1" in out
    assert "M6-strict reads only the strict answer form its own prompts ask for, `答案：X`" in out
    assert "label cell (" not in out and "no label cell: a generation run's answers are read from the text" in out
