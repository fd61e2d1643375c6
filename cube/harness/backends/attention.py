"""Grouped-query attention without copying the KV cache, for padded batches on CPU.

transformers' ``sdpa`` attention hands grouped-query heads to torch's fused kernel
(``enable_gqa=True``) only when no attention mask is passed. A padded batch always has one, so it
falls back to ``repeat_kv``: each layer copies its whole KV cache once per query head sharing a
KV head (3x for SmolLM2, 7x for Qwen2.5-0.5B), at every forward. In greedy decoding that copy
grows with the sequence and dominated the step: 0.99 s of SmolLM2's 1.0 s per step at batch 32.

torch's CPU kernel takes ``enable_gqa`` with a mask and gives bit-identical output (the parity test
checks it on the demo models), so on CPU cube's backend registers an implementation that always
passes it. Every case it does not own (no mask, a position bias, output attentions, another device)
goes to transformers' own function unchanged.
"""

from __future__ import annotations

IMPLEMENTATION = "cube_gqa_sdpa"
_registered = False


def gqa_sdpa_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                               scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if (attention_mask is None or groups == 1 or query.device.type != "cpu"
            or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
            or kwargs.get("output_attentions", False)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    # With a mask, transformers' own function never sets is_causal: the mask carries causality.
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True,
    )
    return out.transpose(1, 2).contiguous(), None


def use_gqa_sdpa(model) -> bool:
    """Switch ``model`` (loaded with ``sdpa`` attention, on CPU) to the copy-free implementation.

    Returns whether it switched; models on eager or flash attention, or off CPU, are left alone.
    """
    global _registered
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    current = getattr(model.config, "_attn_implementation", None)
    if current == IMPLEMENTATION:
        return True
    if current != "sdpa":
        return False
    if next(model.parameters()).device.type != "cpu":
        return False
    if not _registered:
        AttentionInterface.register(IMPLEMENTATION, gqa_sdpa_attention_forward)
        AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)  # the same masks sdpa builds
        _registered = True
    model.set_attn_implementation(IMPLEMENTATION)
    return True


__all__ = ["IMPLEMENTATION", "gqa_sdpa_attention_forward", "use_gqa_sdpa"]
