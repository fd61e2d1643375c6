"""Backends that are slow on purpose: the naive reference and the all-logits baseline.

``ReferenceBackend`` is the yardstick every fast backend is tested against: one full forward per
(context + continuation), the model's own full-vocabulary logits at every position, a
log-softmax, and a pick of the continuation's tokens. No batching, padding, caching or slicing,
so there is nothing to get subtly wrong. The log-softmax runs in float64: torch's fp32
``log_softmax`` over a 151,936-token vocabulary (Qwen2.5) comes out biased high by about 5e-5 per
token, 1.9e-3 over a 32-token cloze option, while the fp32 logits themselves are within 4e-5 of an
fp64 model's (``benchmarks/fp32_agreement.py``). Its generation is a token-by-token argmax loop that
re-runs the whole sequence at every step.

``AllLogitsBackend`` is how the common harnesses score (lm-evaluation-harness style): every
continuation is its own padded sequence, and the full logits of every position are computed and
log-softmaxed. It is correct; the benchmark uses it to show what reusing the context and scoring
only the needed positions saves.
"""

from __future__ import annotations

import numpy as np
from tqdm import tqdm

from cube.errors import CubeError
from cube.harness.backends.base import (
    Backend,
    ContinuationLogprobs,
    ForwardCounter,
    GenerationResult,
    finish_reason,
    ScoreRequest,
    batches,
    count_plans,
    plan_request,
)
from cube.harness.backends.hf import eos_token_ids
from cube.protocol.tokenization import Encoder, InContext, encode_ids


class ReferenceBackend(Backend):
    def __init__(
        self, model, tokenizer: Encoder, add_special_tokens: bool = True,
        eos_ids: frozenset[int] | None = None, progress: bool = True,
    ):
        import torch

        self.torch = torch
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.tokenizer = tokenizer
        self.add_special_tokens = add_special_tokens
        self.eos_ids = eos_token_ids(model) if eos_ids is None else frozenset(eos_ids)
        self.progress = progress
        self.counter = ForwardCounter()

    def _full_logits(self, ids: tuple[int, ...]):
        logits = self.model(input_ids=self.torch.tensor([ids], device=self.device)).logits[0]
        self.counter.forward_tokens += len(ids)
        self.counter.padded_tokens += len(ids)
        self.counter.head_rows += len(ids)
        return logits.float()

    def _score_one(self, cont: InContext) -> ContinuationLogprobs:
        targets = cont.continuation_ids
        if not targets:
            return ContinuationLogprobs(targets, np.zeros(0), cont.boundary_merge)
        logprobs = self.torch.log_softmax(self._full_logits(cont.full_ids).double(), dim=-1)
        picked = [float(logprobs[cont.prefix_len - 1 + k, tok]) for k, tok in enumerate(targets)]
        return ContinuationLogprobs(targets, np.array(picked, dtype=np.float64), cont.boundary_merge)

    def score(self, requests: list[ScoreRequest], batch_size: int = 1) -> list[list[ContinuationLogprobs]]:
        """``batch_size`` is ignored: one sequence per forward is the point."""
        plans = [plan_request(self.tokenizer, r, self.add_special_tokens) for r in requests]
        count_plans(self.counter, plans)
        with self.torch.inference_mode():
            return [
                [self._score_one(c) for c in plan.continuations]
                for plan in tqdm(plans, desc="score (reference)", unit="item", disable=not self.progress)
            ]

    def generate(self, prompts: list[str], max_new_tokens: int, batch_size: int = 1) -> list[GenerationResult]:
        results = []
        with self.torch.inference_mode():
            for prompt in tqdm(prompts, desc="generate (reference)", unit="item", disable=not self.progress):
                ids = list(encode_ids(self.tokenizer, prompt, self.add_special_tokens))
                if not ids:
                    raise CubeError(f"generation prompt {prompt!r} has no tokens (empty and no BOS token)")
                new: list[int] = []
                for _ in range(max_new_tokens):
                    tok = int(self._full_logits(tuple(ids + new))[-1].argmax())
                    if tok in self.eos_ids:
                        break
                    new.append(tok)
                results.append(GenerationResult(self.tokenizer.decode(new), tuple(new),
                                                finish_reason(tuple(new), max_new_tokens)))
        return results


class AllLogitsBackend(ReferenceBackend):
    """Batched like the common harnesses: each continuation a padded row, full logits everywhere."""

    def score(self, requests: list[ScoreRequest], batch_size: int = 16) -> list[list[ContinuationLogprobs]]:
        torch = self.torch
        plans = [plan_request(self.tokenizer, r, self.add_special_tokens) for r in requests]
        count_plans(self.counter, plans)
        results: list[list[ContinuationLogprobs | None]] = [
            [ContinuationLogprobs((), np.zeros(0), c.boundary_merge) for c in p.continuations] for p in plans
        ]
        flat = [(i, j, c) for i, p in enumerate(plans) for j, c in enumerate(p.continuations) if c.continuation_ids]
        order = sorted(range(len(flat)), key=lambda k: len(flat[k][2].full_ids), reverse=True)
        with torch.inference_mode(), tqdm(
            total=len(flat), desc="score (all-logits)", unit="seq", disable=not self.progress
        ) as bar:
            for chunk in batches(order, batch_size):
                # The last token is only a target, so (as lm-evaluation-harness does) it is not fed.
                seqs = [flat[k][2].full_ids[:-1] for k in chunk]
                width = max(len(s) for s in seqs)
                ids = torch.zeros((len(seqs), width), dtype=torch.long)
                mask = torch.zeros((len(seqs), width), dtype=torch.long)
                for r, s in enumerate(seqs):  # right padding keeps the default position ids right
                    ids[r, :len(s)] = torch.tensor(s, dtype=torch.long)
                    mask[r, :len(s)] = 1
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                logprobs = torch.log_softmax(logits.float(), dim=-1)
                self.counter.forward_tokens += int(mask.sum())
                self.counter.padded_tokens += ids.numel()
                self.counter.head_rows += ids.numel()
                for r, k in enumerate(chunk):
                    i, j, cont = flat[k]
                    targets = cont.continuation_ids
                    pos = torch.arange(len(targets)) + cont.prefix_len - 1
                    picked = logprobs[r, pos.to(self.device), torch.tensor(targets, device=self.device)]
                    results[i][j] = ContinuationLogprobs(
                        targets, picked.double().cpu().numpy(), cont.boundary_merge
                    )
                bar.update(len(chunk))
        return results  # type: ignore[return-value]


__all__ = ["AllLogitsBackend", "ReferenceBackend"]
