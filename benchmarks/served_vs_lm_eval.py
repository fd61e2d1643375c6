"""cube's server backend against lm-eval's ``local-completions`` on the same ``vllm serve`` (issue 35 §4).

Both harnesses score the same items (the ones ``cube run --sample N --seed S`` draws) through one
OpenAI-compatible server, with prompts equal byte for byte (lm-eval runs local tasks built from
cube's prompts, ``vs_lm_eval.write_lm_eval_tasks``; checked on lm-eval's own request building
before any timing). They run as interleaved pairs of fresh processes (cube, lm-eval, cube, ...)
against one server started once, so drift on a shared machine hits both alike. Printed per run:
wall time of the process, HTTP requests the server answered and prompt tokens it read, with how
many of those its prefix cache served (vLLM's own counters from ``/metrics``, read before and
after each run), then the medians and their ratios.

Both sides get the same knobs: 4 requests in flight, 16 prompts per request (cube's fixed
``PROMPTS_PER_REQUEST``; lm-eval's ``batch_size``). What differs is what each sends: lm-eval one
prompt per (context, option) with prompt log-probabilities; cube, for labels one token in context
(issue 46, ``cube.harness.backends.served_fast``), one next-token request per (item, cell) with
vLLM's ``logprob_token_ids``, sorted so that an item's cells meet in the prefix cache, and for the
rest (cloze, multi-token labels) each distinct text once, the context alone included. cube's side
declares the server's precision (``--server-dtype float32``: ``local_vllm`` serves fp32).

``--competitor``: the pairs run beside two busy processes (a 2-thread competitor for the CPU), as
issue 46 asks for beside the quiet run. Timings on a machine shared with other work are a
direction, not a ratio: run it on a quiet machine for the README's figures.

The lm-eval task files hold benchmark text: they live in a temporary folder removed at the end.
Not a test: nothing asserts a time. Run: ``python benchmarks/served_vs_lm_eval.py --items 20``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = Path(os.environ.get("CUBE_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
MODEL = "smollm2-135m-instruct"
CONCURRENCY = 4
BATCH = 16
# prompt tokens read; HTTP requests to /v1/completions (vLLM's request_success counts each prompt of
# a list as a request of its own); prompt tokens its prefix cache served
METRICS = ("vllm:prompt_tokens_total", "http_requests_total", "vllm:prefix_cache_hits_total")


def vs_lm_eval():
    """benchmarks/vs_lm_eval.py as a module: its sampling, its byte-equal lm-eval tasks."""
    spec = importlib.util.spec_from_file_location("vs_lm_eval", REPO / "benchmarks" / "vs_lm_eval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def server_counters(url: str) -> dict[str, float]:
    """vLLM's running totals (``/metrics``, Prometheus text), summed over label sets."""
    base = url[: -len("/v1")]
    with urllib.request.urlopen(base + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    totals = dict.fromkeys(METRICS, 0.0)
    for line in text.splitlines():
        match = re.match(r"^([a-z_:]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$", line)
        if not match:
            continue
        name = match[1] if match[1].endswith("_total") else match[1] + "_total"
        if name == "http_requests_total" and "/v1/completions" not in (match[2] or ""):
            continue
        if name in totals:
            totals[name] += float(match[3])
    return totals


def timed(argv: list[str], env: dict, log: Path) -> float:
    t0 = time.perf_counter()
    with log.open("w") as sink:
        proc = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=REPO, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
    return time.perf_counter() - t0


def run_pairs(args, bench, folder: Path, scratch: Path, tasks, tasks_dir: Path, python, env: dict) -> list:
    """The interleaved pairs against one server: (tool, pair, wall seconds, server counters' deltas)."""
    from cube.harness.backends.local_vllm import local_vllm

    rows = []
    with local_vllm(folder, MODEL, scratch / "server.log", python=VLLM_PYTHON) as url:
        for pair in range(args.pairs):
            for tool in ("cube", "lm-eval"):
                out = scratch / f"{tool}-{pair}"
                if tool == "cube":
                    run = bench.cube_argv(MODEL, args.items, args.seed, args.mode, out, args.data)
                    run = [a for a in run if a not in ("--dtype", "float32")]
                    run[run.index("--backend") + 1] = "openai"
                    command = [sys.executable, "-m", "cube", *run, "--base-url", url,
                               "--concurrency", str(CONCURRENCY), "--server-dtype", "float32"]
                else:
                    model_args = (f"model={MODEL},base_url={url}/completions,tokenizer_backend=huggingface,"
                                  f"tokenizer={folder},num_concurrent={CONCURRENCY},max_retries=3")
                    command = [str(python), "-m", "lm_eval", "--model", "local-completions", "--model_args",
                               model_args, "--tasks", ",".join(tasks), "--include_path", str(tasks_dir),
                               "--batch_size", str(BATCH), "--output_path", str(out)]
                before = server_counters(url)
                wall = timed(command, env, scratch / f"{tool}-{pair}.log")
                after = server_counters(url)
                delta = {k: after[k] - before[k] for k in METRICS}
                rows.append((tool, pair, wall, delta))
                print(f"{tool:<8} pair {pair}: {wall:7.1f} s, {delta[METRICS[1]]:6.0f} requests, "
                      f"{delta[METRICS[0]]:8.0f} prompt tokens read, {delta[METRICS[2]]:8.0f} from the prefix "
                      "cache", file=sys.stderr)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--mode", default="full", choices=["letters", "cloze", "full"])
    parser.add_argument("--data", help="the cmmlu folder (default: cube's lookup)")
    parser.add_argument("--competitor", action="store_true", help="run the pairs beside two busy processes")
    args = parser.parse_args()
    if not VLLM_PYTHON.exists():
        print(f"{VLLM_PYTHON} missing: build it with `make vllm-env`", file=sys.stderr)
        return 2
    bench = vs_lm_eval()
    from cube.harness.model_spec import parse_model

    folder = parse_model(MODEL).folder()
    scratch = Path(tempfile.mkdtemp(prefix="cube-served-bench-"))
    env = {**os.environ, **bench.OFFLINE,
           "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    try:
        argv = bench.cube_argv(MODEL, args.items, args.seed, args.mode, scratch / "probe", args.data)
        spec = bench.cube_spec(argv)
        items = list(spec.items)
        tasks_dir = scratch / "tasks"
        tasks_dir.mkdir()
        tasks = bench.write_lm_eval_tasks(tasks_dir, items, args.mode)
        python = bench.lm_eval_python()
        work = bench.cube_workload(spec, parse_model(MODEL).tokenizer())
        problems = bench.prompt_mismatches(work, items, bench.lm_eval_requests(python, tasks_dir, tasks))
        if problems:
            print(f"prompts differ from cube's: {problems[:5]}", file=sys.stderr)
            return 1
        print(f"{len(items)} items, {args.mode}: lm-eval's requests are cube's, byte for byte", file=sys.stderr)
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 if args.competitor else 0)]
        try:
            rows = run_pairs(args, bench, folder, scratch, tasks, tasks_dir, python, env)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
        shown = (scratch / "cube-0.log").read_text(errors="replace").replace("\r", "\n").splitlines()
        print("cube's own output (first pair):", *[f"  {line}" for line in shown if line and "item/s" not in line
                                                    and "it/s" not in line], sep="\n", file=sys.stderr)
        med = {}
        for tool in ("cube", "lm-eval"):
            mine = [r for r in rows if r[0] == tool]
            med[tool] = (statistics.median(r[2] for r in mine),
                         statistics.median(r[3][METRICS[1]] for r in mine),
                         statistics.median(r[3][METRICS[0]] for r in mine),
                         statistics.median(r[3][METRICS[0]] - r[3][METRICS[2]] for r in mine))
        print(json.dumps({"items": len(items), "mode": args.mode, "pairs": args.pairs, "median": med,
                          "ratio_lm_eval_over_cube": {
                              name: round(med["lm-eval"][i] / med["cube"][i], 3) if med["cube"][i] else None
                              for i, name in enumerate(("wall_s", "requests", "prompt_tokens", "computed_tokens"))}},
                         indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
