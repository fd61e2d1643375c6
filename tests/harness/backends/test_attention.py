"""``cube.harness.backends.attention``: padded batches on CPU attend without copying the KV cache,
and give exactly the hidden states transformers' own ``sdpa`` gives."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from cube.harness.backends import open_backend
from cube.harness.backends.attention import IMPLEMENTATION, use_gqa_sdpa
from cube.harness.backends.hf import HFBackend

pytestmark = pytest.mark.registry


def _left_padded(lengths, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, width - n:] = torch.randint(1, vocab, (n,), generator=g)
        mask[b, width - n:] = 1
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def _hidden(model, ids, mask, positions):
    with torch.inference_mode():
        return model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state


def _assert_same_on_real_positions(model):
    stock = copy.deepcopy(model)
    stock.set_attn_implementation("sdpa")
    ours = copy.deepcopy(model)
    assert use_gqa_sdpa(ours) and ours.config._attn_implementation == IMPLEMENTATION
    ids, mask, positions = _left_padded([23, 9, 17], model.config.vocab_size)
    want, got = _hidden(stock, ids, mask, positions), _hidden(ours, ids, mask, positions)
    real = mask.bool()
    assert torch.equal(got[real], want[real])


def test_padded_batch_hidden_states_equal_transformers_sdpa_on_the_tiny_gqa_model(tiny_qwen3):
    assert tiny_qwen3.config.num_key_value_heads < tiny_qwen3.config.num_attention_heads
    _assert_same_on_real_positions(tiny_qwen3)


def test_padded_batch_hidden_states_equal_transformers_sdpa_on_smollm2():
    backend = open_backend("hf", "smollm2-135m-instruct", dtype="float32")  # 9 query heads on 3 KV heads
    _assert_same_on_real_positions(backend.model)


def test_the_backend_never_repeats_kv_heads_for_a_padded_batch(tiny_qwen3, qwen3_tokenizer, monkeypatch):
    """The point of the module: without it, every padded forward copies the cache per query head."""
    import transformers.integrations.sdpa_attention as sdpa

    def refuse(*args, **kwargs):
        raise AssertionError("repeat_kv was called")

    backend = HFBackend(copy.deepcopy(tiny_qwen3), qwen3_tokenizer, progress=False)
    monkeypatch.setattr(sdpa, "repeat_kv", refuse)
    backend.generate(["短的提示", "一个明显更长一些的提示，让这一批需要填充"], max_new_tokens=3, batch_size=2)


def test_eager_attention_is_left_alone(tiny_qwen3):
    eager = copy.deepcopy(tiny_qwen3)
    eager.set_attn_implementation("eager")
    assert not use_gqa_sdpa(eager) and eager.config._attn_implementation == "eager"
