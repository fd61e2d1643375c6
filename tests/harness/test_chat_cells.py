"""``cube run --chat-template none,model`` (issue 37 §3) on real checkpoints: a tiny random Qwen3 with
the real Qwen vocabulary and Qwen's own chat template, and the SmolLM2 demo model.

A chat cell records its template (by digest) in its configuration, is audited with the labels
after the assistant turn's cue (the audit ``cube run`` prints equals ``cube audit --model ...
--chat-template model``), resumes, is a slice of ``cube rescore`` and a named factor of ``cube
explain``; its prompt bytes are transformers' ``apply_chat_template`` of the plain prompt plus the
cue. ``none`` is the plain prompt byte for byte, and a checkpoint without a template asked for
``model`` is one line before anything loads.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest

from cube.cli import main

SMALL_RUN = ["--subjects", "anatomy", "--sample", "2", "--dtype", "float32"]


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.strip().splitlines() if line]


@pytest.fixture(scope="module")
def qwen3_no_template(tiny_qwen3, qwen3_tokenizer, tmp_path_factory) -> Path:
    """Random weights as safetensors with the real Qwen3 tokenizer (npm, verified) and no chat template."""
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("models") / "tiny-qwen3"
    tiny_qwen3.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=qwen3_tokenizer, eos_token="<|im_end|>").save_pretrained(folder)
    assert not (folder / "chat_template.jinja").exists()
    return folder


@pytest.fixture(scope="module")
def qwen_template() -> str:
    """Qwen's own chat template, as the pinned GGUF header of the Qwen2.5-Coder demo model holds it."""
    from cube.harness.models import _first_part_metadata, model_source

    return _first_part_metadata(model_source("qwen2.5-coder-1.5b-instruct"))["tokenizer.chat_template"]


@pytest.fixture
def qwen3_chat(qwen3_no_template, qwen_template, tmp_path) -> Path:
    folder = tmp_path / "tiny-qwen3-chat"
    shutil.copytree(qwen3_no_template, folder)
    (folder / "chat_template.jinja").write_text(qwen_template, encoding="utf-8")
    return folder


def chat_prompts(config, kind: str = "label") -> dict[str, list[str]]:
    """The prompt text of every request of ``kind`` the runner sends the backend, per cell."""
    from cube.harness.build import build_spec
    from cube.harness.passes import SCORING_WORK
    from cube.harness.run_spec import plan_jobs

    spec = build_spec(config)
    return {job.cell_name: [r.context for r in SCORING_WORK[kind](spec, job).requests]
            for job in plan_jobs(spec) if job.kind == kind}


