"""Reasoning checkpoints' thinking blocks: the answer is read after the block, never inside it.

Qwen3, DeepSeek-R1 and their distills write ``<think> … </think>`` before their answer (R1-Distill's
template opens the block in the prompt, so its generations hold only the closing marker). A letter
inside the block is a thought, not an answer: ``<think> maybe B … no, C </think> 答案：D`` is D, and
a generation that runs out of tokens inside the block gave no answer at all. So every extractor
(M6-strict, M6-lenient, and the importers' re-reads) reads only the text outside the blocks
(``answer_text``), and each generation record says what the block did (``thinking`` column):

- ``none``: no thinking block (the extractors read the whole generation, as always);
- ``answered``: a block, and an answer read after it;
- ``truncated_in_thinking``: the token limit came inside an open block and no answer was found
  outside it: a budget too small, not a format failure;
- ``no_answer_after_thinking``: the block was closed (or the generation stopped inside it) and no
  answer was found in what follows.

The last two are no-answer records (``pred`` -1, ``parse_failed`` true, as every record without an
answer), told apart from a plain parse failure by this column; ``thinking_tokens`` counts the
tokens the block took.

The markers: ``<think>``/``</think>`` (Qwen3, QwQ, R1 and its distills) unless the model's
tokenizer has another pair among its added tokens (``THINKING_PAIRS``) or the benchmark card's
``generation.thinking_markers`` names one. A generation of a model that never thinks holds no
marker, so its reading is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NO_THINKING = "none"
ANSWERED = "answered"
TRUNCATED_IN_THINKING = "truncated_in_thinking"
NO_ANSWER_AFTER_THINKING = "no_answer_after_thinking"
THINKING_OUTCOMES = (NO_THINKING, ANSWERED, TRUNCATED_IN_THINKING, NO_ANSWER_AFTER_THINKING)
THINKING_FAILURES = (TRUNCATED_IN_THINKING, NO_ANSWER_AFTER_THINKING)  # the no-answer outcomes, told apart

# Known (open, close) pairs, the first the default: what reasoning checkpoints write.
THINKING_PAIRS = (("<think>", "</think>"), ("<thinking>", "</thinking>"), ("<reasoning>", "</reasoning>"))


@dataclass(frozen=True)
class ThinkingMarkers:
    """A checkpoint's thinking markers, and their token ids where its tokenizer has them as one
    token each (what ``thinking_tokens`` is counted by; None: not counted)."""

    open: str = THINKING_PAIRS[0][0]
    close: str = THINKING_PAIRS[0][1]
    source: str = "default"  # where they were read: "default", "added tokens of <tokenizer>", "benchmark card"
    open_ids: tuple[int, ...] | None = None
    close_ids: tuple[int, ...] | None = None

    def to_log(self) -> dict:
        return {"open": self.open, "close": self.close, "source": self.source}


DEFAULT_MARKERS = ThinkingMarkers()


@dataclass(frozen=True)
class ThinkingSplit:
    """A generation cut at its thinking markers."""

    answer_text: str  # the text outside every block: what the extractors read
    has_block: bool  # a marker was written (or the prompt opened a block)
    unclosed: bool  # the generation ends inside an open block


def split_thinking(text: str, markers: ThinkingMarkers = DEFAULT_MARKERS, opened: bool = False) -> ThinkingSplit:
    """``text`` without its thinking blocks. ``opened``: the prompt ended inside an open block (R1's
    template writes ``<think>\\n`` after the assistant header), so the text up to the first closing
    marker is thought. A closing marker without an opening one closes a block from the start too."""
    outside: list[str] = []
    rest, inside, has_block = text, opened, opened
    while rest:
        if inside:
            end = rest.find(markers.close)
            if end < 0:
                return ThinkingSplit("".join(outside), True, True)
            rest, inside = rest[end + len(markers.close):], False
            continue
        start, end = rest.find(markers.open), rest.find(markers.close)
        if end >= 0 and (start < 0 or end < start):  # a close with no open before it: thought up to it
            outside, has_block = [], True
            rest = rest[end + len(markers.close):]
            continue
        if start < 0:
            outside.append(rest)
            break
        outside.append(rest[:start])
        rest, inside, has_block = rest[start + len(markers.open):], True, True
    return ThinkingSplit("".join(outside), has_block, inside)


def prompt_opens_thinking(prompt: str, markers: ThinkingMarkers = DEFAULT_MARKERS) -> bool:
    """Whether a prompt ends inside an open block (its last opening marker after its last closing)."""
    return prompt.rfind(markers.open) > prompt.rfind(markers.close)


def thinking_outcome(split: ThinkingSplit, found: bool, finish_reason: str | None) -> str:
    """A record's ``thinking`` value: whether an answer was ``found`` outside the blocks, and if not,
    why. ``finish_reason`` None (an import that does not say): an unclosed block is not called a
    truncation, which needs the limit to have been hit."""
    if not split.has_block:
        return NO_THINKING
    if found:
        return ANSWERED
    if split.unclosed and finish_reason == "length":
        return TRUNCATED_IN_THINKING
    return NO_ANSWER_AFTER_THINKING


def _find(ids: Sequence[int], marker: Sequence[int], last: bool) -> int:
    """The index of ``marker`` in ``ids`` (its first or last occurrence); -1 when absent."""
    n, hits = len(marker), -1
    for i in range(len(ids) - n + 1):
        if tuple(ids[i:i + n]) == tuple(marker):
            if not last:
                return i
            hits = i
    return hits


def thinking_tokens(token_ids: Sequence[int], split: ThinkingSplit, markers: ThinkingMarkers,
                    opened: bool = False) -> int | None:
    """The generated tokens the thinking took, markers included: from the first opening marker (the
    start where the prompt opened the block, or a closing marker comes first) to the last closing
    one, or to the end where the block never closed. 0 without a block; None where the markers'
    ids are not known or not found in the tokens (not counted, never estimated)."""
    if not split.has_block:
        return 0
    if markers.close_ids is None or (markers.open_ids is None and not opened):
        return None
    ids = list(token_ids)
    first_close = _find(ids, markers.close_ids, last=False)
    first_open = -1 if opened or markers.open_ids is None else _find(ids, markers.open_ids, last=False)
    start = 0 if opened or first_open < 0 or (0 <= first_close < first_open) else first_open
    if split.unclosed:
        return len(ids) - start if (opened or first_open >= 0 or first_close >= 0) else None
    last_close = _find(ids, markers.close_ids, last=True)
    if last_close < 0:
        return None
    return last_close + len(markers.close_ids) - start


def markers_of_tokenizer(tokenizer, where: str) -> ThinkingMarkers:
    """The thinking markers of a ``tokenizers.Tokenizer``: the first known pair it has as one token
    each (with their ids), else the default pair with whatever ids it spells them with in one token."""
    for open_, close in THINKING_PAIRS:
        open_id, close_id = tokenizer.token_to_id(open_), tokenizer.token_to_id(close)
        if open_id is not None and close_id is not None:
            return ThinkingMarkers(open_, close, f"added tokens of {where}", (open_id,), (close_id,))
    return DEFAULT_MARKERS


def markers_of_card(value, where: str) -> ThinkingMarkers | None:
    """A card's ``thinking_markers: [OPEN, CLOSE]`` (None: the card names none); a bad value is one line."""
    from cube.errors import ConfigError

    if value is None:
        return None
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) and v for v in value)):
        raise ConfigError(f"{where}: thinking_markers {value!r} must be two non-empty strings, e.g. "
                          "['<think>', '</think>']")
    return ThinkingMarkers(value[0], value[1], where)


__all__ = ["ANSWERED", "DEFAULT_MARKERS", "NO_ANSWER_AFTER_THINKING", "NO_THINKING", "THINKING_FAILURES", "THINKING_OUTCOMES",
           "THINKING_PAIRS", "TRUNCATED_IN_THINKING", "ThinkingMarkers", "ThinkingSplit", "markers_of_card",
           "markers_of_tokenizer", "prompt_opens_thinking", "split_thinking", "thinking_outcome", "thinking_tokens"]
