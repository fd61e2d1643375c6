"""Importing OpenCompass runs (cube.importers.opencompass).

Three kinds of test. (1) The committed fixture, data/imported/opencompass-smollm2, written by
``cube import opencompass`` from a real OpenCompass 0.5.4 run (both modes): its records reproduce
OpenCompass's reported accuracy exactly, and its PPLs agree with cube's own HF backend on
byte-equal prompts (cube renders OpenCompass's prompt itself from the shared CMMLU items). (2) Small
OpenCompass output folders written at run time in 0.5.4's layout around real CMMLU items (made-up
PPLs and generations; the benchmark text lives only in tmp_path): bad input. (3) The real
OpenCompass, from ``.venv-opencompass``, when that environment exists (it is not built by the
tests: scripts/install_opencompass_env.sh), on one item in each mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cube.config import REPO_ROOT
from cube.errors import HarnessImportError
from cube.importers.contract import check_metadata_clean
from cube.importers.opencompass.cmmlu_configs import cmmlu_prompt, run_config
from cube.importers.opencompass.config import read_config
from cube.importers.opencompass.matching import LABELS
from cube.importers.opencompass.reading import find_runs, read_run
from cube.importers.opencompass.records import GEN_SCORER, PPL_SCORER, accuracy_by_dataset, import_runs
from cube.protocol.scorers import extract_oc_gen
from cube.records.store import read_manifest, read_records

FIXTURE = REPO_ROOT / "data" / "imported" / "opencompass-smollm2"
OC_VENV = Path(os.environ.get("CUBE_OPENCOMPASS_VENV", REPO_ROOT / ".venv-opencompass"))
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def items(cmmlu_items):
    return cmmlu_items(("dev", "test"))


def _shots(items, subject):
    return sorted((i for i in items if i.subject == subject and i.split == "dev"), key=lambda i: i.row)[:5]


def _item(items, uid):
    return next(i for i in items if i.uid == uid)


# ---- a made-up OpenCompass output folder in 0.5.4's layout ---------------------------------------


def _dataset_config(subject: str, row: int, mode: str, kind: str = "CMMLUDataset") -> str:
    inferencer = "PPLInferencer" if mode == "ppl" else "GenInferencer"
    post = ("pred_postprocessor=dict(type='opencompass.utils.text_postprocessors.first_capital_postprocess'),"
            if mode == "gen" else "")
    return (f"dict(abbr='cmmlu-{subject}', eval_cfg=dict({post}evaluator=dict(type='x.AccEvaluator')), "
            f"infer_cfg=dict(ice_template=dict(ice_token='</E>', template='t'), "
            f"inferencer=dict(type='opencompass.openicl.icl_inferencer.{inferencer}'), "
            f"retriever=dict(fix_id_list=[0, 1, 2, 3, 4], type='opencompass.openicl.icl_retriever.FixKRetriever')), "
            f"name='{subject}', path='/somewhere/cmmlu', reader_cfg=dict(input_columns=['question'], "
            f"output_column='answer', test_range='[{row}:{row + 1}]', test_split='test', train_split='dev'), "
            f"type='opencompass.datasets.{kind}')")


def write_oc_run(folder: Path, items, uids, mode: str = "ppl", model: str = MODEL, kind: str = "CMMLUDataset",
                 ppls=None, generations=None, accuracy=None) -> Path:
    """One OpenCompass run folder (``<work_dir>/<timestamp>/``) over the items ``uids``."""
    run = folder / "20260101_000000"
    chosen = [_item(items, uid) for uid in uids]
    configs = [_dataset_config(i.subject, i.row, mode, kind) for i in chosen]
    (run / "configs").mkdir(parents=True)
    (run / "configs" / "20260101_000000_1.py").write_text(
        "datasets=[\n    " + ",\n    ".join(configs) + "]\n"
        f"models=[dict(abbr={model!r}, path='/nowhere/{MODEL}', type='opencompass.models.HuggingFaceBaseModel')]\n"
        "work_dir='x'\n", encoding="utf-8")
    for k, item in enumerate(chosen):
        abbr = f"cmmlu-{item.subject}"
        shots = _shots(items, item.subject)
        if mode == "ppl":
            values = ppls[k] if ppls is not None else [2.0 + 0.1 * j for j in range(4)]
            entry = {"in-context examples": "", "origin_prompt": ""}
            for label, ppl in zip(LABELS, values):
                prompt = cmmlu_prompt(item, shots, label)
                entry[f"label: {label}"] = {"testing input": "", "prompt": prompt, "PPL": ppl, "BPB": 0.0}
            entry["prediction"] = LABELS[int(np.argmin(values))]
            correct = entry["prediction"] == LABELS[item.answer]
        else:
            text = generations[k] if generations is not None else " " + LABELS[item.answer]
            entry = {"origin_prompt": cmmlu_prompt(item, shots, None), "prediction": text}
            correct = extract_oc_gen(text, LABELS) == item.answer
        entry["gold"] = LABELS[item.answer]
        folder_name = model if "/" not in model else MODEL  # a bad abbr: the files where a good one puts them
        for sub, data in (("predictions", {"0": entry}),
                          ("results", {"accuracy": 100.0 * correct if accuracy is None else accuracy})):
            (run / sub / folder_name).mkdir(parents=True, exist_ok=True)
            (run / sub / folder_name / f"{abbr}.json").write_text(json.dumps(data, ensure_ascii=False),
                                                                  encoding="utf-8")
    return run


UIDS = ["cmmlu/computer_security/test/0", "cmmlu/sociology/test/48"]


def test_a_ppl_run_imports_with_oc_decisions(tmp_path, items):
    write_oc_run(tmp_path, items, UIDS, "ppl", ppls=[[1.5, 1.2, 1.3, 1.4], [1.1, 1.1, 1.3, 1.4]])
    imported = import_runs([read_run(p) for p in find_runs(tmp_path)], items)
    rows = {r["uid"]: r for r in imported.rows}
    assert set(rows) == set(UIDS) and {r["scorer"] for r in rows.values()} == {PPL_SCORER}
    assert rows[UIDS[0]]["pred"] == 1 and rows[UIDS[0]]["scores"] == [-1.5, -1.2, -1.3, -1.4]
    # a tie: OpenCompass's list.index(min) takes the first label, and the record says it tied
    assert rows[UIDS[1]]["pred"] == 0 and rows[UIDS[1]]["tied"]
    assert rows[UIDS[0]]["gold"] == _item(items, UIDS[0]).answer
    assert imported.metadata["opencompass"]["datasets"]["cmmlu-computer_security@ppl"]["shots"] == 5


def test_a_gen_run_keeps_oc_extraction_beside_cubes(tmp_path, items):
    # "The" starts with T: OpenCompass's first capital is no option (wrong, for it), while cube's
    # lenient extractor reads the letter after 答案是.
    gold = [_item(items, u).answer for u in UIDS]
    texts = [f"The 答案是{LABELS[gold[0]]}", f"答案：{LABELS[gold[1]]}。"]
    write_oc_run(tmp_path, items, UIDS, "gen", generations=texts)
    imported = import_runs([read_run(p) for p in find_runs(tmp_path)], items)
    by = {(r["uid"], r["scorer"]): r for r in imported.rows}
    assert by[(UIDS[0], GEN_SCORER)]["pred"] == -1 and by[(UIDS[0], GEN_SCORER)]["parse_failed"]
    assert by[(UIDS[0], "M6-lenient")]["pred"] == gold[0]
    assert by[(UIDS[1], GEN_SCORER)]["correct"] and by[(UIDS[1], "M6-strict")]["pred"] == gold[1]
    assert all(r["generation"] in texts for r in imported.rows)


def test_a_template_without_the_cmmlu_question_marker_matches_by_the_question_block(tmp_path, items):
    # C-Eval's OpenCompass templates have no 题目：; the item whose question and first option end the
    # prompt last (after the in-context examples) is the one scored.
    run = write_oc_run(tmp_path, items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]])
    path = next((run / "predictions").rglob("*.json"))
    data = json.loads(path.read_text(encoding="utf-8"))
    for label in LABELS:
        data["0"][f"label: {label}"]["prompt"] = data["0"][f"label: {label}"]["prompt"].replace("题目：", "")
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    imported = import_runs([read_run(p) for p in find_runs(tmp_path)], items)
    assert [r["uid"] for r in imported.rows] == UIDS[:1]


def test_a_reported_accuracy_its_predictions_do_not_give_is_refused(tmp_path, items):
    write_oc_run(tmp_path, items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]], accuracy=50.0)
    with pytest.raises(HarnessImportError, match="reports accuracy 50 but its own predictions give"):
        import_runs([read_run(p) for p in find_runs(tmp_path)], items)


def test_a_prediction_oc_did_not_derive_from_its_ppls_is_refused(tmp_path, items):
    run = write_oc_run(tmp_path, items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]])
    path = next((run / "predictions").rglob("*.json"))
    data = json.loads(path.read_text(encoding="utf-8"))
    data["0"]["prediction"] = "D"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(HarnessImportError, match="its own PPLs give A"):
        import_runs([read_run(p) for p in find_runs(tmp_path)], items)


def test_a_gold_that_is_not_the_items_answer_is_refused(tmp_path, items):
    run = write_oc_run(tmp_path, items, UIDS[:1], "ppl")
    path = next((run / "predictions").rglob("*.json"))
    data = json.loads(path.read_text(encoding="utf-8"))
    data["0"]["gold"] = LABELS[(_item(items, UIDS[0]).answer + 1) % 4]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(HarnessImportError, match="another copy of the benchmark"):
        import_runs([read_run(p) for p in find_runs(tmp_path)], items)


def test_the_config_is_read_as_a_syntax_tree_never_run(tmp_path):
    path = tmp_path / "c.py"
    marker = tmp_path / "ran"
    path.write_text(f"import os\nx = dict(a=[1, -2, 'b'], c=None)\ny = os.system('touch {marker}')\n",
                    encoding="utf-8")
    assert read_config(path) == {"x": {"a": [1, -2, "b"], "c": None}, "y": None}
    assert not marker.exists()


def test_m6_oc_is_opencompass_first_capital_postprocess():
    # opencompass.utils.text_postprocessors.first_capital_postprocess (0.5.4): for t in text: if t.isupper()
    # returns t; the import reads the scorer table's M6-oc, None where that capital is no label
    assert extract_oc_gen(" 答案是 b, C", LABELS) == 2 and extract_oc_gen("none", LABELS) is None
    assert extract_oc_gen("Because A", LABELS) == 1 and extract_oc_gen("X then A", LABELS) is None


def test_run_config_names_opencompass_own_configs_and_refuses_a_bad_model_name(tmp_path):
    text = run_config("ppl", "/data/cmmlu", "/models/m", {"sociology": 48}, MODEL)
    assert "cmmlu_ppl_8b9c76" in text and "trust_remote_code=False" in text and "'sociology': 48" in text
    compile(text, "config.py", "exec")
    with pytest.raises(HarnessImportError, match="not a plain name"):
        run_config("gen", "/data/cmmlu", "/models/m", {"sociology": 48}, "../evil")


# ---- the committed fixture: a real OpenCompass 0.5.4 run --------------------------------------


@pytest.fixture(scope="module")
def fixture_store():
    return read_records(FIXTURE).to_pylist(), read_manifest(FIXTURE)["metadata"]


def test_fixture_reproduces_opencompass_accuracy_exactly(fixture_store):
    rows, metadata = fixture_store
    accuracies = accuracy_by_dataset(rows, metadata)
    assert len(accuracies) == 8  # 4 subjects x (ppl, gen)
    for key, (reported, reproduced) in accuracies.items():
        assert reported == reproduced, key
    modes = {d["mode"] for d in metadata["opencompass"]["datasets"].values()}
    assert modes == {"ppl", "gen"}


def test_fixture_audit_says_what_ppl_normalised_over(fixture_store):
    _, metadata = fixture_store
    meta = metadata["opencompass"]
    assert meta["audit"]["degenerate"] is False
    assert [lt["tokens"] for lt in meta["audit"]["cell"]["labels"]] == [["ĠA"], ["ĠB"], ["ĠC"], ["ĠD"]]
    for d in meta["datasets"].values():
        if d["mode"] == "ppl":
            assert d["audit"]["equal_token_counts"] is True
            assert d["audit"]["label_token_counts"] == [[1, 1, 1, 1]]
            assert d["audit"]["n_decision_differs_from_summed_loglik"] == 0


def test_fixture_holds_no_benchmark_text(benchmarks_root, capsys):
    from cube import cli

    code = cli.main(["release", "audit", str(FIXTURE), "--items", str(benchmarks_root / "cmmlu")])
    assert code == 0 and "leakage audit clean" in capsys.readouterr().out


@pytest.mark.registry  # the demo model comes from PyPI
def test_fixture_ppls_agree_with_cube_on_byte_equal_prompts(fixture_store, items, capsys):
    """OpenCompass's -PPL x n (the whole prompt's log-likelihood) against cube's HF backend (fp32) on the
    prompt cube renders itself: per token, and between labels (the difference that decides)."""
    from cube.harness.backends import open_backend
    from cube.harness.backends.base import ScoreRequest
    from cube.protocol.tokenization import encode_ids

    rows, metadata = fixture_store
    backend = open_backend("hf", MODEL, dtype="float32", device="cpu")
    tokenizer = backend.tokenizer
    worst_token = worst_pair = 0.0
    ppl_rows = [r for r in rows if r["scorer"] == PPL_SCORER]
    assert len(ppl_rows) == 4
    for row in ppl_rows:
        item = _item(items, row["uid"])
        prompts = [cmmlu_prompt(item, _shots(items, item.subject), label) for label in LABELS]
        ids = [encode_ids(tokenizer, p) for p in prompts]
        first = tokenizer.decode([ids[0][0]])
        scored = backend.score([ScoreRequest(first, tuple(p[len(first):] for p in prompts))], batch_size=1)[0]
        assert [len(s.token_ids) for s in scored] == [len(i) - 1 for i in ids]  # tokens 2..n, as get_ppl
        cube_ll = np.array([s.total for s in scored])
        n = np.array([len(i) for i in ids])
        oc_ll = np.array(row["scores"]) * n  # scores are -PPL; PPL = -(log-likelihood of 2..n) / n
        worst_token = max(worst_token, float(np.abs(oc_ll / n - cube_ll / n).max()))
        worst_pair = max(worst_pair, float(np.abs((oc_ll - oc_ll[0]) - (cube_ll - cube_ll[0])).max()))
        assert int(np.argmax(cube_ll)) == row["pred"]
    with capsys.disabled():
        print(f"\nOpenCompass vs cube fp32: max |d| per token {worst_token:.2e}, between labels "
              f"{worst_pair:.2e}", file=sys.stderr)
    assert worst_token <= 1e-5 and worst_pair <= 1e-3


# ---- the real OpenCompass, where its environment exists -----------------------------------------


@pytest.mark.registry
@pytest.mark.skipif(not (OC_VENV / ".installed").exists(),
                    reason=".venv-opencompass not built (scripts/install_opencompass_env.sh)")
def test_real_opencompass_renders_the_prompts_cube_renders(tmp_path, items, benchmarks_root):
    from cube.harness.models import ensure_model

    model = ensure_model(MODEL)
    rows = {"sociology": 48}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for mode in ("ppl", "gen"):
        config = tmp_path / f"oc_{mode}.py"
        config.write_text(run_config(mode, benchmarks_root / "cmmlu", model, rows, MODEL, max_out_len=4),
                          encoding="utf-8")
        proc = subprocess.run([str(OC_VENV / "bin" / "opencompass"), str(config), "-w", str(tmp_path / "out"),
                               "--debug"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200,
                              check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    item = _item(items, "cmmlu/sociology/test/48")
    shots = _shots(items, "sociology")
    for path in (tmp_path / "out").rglob("predictions/*/*.json"):
        entry = json.loads(path.read_text(encoding="utf-8"))["0"]
        if "label: A" in entry:
            assert [entry[f"label: {lab}"]["prompt"] for lab in LABELS] == [cmmlu_prompt(item, shots, lab)
                                                                            for lab in LABELS]
        else:
            assert entry["origin_prompt"] == cmmlu_prompt(item, shots, None)
    imported = import_runs([read_run(p) for p in find_runs(tmp_path / "out")], items)
    assert {r["scorer"] for r in imported.rows} == {PPL_SCORER, GEN_SCORER, "M6-strict", "M6-lenient"}


# ---- issue 32 §1 and §5: what the import could not reproduce, and said nothing about --------------


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def _import(folder: Path, items):
    return import_runs([read_run(p) for p in find_runs(folder)], items)


@pytest.mark.parametrize("post, needle", [
    ("first_option_postprocess', options='ABCD", "pred_postprocessor is first_option_postprocess, whose decisions"),
    (None, "no eval_cfg.pred_postprocessor"),
])
def test_issue32_a_gen_run_under_another_postprocessor_is_refused(tmp_path, items, post, needle):
    """A first_option_postprocess run imported with first_capital's decisions ("accuracy 50 (records:
    50)"); a run with none read "the results are not of these predictions"."""
    run = write_oc_run(tmp_path, items, UIDS[:1], "gen")
    config = next((run / "configs").glob("*.py"))
    text = config.read_text(encoding="utf-8")
    old = "pred_postprocessor=dict(type='opencompass.utils.text_postprocessors.first_capital_postprocess'),"
    new = "" if post is None else old.replace("first_capital_postprocess'", post + "'")
    config.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(HarnessImportError, match=needle) as caught:
        _import(tmp_path, items)
    assert "\n" not in str(caught.value)


