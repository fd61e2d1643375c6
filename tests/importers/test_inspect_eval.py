"""Importing inspect_ai logs (cube.importers.inspect_eval).

The fixture, tests/fixtures/inspect/*.eval, is the log of one REAL inspect_ai 0.3.285 run with
``--logprobs --top-logprobs 20`` (and *.json
the same log as ``inspect log convert --to json`` wrote it: the .eval's members are zstd, which
Python 3.11's zipfile cannot read, and cube adds no zstd dependency for it): its own
``multiple_choice`` solver and ``choice`` scorer over the hand-written C-Eval-format val items of
tests/fixtures/ceval (no benchmark text), SmolLM2-135M-Instruct behind vLLM's OpenAI-compatible
server (``openai-api`` provider); tests/fixtures/inspect/README.md says how it was made. The
log-likelihood records (M1-inspect) are checked against the log's own top log-probabilities, read
here naively; an absent label and a log without log-probabilities are edited copies of it.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from cube.config import REPO_ROOT
from cube.errors import HarnessImportError
from cube.importers.inspect_eval import (
    INSPECT_SCORER,
    LABELS,
    LOGPROB_SCORER,
    GeneratedToken,
    answer_token,
    describe,
    format_report,
    import_runs,
    read,
    read_log,
)
from cube.protocol.benchmarks import load_items
from cube.records.degeneracy import degenerate_cells
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
    assert len(rows) == 4 * len(samples)  # M6-inspect, M6-strict, M6-lenient, M1-inspect
    logged = sorted(s["scores"]["choice"]["answer"] or "" for s in samples)  # read here, independently
    assert sorted(LABELS[r["pred"]] if r["pred"] >= 0 else "" for r in rows if r["scorer"] == INSPECT_SCORER) == logged
    correct = sum(s["scores"]["choice"]["value"] == "C" for s in samples)
    assert sum(r["correct"] for r in rows if r["scorer"] == INSPECT_SCORER) == correct
    header = json.loads(LOG.read_text(encoding="utf-8"))
    reported = next(s for s in header["results"]["scores"] if s["name"] == "choice")["metrics"]["accuracy"]["value"]
    assert imported.metadata["inspect_ai"]["reported"] == reported == pytest.approx(correct / len(samples))
    for row in rows:  # generations scrubbed of the item's own text
        item = next(i for i in items if i.uid == row["uid"])
        assert row["generation"] is None or item.question not in row["generation"]


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


def test_an_error_line_shows_a_logged_answer_by_its_digest_never_its_text(tmp_path, items):
    """Issue 48 §4: a logged answer that is text (it may quote the item) is shown by its digest."""
    quote = "ANSWER: the option that reads exactly as the question's second option"
    edited = tmp_path / "edited.json"
    _rewrite(LOG, edited, lambda sample: sample["scores"]["choice"].update(answer=quote))
    with pytest.raises(HarnessImportError, match="the logged answer text sha256:") as raised:
        import_runs(read(edited, "ceval").runs, items)
    assert quote[:12] not in str(raised.value)


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
    assert read_records(tmp_path / "store").num_rows == 4 * n
    imported = import_runs(read(LOG, "ceval").runs, items)
    protocol = describe(imported.metadata, imported.rows[0], [], "x")
    assert protocol.harness == "inspect_ai" and "ANSWER" in protocol.extractor


# --- log-likelihood samples (M1-inspect) ------------------------------------------------------------


def _naive_label_logprobs(sample: dict) -> tuple[list[float | None], float]:
    """The labels' log-probabilities at the sample's answer token, read straight off the log: the
    fixture's model never writes ``ANSWER:`` (choice read no answer), so its answer token is the
    first generated token, a lone letter; a label is the top-K entry whose token is that letter."""
    assert sample["scores"]["choice"]["answer"] == ""
    position = sample["output"]["choices"][0]["logprobs"]["content"][0]
    assert position["token"] in LABELS
    top = position["top_logprobs"]
    found = [[t["logprob"] for t in top if t["token"] == label] for label in LABELS]
    return [f[0] if f else None for f in found], min(t["logprob"] for t in top)


def _by_uid(rows: list[dict], scorer: str) -> dict[str, dict]:
    return {r["uid"]: r for r in rows if r["scorer"] == scorer}


def _uid(sample: dict) -> str:
    subject, row = sample["id"].split("/")
    return f"ceval/{subject}/val/{row}"


def test_label_logprobs_are_the_logs_and_the_decision_their_argmax(items):
    imported = import_runs(read(LOG, "ceval").runs, items)
    scored = _by_uid(imported.rows, LOGPROB_SCORER)
    samples = _samples(LOG)
    assert len(scored) == len(samples)
    correct = 0
    for sample in samples:
        logprobs, _ = _naive_label_logprobs(sample)
        assert None not in logprobs  # the fixture's labels are all in the top-20
        row = scored[_uid(sample)]
        assert row["scores"] == logprobs
        assert row["pred"] == max(range(4), key=lambda i: logprobs[i]) and not row["tied"]
        correct += row["pred"] == row["gold"]
    meta = imported.metadata["inspect_ai"]["logprobs"]
    assert meta["accuracy"] == pytest.approx(correct / len(samples))
    assert meta["top_logprobs"] == 20 and meta["n_label_absent"] == 0
    assert meta["answer_tokens"] == {"first token": len(samples)}


def _edited_log(tmp_path: Path, change) -> Path:
    log = json.loads(LOG.read_text(encoding="utf-8"))
    change(log["samples"])
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(log, ensure_ascii=False), encoding="utf-8")
    return path


def _drop_labels(sample: dict, labels: str) -> None:
    position = sample["output"]["choices"][0]["logprobs"]["content"][0]
    position["top_logprobs"] = [t for t in position["top_logprobs"] if t["token"] not in labels]


def test_a_label_outside_the_top_k_scores_the_floor_and_absent_labels_tie(tmp_path, items):
    samples = _samples(LOG)
    first, second = samples[0], samples[1]
    # one absent label, not the generated one; and, on another sample, every label absent (a label
    # inside the top-K is at least the floor, so only labels all outside it leave the log undecided)
    kept = next(label for label in LABELS if label != first["output"]["choices"][0]["logprobs"]["content"][0]["token"])

    def change(edited: list[dict]) -> None:
        _drop_labels(edited[0], kept)
        _drop_labels(edited[1], LABELS)
        # greedy decoding generated the top label: a lone letter outside the labels keeps the log coherent
        edited[1]["output"]["choices"][0]["logprobs"]["content"][0]["token"] = "X"

    path = _edited_log(tmp_path, change)
    edited = _samples(path)
    imported = import_runs(read(path, "ceval").runs, items)
    scored = _by_uid(imported.rows, LOGPROB_SCORER)
    logprobs, floor = _naive_label_logprobs(edited[0])
    assert logprobs[LABELS.index(kept)] is None
    row = scored[_uid(first)]
    assert row["scores"] == [floor if lp is None else lp for lp in logprobs]
    assert not row["tied"] and row["pred"] == max(range(4), key=lambda i: row["scores"][i])
    position = edited[1]["output"]["choices"][0]["logprobs"]["content"][0]
    floor = min(t["logprob"] for t in position["top_logprobs"])
    row = scored[_uid(second)]
    assert row["scores"] == [floor] * 4
    assert row["tied"] and row["pred"] == 0 and row["tie_groups"] == "0=1=2=3"  # the tie-break, recorded
    meta = imported.metadata["inspect_ai"]["logprobs"]
    assert (meta["n_label_absent"], meta["n_absent_tied"]) == (2, 1)
    assert "items with a label outside the top-20: 2/6" in format_report(imported)
    cells = degenerate_cells([r for r in imported.rows if r["scorer"] == LOGPROB_SCORER])
    assert [(c.n_tied, c.n_all_equal) for c in cells] == [(1, 1)]  # cube's degeneracy checks see it


def test_a_log_without_logprobs_imports_its_generations_only(tmp_path, items):
    def strip(edited: list[dict]) -> None:
        for sample in edited:
            sample["output"]["choices"][0].pop("logprobs")

    imported = import_runs(read(_edited_log(tmp_path, strip), "ceval").runs, items)
    assert {r["scorer"] for r in imported.rows} == {INSPECT_SCORER, "M6-strict", "M6-lenient"}
    assert len(imported.rows) == 3 * len(_samples(LOG))
    assert "logprobs" not in imported.metadata["inspect_ai"]
    assert "no log-probabilities in the log" in format_report(imported)


def test_a_log_with_logprobs_on_some_samples_only_is_refused(tmp_path, items):
    path = _edited_log(tmp_path, lambda edited: edited[0]["output"]["choices"][0].pop("logprobs"))
    with pytest.raises(HarnessImportError, match="5 of its 6 samples carry top log-probabilities"):
        import_runs(read(path, "ceval").runs, items)


def _tokens(*texts: str) -> list[GeneratedToken]:
    return [GeneratedToken(t, t, {}) for t in texts]


@pytest.mark.parametrize("texts, answered, expected", [
    (("A", ")", " x", "\n", "ANSWER", ":", " C"), "C", (6, "after ANSWER:")),  # the letter choice read
    (("ANSWER", ": ", "A", "\n", "ANSWER", ":", " B", "."), "B", (6, "after ANSWER:")),  # its last match
    (("The", " answer", ": ", "D", " because"), "D", (3, "after ANSWER:")),  # "answer:" anywhere
    (("ANSWER", ":", " B."), "B", (None, "none")),  # the letter inside a longer token: no lone label
    (("B", ")", " x"), "", (0, "first token")),  # no ANSWER: a generation opening with a label
    (("The", " B"), "", (None, "none")),
])
def test_the_answer_token_is_where_choice_read_its_letter(texts, answered, expected):
    assert answer_token(_tokens(*texts), answered) == expected


def test_a_sample_without_an_answer_token_has_no_scored_record_and_is_counted(tmp_path, items):
    def no_label(edited: list[dict]) -> None:  # the generation opens with a word, not a lone label
        edited[0]["output"]["choices"][0]["logprobs"]["content"][0]["token"] = "The"

    imported = import_runs(read(_edited_log(tmp_path, no_label), "ceval").runs, items)
    samples = _samples(LOG)
    assert _uid(samples[0]) not in _by_uid(imported.rows, LOGPROB_SCORER)
    assert len(_by_uid(imported.rows, LOGPROB_SCORER)) == len(samples) - 1
    meta = imported.metadata["inspect_ai"]["logprobs"]
    assert meta["answer_tokens"] == {"first token": len(samples) - 1, "none": 1}
    assert "over 5 records" in format_report(imported) and "none (no record) 1" in format_report(imported)


def test_a_generation_with_a_thinking_block_is_re_read_by_cubes_extractors_after_it(tmp_path, items):
    """Issue 49: a reasoning model's output in an inspect_ai log, a block holding another letter
    before the model's own answer: cube's M6-strict and M6-lenient read after the block (as on the
    unedited output), never the thought's letter; inspect_ai's own logged answer stays as logged."""
    samples = _samples(LOG)
    uid = _uid(samples[0])
    plain = {r["scorer"]: r for r in import_runs(read(LOG, "ceval").runs, items).rows if r["uid"] == uid}
    assert plain["M6-strict"]["pred"] == -1  # so a reader of the whole text would take the thought's letter

    def think_first(sample: dict) -> None:
        message = sample["output"]["choices"][0]["message"]
        assert isinstance(message["content"], str)
        other = "D" if plain["M6-lenient"]["pred"] != 3 else "A"
        message["content"] = f"<think>ANSWER: {other}\n答案：{other}</think>\n" + message["content"]

    edited = tmp_path / "thinking.json"
    _rewrite(LOG, edited, think_first)
    thought = {r["scorer"]: r for r in import_runs(read(edited, "ceval").runs, items).rows if r["uid"] == uid}
    for scorer in ("M6-strict", "M6-lenient"):
        assert thought[scorer]["pred"] == plain[scorer]["pred"], scorer
        assert thought[scorer]["thinking"] == ("answered" if plain[scorer]["pred"] >= 0 else "no_answer_after_thinking")
        assert plain[scorer]["thinking"] == "none"
    assert thought[INSPECT_SCORER]["pred"] == plain[INSPECT_SCORER]["pred"] and thought[INSPECT_SCORER]["thinking"] is None
