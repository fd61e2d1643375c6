"""Importing EvalScope 1.x runs (cube.importers.evalscope).

The fixture, tests/fixtures/evalscope/, is the output folder of one REAL EvalScope 1.14.1 run
(``evalscope eval --datasets ceval``, its own C-Eval adapter: 5-shot exemplars with explanations,
``答案：X``) of SmolLM2-135M-Instruct served by a local OpenAI-compatible server, on the hand-written
C-Eval-format items of tests/fixtures/ceval (no benchmark text); tests/fixtures/evalscope/README.md
says how it was made. The tests check the import against the fixture's own files, read here
independently, and that edited copies of it are refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cube.config import REPO_ROOT
from cube.errors import HarnessImportError
from cube.importers.contract import write_store
from cube.importers.evalscope import ES_SCORER, IMPORTER, LABELS, describe, format_report, import_runs, read
from cube.protocol.benchmarks import load_items
from cube.records.store import read_manifest, read_records

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "evalscope"
CEVAL = REPO_ROOT / "tests" / "fixtures" / "ceval"
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def items():
    return load_items("ceval", CEVAL, splits=("dev", "val", "test"))


def _reviews(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("*/reviews/*/*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _import(folder: Path, items):
    return import_runs(read(folder).runs, items)


def test_the_real_run_imports_with_its_decisions_and_scores(items):
    imported = _import(FIXTURE, items)
    reviews = _reviews(FIXTURE)
    rows = imported.rows
    assert len(rows) == 3 * len(reviews) and {r["scorer"] for r in rows} == {ES_SCORER, "M6-strict", "M6-lenient"}
    # EvalScope's extracted answers, read from the reviews here, are the M6-es decisions, item for item
    extracted = sorted(r["sample_score"]["score"]["extracted_prediction"] or "" for r in reviews)
    mine = sorted(LABELS[r["pred"]] if r["pred"] >= 0 else "" for r in rows if r["scorer"] == ES_SCORER)
    assert mine == extracted
    # and their accuracy is EvalScope's: the mean of its per-sample scores, and its report's
    values = [next(iter(r["sample_score"]["score"]["value"].values())) for r in reviews]
    es_rows = [r for r in rows if r["scorer"] == ES_SCORER]
    assert sum(r["correct"] for r in es_rows) == sum(values)
    report = json.loads(next(FIXTURE.glob("*/reports/*/ceval.json")).read_text(encoding="utf-8"))
    reported = {s["name"]: s["score"] for m in report["metrics"] for c in m["categories"] for s in c["subsets"]}
    for key, d in imported.metadata["evalscope"]["subsets"].items():
        assert d["reported"] == reported[d["subject"]] and abs(d["score"] - d["reported"]) < 5e-5
    assert {r["uid"].split("/")[2] for r in rows} == {"val"} and {r["shots"] for r in rows} == {5}


def test_the_store_keeps_the_protocol_and_no_item_text(tmp_path, items):
    imported = _import(FIXTURE, items)
    write_store(tmp_path / "store", imported)
    table = read_records(tmp_path / "store", items=items)
    meta = read_manifest(tmp_path / "store")["metadata"]["evalscope"]
    bench = next(iter(meta["runs"].values()))["benchmarks"]["ceval"]
    assert bench["few_shot_num"] == 5 and "答案：[LETTER]" in bench["prompt_template"]
    for row in table.to_pylist():  # generations are scrubbed of the item's question and options
        item = next(i for i in items if i.uid == row["uid"])
        assert item.question not in row["generation"]
        assert not any(len(o) >= 4 and o in row["generation"] for o in item.options)


def test_explain_reads_the_protocol_from_the_store(items):
    imported = _import(FIXTURE, items)
    row = imported.rows[0]
    protocol = describe(imported.metadata, row, [], "generation")
    assert protocol.harness == "EvalScope" and protocol.prompt.startswith("{{exemplars}}")
    # what the exemplars showed, read off the run's own prompts: every one carries its 解析 explanation
    assert protocol.exemplars == "5 exemplars: question, options, a worked explanation (解析), then the answer label"
    assert imported.metadata["evalscope"]["subsets"]["ceval_computer_network"]["exemplars"]["explained"] > 0
    assert protocol.chat_template.startswith("model")
    assert "问题：{{Question}}\n选项：\nA. {{A}}" in protocol.prompt
    assert "parse_answers_zh" in describe(imported.metadata, {**row, "scorer": ES_SCORER}, [], "").extractor
    assert protocol.aggregation.startswith("per subset")


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "run")
    return tmp_path / "run"


def _edit_first_review(folder: Path, change) -> None:
    path = sorted(folder.glob("*/reviews/*/*.jsonl"))[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    change(first)
    path.write_text("\n".join([json.dumps(first, ensure_ascii=False), *lines[1:]]) + "\n", encoding="utf-8")


def _truncate_first_predictions(folder: Path) -> None:
    """A copy cut off mid-way through its second line, as a killed EvalScope leaves it."""
    path = sorted(folder.glob("*/predictions/*/*.jsonl"))[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2], encoding="utf-8")


def _flip_score(review: dict) -> None:
    value = review["sample_score"]["score"]["value"]
    key = next(iter(value))
    value[key] = 1.0 - value[key]


def _other_target(review: dict) -> None:
    review["target"] = ["D" if review["target"] != ["D"] else "A"]


def _edit_report(folder: Path) -> None:
    path = next(folder.glob("*/reports/*/ceval.json"))
    report = json.loads(path.read_text(encoding="utf-8"))
    subset = report["metrics"][0]["categories"][0]["subsets"][0]
    subset["score"] = 1.0 if subset["score"] < 0.5 else 0.0
    path.write_text(json.dumps(report), encoding="utf-8")


def _swap_options(folder: Path) -> None:
    path = sorted(folder.glob("*/predictions/*/*.jsonl"))[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    user = first["messages"][0]
    head, _, tail = user["content"].rpartition("\nA. ")
    a, rest = tail.split("\nB. ", 1)
    b, rest = rest.split("\nC. ", 1)
    user["content"] = f"{head}\nA. {b}\nB. {a}\nC. {rest}"
    path.write_text("\n".join([json.dumps(first, ensure_ascii=False), *lines[1:]]) + "\n", encoding="utf-8")


@pytest.mark.parametrize("spoil, message", [
    (lambda f: _edit_first_review(f, _flip_score), "EvalScope scored"),
    (lambda f: _edit_first_review(f, _other_target), "EvalScope's target is"),
    (_edit_report, "but its own reviews give"),
    (_swap_options, "the prompt's options are not item"),
    (lambda f: shutil.rmtree(next(f.glob("*/configs"))), "no task_config*.yaml"),
    (_truncate_first_predictions, r"predictions/\S+\.jsonl line 2: not a JSON line \("),
])
def test_a_run_whose_files_disagree_is_refused(tmp_path, items, spoil, message):
    folder = _copy(tmp_path)
    spoil(folder)
    with pytest.raises(HarnessImportError, match=message.replace("*", r"\*")):
        _import(folder, items)


def test_an_error_line_shows_a_logged_answer_by_its_digest_never_its_text(tmp_path, items):
    """Issue 48 §4: a model's extracted answer may quote the item; a failed CI log must not carry it."""
    quote = "这是一段引用了题目原文的很长的回答"

    def spoil(review: dict) -> None:
        _flip_score(review)
        review["sample_score"]["score"]["extracted_prediction"] = quote

    folder = _copy(tmp_path)
    _edit_first_review(folder, spoil)
    with pytest.raises(HarnessImportError, match="EvalScope scored") as raised:
        _import(folder, items)
    assert quote not in str(raised.value) and "text sha256:" in str(raised.value)


