"""The chat-template axis (issue 37 §3): a prompt as the checkpoint's own chat, on real templates.

The rendering is held against transformers' own ``apply_chat_template`` on the same messages (an
independent implementation of the same jinja contract), then the cue's placement is checked: the
text before the cue is the user turn, the cue opens the assistant turn.
"""

from __future__ import annotations

import pytest

from cube.errors import ConfigError
from cube.protocol.chat import ChatTemplate, record_context, split_context
from cube.protocol.items import Item
from cube.protocol.label_sets import select_label_sets
from cube.protocol.prompts import Cell, cloze_prompt, judgement_prompts, load_contexts, render_prompt

DEMO = "smollm2-135m-instruct"
ITEM = Item("cmmlu", "anatomy", "test", 0, "下列哪一项是我们自己写的测试题？", ("第一项", "第二项", "第三项", "第四项"), 2,
            subject_zh="解剖学")
SHOTS = [Item("cmmlu", "anatomy", "dev", k, f"自编例题{k}？", ("甲", "乙", "丙", "丁"), k % 4, subject_zh="解剖学")
         for k in range(5)]


@pytest.fixture(scope="module")
def smollm2():
    """The demo model's chat template (its pinned GGUF header) and transformers' tokenizer of its
    converted folder (cube's model store, via ensure_model), which carries the same template."""
    from transformers import AutoTokenizer

    from cube.harness.model_spec import parse_model

    spec = parse_model(DEMO)
    return spec.chat_template(), AutoTokenizer.from_pretrained(spec.folder())


def reference(tokenizer, user: str, cue: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                         tokenize=False) + cue


@pytest.mark.registry
@pytest.mark.parametrize("context, shots", [("zh_cue", 0), ("zh_cue_newline", 5), ("en_label_space", 0)])
def test_a_chat_cell_is_the_prompt_as_the_user_turn_and_the_cue_opening_the_reply(smollm2, context, shots):
    template, tokenizer = smollm2
    label_set = select_label_sets(["L1_halfwidth"])[0]
    cue = load_contexts([context])[0].cue
    plain = render_prompt(ITEM, Cell(label_set, context, shots), SHOTS)
    chat = render_prompt(ITEM, Cell(label_set, context, shots, chat="model"), SHOTS, chat_template=template)
    body = plain.context[: -len(cue)]
    assert chat.context == reference(tokenizer, body.rstrip(), cue)
    # where the cue is: right after the assistant header, the whole plain prompt before it inside the user turn
    assert chat.context.endswith("<|im_end|>\n<|im_start|>assistant\n" + cue)
    assert "<|im_start|>user\n" + body.rstrip() + "<|im_end|>" in chat.context
    assert chat.label_continuations == plain.label_continuations and chat.gold == plain.gold


@pytest.mark.registry
def test_cloze_and_judgement_prompts_take_the_same_chat_form(smollm2):
    template, tokenizer = smollm2
    plain, chat = cloze_prompt(ITEM), cloze_prompt(ITEM, chat_template=template)
    assert chat.context == reference(tokenizer, plain.context[: -len("答案：")].rstrip(), "答案：")
    assert chat.unconditional_context == reference(tokenizer, "", plain.unconditional_context)
    assert chat.continuations == plain.continuations
    statement = judgement_prompts(ITEM)[0]
    shown = judgement_prompts(ITEM, chat_template=template)[0]
    assert shown.context == reference(tokenizer, statement.context[: -len("这个说法是")].rstrip(), "这个说法是")


def test_a_chat_cell_is_marked_in_its_records_context_and_a_plain_cell_keeps_its_name():
    label_set = select_label_sets(["L1_halfwidth"])[0]
    assert Cell(label_set, "zh_cue", 0).key == "L1_halfwidth|zh_cue|0shot|original"
    assert Cell(label_set, "zh_cue", 0, chat="model").key == "L1_halfwidth|zh_cue@chat|0shot|original"
    assert split_context(record_context("zh_cue", "model")) == ("zh_cue", "model")
    assert split_context("zh_cue") == ("zh_cue", "none")
    with pytest.raises(ConfigError, match="cell chat template 'chatml' is not one of none, model"):
        Cell(label_set, "zh_cue", 0, chat="chatml")
    with pytest.raises(ConfigError, match="needs the model's chat template"):
        render_prompt(ITEM, Cell(label_set, "zh_cue", 0, chat="model"))


