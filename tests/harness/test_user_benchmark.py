"""A user's benchmark through the harness (issue 31): CMMLU written in the generic schema gives the
native loader's prompts and records byte for byte, and cube's own fixture (2 to 10 options, English)
goes through run, rescore, explain and release on a real model.

The CMMLU copy is written at test time from the real items under ../shared into a temp folder,
never committed and never printed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cube.cli import main
from cube.config import REPO_ROOT

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "user_benchmark"
SUBJECTS = ("anatomy", "virology", "college_mathematics")


def _write_cmmlu_generic(benchmarks_root: Path, folder: Path, subjects=SUBJECTS) -> Path:
    """CMMLU's dev and test items of ``subjects`` in the generic schema (one JSONL per split, in the
    native loader's order) with a card naming it cmmlu and giving its Chinese subject names."""
    from cube.protocol.items import load_cmmlu

    folder.mkdir(parents=True)
    names = json.loads((benchmarks_root / "cmmlu" / "subjects.json").read_text(encoding="utf-8"))
    for split in ("dev", "test"):
        items = load_cmmlu(benchmarks_root / "cmmlu", splits=(split,), subjects=subjects)
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps({"id": item.row, "subject": item.subject, "question": item.question,
                                     "choices": list(item.options), "answer": "ABCD"[item.answer]},
                                    ensure_ascii=False) + "\n")
    card = {"name": "cmmlu", "language": "zh", "subject_names": {s: names[s]["name_zh"] for s in subjects}}
    (folder / "card.yaml").write_text(json.dumps(card, ensure_ascii=False), encoding="utf-8")  # JSON is YAML
    return folder


def test_cmmlu_in_the_generic_schema_renders_the_native_prompts_byte_for_byte(benchmarks_root, tmp_path):
    """Every item of three subjects, every label set, answer context, shot count and an order shift:
    the same label, cloze and judgement prompts as the native loader's."""
    from cube.protocol.benchmarks import resolve
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import Cell, cloze_prompt, judgement_prompts, load_contexts, render_prompt

    native, generic = resolve("cmmlu"), resolve(str(_write_cmmlu_generic(benchmarks_root, tmp_path / "generic")))
    items_n = native.load(splits=("test",), subjects=SUBJECTS)
    items_g = generic.load(splits=("test",), subjects=SUBJECTS)
    dev_n, dev_g = native.load(splits=("dev",), subjects=SUBJECTS), generic.load(splits=("dev",), subjects=SUBJECTS)
    assert items_n == items_g and dev_n == dev_g and len(items_n) > 300  # same uid, qhash, text, options, answer
    t_n, t_g = native.templates(), generic.templates()
    n_prompts = 0
    for label_set in load_label_sets().values():  # the ten-label sets show A-D, Ａ-Ｄ, 甲-丁, ①-④ here
        for context in load_contexts():
            for shots, order in ((0, "original"), (5, "shift1")):
                cell = Cell(label_set, context.name, shots, order)
                for a, b in zip(items_n[::7], items_g[::7]):
                    assert render_prompt(a, cell, dev_n, t_n) == render_prompt(b, cell, dev_g, t_g)
                    n_prompts += 1
    for a, b in zip(items_n, items_g):
        assert cloze_prompt(a, templates=t_n) == cloze_prompt(b, templates=t_g)
        assert judgement_prompts(a, t_n) == judgement_prompts(b, t_g)
    assert n_prompts > 1000