def test_cube_import_evalscope_writes_the_store_and_reports(tmp_path, capsys, monkeypatch):
    from cube import cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.import_run"])
    code = cli.main(["import", "evalscope", str(FIXTURE), "--out", str(tmp_path / "store"), "--data", str(CEVAL)])
    out, err = capsys.readouterr()
    n = len(_reviews(FIXTURE))
    assert code == 0, err
    assert out.startswith(f"imported {n} samples of 2 subset(s), model {MODEL}: {3 * n} records")
    assert read_records(tmp_path / "store").num_rows == 3 * n
    assert IMPORTER.name == "evalscope" and not IMPORTER.audits


def _as_cmmlu_run(folder: Path, option_line: str) -> None:
    """The fixture's run rewritten as EvalScope's CMMLU adapter names and lays it out: the benchmark
    ``cmmlu`` in the config and the file names, and every option line of the prompts written
    ``option_line`` (its generic ``answer_options`` writes ``A) <option>``; C-Eval's own adapter
    ``A. <option>``). The generations, reviews and reports are the real run's."""
    import re

    import yaml

    config_path = next(folder.glob("*/configs/task_config*.yaml"))
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config["resolved_benchmarks"] = {"cmmlu": {**config["resolved_benchmarks"]["ceval"], "name": "cmmlu"}}
    config_path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    for path in [*folder.glob("*/predictions/*/ceval_*.jsonl"), *folder.glob("*/reviews/*/ceval_*.jsonl"),
                 *folder.glob("*/reports/*/ceval.json")]:
        path.rename(path.with_name(path.name.replace("ceval", "cmmlu", 1)))
    for path in folder.glob("*/predictions/*/cmmlu_*.jsonl"):
        entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for entry in entries:
            for message in entry["messages"]:
                message["content"] = re.sub(r"(?m)^([ABCD])\. ", lambda m: option_line.format(label=m.group(1)),
                                            message["content"])
        path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries), encoding="utf-8")


