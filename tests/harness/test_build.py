"""A RunConfig built into a RunSpec without argparse: the same items, cells and settings as ``cube run``."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from cube.cli import build_parser
from cube.harness.run_config import RunConfig


@pytest.mark.registry
def test_a_config_builds_the_same_spec_as_the_command_line(benchmarks_root):
    pytest.importorskip("torch")
    from cube.commands.run import build_spec as from_args
    from cube.harness.build import build_spec

    config = RunConfig(model="smollm2-135m-instruct", subjects=("anatomy", "virology"), sample=3,
                       label_sets=("L1_halfwidth", "L4_circled"), dtype="float32", out=Path("o"),
                       data=benchmarks_root / "cmmlu")
    spec = build_spec(config)
    argv = shlex.split(config.command_line())[1:] + ["--data", str(benchmarks_root / "cmmlu")]
    assert spec == from_args(build_parser().parse_args(argv))  # items, cells, settings, command alike
    assert [c.key for c in spec.cells] == ["L1_halfwidth|zh_cue|0shot|original", "L4_circled|zh_cue|0shot|original"]
    # the settings hold the configuration as it ran: the benchmark's own cues filled in (no --cues given)
    ran = replace(config, contexts=("zh_cue",))
    assert len(spec.items) == 3 and spec.settings.config == ran and spec.settings.dtype == "float32"
    assert spec.settings.to_log()["command"] == ran.command_line() and spec.settings.to_log()["config"] == ran.to_log()


@pytest.mark.registry
def test_thinking_markers_come_from_the_tokenizer_else_the_templates_else_the_default(tiny_qwen3, qwen3_tokenizer,
                                                                                     tmp_path):
    """Where a generation's thinking block ends (issue 49): Qwen3's added <think>/</think> with their
    ids; the templates' generation.thinking_markers over them (ids where the tokenizer has the
    markers as tokens); the default pair without ids for a tokenizer that has none (the demo SmolLM2)."""
    from transformers import PreTrainedTokenizerFast

    from cube.harness.build import thinking_markers_of
    from cube.harness.model_spec import parse_model

    folder = tmp_path / "tiny-qwen3"
    tiny_qwen3.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=qwen3_tokenizer, eos_token="<|im_end|>").save_pretrained(folder)
    qwen3 = parse_model(str(folder))
    found = thinking_markers_of(qwen3, {})
    assert (found.open, found.close, found.close_ids) == ("<think>", "</think>", (qwen3_tokenizer.token_to_id("</think>"),))
    named = thinking_markers_of(qwen3, {"generation": {"thinking_markers": ["<tool_call>", "</tool_call>"]}})
    assert (named.open, named.close, named.source) == ("<tool_call>", "</tool_call>", "templates generation")
    assert named.close_ids == (qwen3_tokenizer.token_to_id("</tool_call>"),)
    demo = thinking_markers_of(parse_model("smollm2-135m-instruct"), {})
    assert (demo.open, demo.close, demo.open_ids, demo.close_ids) == ("<think>", "</think>", None, None)