@pytest.mark.registry
def test_cmmlu_in_the_generic_schema_writes_the_native_records_byte_for_byte(benchmarks_root, tmp_path, capsys):
    """SmolLM2, every scorer but chain of thought, 0- and 5-shot: the same record shards, byte for byte."""
    pytest.importorskip("torch")
    from cube.records.store import read_manifest, read_records

    generic = _write_cmmlu_generic(benchmarks_root, tmp_path / "generic", subjects=("anatomy", "virology"))
    common = ["run", "--model", "smollm2-135m-instruct", "--subjects", "anatomy,virology", "--sample", "2",
              "--shots", "0,5", "--scorers", "M1-seq,M1-strict,M2,M3,M4,M5,TF,M6", "--label-sets", "L1_halfwidth"]
    assert main([*common, "--benchmark", "cmmlu", "--out", str(tmp_path / "native")]) == 0
    assert main([*common, "--benchmark", str(generic), "--out", str(tmp_path / "file")]) == 0
    native, mine = read_records(tmp_path / "native"), read_records(tmp_path / "file")
    assert native.num_rows == 2 * (2 * 2 + 2 * 2 + 4 + 1)  # items x (label 2 cells x 2 + M6 2 cells x 2 + cloze 4 + TF)
    # the same rows (M6 records' scores are NaN: compared as text, where NaN equals NaN)
    assert [json.dumps(r, sort_keys=True) for r in mine.to_pylist()] == \
        [json.dumps(r, sort_keys=True) for r in native.to_pylist()]
    files_n, files_m = read_manifest(tmp_path / "native")["files"], read_manifest(tmp_path / "file")["files"]
    shards = {name: entry for name, entry in files_n.items() if name.endswith(".parquet")}
    assert shards and {n: files_m[n] for n in shards} == shards  # same shard names, same sha256
    cells_m = read_manifest(tmp_path / "file")["cells"]
    assert all(len(c["benchmark_sha256"]) == 64 and c["benchmark"] == "cmmlu" for c in cells_m.values())
    assert all("benchmark_sha256" not in c for c in read_manifest(tmp_path / "native")["cells"].values())


