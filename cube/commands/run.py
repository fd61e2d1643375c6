"""``cube run``: score a model on benchmark items under protocol cells, writing records."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cube.commands.options import comma_list, joined, random_seed
from cube.errors import ConfigError
from cube.harness.backends import BACKENDS


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="score a model under protocol cells; resumable Parquet records")
    p.add_argument("--model", required=True, help="a model name from config/models.yaml demo_models")
    p.add_argument("--benchmark", default="cmmlu", choices=["cmmlu", "ceval"])
    p.add_argument("--split", default="test")
    p.add_argument("--data", type=Path, help="benchmark folder (default: the lookup of `cube data list`)")
    p.add_argument("--sample", type=int, help="stratified sample size (every subject represented)")
    p.add_argument("--seed", type=random_seed(), default=0)
    p.add_argument("--within", type=int, metavar="N",
                   help="draw --sample from the stratified sample of N items (same seed), so that a "
                        "subset run (CoT, 5-shot) shares its items with the full run")
    p.add_argument("--subjects", type=comma_list("--subjects"), help="comma-separated subjects (default: all)")
    p.add_argument("--label-sets", type=comma_list("--label-sets"), default="L1_halfwidth")
    p.add_argument("--scorers", type=comma_list("--scorers"), default="M1-seq,M1-strict",
                   help="M1-seq,M1-strict,M2,M3,M4,M5,M6,M6-cot,TF")
    p.add_argument("--shots", type=comma_list("--shots", int), default="0", help="comma-separated, e.g. 0,5")
    p.add_argument("--cues", "--contexts", dest="contexts", type=comma_list("--cues"), default="zh_cue",
                   help="answer contexts")
    p.add_argument("--orders", type=comma_list("--orders"), default="original", help="original,shift1,...")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--backend", default="hf", choices=list(BACKENDS))
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"],
                   help="auto (default): bf16 only where the CPU has a native bf16 unit that a probe "
                        "confirms faster, or on a CUDA device with bf16; fp32 otherwise (logged with why)")
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
            parts += ["--cues" if dest == "contexts" else "--" + dest.replace("_", "-"), joined(value)]
    return shlex.join(parts)


def _at_least_one(args: argparse.Namespace) -> None:
    for dest in ("sample", "within", "max_new_tokens", "batch_size", "shard_size"):
        value = getattr(args, dest)
        if value is not None and value < 1:
            raise ConfigError(f"--{dest.replace('_', '-')} {value} must be at least 1")


def check_out(out: Path) -> None:
    """``--out`` must be a records store or a new (or empty) folder: checked before a model loads.

    A folder holding only the store's lock files is empty: another run has just created it (and
    the writer lock then says which), or a run died before it wrote its manifest.
    """
    from cube.records.store import LOCK_FILES, MANIFEST_NAME

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; it must be a records folder")
    if out.is_dir() and not (out / MANIFEST_NAME).exists() and any(p.name not in LOCK_FILES for p in out.iterdir()):
        raise ConfigError(f"--out {out} is a folder with other files and no {MANIFEST_NAME}; "
                          "give a new folder or an existing records store")


def check_contexts(contexts: list[str]) -> None:
    from cube.protocol.prompts import load_templates

    known = load_templates()["contexts"]
    unknown = [c for c in contexts if c not in known]
    if unknown:
        raise ConfigError(f"unknown answer context {unknown[0]!r}; known: {', '.join(known)}")


def _shard(value: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {value!r} must look like K/N, e.g. 0/4") from None
    if not (n >= 1 and 0 <= k < n):  # as RunSpec checks it, but before the data is looked up
        raise ConfigError(f"--shard {k}/{n}: need 0 <= K < N")
    return k, n


def check_scorers(scorers: tuple[str, ...]) -> None:
    """Scorer names, checked with the other arguments (RunSpec checks them too, after the items)."""
    from cube.records.schema import ALL_SCORERS

    unknown = [s for s in scorers if s not in ALL_SCORERS]
    if unknown:
        raise ConfigError(f"unknown scorer {unknown[0]!r}; known: {', '.join(ALL_SCORERS)}")


def build_spec(args: argparse.Namespace):
    from cube.harness.models import model_source
    from cube.harness.precision import check_device, choose_dtype
    from cube.harness.runner import GENERATION_SCORERS, RunSpec, preflight
    from cube.protocol.items import default_benchmark_root, load_items, stratified_sample
    from cube.protocol.label_sets import select_label_sets
    from cube.protocol.prompts import Cell
    from cube.records.leakage import build_index

    # Errors in the order a user makes them: the arguments, the model name and the config first,
    # the benchmark data last, so that fixing the data never reveals a typo the run already had.
    _at_least_one(args)
    check_device(args.device)  # before items and the model load (torch's own errors are tracebacks)
    model_sha256 = model_source(args.model).gguf_sha256  # an unknown model fails here, not at load
    subjects, contexts, orders, shots = args.subjects, args.contexts, args.orders, args.shots
    check_contexts(contexts)  # (each list option is parsed by cube.commands.options.comma_list)
    label_sets = select_label_sets(args.label_sets)
    scorers = tuple(args.scorers)
    check_scorers(scorers)
    shard = _shard(args.shard)
    if args.within is not None and (args.sample is None or args.sample > args.within):
        raise ConfigError(f"--within {args.within} needs a --sample of at most {args.within}")
    cells = [Cell(ls, ctx, n, order) for ls in label_sets for ctx in contexts for n in shots for order in orders]
    root = default_benchmark_root(args.benchmark, args.data)
    items = load_items(args.benchmark, root, splits=(args.split,), subjects=subjects)
    for option, size in (("--within", args.within), ("--sample", args.sample)):
        if size is not None and size > len(items):
            raise ConfigError(f"{option} {size} is more than the {len(items)} {args.split} items to draw from")
    if args.within is not None:
        items = stratified_sample(items, args.within, args.seed)
    if args.sample is not None:
        items = stratified_sample(items, args.sample, args.seed)
    dev = load_items(args.benchmark, root, splits=("dev",), subjects=subjects) if any(shots) else []
    index = None
    if set(scorers) & set(GENERATION_SCORERS):  # generations are scrubbed of every item's text
        splits = [s for s in ("dev", "val", "test") if (Path(root) / s).is_dir()]
        index = build_index(load_items(args.benchmark, root, splits=splits))
    precision = choose_dtype(args.dtype, args.device)
    spec = RunSpec(
        model=args.model, items=tuple(items), cells=tuple(cells), scorers=scorers, leakage_index=index,
        dev_items=tuple(dev), shard_size=args.shard_size, batch_size=args.batch_size,
        shard=shard, max_new_tokens=args.max_new_tokens,
        extra={"benchmark": args.benchmark, "split": args.split, "sample": args.sample, "within": args.within,
               "seed": args.seed, "subjects": subjects, "model_sha256": model_sha256, "device": args.device,
               "dtype": precision.dtype, "dtype_reason": precision.reason, "backend": args.backend,
               "command": command_line(args)},
    )
    preflight(spec)  # every prompt the run will build: shots, orders, label sets, names
    return spec


def run(args: argparse.Namespace) -> int:
    from cube.harness.runner import resume_plan
    from cube.harness.runner import run as run_spec
    from cube.records.store import create_store, writer_lock

    check_out(args.out)
    spec = build_spec(args)  # every argument is checked here, before a model loads
    with writer_lock(args.out):  # one writer per store, from the resume check to the run log
        create_store(args.out)  # at once, so that the folder reads as a store (check_out) from now on
        plan = resume_plan(spec, args.out)  # the store's recorded configuration, each done shard re-checked
        for line in plan.broken:
            print(line, file=sys.stderr)
        dtype = spec.extra["dtype"]
        print(f"{spec.model}: {len(spec.items)} items x {len(spec.cells)} cells, {len(plan.todo)} shards to run, "
              f"{plan.done} already done (config {spec.config_hash()}); {dtype} ({spec.extra['dtype_reason']})",
              file=sys.stderr)
        if not plan.todo:
            return 0
        from cube.harness.backends import open_backend

        backend = open_backend(args.backend, args.model, dtype=dtype, device=args.device)
        log = run_spec(backend, spec, args.out, model_sha256=spec.extra["model_sha256"])
    print(f"wrote {log['records_written']} records in {log['jobs_run']} shards, {log['wall_s']} s", file=sys.stderr)
    return 0