def test_a_cmmlu_run_is_read_in_its_adapters_option_layout(tmp_path, items):
    # EvalScope 1.14.1 writes CMMLU's options "A) <option>" (a real run on the 24 CMMLU items of
    # data/imported/evalscope-smollm2 did); its C-Eval options "A. <option>". Each benchmark's prompt
    # is checked against its own layout.
    folder = _copy(tmp_path)
    _as_cmmlu_run(folder, "{label}) ")
    imported = _import(folder, items)
    reviews = _reviews(folder)
    assert len(imported.rows) == 3 * len(reviews)
    assert {d["benchmark"] for d in imported.metadata["evalscope"]["subsets"].values()} == {"cmmlu"}
    extracted = sorted(r["sample_score"]["score"]["extracted_prediction"] or "" for r in reviews)
    assert sorted(LABELS[r["pred"]] if r["pred"] >= 0 else "" for r in imported.rows if r["scorer"] == ES_SCORER) \
        == extracted


def test_a_cmmlu_run_in_c_evals_option_layout_is_refused(tmp_path, items):
    folder = _copy(tmp_path)
    _as_cmmlu_run(folder, "{label}. ")  # not how EvalScope prompts CMMLU: not this item's prompt
    with pytest.raises(HarnessImportError, match="the prompt's options are not item"):
        _import(folder, items)


# ---- the committed real CMMLU run: data/imported/evalscope-smollm2 (data/imported/README.md) ------

CMMLU_STORE = REPO_ROOT / "data" / "imported" / "evalscope-smollm2"
CUBE_24 = REPO_ROOT / "data" / "harnesses" / "cube-smollm2-24"


