"""Reasoning checkpoints' thinking blocks (issue 49): the extractors read the text after the block,
and each generation says whether it answered, ran out inside the block, or closed it and gave none."""

from __future__ import annotations

import pytest

from cube.errors import ConfigError
from cube.protocol.extract import extract_lenient, extract_strict
from cube.protocol.thinking import (
    ANSWERED,
    NO_ANSWER_AFTER_THINKING,
    NO_THINKING,
    TRUNCATED_IN_THINKING,
    ThinkingMarkers,
    markers_of_card,
    prompt_opens_thinking,
    split_thinking,
    thinking_outcome,
    thinking_tokens,
)

LABELS = ("A", "B", "C", "D")
OPTIONS = ("一", "二", "三", "四")


def read(text: str, finish: str | None = "stop", opened: bool = False) -> tuple[int | None, int | None, str, str]:
    """(strict, lenient, strict's outcome, lenient's outcome) as the runner reads one generation."""
    split = split_thinking(text, opened=opened)
    strict = extract_strict(split.answer_text, LABELS)
    lenient = extract_lenient(split.answer_text, LABELS, OPTIONS)
    return (strict, lenient, thinking_outcome(split, strict is not None, finish),
            thinking_outcome(split, lenient is not None, finish))


def test_the_answer_after_the_block_wins_over_every_letter_inside_it():
    text = "<think>\n答案：B？不对，答案：C。选A吧\n</think>\n\n答案：D"
    assert extract_strict(text, LABELS) == 3  # the last match happens to be after the block here
    assert read(text) == (3, 3, ANSWERED, ANSWERED)
    # the letter after the block is bare: without the split the lenient reader took C from the thought
    text = "<think>\n答案：B？不对，答案：C\n</think>\nD"
    assert extract_lenient(text, LABELS, OPTIONS) == 2
    assert read(text) == (None, 3, NO_ANSWER_AFTER_THINKING, ANSWERED)


def test_a_letter_only_inside_the_block_is_no_answer_not_a_parse_of_the_thought():
    text = "<think>所以答案：B</think>\n我不确定。"
    assert extract_strict(text, LABELS) == 1  # the old reading: B, from the reasoning
    assert read(text) == (None, None, NO_ANSWER_AFTER_THINKING, NO_ANSWER_AFTER_THINKING)


def test_a_generation_cut_inside_the_block_is_truncated_in_thinking():
    text = "<think>先看选项。答案：A 似乎对，但是"
    assert read(text, finish="length") == (None, None, TRUNCATED_IN_THINKING, TRUNCATED_IN_THINKING)
    # stopped (an end token) inside the block: not a truncation
    assert read(text, finish="stop")[2] == NO_ANSWER_AFTER_THINKING
    # an import that does not say why it ended: never called a truncation
    assert read(text, finish=None)[2] == NO_ANSWER_AFTER_THINKING


def test_two_blocks_are_both_thought_and_the_text_between_and_after_them_is_read():
    text = "<think>答案：A</think>答案：B\n<think>再想想，答案：C</think>\n答案：D"
    assert read(text) == (3, 3, ANSWERED, ANSWERED)
    text = "<think>答案：A</think>答案：B\n<think>再想想，答案：C</think>\n"
    assert read(text) == (1, 1, ANSWERED, ANSWERED)
    # a second block cut off: the answer written between the blocks still stands
    assert read("<think>x</think>答案：B<think>答案：C", finish="length") == (1, 1, ANSWERED, ANSWERED)


def test_no_block_reads_the_whole_generation_as_before():
    for text in ("答案：C", "B", "我认为选B", "无法判断"):
        split = split_thinking(text)
        assert split.answer_text == text and not split.has_block
        assert read(text)[:2] == (extract_strict(text, LABELS), extract_lenient(text, LABELS, OPTIONS))
        assert read(text)[2] == NO_THINKING


def test_a_block_the_prompt_opened_ends_at_the_first_closing_marker():
    """R1-Distill's template writes <think> after the assistant header: the generation holds only
    the close; a closing marker with no opening one closes a block from the start too."""
    prompt = "<｜User｜>问题<｜Assistant｜><think>\n"
    assert prompt_opens_thinking(prompt) and not prompt_opens_thinking(prompt + "x</think>\n")
    assert read("答案：A？不。</think>答案：C", opened=True)[:3] == (2, 2, ANSWERED)
    assert read("答案：A？不。</think>答案：C", opened=False)[:3] == (2, 2, ANSWERED)
    assert read("答案：A 但是", finish="length", opened=True)[:3] == (None, None, TRUNCATED_IN_THINKING)


def test_thinking_tokens_count_the_block_by_its_marker_ids_and_are_not_guessed_without_them():
    markers = ThinkingMarkers(open_ids=(7,), close_ids=(8,))
    #      <think> a  b  c </think> ans
    ids = [7, 1, 2, 3, 8, 4]
    split = split_thinking("<think>abc</think>答案：A", markers)
    assert thinking_tokens(ids, split, markers) == 5
    unclosed = split_thinking("<think>abc", markers)
    assert thinking_tokens([7, 1, 2, 3], unclosed, markers) == 4
    opened = split_thinking("abc</think>答案：A", markers, opened=True)
    assert thinking_tokens([1, 2, 3, 8, 4], opened, markers, opened=True) == 4
    assert thinking_tokens([9, 9], split_thinking("答案：A", markers), markers) == 0
    assert thinking_tokens(ids, split, ThinkingMarkers()) is None  # ids unknown: not counted


def test_another_marker_pair_and_a_bad_card_value():
    markers = markers_of_card(["<reasoning>", "</reasoning>"], "card x")
    split = split_thinking("<reasoning>答案：A</reasoning>答案：B <think>", markers)
    assert extract_strict(split.answer_text, LABELS) == 1
    with pytest.raises(ConfigError, match=r"card x: thinking_markers '<think>' must be two non-empty strings"):
        markers_of_card("<think>", "card x")


@pytest.mark.registry
def test_qwen3s_tokenizer_gives_its_markers_ids_and_the_block_is_counted_in_its_tokens(qwen3_tokenizer):
    """Qwen3 has <think> and </think> as added tokens: their ids are read from the tokenizer, and a
    generation's block is counted in its own tokens (checked against encoding the block alone)."""
    from cube.protocol.thinking import markers_of_tokenizer

    markers = markers_of_tokenizer(qwen3_tokenizer, "qwen3")
    assert (markers.open, markers.close) == ("<think>", "</think>")
    assert markers.open_ids == (qwen3_tokenizer.token_to_id("<think>"),) and markers.close_ids is not None
    block, answer = "<think>\n先排除A，答案：B？不对。\n</think>", "\n\n答案：C"
    ids = qwen3_tokenizer.encode(block + answer, add_special_tokens=False).ids
    split = split_thinking(qwen3_tokenizer.decode(ids, skip_special_tokens=False), markers)
    assert extract_strict(split.answer_text, LABELS) == 2
    assert thinking_tokens(ids, split, markers) == len(qwen3_tokenizer.encode(block, add_special_tokens=False).ids)
