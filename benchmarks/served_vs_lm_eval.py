"""cube's server backend against lm-eval's ``local-completions`` on the same ``vllm serve`` (issue 35 §4).

Both harnesses score the same items (the ones ``cube run --sample N --seed S`` draws) through one
OpenAI-compatible server, with prompts equal byte for byte (lm-eval runs local tasks whose documents
are the contexts and continuations cube's own runner asks for, ``context_tasks``; checked on
lm-eval's own request building before any timing). Issue 46's two workloads (``MODES``):
``letters``, the 4 label sets at 0 shots (M1-seq); ``full``, the 4 label sets at 0 and 5 shots
plus cloze (M2). They run as interleaved pairs of fresh processes (cube, lm-eval, cube, ...)
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

One server, started once, serves every run; each run starts from an empty prefix cache
(``/reset_prefix_cache``, vLLM's dev endpoint), so neither harness is served from the other's
prompts. Each pair runs both modes, quiet and then beside two busy processes (``--conditions``:
a 2-thread competitor for the CPU), the two harnesses in an order that alternates by pair.
Timings on a machine shared with other work are a direction, not a ratio: run it on a quiet
machine for the README's figures.

The lm-eval task files hold benchmark text: they live in a temporary folder removed at the end.
Not a test: nothing asserts a time. Run: ``python benchmarks/served_vs_lm_eval.py --items 20 --pairs 2``.
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


# issue 46's workloads: label sets, shots, cloze too
LABEL_SETS = ("L1_halfwidth", "L2_fullwidth", "L3_ganzhi", "L4_circled")
MODES = {"letters": (LABEL_SETS, (0,), False), "full": (LABEL_SETS, (0, 5), True)}


def vs_lm_eval():
    """benchmarks/vs_lm_eval.py as a module: its sampling, its byte-equal lm-eval tasks."""
    spec = importlib.util.spec_from_file_location("vs_lm_eval", REPO / "benchmarks" / "vs_lm_eval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def cube_argv(bench, mode: str, items: int, seed: int, out: Path, data: str | None) -> list[str]:
    """``cube run``'s arguments for ``mode`` with the fp32 HF config the in-process benchmark uses
    (its sampling, its context), the label sets, shots and scorers of ``MODES``."""
    import shlex
    from dataclasses import replace

    label_sets, shots, cloze = MODES[mode]
    config = replace(bench.cube_config(MODEL, items, seed, "letters", out, data), label_sets=label_sets,
                     shots=shots, scorers=("M1-seq", "M2") if cloze else ("M1-seq",))
    return shlex.split(config.command_line())[1:] + (["--data", data] if data else [])


def task_name(job) -> str:
    """The lm-eval task a job's requests go to: ``cube_<label set>_<shots>shot``, ``cube_cloze``."""
    return f"cube_{job.cell.label_set.name.lower()}_{job.cell.shots}shot" if job.kind == "label" else "cube_cloze"


def cube_requests(bench, spec, tokenizer) -> dict[str, dict[str, object]]:
    """Every log-likelihood request cube's runner makes for ``spec``, by lm-eval task name and item
    uid (the in-process benchmark's recorder of the runner's own jobs, ``cube_workload``)."""
    return bench.cube_workload(spec, tokenizer, key=task_name).requests


def context_tasks(folder: Path, items, requests: dict[str, dict[str, object]]) -> list[str]:
    """One local lm-eval task per entry of ``cube_requests``: document i is item i, its text cube's
    context (shots included) and its choices cube's continuations, with no delimiter between them,
    so lm-eval asks for exactly what cube asks for. The files hold benchmark text: ``folder`` is
    a scratch folder."""
    for task, by_uid in requests.items():
        docs = [{"context": by_uid[it.uid].context, "choices": list(by_uid[it.uid].continuations),
                 "gold": it.answer} for it in items]
        data = folder / f"{task}.jsonl"
        data.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
        config = {"task": task, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
                  "test_split": "test", "output_type": "multiple_choice", "doc_to_text": "{{context}}",
                  "doc_to_choice": "{{choices}}", "doc_to_target": "{{gold}}", "target_delimiter": "",
                  "metric_list": [{"metric": "acc"}]}
        (folder / f"{task}.yaml").write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return sorted(requests)