def test_issue32_a_nan_accuracy_is_refused(tmp_path, items):
    write_oc_run(tmp_path, items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]], accuracy=float("nan"))
    with pytest.raises(HarnessImportError, match="accuracy nan is not a percentage"):
        _import(tmp_path, items)


@pytest.mark.parametrize("mode", ["ppl", "gen"])
@pytest.mark.parametrize("how", ["swapped", "another item's"])
def test_issue32_options_not_the_items_are_refused(tmp_path, items, mode, how):
    """The question hash named the item, and options swapped or taken from another item imported rc 0."""
    import dataclasses

    item = _item(items, UIDS[0])
    other = _item(items, UIDS[1])
    options = tuple(reversed(item.options)) if how == "swapped" else other.options
    fake = dataclasses.replace(item, options=options)
    run = write_oc_run(tmp_path, items, UIDS[:1], mode, ppls=[[1.0, 2.0, 3.0, 4.0]])
    shots = _shots(items, item.subject)

    def change(data):
        if mode == "ppl":
            for label in LABELS:
                data["0"][f"label: {label}"]["prompt"] = cmmlu_prompt(fake, shots, label)
        else:
            data["0"]["origin_prompt"] = cmmlu_prompt(fake, shots, None)

    _edit(next((run / "predictions").rglob("*.json")), change)
    with pytest.raises(HarnessImportError, match=r"options are not item .*'s, in its order"):
        _import(tmp_path, items)


