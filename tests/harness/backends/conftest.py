"""Parity cases shared by every backend's test: real CMMLU items in every label set and context."""

from __future__ import annotations

import pytest

from cube.harness.backends.base import ScoreRequest
from cube.protocol.items import load_cmmlu
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell, cloze_prompt, render_prompt

LABEL_SETS = {
    "L1": ("A", "B", "C", "D"),
    "L2": ("Ａ", "Ｂ", "Ｃ", "Ｄ"),
    "L3": ("甲", "乙", "丙", "丁"),
    "L4": ("①", "②", "③", "④"),
}
# (label set, answer context): the Chinese cue for every set; both English whitespace variants
# on ABCD, whose en_prompt_space ('Answer: ' + 'A') merges the space into the label's token.
CELLS = [(name, "zh_cue") for name in LABEL_SETS] + [
    ("L1", "en_label_space"), ("L1", "en_prompt_space"), ("L1", "en_prompt_space_separate")]


def assert_same_scores(got, want, requests, tolerance: float = 1e-4):
    """Same tokens, and log-probabilities within ``tolerance`` per token (fp32)."""
    assert len(got) == len(want) == len(requests)
    for g_item, w_item, req in zip(got, want, requests):
        assert len(g_item) == len(w_item) == len(req.continuations)
        for g, w, text in zip(g_item, w_item, req.continuations):
            assert g.token_ids == w.token_ids, text
            assert g.boundary_merge == w.boundary_merge, text
            assert abs(g.logprobs - w.logprobs).max() <= tolerance, text


@pytest.fixture(scope="session")
def tokenizer(qwen3_tokenizer):
    return qwen3_tokenizer


@pytest.fixture(scope="session")
def model(tiny_qwen3):
    return tiny_qwen3


@pytest.fixture(scope="module")
def items(benchmarks_root):
    """A few real items from subjects with short and long questions (lengths vary in a batch)."""
    loaded = load_cmmlu(benchmarks_root / "cmmlu", subjects=["anatomy", "high_school_physics", "marketing"])
    by_subject: dict[str, list] = {}
    for item in loaded:
        by_subject.setdefault(item.subject, []).append(item)
    chosen = [it for rows in by_subject.values() for it in rows[:3]]
    assert len(chosen) >= len(CELLS)
    return chosen


@pytest.fixture(scope="module")
def requests(items) -> list[ScoreRequest]:
    """Each item in one cell (every cell covered), plus cloze and unconditional on half the items.

    One cell per item keeps the naive reference, a full-vocabulary forward per continuation, fast.
    """
    out = []
    for i, item in enumerate(items):
        name, context = CELLS[i % len(CELLS)]
        prompt = render_prompt(item, Cell(LabelSet(name, LABEL_SETS[name]), context, 0))
        out.append(ScoreRequest(prompt.context, prompt.label_continuations, prompt.tokenization))
        if i % 2 == 0:
            cloze = cloze_prompt(item)
            out.append(ScoreRequest(cloze.context, cloze.continuations))
            out.append(ScoreRequest(cloze.unconditional_context, cloze.continuations))
    return out