def mismatches(requests: dict[str, dict[str, object]], items, built: dict[str, dict[str, list]]) -> list[str]:
    """Where lm-eval's (context, continuation) pairs are not cube's, byte for byte (task and doc only)."""
    problems = []
    for task, by_uid in requests.items():
        docs = built.get(task, {})
        if sorted(docs, key=int) != [str(i) for i in range(len(items))]:
            problems.append(f"{task}: {len(docs)} docs for {len(items)} items")
            continue
        for doc_id, pairs in docs.items():
            request = by_uid[items[int(doc_id)].uid]
            if [list(p) for p in pairs] != [[request.context, c] for c in request.continuations]:
                problems.append(f"{task} doc {doc_id}")
    return problems


def platform_line() -> str:
    """The CPU the timings were taken on (``lscpu``'s model name and core count)."""
    import platform

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


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


def reset_prefix_cache(url: str) -> None:
    """Empty the server's prefix cache (vLLM's dev endpoint, ``VLLM_SERVER_DEV_MODE=1``) before each
    timed run: both harnesses send the same prompts, so the second of a pair would otherwise be
    served from the first one's cache. Each run's own reuse of its prefixes is what is measured."""
    request = urllib.request.Request(url[: -len("/v1")] + "/reset_prefix_cache", data=b"", method="POST")
    for _ in range(20):
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read().decode() or "{}"
        if json.loads(body).get("success", True):
            return
        time.sleep(0.5)
    raise RuntimeError("the server would not reset its prefix cache")


def harness_command(tool: str, mode: str, args, bench, url: str, folder: Path, out: Path, tasks: list[str],
                    tasks_dir: Path, python) -> list[str]:
    if tool == "cube":
        run = cube_argv(bench, mode, args.items, args.seed, out, args.data)
        run = [a for a in run if a not in ("--dtype", "float32")]
        run[run.index("--backend") + 1] = "openai"
        return [sys.executable, "-m", "cube", *run, "--base-url", url, "--concurrency", str(CONCURRENCY),
                "--server-dtype", "float32"]
    model_args = (f"model={MODEL},base_url={url}/completions,tokenizer_backend=huggingface,"
                  f"tokenizer={folder},num_concurrent={CONCURRENCY},max_retries=3")
    return [str(python), "-m", "lm_eval", "--model", "local-completions", "--model_args", model_args,
            "--tasks", ",".join(tasks), "--include_path", str(tasks_dir), "--batch_size", str(BATCH),
            "--output_path", str(out)]


