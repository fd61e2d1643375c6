"""Harness throughput: our transformers backend vs the naive reference and the all-logits baseline.

One run, same model, same items, same requests. Each item is scored two ways, as a study does:
label scoring (context ending in the answer cue; the four labels A-D as continuations) and cloze
(question + cue; the four option texts as continuations). Reported:

- items/s of each backend, and ours / baseline, ours / naive;
- forward tokens each backend ran through the model, divided by the minimum (each request's
  shared context once plus every continuation token that precedes another scored token), and by
  the looser "shared context once + all continuation tokens";
- positions the output layer was applied at;
- agreement: max |Δ log-prob| per token against the naive reference and argmax agreement.

Not a test: nothing here asserts a time. Run: ``python benchmarks/harness_throughput.py``.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import torch
from tqdm import tqdm

from cube.harness.backends.base import ScoreRequest, plan_request
from cube.harness.backends.hf import HFBackend
from cube.harness.backends.reference import AllLogitsBackend, ReferenceBackend
from cube.harness.models import load_model
from cube.protocol.items import load_cmmlu
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell, cloze_prompt, render_prompt

RANDOM_MODELS = {
    # The scale at which the issue measured lm-evaluation-harness at ~1 item/s: a 40M-parameter
    # model whose real 151,669-token vocabulary (38.8M embedding/output parameters) outweighs its
    # decoder. Random weights: throughput does not depend on what the weights say.
    "random:qwen3-40m": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=64),
}


def load_benchmark_model(name: str, dtype: str):
    """A demo model from the store, or a random-weight model with a real tokenizer (``random:``)."""
    if name not in RANDOM_MODELS:
        return load_model(name, dtype=dtype, device="cpu")
    import transformers

    from cube.models_config import models_config
    from cube.tokenizers.sources import resolve_tokenizer

    src = models_config().family("qwen3").offline
    tokenizer = resolve_tokenizer(src.spec, src.sha256)
    config = transformers.Qwen3Config(vocab_size=tokenizer.get_vocab_size(), tie_word_embeddings=True,
                                      max_position_embeddings=4096, **RANDOM_MODELS[name])
    model = transformers.Qwen3ForCausalLM(config).to(getattr(torch, dtype)).eval()
    print(f"{name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters (random weights)")
    return model, tokenizer


def sample_items(n: int, seed: int):
    """One item from each of ``n`` subjects (seeded), so lengths vary as in a real run."""
    items = load_cmmlu()
    by_subject: dict[str, list] = {}
    for item in items:
        by_subject.setdefault(item.subject, []).append(item)
    rng = random.Random(seed)
    subjects = rng.sample(sorted(by_subject), min(n, len(by_subject)))
    return [rng.choice(by_subject[s]) for s in subjects]


def build_requests(items) -> list[ScoreRequest]:
    cell = Cell(LabelSet("L1_halfwidth", ("A", "B", "C", "D")), "zh_cue", 0)
    requests = []
    for item in items:
        prompt = render_prompt(item, cell)
        requests.append(ScoreRequest(prompt.context, prompt.label_continuations))
        cloze = cloze_prompt(item)
        requests.append(ScoreRequest(cloze.context, cloze.continuations))
    return requests


def run_interleaved(backends: dict, requests: list[ScoreRequest], batch_size: int, per_round: int):
    """Every backend scores the same slice in turn, slice after slice.

    On a shared machine the load drifts over minutes; interleaving exposes every backend to the
    same drift, so the ratios stay meaningful even when the absolute rates do not.
    """
    scores = {name: [] for name in backends}
    seconds = dict.fromkeys(backends, 0.0)
    for backend in backends.values():
        backend.counter.reset()
    rounds = range(0, len(requests), per_round)
    for start in tqdm(rounds, desc="rounds", unit="round"):
        chunk = requests[start:start + per_round]
        for name, backend in backends.items():
            t0 = time.perf_counter()
            scores[name].extend(backend.score(chunk, batch_size=batch_size))
            seconds[name] += time.perf_counter() - t0
    return scores, seconds


def loose_minimum(tokenizer, requests) -> int:
    """Shared context once + every continuation token (the issue's wording of the minimum)."""
    total = 0
    for plan in (plan_request(tokenizer, r) for r in requests):
        total += plan.shared_len + sum(len(c.full_ids) - plan.shared_len for c in plan.continuations)
    return total


def agreement(got, want) -> tuple[float, float]:
    diffs, same = [], []
    for g_item, w_item in zip(got, want):
        diffs.extend(np.abs(g.logprobs - w.logprobs).max() for g, w in zip(g_item, w_item) if len(w.logprobs))
        same.append(np.argmax([g.total for g in g_item]) == np.argmax([w.total for w in w_item]))
    return float(max(diffs)), float(np.mean(same))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help=f"a demo model or one of {', '.join(RANDOM_MODELS)}")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--items", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--round-items", type=int, default=10, help="items per interleaved round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-naive", action="store_true", help="skip the slow naive reference")
    args = parser.parse_args()

    torch.manual_seed(0)
    model, tokenizer = load_benchmark_model(args.model, args.dtype)
    items = sample_items(args.items, args.seed)
    requests = build_requests(items)
    n_items = len(items)
    loose = loose_minimum(tokenizer, requests)
    print(f"model {args.model} ({args.dtype}, CPU, {torch.get_num_threads()} threads); "
          f"{n_items} CMMLU test items x (label A-D + cloze of 4 option texts) = {len(requests)} requests")

    backends = {
        "ours (hf)": HFBackend(model, tokenizer, progress=False),
        "all-logits": AllLogitsBackend(model, tokenizer, progress=False),
    }
    if not args.no_naive:
        backends["naive ref"] = ReferenceBackend(model, tokenizer, progress=False)
    # Warm-up: first calls pay one-off allocation costs that would flatter whoever runs second.
    backends["ours (hf)"].score(requests[:2], batch_size=2)

    scores, seconds = run_interleaved(backends, requests, args.batch_size, 2 * args.round_items)
    results = {name: (scores[name], seconds[name], backends[name].counter) for name in backends}

    minimum = results["ours (hf)"][2].minimum_tokens
    print(f"\nminimum forward tokens {minimum}; shared context once + all continuation tokens {loose}")
    print(f"{'backend':<12} {'seconds':>8} {'items/s':>8} {'fwd tokens':>11} {'/minimum':>9} "
          f"{'/loose':>7} {'padded':>8} {'head rows':>10}")
    for name, (_, seconds, c) in results.items():
        print(f"{name:<12} {seconds:8.2f} {n_items / seconds:8.2f} {c.forward_tokens:11d} "
              f"{c.forward_tokens / minimum:9.3f} {c.forward_tokens / loose:7.3f} {c.padded_tokens:8d} "
              f"{c.head_rows:10d}")

    ours_s = results["ours (hf)"][1]
    print(f"\nspeed-up of ours over the all-logits baseline: {results['all-logits'][1] / ours_s:.1f}x (target >= 10x)")
    if "naive ref" in results:
        print(f"speed-up of ours over the naive reference:    {results['naive ref'][1] / ours_s:.1f}x")
        want = results["naive ref"][0]
        for name in ("ours (hf)", "all-logits"):
            diff, same = agreement(results[name][0], want)
            print(f"{name} vs naive ({args.dtype}): max |dlogprob| per token {diff:.2e}; argmax agreement {same:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