@pytest.mark.registry
def test_the_fixture_runs_rescores_explains_and_releases(tmp_path, capsys):
    """cube's own fixture (English, 2 to 10 options) on SmolLM2 with every scorer; then a changed
    file refuses the resume naming --benchmark."""
    pytest.importorskip("torch")
    from cube.records.store import read_manifest, read_records

    data = tmp_path / "en"
    shutil.copytree(FIXTURE / "en", data)
    out = tmp_path / "records"
    argv = ["run", "--model", "smollm2-135m-instruct", "--benchmark", str(data), "--label-sets", "A10_halfwidth",
            "--cues", "en_label_space", "--scorers", "M1-seq,M1-strict,M2,M3,M4,M5,TF,M6,M6-cot",
            "--max-new-tokens", "8", "--out", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "A10_halfwidth | en_label_space | 0-shot: max1tok (A ' A'; B ' B';" in captured.err
    table = read_records(out)
    rows = table.to_pylist()
    by_uid = {}
    for line in (data / "test.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        by_uid[f"cube_en_fixture/{row['subject']}/test/{row['id']}"] = row
    assert {r["uid"] for r in rows} == set(by_uid)
    for r in rows:  # each record has one score per option of its item, and its item's gold
        n = len(by_uid[r["uid"]]["choices"])
        answer = by_uid[r["uid"]]["answer"]
        assert r["gold"] == (answer if isinstance(answer, int) else "ABCDEFGHIJ".index(answer))
        if r["scorer"] not in ("M6-strict", "M6-lenient"):
            assert len(r["scores"]) == n and len(r["probs"]) == n
        assert r["pred"] < n
    assert {r["scorer"] for r in rows} == {"M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "TF", "M6-strict",
                                           "M6-lenient"}
    # rescore reads records of 2 to 10 options (accuracy from the records themselves)
    assert main(["rescore", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rescored = [r for r in result["rows"] if r["scorer"] == "M1-seq" and r["aggregation"] == "micro"
                and r["level"] == "overall"]
    m1 = [r for r in rows if r["scorer"] == "M1-seq"]
    assert rescored and rescored[0]["accuracy"] == pytest.approx(sum(r["correct"] for r in m1) / len(m1))
    assert main(["rescore", str(out), "--calibration"]) == 0  # ECE over padded probabilities
    capsys.readouterr()
    assert main(["explain", f"{out}:scorer=M1-seq", f"{out}:scorer=M2", "--bootstrap", "200"]) == 0
    assert "sum" in capsys.readouterr().out
    bundle = tmp_path / "bundle"
    assert main(["release", "build", str(out), "--out", str(bundle), "--benchmark", str(data)]) == 0
    assert "leakage audit clean against 30 items" in capsys.readouterr().out
    # the bundle names the file's own terms (its card's licence and source) beside the registry's
    notes = json.loads((bundle / "MANIFEST.json").read_text(encoding="utf-8"))["benchmark_licences"]
    assert notes["cube_en_fixture"] == {"name": "cube's English fixture (arithmetic, units, geography)",
                                        "licence": "CC0 1.0 (written for cube's tests)",
                                        "source": "tests/fixtures/user_benchmark/en"}
    assert "CC0 1.0 (written for cube's tests)" in (bundle / "README.md").read_text(encoding="utf-8")
    assert main(["release", "verify", str(bundle), "--benchmark", str(data)]) == 0
    capsys.readouterr()
    # a changed answer changes no uid or question hash: the file's sha256 refuses the resume
    files = read_manifest(out)["files"]
    lines = (data / "test.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "answer": "A"})
    (data / "test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--benchmark cube_en_fixture changed (sha256" in err[0], err
    assert read_manifest(out)["files"] == files  # nothing written


def _no_model_loads(monkeypatch):
    import cube.harness.models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded although the benchmark file is bad")

    monkeypatch.setattr(cube.harness.models, "load_model", refuse)


@pytest.mark.parametrize("rows, needle", [
    ([{"question": "q?", "choices": ["a", "b"], "answer": "C"}], "row 0 (line 1): field answer 'C' is out of range"),
    ([{"question": "q?", "choices": ["a", ""], "answer": "A"}], "row 0 (line 1): field choices[1]: empty option"),
    ([{"question": "q?", "answer": "A"}], "row 0 (line 1): field choices is missing"),
    ([{"question": "q?", "choices": ["a", "b"], "answer": "A", "id": 1}] * 2, "row 1 (line 2): field id 1 duplicates"),
    ([{"question": "q?", "choices": list("abcdefghijk"), "answer": "A"}], "field choices has 11 option(s)"),
])
def test_a_bad_file_fails_cube_run_in_one_line_before_any_model_loads(tmp_path, monkeypatch, capsys, rows, needle):
    _no_model_loads(monkeypatch)
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", "--model", "smollm2-135m-instruct", "--benchmark", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == f"cube: error: {path} {needle}" or needle in err[0], err
    assert err[0].startswith(f"cube: error: {path} row ")
    assert not out.exists()


def test_a_label_set_shorter_than_some_items_is_refused_naming_how_many(tmp_path, monkeypatch, capsys):
    _no_model_loads(monkeypatch)
    rows = [json.loads(line) for line in (FIXTURE / "en" / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    more = [len(r["choices"]) for r in rows if len(r["choices"]) > 4]
    out = tmp_path / "out"
    argv = ["run", "--model", "smollm2-135m-instruct", "--benchmark", str(FIXTURE / "en"), "--cues",
            "en_label_space", "--label-sets", "L1_halfwidth,A10_halfwidth", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and (f"label set 'L1_halfwidth' has 4 labels but {len(more)} of {len(rows)} items have "
                              f"more options (up to {max(more)})") in err[0], err
    assert "A10_halfwidth'" not in err[0] and not out.exists()


def test_the_scrub_and_leakage_index_cover_a_users_items():
    """The generation scrub and the leakage audit read a user's items as CMMLU's."""
    from cube.protocol.benchmarks import resolve
    from cube.records.leakage import build_index, scrub

    bench = resolve(str(FIXTURE / "en"))
    items = bench.load(splits=bench.present_splits(bench.root()))
    index = build_index(items)
    question = next(i for i in items if i.row == 308).question
    leaked = f"I recall: {question} The answer is C."
    cleaned = scrub(leaked, "", (), index=index).text
    assert question not in cleaned and "The answer is C." in cleaned


@pytest.mark.registry
def test_cube_audit_audits_the_labels_a_users_items_show(capsys):
    """``cube audit --model --benchmark PATH``: the ten-label sets on the labels the file's items show
    (the most options of any item: 5 in zh.csv), as `cube run --benchmark` audits them."""
    import csv

    with open(FIXTURE / "zh.csv", encoding="utf-8", newline="") as fh:
        counts = [sum(1 for c in "ABCDE" if row[c]) for row in csv.DictReader(fh)]
    most = max(counts)
    assert main(["audit", "--model", "smollm2-135m-instruct", "--benchmark", str(FIXTURE / "zh.csv"),
                 "--label-sets", "A10_halfwidth,A10_circled", "--contexts", "zh_cue"]) == 0
    out = capsys.readouterr().out
    half = next(line for line in out.splitlines() if "A10_halfwidth | zh_cue" in line)
    assert half.count("'") == 2 * most and f"{'ABCDEFGHIJ'[most - 1]} '" in half and "F '" not in half
    circled = next(line for line in out.splitlines() if "A10_circled | zh_cue" in line)
    assert "DEGEN (full): " + "=".join("①②③④⑤⑥⑦⑧⑨⑩"[:most]) + " share first token" in circled
    assert main(["audit", "--model", "smollm2-135m-instruct", "--benchmark", str(FIXTURE / "zh.csv"),
                 "--label-sets", "L1_halfwidth"]) == 2
    need = sum(n > 4 for n in counts)
    assert f"{need} of {len(counts)} items have more options (up to {most})" in capsys.readouterr().err


def test_data_beside_a_users_file_is_refused(tmp_path, monkeypatch, capsys):
    _no_model_loads(monkeypatch)
    argv = ["run", "--model", "smollm2-135m-instruct", "--benchmark", str(FIXTURE / "zh.csv"), "--data", str(tmp_path),
            "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "names a registered benchmark's folder; --benchmark" in capsys.readouterr().err


def test_the_cues_default_to_the_benchmarks_own(tmp_path, benchmarks_root):
    """Without --cues a run takes its benchmark's own answer contexts: an English file's "Answer:"
    (en_label_space), a card's own contexts, CMMLU's 答案： (zh_cue); never CMMLU's cue on an English
    file, as the option's fixed default once gave. The logged command names the cues it ran."""
    pytest.importorskip("torch")
    from cube.harness.build import build_spec
    from cube.harness.run_config import RunConfig

    def contexts(benchmark, **fields):
        spec = build_spec(RunConfig(model="smollm2-135m-instruct", benchmark=str(benchmark), scorers=("M1-seq",),
                                    out=tmp_path / "unused", **fields))
        return {c.context for c in spec.cells}, spec.settings.config.command_line()

    english, command = contexts(FIXTURE / "en", label_sets=("A10_halfwidth",))
    assert english == {"en_label_space"} and "--cues en_label_space" in command
    mine = tmp_path / "mine"
    shutil.copytree(FIXTURE / "en", mine)
    card = (mine / "card.yaml").read_text(encoding="utf-8")
    (mine / "card.yaml").write_text(card + 'contexts:\n  choice_cue: {cue: "Choice:", label_prefix: " "}\n',
                                    encoding="utf-8")
    assert contexts(mine, label_sets=("A10_halfwidth",))[0] == {"choice_cue"}
    assert contexts("cmmlu", data=benchmarks_root / "cmmlu", sample=3)[0] == {"zh_cue"}
    # a given --cues is kept
    assert contexts(FIXTURE / "en", label_sets=("A10_halfwidth",), contexts=("en_prompt_space",))[0] == {"en_prompt_space"}


def _spec(benchmark, tmp_path, **fields):
    from cube.harness.build import build_spec
    from cube.harness.run_config import RunConfig

    return build_spec(RunConfig(model="smollm2-135m-instruct", benchmark=str(benchmark), scorers=("M1-seq",),
                                out=tmp_path / "unused", **fields))


def test_a_first_run_on_a_file_with_more_than_four_options_takes_the_ten_label_sets_and_says_so(tmp_path):
    """No --label-sets: a file with 5-option items takes A10_halfwidth (it was refused for
    L1_halfwidth, a set the user never named), and the run names the choice; a file of 4-option
    items keeps the study's L1_halfwidth and says nothing about it."""
    pytest.importorskip("torch")
    import csv

    with open(FIXTURE / "zh.csv", encoding="utf-8", newline="") as fh:
        counts = [sum(1 for c in "ABCDE" if row[c]) for row in csv.DictReader(fh)]
    spec = _spec(FIXTURE / "zh.csv", tmp_path)
    assert {c.label_set.name for c in spec.cells} == {"A10_halfwidth"}
    assert "--label-sets A10_halfwidth" in spec.settings.config.command_line()  # logged as run
    more = [n for n in counts if n > 4]
    assert [n for n in spec.settings.notes if n.startswith("label sets:")] == [
        f"label sets: A10_halfwidth, chosen because {len(more)} of {len(counts)} items have more than 4 options "
        f"(up to {max(more)}); each item shows its first N labels; --label-sets to choose others"]
    four = tmp_path / "four.jsonl"
    four.write_text("".join(json.dumps({"question": f"第{n}题？", "choices": list("甲乙丙丁"), "answer": n % 4},
                                       ensure_ascii=False) + "\n" for n in range(4)), encoding="utf-8")
    spec = _spec(four, tmp_path)
    assert {c.label_set.name for c in spec.cells} == {"L1_halfwidth"} and spec.settings.notes == ()


def _without_card(tmp_path) -> Path:
    """The English fixture's test items as one file with no card beside it."""
    path = tmp_path / "quiz.jsonl"
    shutil.copyfile(FIXTURE / "en" / "test.jsonl", path)
    return path


def test_an_english_file_without_a_card_gets_the_english_prompt_and_says_so(tmp_path):
    """Detected from its questions (none in Chinese script): en_mcq and en_label_space, never
    CMMLU's 以下是中国关于…考试 header and 答案：; the run's line names the choice and the card that
    changes it. A card's language still decides."""
    pytest.importorskip("torch")
    from cube.protocol.prompts import render_prompt

    path = _without_card(tmp_path)
    spec = _spec(path, tmp_path)
    assert {c.context for c in spec.cells} == {"en_label_space"}
    prompt = render_prompt(spec.items[0], spec.cells[0], [], spec.templates).context
    assert "考试" not in prompt and "答案" not in prompt and prompt.rstrip().endswith("Answer:")
    n = len(spec.items)
    assert spec.settings.notes[0] == (
        f"{path}: English questions (0 of {n} questions in Chinese script), no card language: the English prompt "
        f"format en_mcq, cue en_label_space; to choose, set `language: en` or `language: zh` in a card "
        f"({tmp_path / 'quiz.card.yaml'})")
    (tmp_path / "quiz.card.yaml").write_text("language: zh\n", encoding="utf-8")
    spec = _spec(path, tmp_path)
    assert {c.context for c in spec.cells} == {"zh_cue"} and not any("English" in n for n in spec.settings.notes)


def test_a_mixed_language_file_gets_the_exam_format_and_one_line_on_how_to_choose(tmp_path):
    pytest.importorskip("torch")
    from cube.protocol.prompts import render_prompt

    path = tmp_path / "mixed.jsonl"
    rows = [{"question": "What is 2 + 2?", "choices": ["3", "4"], "answer": 1},
            {"question": "二加二等于几？", "choices": ["三", "四"], "answer": 1}] * 2
    path.write_text("".join(json.dumps({**r, "id": n}, ensure_ascii=False) + "\n" for n, r in enumerate(rows)),
                    encoding="utf-8")
    spec = _spec(path, tmp_path)
    assert {c.context for c in spec.cells} == {"zh_cue"}
    assert "答案" in render_prompt(spec.items[0], spec.cells[0], [], spec.templates).context
    lines = [n for n in spec.settings.notes if "mixed languages" in n]
    assert lines == [f"{path}: mixed languages (2 of 4 questions in Chinese script): every item gets the exam format "
                     f"(CMMLU's Chinese header, cue zh_cue); to choose, set `language: en` or `language: zh` in a "
                     f"card ({tmp_path / 'mixed.card.yaml'}), or split the file by language"]


@pytest.mark.registry
def test_a_users_file_all_the_way_with_only_model_benchmark_and_out(tmp_path, capsys):
    """Issue 44's path as a new user walks it, no option beyond --model, --benchmark and --out: the
    Chinese CSV (string ids, Chinese subjects, 2 to 5 options) runs under the ten-label set it chose
    and said; rescore prints chance as the mean of 1/N and groups by the file's category column;
    confirm --run-audit finds no padded ties; release build and verify take the string ids and
    Chinese subjects; claim notebook 08 re-executes on the run with benchmark=FILE. The English file
    without a card runs under the English prompt and says so, and explain between it and a carded run
    shows each side's own template."""
    pytest.importorskip("torch")
    import csv
    from fractions import Fraction

    with open(FIXTURE / "zh.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    data = tmp_path / "quiz.csv"
    with open(data, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "id": f"q{row['id']}"} for row in rows)
    widths = [sum(1 for c in "ABCDE" if row[c]) for row in rows]
    out = tmp_path / "runs" / "zh"
    assert main(["run", "--model", "smollm2-135m-instruct", "--benchmark", str(data), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "label sets: A10_halfwidth, chosen because" in err
    assert main(["rescore", str(out), "--json"]) == 0
    overall = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["aggregation"] == "micro"]
    exact = float(sum(Fraction(1, n) for n in widths) / len(widths))
    assert overall and all(r["chance"] == pytest.approx(exact, rel=1e-12) for r in overall)
    assert main(["rescore", str(out), "--level", "category", "--json"]) == 0  # the file's own column
    groups = {r["group"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert groups == {row["category"] for row in rows}
    assert main(["confirm", str(out), "--run-audit"]) == 0  # no item ties on padding
    assert "items tie" not in capsys.readouterr().out
    bundle = tmp_path / "bundle"
    assert main(["release", "build", str(out), "--out", str(bundle), "--benchmark", str(data)]) == 0
    manifest = json.loads((bundle / "MANIFEST.json").read_text(encoding="utf-8"))
    assert {row["subject"] for row in rows} | {f"q{row['id']}" for row in rows} == set(manifest["uid_escapes"].values())
    assert main(["release", "verify", str(bundle), "--benchmark", str(data)]) == 0
    assert f"leakage audit clean against {len(rows)} items" in capsys.readouterr().out
    # a claim notebook re-executed on the file's run: benchmark= gives its categories, as records= its store
    protocol = json.dumps({"scorer": "M1-seq", "label_set": "A10_halfwidth", "context": "zh_cue", "shots": 0,
                           "order": "original"})
    assert main(["book", "execute", "--only", "08_benchmark_practice", "--param", f"records={out}", "--param",
                 f"benchmark={data}", "--param", f"protocol={protocol}", "--as", "mine08",
                 "--out", str(tmp_path / "book")]) == 0
    executed = (tmp_path / "book" / "mine08.ipynb").read_text(encoding="utf-8")
    assert "Social Science" in executed and "2 macro and 2 micro category rows recomputed from subjects" in executed

    english = _without_card(tmp_path)
    carded = tmp_path / "carded" / "quiz.jsonl"
    carded.parent.mkdir()
    shutil.copyfile(english, carded)
    (carded.parent / "quiz.card.yaml").write_text('language: en\noption: "({label}) {text}\\n"\n', encoding="utf-8")
    for path, name in ((english, "en"), (carded, "en_card")):
        assert main(["run", "--model", "smollm2-135m-instruct", "--benchmark", str(path),
                     "--out", str(tmp_path / "runs" / name)]) == 0
        err = capsys.readouterr().err
        assert ("English questions (0 of" in err) == (name == "en")
    assert main(["explain", f"{tmp_path / 'runs' / 'en'}:scorer=M1-seq", f"{tmp_path / 'runs' / 'en_card'}:scorer=M1-seq",
                 "--json", "--bootstrap", "200"]) == 0
    diff = json.loads(capsys.readouterr().out)["prompt_diff"]
    assert '-"A. {{A}}\\n"' in diff and '+"(A) {{A}}\\n"' in diff
    assert not any("以下是中国" in line or "答案" in line for line in diff)


def test_explain_judges_a_fresh_runs_cells_by_the_audit_that_run_logged(tmp_path, capsys):
    """A label set the frozen audit never saw (A10_halfwidth, chosen for a file of up to 5 options):
    explain read only the frozen audit and said "not audited" of cells the run had audited before
    it loaded the weights; it now reads the run's own audit first, as `cube confirm --run-audit` does."""
    from cube.analysis.explain import explain_slices
    from cube.analysis.explain_selectors import parse_slice

    store = tmp_path / "chat"
    assert main(["run", "--model", "smollm2-135m-instruct", "--benchmark", str(FIXTURE / "zh.csv"),
                 "--label-sets", "A10_halfwidth", "--scorers", "M1-seq", "--dtype", "float32",
                 "--chat-template", "none,model", "--out", str(store)]) == 0
    capsys.readouterr()
    found = explain_slices(parse_slice(f"{store}:context=zh_cue"), parse_slice(f"{store}:context=zh_cue@chat"))
    assert found.factor("tie_break").detail == "audit: A max1tok, B max1tok"