@pytest.mark.parametrize("how, needle", [("four questions", "options are not item"),
                                         ("0-shot prompts", "asks for 5-shot prompts, but the prompt holds 0")])
def test_issue32_label_prompts_not_of_one_item_and_the_configs_shots_are_refused(tmp_path, items, how, needle):
    """Four label prompts of four different questions made one record of the first one's item; a
    5-shot config over 0-shot prompts imported, its records saying 5-shot."""
    item = _item(items, UIDS[0])
    run = write_oc_run(tmp_path, items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]])
    others = [i for i in items if i.subject == item.subject and i.split == "test"][1:4]
    shots = _shots(items, item.subject)
    prompts = ({label: cmmlu_prompt(other, shots, label) for label, other in zip(LABELS[1:], others)}
               if how == "four questions" else {label: cmmlu_prompt(item, [], label) for label in LABELS})

    def change(data):
        for label, prompt in prompts.items():
            data["0"][f"label: {label}"]["prompt"] = prompt

    _edit(next((run / "predictions").rglob("*.json")), change)
    with pytest.raises(HarnessImportError, match=needle):
        _import(tmp_path, items)


def test_issue32_a_test_range_the_predictions_do_not_fill_is_refused(tmp_path, items):
    run = write_oc_run(tmp_path, items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]])
    config = next((run / "configs").glob("*.py"))
    row = _item(items, UIDS[0]).row
    config.write_text(config.read_text(encoding="utf-8").replace(f"test_range='[{row}:{row + 1}]'",
                                                                 f"test_range='[{row}:{row + 4}]'"), encoding="utf-8")
    with pytest.raises(HarnessImportError, match=r"1 prediction\(s\), but the config's test_range .* selects 4 row"):
        _import(tmp_path, items)