def test_the_committed_cmmlu_run_holds_evalscopes_decisions_on_the_24_items():
    table = read_records(CMMLU_STORE).to_pylist()
    meta = read_manifest(CMMLU_STORE)["metadata"]["evalscope"]
    # the items of cube's own run and of the lm-eval import, one per subject
    assert {r["uid"] for r in table} == {r["uid"] for r in read_records(CUBE_24).to_pylist()}
    assert len({r["uid"] for r in table}) == 24 and {r["subject"] for r in table} == {
        d["subject"] for d in meta["subsets"].values()}
    # EvalScope's own report of each subset, logged in the manifest, is the M6-es records' accuracy
    for d in meta["subsets"].values():
        rows = [r for r in table if r["scorer"] == ES_SCORER and r["subject"] == d["subject"]]
        assert len(rows) == d["n"] == 1 and float(rows[0]["correct"]) == d["reported"]
    # its report's totals, checked at import against the records: 4 of 24 overall, and the macro score
    # the mean of its 5 categories' (each the mean of its subjects', one item each)
    totals = meta["reported_totals"]["cmmlu"]
    right = {r["subject"]: float(r["correct"]) for r in table if r["scorer"] == ES_SCORER}
    assert totals["overall"]["num"] == 24 and totals["overall"]["score"] == round(sum(right.values()) / 24, 4) == 0.1667
    categories = [v for k, v in totals.items() if k.startswith("category ")]
    assert len(categories) == 5 and sum(c["num"] for c in categories) == 24
    assert abs(totals["overall"]["macro_score"] - sum(c["macro_score"] for c in categories) / 5) <= 2e-4
    run = next(iter(meta["runs"].values()))
    bench = run["benchmarks"]["cmmlu"]
    assert run["evalscope_version"] == "1.14.1" and bench["few_shot_num"] == 0 and bench["eval_split"] == "test"
    assert "请在回答前进行一步步思考" in bench["prompt_template"]  # its CMMLU default: chain of thought
    assert "dataset_id" not in bench  # the scratch folder's path is not kept
    # what `cube explain` shows of it: CMMLU's own option layout ('A) '), 0-shot, a chat API
    row = table[0]
    protocol = describe({"evalscope": meta}, row, [row["context"]], "generation")
    assert "选项：\nA) {{A}}\nB) {{B}}" in protocol.prompt and "是 {{letters}} 中" in protocol.prompt
    assert protocol.exemplars == "none" and protocol.chat_template.startswith("model")


def test_the_committed_cmmlu_run_holds_no_benchmark_text(benchmarks_root, capsys):
    from cube import cli

    code = cli.main(["release", "audit", str(CMMLU_STORE), "--items", str(benchmarks_root / "cmmlu")])
    assert code == 0 and "leakage audit clean: 0 hit(s) in 72 records" in capsys.readouterr().out


def _report(folder: Path) -> tuple[Path, dict]:
    path = next(folder.glob("*/reports/*/ceval.json"))
    return path, json.loads(path.read_text(encoding="utf-8"))


def _one_right(folder: Path) -> str:
    """The first review made right (EvalScope's extracted answer the target, score 1), the report's
    numbers made as EvalScope makes them; returns that subset's name."""
    def right(review: dict) -> None:
        review["sample_score"]["score"]["extracted_prediction"] = review["target"][0] if isinstance(
            review["target"], list) else review["target"]
        value = review["sample_score"]["score"]["value"]
        value[next(iter(value))] = 1.0
    _edit_first_review(folder, right)
    first = sorted(folder.glob("*/reviews/*/*.jsonl"))[0].stem.removeprefix("ceval_")
    path, report = _report(folder)
    metric = report["metrics"][0]
    for category in metric["categories"]:
        for subset in category["subsets"]:
            if subset["name"] == first:
                subset["score"] = round(1 / subset["num"], 4)
        subs = category["subsets"]
        category["score"] = round(sum(x["score"] * x["num"] for x in subs) / sum(x["num"] for x in subs), 4)
        category["macro_score"] = round(sum(x["score"] for x in subs) / len(subs), 4)
    cats = metric["categories"]
    metric["score"] = round(sum(c["score"] * c["num"] for c in cats) / sum(c["num"] for c in cats), 4)
    metric["macro_score"] = round(sum(c["score"] for c in cats) / len(cats), 4)
    path.write_text(json.dumps(report), encoding="utf-8")
    return first


