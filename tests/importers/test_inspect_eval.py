"""Importing inspect_ai logs (cube.importers.inspect_eval).

The fixture, tests/fixtures/inspect/*.eval, is the log of one REAL inspect_ai 0.3.285 run (and *.json
the same log as ``inspect log convert --to json`` wrote it: the .eval's members are zstd, which
Python 3.11's zipfile cannot read, and cube adds no zstd dependency for it): its own
``multiple_choice`` solver and ``choice`` scorer over the hand-written C-Eval-format val items of
tests/fixtures/ceval (no benchmark text), SmolLM2-135M-Instruct behind a local OpenAI-compatible
server (``openai-api`` provider); tests/fixtures/inspect/README.md says how it was made.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from cube.config import REPO_ROOT
from cube.errors import HarnessImportError
from cube.importers.inspect_eval import INSPECT_SCORER, LABELS, describe, import_runs, read, read_log
from cube.protocol.benchmarks import load_items
from cube.records.store import read_records

CEVAL = REPO_ROOT / "tests" / "fixtures" / "ceval"
EVAL_LOG = next((REPO_ROOT / "tests" / "fixtures" / "inspect").glob("*.eval"))
LOG = EVAL_LOG.with_suffix(".json")


@pytest.fixture(scope="module")
def items():
    return load_items("ceval", CEVAL, splits=("dev", "val", "test"))


def _samples(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["samples"]


def test_the_real_log_imports_with_its_answers_and_accuracy(items):
    imported = import_runs(read(LOG, "ceval").runs, items)
    samples = _samples(LOG)
    rows = imported.rows
    assert len(rows) == 3 * len(samples)
    logged = sorted(s["scores"]["choice"]["answer"] or "" for s in samples)  # read here, independently
    assert sorted(LABELS[r["pred"]] if r["pred"] >= 0 else "" for r in rows if r["scorer"] == INSPECT_SCORER) == logged
    correct = sum(s["scores"]["choice"]["value"] == "C" for s in samples)
    assert sum(r["correct"] for r in rows if r["scorer"] == INSPECT_SCORER) == correct
    header = json.loads(LOG.read_text(encoding="utf-8"))
    reported = next(s for s in header["results"]["scores"] if s["name"] == "choice")["metrics"]["accuracy"]["value"]
    assert imported.metadata["inspect_ai"]["reported"] == reported == pytest.approx(correct / len(samples))
    for row in rows:  # generations scrubbed of the item's own text
        item = next(i for i in items if i.uid == row["uid"])
        assert item.question not in row["generation"]


def _rewrite(src: Path, dst: Path, change) -> None:
    log = json.loads(src.read_text(encoding="utf-8"))
    change(log["samples"][0])
    dst.write_text(json.dumps(log, ensure_ascii=False), encoding="utf-8")


def _flip(sample: dict) -> None:
    sample["scores"]["choice"]["value"] = "I" if sample["scores"]["choice"]["value"] == "C" else "C"


def _swap(sample: dict) -> None:
    sample["choices"][0], sample["choices"][1] = sample["choices"][1], sample["choices"][0]


@pytest.mark.parametrize("change, message", [(_flip, "inspect_ai scored"), (_swap, "match 0 items")])
def test_an_edited_log_is_refused(tmp_path, items, change, message):
    edited = tmp_path / "edited.json"
    _rewrite(LOG, edited, change)
    with pytest.raises(HarnessImportError, match=message):
        import_runs(read(edited, "ceval").runs, items)


def test_an_unfinished_log_a_zstd_eval_and_a_missing_benchmark_are_one_line(tmp_path):
    log = json.loads(LOG.read_text(encoding="utf-8"))
    (tmp_path / "started.json").write_text(json.dumps({**log, "status": "started"}), encoding="utf-8")
    with pytest.raises(HarnessImportError, match="status is 'started', not 'success'"):
        read_log(tmp_path / "started.json")
    with zipfile.ZipFile(EVAL_LOG) as archive:  # the real .eval: zstd members
        assert {i.compress_type for i in archive.infolist() if i.filename.startswith("samples/")} == {93}
    with pytest.raises(HarnessImportError, match="inspect log convert"):
        read_log(EVAL_LOG)
    no_header = tmp_path / "no_header.eval"
    with zipfile.ZipFile(no_header, "w") as archive:
        archive.writestr("samples/1_epoch_1.json", "{}")
    with pytest.raises(HarnessImportError, match="no header.json"):
        read_log(no_header)
    with pytest.raises(HarnessImportError, match="give --benchmark"):
        read(LOG, None)


def test_cube_import_inspect_and_explain_reads_its_protocol(tmp_path, capsys, monkeypatch, items):
    from cube import cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.import_run"])
    code = cli.main(["import", "inspect", str(LOG), "--out", str(tmp_path / "store"), "--benchmark", "ceval",
                     "--data", str(CEVAL)])
    out, err = capsys.readouterr()
    n = len(_samples(LOG))
    assert code == 0, err
    assert out.startswith(f"imported {n} samples of task ceval_fixture")
    assert read_records(tmp_path / "store").num_rows == 3 * n
    imported = import_runs(read(LOG, "ceval").runs, items)
    protocol = describe(imported.metadata, imported.rows[0], [], "x")
    assert protocol.harness == "inspect_ai" and "ANSWER" in protocol.extractor
