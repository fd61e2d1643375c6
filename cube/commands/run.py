"""``cube run``: score a model on benchmark items under protocol cells, writing records."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cube.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="score a model under protocol cells; resumable Parquet records")
    p.add_argument("--model", required=True, help="a model name from config/models.yaml demo_models")
    p.add_argument("--benchmark", default="cmmlu", choices=["cmmlu", "ceval"])
    p.add_argument("--split", default="test")
    p.add_argument("--data", type=Path, help="benchmark root (default ../shared/benchmarks/<benchmark>)")
    p.add_argument("--sample", type=int, help="stratified sample size (every subject represented)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--within", type=int, metavar="N",
                   help="draw --sample from the stratified sample of N items (same seed), so that a "
                        "subset run (CoT, 5-shot) shares its items with the full run")
    p.add_argument("--subjects", help="comma-separated subjects (default: all)")
    p.add_argument("--label-sets", default="L1_halfwidth")
    p.add_argument("--scorers", default="M1-seq,M1-strict", help="M1-seq,M1-strict,M2,M3,M4,M5,M6,M6-cot,TF")
    p.add_argument("--shots", default="0", help="comma-separated, e.g. 0,5")
    p.add_argument("--cues", "--contexts", dest="contexts", default="zh_cue", help="answer contexts")
    p.add_argument("--orders", default="original", help="original,shift1,...")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--shard-size", type=int, default=50, help="items per record shard")
    p.add_argument("--shard", default="0/1", help="K/N: run only chunks with index %% N == K")
    p.add_argument("--max-new-tokens", type=int, help="generation length (default from templates)")
    p.set_defaults(func=run)


# What the run log records of a command line (all but --data and --device, which name this machine).
RECORDED_OPTIONS = ("model", "benchmark", "split", "sample", "within", "seed", "subjects", "label_sets", "scorers",
                    "shots", "contexts", "orders", "backend", "dtype", "batch_size", "shard_size", "shard",
                    "max_new_tokens", "out")


def command_line(args: argparse.Namespace) -> str:
    """The run as one explicit command (every option spelled out), for the run log and provenance."""
    import shlex

    parts = ["cube", "run"]
    for dest in RECORDED_OPTIONS:
        value = getattr(args, dest, None)
        if value is not None:
            parts += ["--cues" if dest == "contexts" else "--" + dest.replace("_", "-"), str(value)]
    return shlex.join(parts)


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _shard(value: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {value!r} must look like K/N, e.g. 0/4") from None
    return k, n


def build_spec(args: argparse.Namespace):
    from cube.items import default_benchmark_root, load_items, stratified_sample
    from cube.label_sets import select_label_sets
    from cube.prompts import Cell
    from cube.leakage import build_index
    from cube.runner import GENERATION_SCORERS, RunSpec

    root = args.data or default_benchmark_root(args.benchmark)
    subjects = _csv(args.subjects) if args.subjects else None
    items = load_items(args.benchmark, root, splits=(args.split,), subjects=subjects)
    if args.within:
        if not args.sample or args.sample > args.within:
            raise ConfigError(f"--within {args.within} needs a --sample of at most {args.within}")
        items = stratified_sample(items, args.within, args.seed)
    if args.sample:
        items = stratified_sample(items, args.sample, args.seed)
    try:
        shots = [int(s) for s in _csv(args.shots)]
    except ValueError:
        raise ConfigError(f"--shots {args.shots!r} must be comma-separated integers") from None
    dev = load_items(args.benchmark, root, splits=("dev",), subjects=subjects) if any(shots) else []
    scorers = tuple(_csv(args.scorers))
    index = None
    if set(scorers) & set(GENERATION_SCORERS):  # generations are scrubbed of every item's text
        splits = [s for s in ("dev", "val", "test") if (Path(root) / s).is_dir()]
        index = build_index(load_items(args.benchmark, root, splits=splits))
    cells = [Cell(ls, ctx, n, order) for ls in select_label_sets(_csv(args.label_sets))
             for ctx in _csv(args.contexts) for n in shots for order in _csv(args.orders)]
    return RunSpec(
        model=args.model, items=tuple(items), cells=tuple(cells), scorers=scorers, leakage_index=index,
        dev_items=tuple(dev), shard_size=args.shard_size, batch_size=args.batch_size,
        shard=_shard(args.shard), max_new_tokens=args.max_new_tokens,
        extra={"benchmark": args.benchmark, "split": args.split, "sample": args.sample, "within": args.within,
               "seed": args.seed,
               "dtype": args.dtype, "backend": args.backend, "command": command_line(args)},
    )


def run(args: argparse.Namespace) -> int:
    from cube.runner import pending_jobs, run as run_spec

    spec = build_spec(args)
    todo, done = pending_jobs(spec, args.out)
    print(f"{spec.model}: {len(spec.items)} items x {len(spec.cells)} cells, {len(todo)} shards to run, "
          f"{done} already done (config {spec.config_hash()})", file=sys.stderr)
    if not todo:
        return 0
    if args.backend == "vllm":
        from cube.backends.vllm import VLLMBackend

        backend = VLLMBackend.from_config(args.model, dtype=args.dtype)
    else:
        from cube.backends.hf import HFBackend
        from cube.models import load_model

        model, tokenizer = load_model(args.model, args.dtype, args.device)
        backend = HFBackend(model, tokenizer)
    from cube.models import model_source

    model_sha = model_source(args.model).gguf_sha256
    log = run_spec(backend, spec, args.out, model_sha256=model_sha)
    print(f"wrote {log['records_written']} records in {log['jobs_run']} shards, {log['wall_s']} s", file=sys.stderr)
    return 0