def test_the_reports_category_and_overall_numbers_are_reproduced(tmp_path, items):
    """EvalScope's overall score (the number a user quotes), its macro score and each category's,
    against the records: 1 right of 6 samples in two subsets of 3 is 1/6 overall and, per subset
    1/3 and 0, a macro mean of 1/6 (computed here from the counts, not from the importer)."""
    folder = _copy(tmp_path)
    _one_right(folder)
    imported = _import(folder, items)
    overall = imported.metadata["evalscope"]["reported_totals"]["ceval"]["overall"]
    assert overall["num"] == 6 and overall["records_score"] == pytest.approx(1 / 6, abs=1e-6)
    assert overall["records_macro_score"] == pytest.approx(1 / 6, abs=1e-6)
    # EvalScope rounds each level from the rounded level below: 0.3333 * 3 / 6 = 0.16665 -> 0.1666, where
    # the exact 1/6 is 0.1667; the check allows that chain of roundings, no more
    stated = _report(folder)[1]["metrics"][0]["score"]
    assert overall["score"] == stated == 0.1666
    assert "ceval overall: EvalScope 0.1666 over 6 samples (records: 0.1667)" in format_report(imported)
    assert sum(r["correct"] for r in imported.rows if r["scorer"] == ES_SCORER) == 1


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(score=0.5), "reports overall score 0.5"),
    (lambda m: m.update(macro_score=0.5), "reports overall macro score 0.5"),
    (lambda m: m["categories"][0].update(num=7), "reports category STEM sample count 7"),
    (lambda m: m["categories"][0]["subsets"].append({"name": "law", "score": 0.0, "num": 3}),
     "scores subset 'law', which the run has no reviews of"),
])
def test_a_report_whose_totals_are_not_its_reviews_is_refused(tmp_path, items, edit, message):
    folder = _copy(tmp_path)
    path, report = _report(folder)
    edit(report["metrics"][0])
    path.write_text(json.dumps(report), encoding="utf-8")
    with pytest.raises(HarnessImportError, match=message):
        _import(folder, items)


def test_a_fifo_as_a_review_file_says_what_it_is_and_a_deep_task_config_is_one_line(tmp_path):
    """Issue 48: a FIFO in a review file's place read as 'did not finish'; a task config nesting
    too deep raised a RecursionError."""
    import os

    folder = _copy(tmp_path)
    review = sorted(folder.glob("*/reviews/*/*.jsonl"))[0]
    review.unlink()
    os.mkfifo(review)
    with pytest.raises(HarnessImportError, match=r"not a regular file \(a device, FIFO, socket or folder\)"):
        read(folder)
    review.unlink()
    shutil.copy(sorted(FIXTURE.glob("*/reviews/*/*.jsonl"))[0], review)
    config = sorted(folder.glob("*/configs/task_config*.yaml"))[-1]
    config.write_text("model: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(HarnessImportError, match=r"YAML nesting too deep to parse"):
        read(folder)


def test_a_generation_with_a_thinking_block_is_re_read_by_cubes_extractors_after_it(tmp_path, items):
    """Issue 49: a reasoning model's output in EvalScope's predictions, a block holding another letter
    before the model's own answer: cube's M6-strict and M6-lenient read the answer after the block
    (as on the unedited output), not the letter in the thought; EvalScope's logged answer stays its own."""
    folder = _copy(tmp_path)
    path = sorted(folder.glob("*/predictions/*/*.jsonl"))[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    content = first["model_output"]["choices"][0]["message"]["content"]
    assert isinstance(content, str)
    plain = {(r["uid"], r["scorer"]): r for r in _import(FIXTURE, items).rows}
    uid = next(u for (u, s), r in plain.items() if s == "M6-strict" and r["generation"] is not None
               and r["generation"].strip() and content.startswith(r["generation"][:20]))
    other = "D" if plain[(uid, "M6-strict")]["pred"] != 3 else "A"
    assert plain[(uid, "M6-strict")]["pred"] == -1  # so a reader of the whole text would take the thought's letter
    first["model_output"]["choices"][0]["message"]["content"] = f"<think>答案：{other}。选{other}</think>\n{content}"
    path.write_text("\n".join([json.dumps(first, ensure_ascii=False), *lines[1:]]) + "\n", encoding="utf-8")
    thought = {(r["uid"], r["scorer"]): r for r in _import(folder, items).rows}
    for scorer in ("M6-strict", "M6-lenient"):
        assert thought[(uid, scorer)]["pred"] == plain[(uid, scorer)]["pred"], scorer
        assert thought[(uid, scorer)]["thinking"] == ("answered" if plain[(uid, scorer)]["pred"] >= 0
                                                      else "no_answer_after_thinking")
        assert plain[(uid, scorer)]["thinking"] == "none"
    assert thought[(uid, ES_SCORER)]["pred"] == plain[(uid, ES_SCORER)]["pred"]
    assert thought[(uid, ES_SCORER)]["thinking"] is None  # EvalScope's own reading: not cube's to say
