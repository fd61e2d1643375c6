"""Wall time of the footrule noise floor at the paper's scale, against a naive loop.

The noise floor is the one statistic whose cost grows with models x items x replicates, so it is
the one that decides whether the paper's analysis runs in seconds. Outcomes are synthetic (a
latent ability per model, a difficulty per item); no benchmark data is read.

    python benchmarks/stats_speed.py [--models 18] [--items 12925] [--B 1000] [--naive-B 50]

The naive loop (one replicate at a time: gather the resampled items, rank with scipy) is timed
on a smaller B in the same run and extrapolated per replicate; both use the same random stream,
so their first replicates are also checked to agree.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.stats import rankdata

from cube.analysis.footrule import footrule_noise_floor


def synthetic_outcomes(n_models: int, n_items: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ability = rng.normal(0.0, 0.6, n_models)
    difficulty = rng.normal(0.0, 1.0, n_items)
    p_right = 1.0 / (1.0 + np.exp(-(ability[:, None] - difficulty[None, :])))
    return rng.random((n_models, n_items)) < p_right


def naive_noise_floor(correct: np.ndarray, B: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m, n = correct.shape
    out = np.empty(B)
    for r in range(B):
        idx_a = rng.integers(0, n, n)
        idx_b = rng.integers(0, n, n)
        ra = rankdata(-correct[:, idx_a].mean(axis=1), method="average")
        rb = rankdata(-correct[:, idx_b].mean(axis=1), method="average")
        out[r] = np.abs(ra - rb).sum() / (m * m // 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=18)
    parser.add_argument("--items", type=int, default=12_925)
    parser.add_argument("--B", type=int, default=1000)
    parser.add_argument("--naive-B", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="fast runs; the best is reported")
    args = parser.parse_args()

    correct = synthetic_outcomes(args.models, args.items)
    print(f"noise floor: {args.models} models x {args.items} items, B = {args.B}")

    fast_times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        floor = footrule_noise_floor(correct, B=args.B, seed=0)
        fast_times.append(time.perf_counter() - t0)
    fast = min(fast_times)
    print(f"  vectorised: {fast:.3f} s (best of {args.repeats}; all: "
          + ", ".join(f"{t:.3f}" for t in fast_times) + ")")
    print(f"  floor mean {floor.mean:.4f}, p95 {floor.p95:.4f}")

    t0 = time.perf_counter()
    naive = naive_noise_floor(correct, B=args.naive_B, seed=0)
    naive_per_rep = (time.perf_counter() - t0) / args.naive_B
    naive_total = naive_per_rep * args.B
    agree = np.allclose(naive, floor.samples[: args.naive_B], rtol=0, atol=1e-12)
    print(f"  naive loop: {naive_per_rep * 1e3:.1f} ms per replicate over B = {args.naive_B}, "
          f"extrapolated {naive_total:.1f} s for B = {args.B}")
    print(f"  speed-up: {naive_total / fast:.1f}x; first {args.naive_B} replicates identical: {agree}")


if __name__ == "__main__":
    main()