@pytest.mark.registry
def test_a_qwen_chat_cell_is_recorded_audited_resumed_sliced_and_explained(qwen3_chat, qwen_template, tmp_path,
                                                                           capsys):
    from transformers import AutoTokenizer

    from cube.harness.run_config import RunConfig
    from cube.records.store import read_manifest, read_records

    out = tmp_path / "out"
    argv = ["run", "--model", str(qwen3_chat), *SMALL_RUN, "--label-sets", "L1_halfwidth,L4_circled",
            "--scorers", "M1-seq,M1-strict,M2,M6", "--chat-template", "none,model", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    # the audit cube run printed before the weights loaded is cube audit --model's, chat cells included
    assert main(["audit", "--model", str(qwen3_chat), "--label-sets", "L1_halfwidth,L4_circled",
                 "--contexts", "zh_cue", "--chat-template", "none,model"]) == 0
    audit = capsys.readouterr().out
    assert audit.startswith("audit of tiny-qwen3-chat's tokenizer: 4 cells, 2 DEGEN\n") and audit in err
    assert "  L1_halfwidth | zh_cue@chat | 0-shot: max1tok (A 'A'; B 'B'; C 'C'; D 'D')\n" in audit
    assert "  L4_circled | zh_cue@chat | 0-shot: DEGEN (full): ①=②=③=④ share first token" in audit

    # each cell records its form; a chat cell its template's digest, a plain cell what it recorded before
    records = read_records(out)
    assert set(records.column("context").to_pylist()) == {"zh_cue", "zh_cue@chat", "cloze", "cloze@chat"}
    # items x (label sets x forms x (2 label scorers + M6's two extractors) + 2 cloze forms)
    assert records.num_rows == 2 * (2 * 2 * 4 + 2)
    generated = records.filter(pc.equal(records.column("scorer"), "M6-strict"))
    assert sorted(set(generated.column("context").to_pylist())) == ["zh_cue", "zh_cue@chat"]
    cells = read_manifest(out)["cells"]
    digest = hashlib.sha256(qwen_template.encode("utf-8")).hexdigest()
    chat = {k: c for k, c in cells.items() if "@chat" in k}
    assert sorted(chat) == ["tiny-qwen3-chat/cloze--cloze@chat",
                            "tiny-qwen3-chat/gen--L1_halfwidth__zh_cue@chat__0shot__original",
                            "tiny-qwen3-chat/gen--L4_circled__zh_cue@chat__0shot__original",
                            "tiny-qwen3-chat/label--L1_halfwidth__zh_cue@chat__0shot__original",
                            "tiny-qwen3-chat/label--L4_circled__zh_cue@chat__0shot__original"]
    assert all((c["chat_template"], c["chat_template_sha256"], c["chat_template_bos_added"]) == ("model", digest, None)
               for c in chat.values())
    assert not any("chat_template" in c for k, c in cells.items() if k not in chat)
    log = json.loads((out / "tiny-qwen3-chat" / "runlog.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert log["chat_template"]["sha256"] == digest and log["config"]["chat_templates"] == ["none", "model"]
    assert log["chat_template"]["source"] == f"chat_template.jinja of {qwen3_chat}"

    # the prompt bytes the backend got: transformers' rendering of the plain prompt, the cue after it
    tokenizer = AutoTokenizer.from_pretrained(qwen3_chat)
    config = RunConfig.from_log(log)
    prompts = chat_prompts(config)
    plain = prompts["label--L1_halfwidth__zh_cue__0shot__original"]
    shown = prompts["label--L1_halfwidth__zh_cue@chat__0shot__original"]
    # answer-only generation continues the same chat prompt (its cue opening the reply)
    from cube.harness.build import build_spec
    from cube.harness.passes import _generation_prompt
    from cube.harness.run_spec import plan_jobs

    spec = build_spec(config)
    (job,) = [j for j in plan_jobs(spec) if j.cell_name == "gen--L1_halfwidth__zh_cue@chat__0shot__original"]
    assert [_generation_prompt(it, job.cell, spec, cot=False) for it in job.items] == [(t, "答案：") for t in shown]
    # chain of thought: its instruction ends the user turn, the reply starts empty
    from cube.protocol.prompts import load_templates

    instruction = load_templates()["generation"]["cot_instruction"]
    assert [_generation_prompt(it, job.cell, spec, cot=True) for it in job.items] == [
        (tokenizer.apply_chat_template([{"role": "user", "content": (t[: -len("答案：")] + instruction).rstrip()}],
                                       add_generation_prompt=True, tokenize=False), "") for t in plain]
    for text, in_chat in zip(plain, shown):
        assert text.endswith("\nD. " + text.split("\nD. ")[-1]) and text.endswith("答案：")
        expected = tokenizer.apply_chat_template([{"role": "user", "content": text[: -len("答案：")].rstrip()}],
                                                 add_generation_prompt=True, tokenize=False) + "答案："
        assert in_chat == expected
        assert in_chat.endswith("<|im_end|>\n<|im_start|>assistant\n答案：")
        assert in_chat.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")

    # resumable: the same command finds every shard done
    assert main(argv) == 0
    assert "0 shards to run, 10 already done" in capsys.readouterr().err
    # a slice of cube rescore, and a named factor of cube explain
    assert main(["rescore", str(out), "--context", "zh_cue@chat", "--scorer", "M1-seq", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {(r["label_set"], r["context"]) for r in rows if r["level"] == "overall"} == {
        ("L1_halfwidth", "zh_cue@chat"), ("L4_circled", "zh_cue@chat")}
    assert main(["explain", f"{out}:label_set=L1_halfwidth,context=zh_cue,scorer=M1-seq",
                 f"{out}:label_set=L1_halfwidth,context=zh_cue@chat,scorer=M1-seq", "--json", "--bootstrap", "100"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["protocol"]["chat_template"] == {"status": "differs", "a": "none",
                                                       "b": f"model (template sha256 {digest[:12]}...)"}
    assert explained["protocol"]["prompt_bytes"]["status"] == "same"
    assert explained["max_score_difference"] is None  # the prompts are not byte-equal: one is a chat
    assert "chat_template" in [f["name"] for f in explained["factors"]]
    # two chat cells of one store: the one template, known by its recorded digest on both sides
    assert main(["explain", f"{out}:label_set=L1_halfwidth,context=zh_cue@chat,scorer=M1-seq",
                 f"{out}:label_set=L4_circled,context=zh_cue@chat,scorer=M1-seq", "--json", "--bootstrap", "100"]) == 0
    assert json.loads(capsys.readouterr().out)["protocol"]["chat_template"]["status"] == "same"

    # another template is another model file: the resume is refused naming it, before anything loads
    (qwen3_chat / "chat_template.jinja").write_text(qwen_template.replace("You are Qwen", "You are Q"), encoding="utf-8")
    assert main(argv) == 2
    line = error_lines(capsys)[-1]
    assert "model file chat_template.jinja changed (sha256 " in line and line.startswith("cube: error: ")


@pytest.mark.registry
def test_a_checkpoint_without_a_template_asked_for_model_is_one_line_before_anything_loads(qwen3_no_template, tmp_path,
                                                                                           capsys):
    out = tmp_path / "out"
    assert main(["run", "--model", str(qwen3_no_template), *SMALL_RUN, "--chat-template", "none,model",
                 "--out", str(out)]) == 2
    lines = error_lines(capsys)
    assert lines == [f"cube: error: --chat-template model: model tiny-qwen3 has no chat template: {qwen3_no_template} "
                     "(no chat_template.jinja, and no chat_template in tokenizer_config.json); run it with "
                     "--chat-template none"]
    assert not out.exists()
    assert main(["audit", "--model", str(qwen3_no_template), "--chat-template", "model"]) == 2
    assert error_lines(capsys) == lines
    # the plain form runs as before
    assert main(["audit", "--model", str(qwen3_no_template), "--contexts", "zh_cue", "--label-sets", "L1_halfwidth"]) == 0


@pytest.mark.registry
def test_smollm2_scores_a_chat_cell_with_its_own_template(tmp_path, capsys):
    """The demo model by name: its template from its pinned GGUF header (the same text its converted
    folder's chat_template.jinja holds), recorded in the cell, audited as cube audit does."""
    from cube.harness.models import ensure_model
    from cube.records.store import read_manifest, read_records

    out = tmp_path / "out"
    argv = ["run", "--model", "smollm2-135m-instruct", *SMALL_RUN, "--scorers", "M1-seq", "--chat-template", "model",
            "--label-sets", "L1_halfwidth", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert main(["audit", "--model", "smollm2-135m-instruct", "--label-sets", "L1_halfwidth", "--contexts", "zh_cue",
                 "--chat-template", "model"]) == 0
    audit = capsys.readouterr().out
    assert audit.startswith("audit of smollm2-135m-instruct's tokenizer: 1 cell, 0 DEGEN\n") and audit in err
    assert "L1_halfwidth | zh_cue@chat | 0-shot: max1tok" in audit
    digest = hashlib.sha256((ensure_model("smollm2-135m-instruct") / "chat_template.jinja").read_bytes()).hexdigest()
    (cell,) = read_manifest(out)["cells"].values()
    assert (cell["chat_template"], cell["chat_template_sha256"], cell["context"]) == ("model", digest, "zh_cue")
    records = read_records(out)
    assert records.column("context").to_pylist() == ["zh_cue@chat"] * 2
    # its precision is found for the chat cell, so rescore's in-noise column is counted, not unknown
    assert main(["rescore", str(out), "--json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["aggregation"] == "micro"]
    assert row["context"] == "zh_cue@chat" and row["within_noise_rate"] is not None


# The prompts of a plain run with label, cloze, judgement and generation passes, 0- and 5-shot, two
# label sets and two contexts, hashed on main at a837464 before the chat axis existed.
PLAIN_PROMPTS_ON_MAIN = "b21a05ab2403d8b4"


@pytest.mark.registry
def test_the_none_form_is_the_plain_prompt_byte_for_byte():
    from cube.harness.build import build_spec
    from cube.harness.run_config import RunConfig
    from cube.harness.passes import SCORING_WORK, _generation_prompt
    from cube.harness.run_spec import cell_configs, plan_jobs

    config = RunConfig(model="smollm2-135m-instruct", subjects=("anatomy",), sample=3, shots=(0, 5),
                       label_sets=("L1_halfwidth", "L4_circled"), scorers=("M1-seq", "M2", "TF", "M6"),
                       contexts=("zh_cue", "en_label_space"))
    spec = build_spec(config)
    digest = hashlib.sha256()
    for job in plan_jobs(spec):
        if job.kind in SCORING_WORK:
            for request in SCORING_WORK[job.kind](spec, job).requests:
                digest.update(request.context.encode())
                digest.update("\x00".join(request.continuations).encode())
        else:
            for item in job.items:
                digest.update("\x01".join(_generation_prompt(item, job.cell, spec, job.kind == "cot")).encode())
    assert digest.hexdigest()[:16] == PLAIN_PROMPTS_ON_MAIN
    explicit = build_spec(RunConfig(**{**config.__dict__, "chat_templates": ("none",)}))
    assert explicit.config_hash() == spec.config_hash()
    assert not any("chat_template" in c for c in cell_configs(spec).values())


@pytest.fixture
def qwen3_thinking(qwen3_no_template, tmp_path) -> Path:
    """The tiny Qwen3 with Qwen3's own template, which takes enable_thinking (tests/protocol/test_chat_thinking.py)."""
    from tests.protocol.test_chat_thinking import QWEN3_CONFIG, QWEN3_CONFIG_SHA256
    from cube.tokenizers.sources import fetch_registry_file

    folder = tmp_path / "tiny-qwen3-thinking"
    shutil.copytree(qwen3_no_template, folder)
    template = json.loads(fetch_registry_file(QWEN3_CONFIG, QWEN3_CONFIG_SHA256).read_text(encoding="utf-8"))
    (folder / "chat_template.jinja").write_text(template["chat_template"], encoding="utf-8")
    return folder


@pytest.mark.registry
def test_thinking_off_and_on_are_cells_of_their_own(qwen3_thinking, qwen_template, qwen3_no_template, tmp_path, capsys):
    """``--thinking off,on`` (issue 49 §2): each chat cell twice, its records' context marked, its mode in
    the cell's configuration (so the configuration hash differs), every generation prompt transformers'
    apply_chat_template with enable_thinking; labels scored with thinking off after the template's own
    empty block, exactly as it renders; a template without enable_thinking refused in one line."""
    from transformers import AutoTokenizer

    from cube.harness.build import build_spec
    from cube.harness.run_config import RunConfig
    from cube.harness.passes import _generation_prompt
    from cube.harness.run_spec import plan_jobs
    from cube.records.store import read_manifest, read_records

    out = tmp_path / "out"
    argv = ["run", "--model", str(qwen3_thinking), *SMALL_RUN, "--chat-template", "model", "--thinking", "off,on",
            "--scorers", "M6", "--max-gen-tokens", "3", "--out", str(out)]
    assert main(argv) == 0
    contexts = set(read_records(out).column("context").to_pylist())
    assert contexts == {"zh_cue@chat+nothink", "zh_cue@chat+think"}
    cells = read_manifest(out)["cells"]
    assert {k.split("/", 1)[1]: c["thinking"] for k, c in cells.items()} == {
        "gen--L1_halfwidth__zh_cue@chat+nothink__0shot__original": "off",
        "gen--L1_halfwidth__zh_cue@chat+think__0shot__original": "on"}
    config = RunConfig.from_log(json.loads((out / "tiny-qwen3-thinking" / "runlog.jsonl").read_text().splitlines()[-1]))
    assert config.thinking == ("off", "on")
    spec = build_spec(config)
    tokenizer = AutoTokenizer.from_pretrained(qwen3_thinking)
    plain = build_spec(RunConfig(model=str(qwen3_thinking), subjects=("anatomy",), sample=2, dtype="float32",
                                 scorers=("M1-seq",)))
    from cube.protocol.prompts import render_prompt

    for job in plan_jobs(spec):
        mode = job.cell.chat.endswith("+think")
        for item in job.items:
            text = render_prompt(item, plain.cells[0], [], plain.prompt_templates()).context
            expected = tokenizer.apply_chat_template([{"role": "user", "content": text[:-len("答案：")].rstrip()}],
                                                     add_generation_prompt=True, tokenize=False,
                                                     enable_thinking=mode) + "答案："
            assert _generation_prompt(item, job.cell, spec, cot=False) == (expected, "答案：")
    capsys.readouterr()

    # labels with thinking off: scored after the template's own empty block
    off = build_spec(RunConfig(model=str(qwen3_thinking), subjects=("anatomy",), sample=2, dtype="float32",
                               scorers=("M1-seq",), chat_templates=("model",), thinking=("off",)))
    prompts = chat_prompts(off.settings.config)
    assert list(prompts) == ["label--L1_halfwidth__zh_cue@chat+nothink__0shot__original"]
    assert all(p.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n答案：") for p in prompts[next(iter(prompts))])
    assert off.settings.audit[0].cell.context == "zh_cue@chat+nothink"

    # a template that does not read enable_thinking: one line, before anything loads
    folder = tmp_path / "tiny-qwen25-template"
    shutil.copytree(qwen3_no_template, folder)
    (folder / "chat_template.jinja").write_text(qwen_template, encoding="utf-8")
    assert main(["run", "--model", str(folder), *SMALL_RUN, "--chat-template", "model", "--thinking", "off",
                 "--scorers", "M6", "--out", str(tmp_path / "refused")]) == 2
    lines = error_lines(capsys)
    assert len(lines) == 1 and "does not read enable_thinking" in lines[0]
    assert not (tmp_path / "refused").exists()