def test_issue32_a_config_with_a_byte_order_mark_reads_and_a_broken_one_names_its_line(tmp_path, items):
    run = write_oc_run(tmp_path, items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]])
    config = next((run / "configs").glob("*.py"))
    text = config.read_text(encoding="utf-8")
    config.write_text("\ufeff" + text, encoding="utf-8")  # "not a Python config file (truncated?)" before
    assert [r["uid"] for r in _import(tmp_path, items).rows] == UIDS[:1]
    config.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(HarnessImportError, match=r"not a Python config file: line \d+: "):
        read_config(config)


def test_issue32_links_out_of_the_folder_and_fifos_are_refused(tmp_path, items):
    """Both importers followed symlinks out of the folder they were given (``../`` abbrs are refused for
    that reason), and a FIFO hung the import."""
    run = write_oc_run(tmp_path / "given", items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]])
    predictions = next((run / "predictions").rglob("*.json"))
    outside = tmp_path / "elsewhere.json"
    predictions.rename(outside)
    os.symlink(outside, predictions)
    with pytest.raises(HarnessImportError, match=r"OpenCompass predictions file leads to .*elsewhere.json, outside"):
        _import(tmp_path / "given", items)
    predictions.unlink()
    outside.rename(predictions)
    config = next((run / "configs").glob("*.py"))
    config.unlink()
    os.mkfifo(config)
    with pytest.raises(HarnessImportError, match=r"OpenCompass config is not a regular file"):
        _import(tmp_path / "given", items)


