"""Generation throughput (M6): our batched KV-cached greedy loop vs transformers' generate and the
naive reference, on the same prompts in one run.

- ours: prompts batched (sorted by length, left-padded), one prefill, then one token per step on
  the KV cache, the output layer on the last position only;
- ``model.generate``: transformers' own greedy decoding, batched the same way (what harnesses
  built on transformers call);
- naive: the reference backend, one prompt at a time, re-running the whole sequence per token.

Reported: new tokens/s of each, ours / each, and whether the greedy continuations are identical
(they must be, in fp32). Not a test: nothing here asserts a time.
Run: ``python benchmarks/generation_throughput.py [--model random:qwen3-40m]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from harness_throughput import RANDOM_MODELS, load_benchmark_model, sample_items  # noqa: E402

from cube.harness.backends.hf import HFBackend  # noqa: E402
from cube.harness.backends.reference import ReferenceBackend  # noqa: E402
from cube.protocol.label_sets import LabelSet  # noqa: E402
from cube.protocol.prompts import Cell, render_prompt  # noqa: E402
from cube.protocol.tokenization import encode_ids  # noqa: E402


def hf_generate(model, tokenizer, prompts: list[str], max_new: int, batch_size: int, eos: frozenset[int]):
    """transformers' greedy ``generate`` over left-padded batches; returns new token ids per prompt."""
    encoded = [encode_ids(tokenizer, p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]), reverse=True)
    out: list[tuple[int, ...]] = [()] * len(prompts)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, i in enumerate(chunk):
            ids[r, width - len(encoded[i]):] = torch.tensor(encoded[i])
            mask[r, width - len(encoded[i]):] = 1
        with torch.inference_mode():
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                                 eos_token_id=sorted(eos) or None, pad_token_id=0)
        for r, i in enumerate(chunk):
            new = []
            for tok in gen[r, width:].tolist():
                if tok in eos:
                    break
                new.append(tok)
            out[i] = tuple(new)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random:qwen3-40m", help=f"a demo model or one of {', '.join(RANDOM_MODELS)}")
    parser.add_argument("--dtype", default="float32", help="float32 makes the three outputs comparable token for token")
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--naive-items", type=int, default=4, help="the naive loop is slow: time it on fewer prompts")
    args = parser.parse_args()

    torch.manual_seed(0)
    model, tokenizer = load_benchmark_model(args.model, args.dtype)
    cell = Cell(LabelSet("L1_halfwidth", ("A", "B", "C", "D")), "zh_cue", 0)
    prompts = [render_prompt(item, cell).context for item in sample_items(args.items, 0)]
    ours_backend = HFBackend(model, tokenizer, progress=False)
    eos = ours_backend.eos_ids
    ours_backend.generate(prompts[:2], 2, batch_size=2)  # warm-up

    t0 = time.perf_counter()
    ours = [g.token_ids for g in ours_backend.generate(prompts, args.max_new_tokens, batch_size=args.batch_size)]
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = hf_generate(model, tokenizer, prompts, args.max_new_tokens, args.batch_size, eos)
    theirs_s = time.perf_counter() - t0
    naive_prompts = prompts[:args.naive_items]
    t0 = time.perf_counter()
    naive = [g.token_ids for g in ReferenceBackend(model, tokenizer, progress=False).generate(naive_prompts, args.max_new_tokens)]
    naive_s = time.perf_counter() - t0

    def rate(outputs, seconds):
        return sum(len(o) for o in outputs) / seconds

    print(f"model {args.model} ({args.dtype}, CPU, {torch.get_num_threads()} threads); {len(prompts)} CMMLU prompts, "
          f"greedy, at most {args.max_new_tokens} new tokens, batch {args.batch_size}")
    print(f"{'generator':<22} {'prompts':>7} {'new tokens':>10} {'seconds':>8} {'tokens/s':>9}")
    for name, outs, secs in (("ours (hf backend)", ours, ours_s), ("transformers generate", theirs, theirs_s),
                             ("naive reference", naive, naive_s)):
        print(f"{name:<22} {len(outs):>7} {sum(len(o) for o in outs):>10} {secs:8.2f} {rate(outs, secs):9.1f}")
    print(f"\nours / transformers generate: {rate(ours, ours_s) / rate(theirs, theirs_s):.2f}x tokens/s")
    print(f"ours / naive reference:       {rate(ours, ours_s) / rate(naive, naive_s):.2f}x tokens/s")
    same_generate = sum(a == b for a, b in zip(ours, theirs))
    same_naive = sum(a == b for a, b in zip(ours, naive))
    print(f"identical continuations: {same_generate}/{len(ours)} vs generate, {same_naive}/{len(naive)} vs naive")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