def run_pairs(args, bench, folder: Path, scratch: Path, workloads: dict, python, env: dict) -> list:
    """The interleaved pairs against one server: for each pair, each mode and each condition (quiet,
    then beside two busy processes), both harnesses, in an order that alternates by pair; each run
    starts from an empty prefix cache. Rows: (tool, mode, condition, pair, wall s, counters' deltas)."""
    from cube.harness.backends.local_vllm import local_vllm

    rows = []
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache (local_vllm passes the environment on)
    with local_vllm(folder, MODEL, scratch / "server.log", python=VLLM_PYTHON) as url:
        for pair in range(args.pairs):
            for mode in args.modes:
                tasks, tasks_dir = workloads[mode]
                for condition in args.conditions:
                    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                            for _ in range(2 if condition == "competitor" else 0)]
                    try:
                        for tool in (("cube", "lm-eval") if pair % 2 == 0 else ("lm-eval", "cube")):
                            name = f"{tool}-{mode}-{condition}-{pair}"
                            command = harness_command(tool, mode, args, bench, url, folder, scratch / name, tasks,
                                                      tasks_dir, python)
                            reset_prefix_cache(url)
                            before = server_counters(url)
                            wall = timed(command, env, scratch / f"{name}.log")
                            after = server_counters(url)
                            delta = {k: after[k] - before[k] for k in METRICS}
                            rows.append((tool, mode, condition, pair, wall, delta))
                            print(f"{tool:<8} {mode:<8} {condition:<10} pair {pair}: {wall:7.1f} s, "
                                  f"{delta[METRICS[1]]:6.0f} requests, {delta[METRICS[0]]:8.0f} prompt tokens read, "
                                  f"{delta[METRICS[2]]:8.0f} from the prefix cache", file=sys.stderr, flush=True)
                    finally:
                        for proc in busy:
                            proc.kill()
                            proc.wait()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--modes", default="letters,full", help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--data", help="the cmmlu folder (default: cube's lookup)")
    parser.add_argument("--conditions", default="quiet,competitor",
                        help="comma-separated: quiet, competitor (beside two busy processes)")
    args = parser.parse_args()
    args.modes, args.conditions = args.modes.split(","), args.conditions.split(",")
    if not set(args.modes) <= set(MODES) or not set(args.conditions) <= {"quiet", "competitor"}:
        parser.error(f"--modes of {', '.join(MODES)}; --conditions of quiet, competitor")
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
        python = bench.lm_eval_python()
        tokenizer = parse_model(MODEL).tokenizer()
        workloads, n_items = {}, 0
        for mode in args.modes:
            spec = bench.cube_spec(cube_argv(bench, mode, args.items, args.seed, scratch / "probe", args.data))
            items = list(spec.items)
            n_items = len(items)
            tasks_dir = scratch / f"tasks-{mode}"
            tasks_dir.mkdir()
            requests = cube_requests(bench, spec, tokenizer)
            tasks = context_tasks(tasks_dir, items, requests)
            problems = mismatches(requests, items, bench.lm_eval_requests(python, tasks_dir, tasks))
            if problems:
                print(f"{mode}: prompts differ from cube's: {problems[:5]}", file=sys.stderr)
                return 1
            workloads[mode] = (tasks, tasks_dir)
            print(f"{len(items)} items, {mode} ({len(tasks)} tasks: {', '.join(tasks)}): lm-eval's requests are "
                  "cube's, byte for byte", file=sys.stderr)
        rows = run_pairs(args, bench, folder, scratch, workloads, python, env)
        first = f"cube-{args.modes[0]}-{args.conditions[0]}-0.log"
        shown = (scratch / first).read_text(errors="replace").replace("\r", "\n").splitlines()
        print(f"cube's own output ({first[:-4]}):", *[f"  {line}" for line in shown if line and "item/s" not in line
                                                      and "it/s" not in line], sep="\n", file=sys.stderr)
        summary = []
        for mode in args.modes:
            for condition in args.conditions:
                med = {}
                for tool in ("cube", "lm-eval"):
                    mine = [r for r in rows if r[:3] == (tool, mode, condition)]
                    med[tool] = {"wall_s": round(statistics.median(r[4] for r in mine), 1),
                                 "requests": statistics.median(r[5][METRICS[1]] for r in mine),
                                 "prompt_tokens": statistics.median(r[5][METRICS[0]] for r in mine),
                                 "prefix_cache_hits": statistics.median(r[5][METRICS[2]] for r in mine)}
                summary.append({"mode": mode, "condition": condition, "median": med,
                                "lm_eval_over_cube_wall": round(med["lm-eval"]["wall_s"] / med["cube"]["wall_s"], 2)})
                print(f"{mode:<8} {condition:<10} median wall: cube {med['cube']['wall_s']:.1f} s, lm-eval "
                      f"{med['lm-eval']['wall_s']:.1f} s: cube {summary[-1]['lm_eval_over_cube_wall']:.2f}x as fast; "
                      f"prefix cache served {med['cube']['prefix_cache_hits']:.0f} of {med['cube']['prompt_tokens']:.0f} "
                      f"prompt tokens for cube, {med['lm-eval']['prefix_cache_hits']:.0f} of "
                      f"{med['lm-eval']['prompt_tokens']:.0f} for lm-eval")
        print(json.dumps({"items": n_items, "pairs": args.pairs, "cpu": platform_line(), "results": summary},
                         indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