def test_issue32_a_short_unique_option_in_the_config_is_refused(tmp_path, items, unique_short_option):
    """Issue 32 §4: a unique 5-8 character option planted in an OpenCompass config imported."""

    _, option = unique_short_option
    run = write_oc_run(tmp_path, items, UIDS[:1], "ppl", ppls=[[1.0, 2.0, 3.0, 4.0]])
    config = next((run / "configs").glob("*.py"))
    config.write_text(config.read_text(encoding="utf-8").replace("abbr='cmmlu-", f"desc={option[::-1]!r}, abbr='cmmlu-", 1),
                      encoding="utf-8")
    imported = _import(tmp_path, items)
    with pytest.raises(HarnessImportError, match=r"quotes benchmark text .*option, reversed"):
        check_metadata_clean(imported.metadata, items)


def test_a_generation_import_says_its_parse_failures_and_why_strict_fails(tmp_path, items):
    """Issue 36 §6: the report said `M6-strict 1, M6-lenient 0` without saying these were parse
    failures, or why cube's strict extractor fails on every OpenCompass generation (a bare ` A`),
    and printed a label-cell audit for a run that scores no label."""
    from cube.importers.opencompass.report import format_report

    write_oc_run(tmp_path, items, UIDS[:1], "gen", generations=[" A"])
    out = format_report(_import(tmp_path, items))
    assert "parse failures (generations no answer was read from): OpenCompass's first_capital_postprocess 0/1, " \
           "cube's M6-strict 1/1, M6-lenient 0/1" in out
    assert "M6-strict reads only the strict answer form its own prompts ask for, `答案：X`" in out
    assert "label cell (" not in out and "no label cell: a generation run's answers are read from the text" in out


def test_a_gen_runs_generations_are_stored_scrubbed_of_the_item(tmp_path, items):
    """A generation that quotes its item (the question, an option) is stored scrubbed, as every
    importer's and cube's own are; the decisions are still read off the whole text (the lenient
    extractor finds the quoted option)."""
    from cube.records.leakage import audit_records, build_index

    item = _item(items, UIDS[0])
    option = item.options[item.answer]
    texts = [f"{item.question} 我选{option}", f"答案：{LABELS[_item(items, UIDS[1]).answer]}"]
    write_oc_run(tmp_path, items, UIDS, "gen", generations=texts)
    imported = import_runs([read_run(p) for p in find_runs(tmp_path)], items)
    stored = {r["generation"] for r in imported.rows if r["uid"] == UIDS[0]}
    assert len(stored) == 1 and option not in stored.pop() and len(item.question) >= 8
    assert all(r["generation"] == texts[1] for r in imported.rows if r["uid"] == UIDS[1])  # nothing to scrub
    lenient = next(r for r in imported.rows if r["uid"] == UIDS[0] and r["scorer"] == "M6-lenient")
    assert lenient["pred"] == item.answer
    assert not audit_records([(r["uid"], "generation", r["generation"]) for r in imported.rows], build_index(items))
