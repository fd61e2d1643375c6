"""How far fp32 log-likelihoods are from an fp64 decoder: cube's, and lm-eval's way of computing them.

`vs_lm_eval.py` finds cube and lm-eval up to 1.9e-3 apart on cloze options of
qwen2.5-coder-0.5b-instruct, above the 1e-3 it aims for. Which one is off? This scores the same
cube requests four ways and compares each with the model's decoder in float64:

- ``cube fp32``: the HF backend as ``cube run --dtype float32`` runs it (the prefix tree, right-padded
  batches, each node on copies of its parent's KV cache; the normaliser is ``torch.logsumexp`` of
  fp32 logits);
- ``lm-eval fp32``: what lm-eval's HF model does with a request: one forward over context +
  continuation, then ``torch.log_softmax`` of the fp32 logits over the whole vocabulary;
- ``lm-eval, fp64 lsm``: the same fp32 logits, log-softmaxed in float64 (which part is off: the
  model's fp32 arithmetic, or the normaliser);
- the yardstick, ``fp64``: the HF backend on the model cast to float64 (its output layer still
  rounds logits to fp32, about 1e-6 per token).

It prints, per path, the largest and median |difference| per option (summed over the option's
tokens, what records hold), the largest per token, the mean signed difference per token (a bias),
and the option length at the worst option. No time is measured.

    python benchmarks/fp32_agreement.py --model qwen2.5-coder-0.5b-instruct --items 40 --mode cloze
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_lm_eval import MODES, cube_argv, cube_spec, cube_workload  # noqa: E402


def differences(got: list, want: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(|d| per option, max |d| per token, tokens per option, signed d per option), option by option."""
    per_option, per_token, lengths, signed = [], [], [], []
    for g_item, w_item in zip(got, want):
        for g, w in zip(g_item, w_item):
            if g.token_ids != w.token_ids:
                raise SystemExit(f"the paths scored different tokens: {g.token_ids} vs {w.token_ids}")
            d = np.abs(g.logprobs - w.logprobs)
            per_option.append(abs(g.total - w.total))
            signed.append(g.total - w.total)
            per_token.append(float(d.max(initial=0.0)))
            lengths.append(len(g.token_ids))
    return np.array(per_option), np.array(per_token), np.array(lengths), np.array(signed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", default="cloze", choices=sorted(MODES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", help="the CMMLU folder (default: cube's own lookup)")
    args = parser.parse_args()

    import torch

    from cube.harness.backends.base import ContinuationLogprobs, plan_request
    from cube.harness.backends.hf import HFBackend
    from cube.harness.models import load_model

    torch.set_num_threads(args.threads)
    spec = cube_spec(cube_argv(args.model, args.items, args.seed, args.mode, Path("unused"), args.data))
    model, tokenizer = load_model(args.model, "float32")
    requests = [r for by_uid in cube_workload(spec, tokenizer).requests.values() for r in by_uid.values()]
    print(f"{args.model}: {args.items} CMMLU items, {args.mode}: {len(requests)} requests", flush=True)

    cube32 = HFBackend(model, tokenizer, progress=False).score(requests)
    lm_eval32, lm_eval64 = [], []
    with torch.inference_mode():
        for request in requests:
            per32, per64 = [], []
            for cont in plan_request(tokenizer, request).continuations:
                logits = model(input_ids=torch.tensor([cont.full_ids])).logits[0].float()
                rows = torch.arange(len(cont.continuation_ids)) + cont.prefix_len - 1
                targets = torch.tensor(cont.continuation_ids)
                for out, lsm in ((per32, torch.log_softmax(logits, -1)),
                                 (per64, torch.log_softmax(logits.double(), -1))):
                    picked = lsm[rows, targets].double().numpy()
                    out.append(ContinuationLogprobs(cont.continuation_ids, picked, cont.boundary_merge))
            lm_eval32.append(per32)
            lm_eval64.append(per64)
    fp64 = HFBackend(model.double(), tokenizer, progress=False).score(requests)

    print(f"{'path':<18} {'max |d| option':>15} {'median':>9} {'max |d| token':>14} {'mean d token':>13} "
          f"{'tokens at worst':>16}")
    for name, got in (("cube fp32", cube32), ("lm-eval fp32", lm_eval32), ("lm-eval, fp64 lsm", lm_eval64)):
        option, token, lengths, signed = differences(got, fp64)
        worst = int(np.argmax(option))
        print(f"{name:<18} {option.max():15.2e} {np.median(option):9.1e} {token.max():14.2e} "
              f"{signed.sum() / lengths.sum():+13.1e} {lengths[worst]:16d}")
    option, token, _, _ = differences(cube32, lm_eval32)
    print(f"{'cube - lm-eval':<18} {option.max():15.2e} {np.median(option):9.1e} {token.max():14.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