def test_a_template_runs_in_a_sandbox_and_its_errors_are_one_line():
    """Nothing a checkpoint ships runs code: the sandbox refuses Python internals."""
    escape = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}", "a test's own template")
    with pytest.raises(ConfigError) as caught:
        escape.user_turn("x")
    assert "SecurityError" in str(caught.value) and "\n" not in str(caught.value)
    refusing = ChatTemplate("{{ raise_exception('only system and user roles') }}", "a test's own template")
    with pytest.raises(ConfigError, match=r"\(TemplateError: only system and user roles\); run with --chat-template none$"):
        refusing.user_turn("x")
    # a template that prints today's date where it can falls back to its own fixed one
    dated = ChatTemplate("{% if strftime_now is defined %}{{ strftime_now('%Y') }}{% else %}fixed{% endif %}"
                         "{{ messages[0].content }}", "a test's own template")
    assert dated.user_turn("x") == "fixedx"


def test_a_bos_the_tokenizer_adds_itself_is_not_written_twice():
    template = ChatTemplate("{{ bos_token }}<u>{{ messages[0].content }}</u>", "a test's own template",
                            (("bos_token", "<s>"),), bos_added="<s>")
    assert template.wrap("question\n", "Answer:") == "<u>question</u>Answer:"
    assert ChatTemplate(template.template, "t", (("bos_token", "<s>"),)).wrap("q", "") == "<s><u>q</u>"


# ---- issue 48: a template that is not a function of its input ------------------------------------------

@pytest.mark.parametrize("source", [
    "{{ [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] | random }}{% for m in messages %}{{ m.content }}{% endfor %}",
    "{{ lipsum(1) }}{% for m in messages %}{{ m.content }}{% endfor %}",
])
def test_a_template_with_randomness_cannot_give_one_sha256_two_prompts(source):
    with pytest.raises(ConfigError) as caught:
        ChatTemplate(source, "a test template").user_turn("问题")
    assert "run with --chat-template none" in str(caught.value) and "\n" not in str(caught.value)


def test_a_template_that_ignores_the_message_is_one_line():
    with pytest.raises(ConfigError, match=r"renders two different user messages as the same text: it ignores the "
                                          r"message"):
        ChatTemplate("<|user|>hello<|assistant|>", "a test template").user_turn("问题")


def test_a_template_that_loops_is_stopped_at_a_bounded_size():
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}{{ messages[0].content }}"
    with pytest.raises(ConfigError, match=r"renders one user turn in more than 1,000,000 characters"):
        ChatTemplate(loop, "a test template").user_turn("问题")


def test_a_loop_that_writes_nothing_is_stopped_at_the_time_bound(monkeypatch):
    """Nested range loops that write nothing (10^10 iterations) stop at the render's deadline, not
    after hours; a range still has a length, an index and a reverse for templates that use them."""
    import cube.protocol.chat as chat

    monkeypatch.setattr(chat, "MAX_RENDER_S", 0.2)
    silent = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ messages[0].content }}"
    with pytest.raises(ConfigError, match=r"renders one user turn in more than 0.2 s: a loop, not a chat"):
        ChatTemplate(silent, "a silent loop").user_turn("问题")
    used = "{{ range(3)|length }}{{ range(5)[2] }}{% for i in range(3)|reverse %}{{ i }}{% endfor %}{{ messages[0].content }}"
    assert ChatTemplate(used, "a range user").user_turn("问题") == "32210问题"
    with pytest.raises(ConfigError, match="cannot render a user turn"):  # jinja's own limit still holds
        ChatTemplate("{% for i in range(10**9) %}{% endfor %}{{ messages[0].content }}", "huge").user_turn("问题")
