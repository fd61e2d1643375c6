"""cube against the real lm-evaluation-harness 0.4.13, side by side, on the same items (issue 12).

What users ask first: "is it faster than lm-eval, and does it compute the same numbers?" One run
of this script answers both, on real demo models, for three workloads on the same items:

- ``letters``: one label set (ABCD) scored as labels, cube's M1-seq = lm-eval's ``acc``;
- ``cloze``: the four option texts after the question, cube's M2 = lm-eval's ``acc``;
- ``full``: the four frozen label sets plus cloze, what a protocol study runs.

The items are exactly those ``cube run --sample N --seed S`` draws (cube's own ``build_spec``), and
lm-eval runs local tasks whose prompts are cube's byte for byte (``cube.importers.lm_eval.local_task``; checked
before any timing, on lm-eval's own request building, and again on its logged samples). Each
workload runs as interleaved pairs of fresh processes (cube, lm-eval, cube, lm-eval, ...), fp32,
the same thread count, so load drift on a shared machine hits both alike. Printed: items/s
(scoring alone and the whole process), the ratio, forward tokens against the per-request minimum
and the whole-cube prefix-tree minimum, padded/real tokens, peak RSS, per-option log-likelihood
agreement, and the achieved model FLOP/s against this CPU's measured matmul peak. Where
``.venv-vllm`` exists, cube's vLLM backend joins each pair twice: with vLLM's prefix cache
(``vllm``, config/serving.yaml as shipped) and without it (``vllm-nocache``).

The lm-eval job files hold benchmark text: they live in a temporary folder removed at the end.
Not a test: nothing asserts a time. Run: ``python benchmarks/vs_lm_eval.py --items 100``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from cube.harness.run_config import RunConfig
    from cube.harness.run_spec import RunSpec

REPO = Path(__file__).resolve().parents[1]
LMEVAL_VENV = Path(os.environ.get("CUBE_LMEVAL_VENV", REPO / ".venv-lmeval"))
VLLM_VENV = Path(os.environ.get("CUBE_VLLM_VENV", REPO / ".venv-vllm"))
LABEL_SETS = ("L1_halfwidth", "L2_fullwidth", "L3_ganzhi", "L4_circled")
CONTEXT = "zh_cue"
CLOZE_TASK = "cube_cloze"
# workload -> (label sets scored as labels, cloze too)
MODES = {"letters": (LABEL_SETS[:1], False), "cloze": ((), True), "full": (LABEL_SETS, True)}
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}

# Run by .venv-lmeval's python: lm-eval's own CLI, with its model load timed and the tokens its
# forwards ran counted where it pads each batch (pad_and_concat gets every row unpadded).
LM_EVAL_DRIVER = r'''
import json, os, sys, time
t_start = time.perf_counter()
import lm_eval.models.huggingface as hf
from lm_eval.__main__ import cli_evaluate
counts = {"real": 0, "padded": 0, "forwards": 0, "load_s": 0.0, "import_s": time.perf_counter() - t_start}
_pad = hf.pad_and_concat
def pad_and_concat(max_length, tensors, padding_side="right"):
    counts["real"] += sum(int(t.shape[-1]) for t in tensors)
    counts["padded"] += int(max_length) * len(tensors)
    counts["forwards"] += 1
    return _pad(max_length, tensors, padding_side=padding_side)
hf.pad_and_concat = pad_and_concat
_init = hf.HFLM.__init__
def init(self, *args, **kwargs):
    t0 = time.perf_counter()
    _init(self, *args, **kwargs)
    counts["load_s"] += time.perf_counter() - t0
hf.HFLM.__init__ = init
sys.argv = ["lm_eval"] + sys.argv[1:]
try:
    cli_evaluate()
finally:
    counts["total_s"] = time.perf_counter() - t_start
    with open(os.environ["CUBE_BENCH_COUNTS"], "w") as f:
        json.dump(counts, f)
'''

# Run by .venv-lmeval's python: the (context, continuation) pairs lm-eval builds for each doc of
# the local tasks, without a model. JSON on stdout, read in memory only (it is benchmark text).
LM_EVAL_REQUESTS = r'''
import json, sys
from lm_eval.tasks import TaskManager
manager = TaskManager(include_path=sys.argv[1])
out = {}
for name, task in manager.load_task_or_group(sys.argv[2].split(",")).items():
    task.build_all_requests()
    docs = {}
    for inst in task.instances:
        docs.setdefault(str(inst.doc_id), []).append(list(inst.arguments[:2]))
    out[str(name)] = docs
json.dump(out, sys.stdout, ensure_ascii=False)
'''


# ---- what cube runs: its own sampling, its own requests ------------------------------------------


def cube_config(model: str, n_items: int, seed: int, mode: str, out: Path, data: str | None,
                backend: str = "hf") -> RunConfig:
    """The ``RunConfig`` of cube's side of ``mode`` (no argparse: the harness's own type)."""
    from cube.harness.run_config import RunConfig

    label_sets, cloze = MODES[mode]
    scorers = (["M1-seq"] if label_sets else []) + (["M2"] if cloze else [])
    return RunConfig(model=model, benchmark="cmmlu", split="test", sample=n_items, seed=seed,
                     label_sets=tuple(label_sets or LABEL_SETS[:1]), contexts=(CONTEXT,), scorers=tuple(scorers),
                     dtype="float32", backend=backend, out=Path(out), data=Path(data) if data else None)


def cube_argv(model: str, n_items: int, seed: int, mode: str, out: Path, data: str | None,
              backend: str = "hf") -> list[str]:
    """``cube run``'s arguments for ``mode``: the config's own command line, plus ``--data``."""
    import shlex

    config = cube_config(model, n_items, seed, mode, out, data, backend)
    return shlex.split(config.command_line())[1:] + (["--data", data] if data else [])


def cube_spec(config_or_argv: RunConfig | list[str]) -> RunSpec:
    """The RunSpec cube runs (its items are the ones it samples), of a ``RunConfig`` or of ``cube_argv``."""
    from cube.harness.build import build_spec
    from cube.harness.run_config import RunConfig

    if not isinstance(config_or_argv, RunConfig):
        from cube.cli import build_parser

        config_or_argv = RunConfig.from_cli(build_parser().parse_args(config_or_argv))
    return build_spec(config_or_argv)


@dataclass
class Workload:
    """The requests one ``cube run`` scores, keyed as records are: (scorer, label set) -> uid."""

    requests: dict[object, dict[str, object]] = field(default_factory=dict)  # key(job) -> uid -> request
    plans_by_uid: dict[str, list] = field(default_factory=dict)
    minimum_tokens: int = 0  # per request (RequestPlan.minimum_tokens), what cube runs today

    @property
    def prefix_tree_per_item(self) -> int:
        from cube.harness.backends.base import prefix_tree_minimum

        return sum(prefix_tree_minimum(plans) for plans in self.plans_by_uid.values())

    @property
    def prefix_tree_all(self) -> int:
        from cube.harness.backends.base import prefix_tree_minimum

        return prefix_tree_minimum(p for plans in self.plans_by_uid.values() for p in plans)


def record_key(job) -> tuple[str, str]:
    """The (scorer, label set) a job's requests are keyed by, as records are."""
    return ("M1-seq", job.cell.label_set.name) if job.kind == "label" else ("M2", "-")


def cube_workload(spec, tokenizer, key=record_key) -> Workload:
    """Every request cube's runner makes for ``spec``, planned, without a model, keyed by
    ``key(job)`` (default: as records are).

    The runner's own job functions run against a backend that only records what it is asked, so
    the requests are the runner's, not a re-derivation of them.
    """
    from cube.harness.backends.base import Backend, ContinuationLogprobs, ForwardCounter, plan_request
    from cube.harness.passes import SCORING_WORK
    from cube.harness.run_spec import plan_jobs

    work = Workload()

    class Recorder(Backend):
        def __init__(self) -> None:
            self.tokenizer, self.counter, self.job = tokenizer, ForwardCounter(), None

        def score(self, requests, batch_size=16):
            job, out = self.job, []
            name = key(job)
            for i, request in enumerate(requests):
                item = job.items[i % len(job.items)]
                plan = plan_request(tokenizer, request)
                work.minimum_tokens += plan.minimum_tokens
                work.plans_by_uid.setdefault(item.uid, []).append(plan)
                work.requests.setdefault(name, {})[item.uid] = request
                out.append([ContinuationLogprobs(c.continuation_ids, np.zeros(len(c.continuation_ids)),
                                                 c.boundary_merge) for c in plan.continuations])
            return out

        def generate(self, prompts, max_new_tokens, batch_size=8):
            raise NotImplementedError("the benchmark scores log-likelihoods only")

    recorder = Recorder()
    for job in plan_jobs(spec):
        recorder.job = job
        recorder.score(SCORING_WORK[job.kind](spec, job).requests)
    return work


# ---- lm-eval tasks over the same items -----------------------------------------------------------


def cloze_doc_to_text() -> str:
    """A jinja ``doc_to_text`` rendering cube's cloze context (question, then the cloze cue)."""
    from cube.protocol.prompts import load_templates

    templates = load_templates()
    return str(templates["question"]).format(question="{{Question}}") + str(templates["cloze"]["cue"])


def write_lm_eval_tasks(folder: Path, items, mode: str) -> list[str]:
    """Local lm-eval tasks for ``mode`` over ``items`` (doc i is item i); their names.

    target_delimiter is "" so lm-eval scores exactly cube's continuations after exactly cube's
    contexts: labels for the label sets, the option texts (doc_to_choice from the doc) for cloze.
    """
    from cube.protocol.label_sets import load_label_sets
    from cube.importers.lm_eval.local_task import cube_doc_to_text, write_local_task
    from cube.importers.lm_eval.matching import OPTION_FIELDS

    label_sets, cloze = MODES[mode]
    sets = load_label_sets()
    names = []
    for name in label_sets:
        task = f"cube_{name.lower()}"
        write_local_task(folder, task, items, cube_doc_to_text(sets[name], CONTEXT), sets[name].labels, "")
        names.append(task)
    if cloze:
        path = write_local_task(folder, CLOZE_TASK, items, cloze_doc_to_text(), OPTION_FIELDS, "")
        config = json.loads(path.read_text(encoding="utf-8"))
        config["doc_to_choice"] = "{{[" + ", ".join(OPTION_FIELDS) + "]}}"  # the doc's own option texts
        path.write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        names.append(CLOZE_TASK)
    return names


def task_key(task: str) -> tuple[str, str]:
    """The (scorer, label set) of cube's records that a local task's ``acc`` is."""
    if task == CLOZE_TASK:
        return ("M2", "-")
    return ("M1-seq", next(n for n in LABEL_SETS if f"cube_{n.lower()}" == task))


def lm_eval_python() -> Path:
    """``.venv-lmeval``'s python, built by scripts/install_lm_eval_env.sh when missing."""
    if not (LMEVAL_VENV / ".installed").exists():
        print(f"building {LMEVAL_VENV} (scripts/install_lm_eval_env.sh; minutes, once)", file=sys.stderr)
        subprocess.run([str(REPO / "scripts" / "install_lm_eval_env.sh")], cwd=REPO, check=True,
                       env={**os.environ, "LMEVAL_VENV": str(LMEVAL_VENV)})
    return LMEVAL_VENV / "bin" / "python"


def lm_eval_requests(python: Path, folder: Path, tasks: list[str]) -> dict[str, dict[str, list]]:
    """task -> doc id -> [(context, continuation), ...] as lm-eval itself builds them (no model)."""
    proc = subprocess.run([str(python), "-c", LM_EVAL_REQUESTS, str(folder), ",".join(tasks)],
                          capture_output=True, text=True, env={**os.environ, **OFFLINE}, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"lm-eval could not build its requests:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def prompt_mismatches(work: Workload, items, built: dict[str, dict[str, list]]) -> list[str]:
    """Where lm-eval's (context, continuation) pairs are not cube's requests, byte for byte.

    Names the task and doc only: the texts are benchmark text and are never printed.
    """
    problems = []
    for task, docs in built.items():
        want = work.requests[task_key(task)]
        if sorted(docs, key=int) != [str(i) for i in range(len(items))]:
            problems.append(f"{task}: {len(docs)} docs for {len(items)} items")
            continue
        for doc_id, pairs in docs.items():
            request = want[items[int(doc_id)].uid]
            if [list(p) for p in pairs] != [[request.context, c] for c in request.continuations]:
                problems.append(f"{task} doc {doc_id}")
    return problems


# ---- running the processes -----------------------------------------------------------------------


@dataclass
class Run:
    tool: str
    mode: str
    wall_s: float  # the whole process: imports, data, model load, scoring, writing
    score_s: float  # scoring alone (cube: the run log's wall_s; lm-eval: all but imports and load)
    peak_rss_mib: float
    forward_tokens: int  # real tokens through the decoder
    padded_tokens: int  # the same, padding included (what the hardware computed)
    head_rows: int  # positions the output layer ran at
    out: Path
    cpu_s: float = 0.0  # user + system CPU seconds of the whole process (spinning threads included)
    condition: str = "quiet"  # or "contended": a fixed competitor ran beside it (``Competitor``)


def run_process(argv: list[str], env: dict, log: Path) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of one child process; its output goes to ``log``."""
    t0 = time.perf_counter()
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}; its log's end:\n{tail}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime  # Linux: KiB


def run_cube(argv: list[str], mode: str, scratch: Path, env: dict, tool: str = "cube",
             python: Path | None = None) -> Run:
    out = Path(argv[argv.index("--out") + 1])
    exe = [str(python or sys.executable), "-m", "cube"]
    wall, rss, cpu = run_process(exe + argv, env, scratch / f"{tool}-{mode}-{out.name}.log")
    from cube.records.provenance import RUNLOG_NAME

    model = argv[argv.index("--model") + 1]
    log = json.loads((out / model / RUNLOG_NAME).read_text(encoding="utf-8").splitlines()[-1])
    return Run(tool, mode, wall, float(log["wall_s"]), rss, int(log["forward_tokens"]),
               int(log.get("padded_tokens", log["forward_tokens"])), int(log.get("head_rows", 0)), out, cpu)


def run_lm_eval(python: Path, model_dir: Path, tasks: list[str], folder: Path, out: Path, mode: str,
                scratch: Path, env: dict, batch_size: int) -> Run:
    counts = scratch / f"lm-eval-{mode}-{out.name}.json"
    driver = scratch / "lm_eval_driver.py"
    driver.write_text(LM_EVAL_DRIVER, encoding="utf-8")
    argv = [str(python), str(driver), "--model", "hf", "--model_args", f"pretrained={model_dir},dtype=float32",
            "--tasks", ",".join(tasks), "--include_path", str(folder), "--log_samples", "--output_path",
            str(out), "--device", "cpu", "--batch_size", str(batch_size)]
    wall, rss, cpu = run_process(argv, {**env, **OFFLINE, "CUBE_BENCH_COUNTS": str(counts)},
                                 scratch / f"lm-eval-{mode}-{out.name}.log")
    c = json.loads(counts.read_text())
    score = c["total_s"] - c["import_s"] - c["load_s"]
    # lm-eval's model computes logits at every position it runs, padding included.
    return Run("lm-eval", mode, wall, score, rss, c["real"], c["padded"], c["padded"], out, cpu)


def config_without_prefix_cache(folder: Path) -> Path:
    """A copy of config/ whose serving.yaml turns vLLM's prefix cache off (the `vllm-nocache` arm)."""
    import yaml

    from cube.config import config_dir, load_yaml

    shutil.copytree(config_dir(), folder)
    serving = folder / "serving.yaml"
    data = load_yaml(serving)
    data["defaults"]["llm"]["enable_prefix_caching"] = False
    serving.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return folder


# ---- agreement and utilisation -------------------------------------------------------------------


def agreement(cube_out: Path, lm_out: Path, items, work: Workload) -> tuple[float, float, int, list[str]]:
    """(max |d loglik| per option, argmax agreement, options compared, prompt mismatches)."""
    from cube.importers.lm_eval.reading import find_results, read_run, read_samples
    from cube.importers.lm_eval.records import import_runs
    from cube.records.store import read_records

    runs = [read_run(p) for p in find_results(lm_out)]
    logged = {task.name: {str(s["doc_id"]): [[a["arg_0"], a["arg_1"]] for a in s["arguments"].values()]
                          for s in read_samples(task)} for run in runs for task in run.tasks}
    mismatches = prompt_mismatches(work, items, logged)
    theirs = {(r["scorer"], r["label_set"], r["uid"]): r["scores"]
              for r in import_runs(runs, items, model="bench").rows}
    ours = {(r["scorer"], r["label_set"], r["uid"]): r["scores"] for r in read_records(cube_out).to_pylist()}
    worst, same, n = 0.0, [], 0
    for key, scores in theirs.items():
        if key[0] not in ("M1-seq", "M2"):
            continue
        a, b = np.asarray(ours[key]), np.asarray(scores)
        worst = max(worst, float(np.abs(a - b).max()))
        same.append(int(np.argmax(a)) == int(np.argmax(b)))
        n += a.size
    return worst, float(np.mean(same)), n, mismatches


def parameter_counts(model_dir: Path) -> tuple[int, int, int]:
    """(decoder parameters, input embedding, output layer) from the safetensors headers.

    A tied output layer counts as the embedding's size: it is the same matrix, used as a matmul.
    """
    from safetensors import safe_open

    body = embed = head = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), "np") as f:
            for name in f.keys():
                size = int(np.prod(f.get_slice(name).get_shape()))
                if name.endswith("embed_tokens.weight"):
                    embed += size
                elif name.startswith("lm_head"):
                    head += size
                else:
                    body += size
    return body, embed, head or embed


def matmul_peak(threads: int, dtype: str = "float32", size: int = 2048, seconds: float = 3.0) -> float:
    """FLOP/s of a square matmul in ``dtype`` on ``threads`` threads: this machine's practical peak."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = (torch.randn(size, size).to(getattr(torch, dtype)) for _ in range(2))
        a @ b
        best, end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            a @ b
            best = max(best, 2 * size ** 3 / (time.perf_counter() - t0))
        return best
    finally:
        torch.set_num_threads(before)


# Run by .venv's python: the fixed competitor, fp32 matmuls on N threads until SIGTERM, then the
# matmuls it finished per second (so the report shows it kept running, and how hard).
COMPETITOR = r'''
import signal, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
done, t0 = 0, time.perf_counter()
def stop(*_):
    with open(sys.argv[2], "w") as f:
        f.write(f"{done / (time.perf_counter() - t0):.3f}")
    raise SystemExit(0)
signal.signal(signal.SIGTERM, stop)
a @ b
done += 1
open(sys.argv[3], "w").close()  # ready: imported, its handler in place, one matmul done
while True:
    a @ b
    done += 1
'''


class Competitor:
    """Another job on the same cores for the whole of one run: a separate process doing 1024^2 fp32
    matmuls on ``threads`` threads (the load a shared machine's neighbour puts on it, the same for
    every run it sits beside). ``rates`` holds its matmuls/s beside each run."""

    def __init__(self, threads: int, scratch: Path, env: dict) -> None:
        self.threads, self.scratch, self.env = threads, scratch, env
        self.rates: list[float] = []
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Competitor:
        self.out = self.scratch / f"competitor-{len(self.rates)}.txt"
        ready = self.scratch / f"competitor-{len(self.rates)}.ready"
        script = self.scratch / "competitor.py"
        script.write_text(COMPETITOR, encoding="utf-8")
        env = {**self.env, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        self.proc = subprocess.Popen([sys.executable, str(script), str(self.threads), str(self.out), str(ready)],
                                     env=env)
        # Past its imports before the measured run starts, however long they take on a busy
        # machine: it says so itself (a fixed sleep was too short under load, and a SIGTERM before
        # its handler was in place lost its rate).
        while not ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the competitor process exited with {self.proc.returncode} before it started")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.rates.append(float(self.out.read_text()) if self.out.exists() else float("nan"))


def executed_flops(run: Run, body: int, head: int) -> float:
    """2 x parameters x tokens for every matmul run (padding included, attention scores not)."""
    return 2.0 * body * run.padded_tokens + 2.0 * head * run.head_rows


# ---- the report ----------------------------------------------------------------------------------


def report(model: str, n_items: int, runs: list[Run], works: dict, agree: dict, params, peak: float) -> None:
    body, _, head = params
    print(f"\n== {model}: {n_items} CMMLU test items, fp32; decoder {body / 1e6:.0f}M + output layer "
          f"{head / 1e6:.0f}M parameters; matmul peak {peak / 1e9:.0f} GFLOP/s ==")
    header = (f"{'workload':<8} {'condition':<9} {'tool':<12} {'items/s':>8} {'(process)':>9} {'ratio':>6} "
              f"{'wall s':>7} {'CPU-s':>7} {'tok/CPU-s':>9} {'fwd tokens':>10} {'/min':>6} {'/tree':>6} "
              f"{'pad/real':>8} {'RSS MiB':>8} {'GFLOP/s':>8} {'%peak':>6}")
    print(header)
    for mode, work in works.items():
        by_condition: dict[str, dict[str, list[Run]]] = {}
        for r in runs:
            if r.mode == mode:
                by_condition.setdefault(r.condition, {}).setdefault(r.tool, []).append(r)
        for condition, by_tool in by_condition.items():
            cube_best = min(r.score_s for r in by_tool["cube"])
            for tool, rs in by_tool.items():
                best = min(rs, key=lambda r: r.score_s)
                fastest = min(rs, key=lambda r: r.wall_s)
                ratio = best.score_s / cube_best
                flops = executed_flops(best, body, head) / best.score_s
                print(f"{mode:<8} {condition:<9} {tool:<12} {n_items / best.score_s:8.2f} "
                      f"{n_items / fastest.wall_s:9.2f} {ratio:5.2f}x {fastest.wall_s:7.1f} {fastest.cpu_s:7.1f} "
                      f"{fastest.forward_tokens / fastest.cpu_s:9.1f} {best.forward_tokens:10d} "
                      f"{best.forward_tokens / work.minimum_tokens:6.2f} "
                      f"{best.forward_tokens / work.prefix_tree_all:6.2f} "
                      f"{best.padded_tokens / best.forward_tokens:8.3f} {max(r.peak_rss_mib for r in rs):8.0f} "
                      f"{flops / 1e9:8.1f} {flops / peak:6.1%}")
            if "lm-eval" in by_tool:
                pairs = zip(by_tool["cube"], by_tool["lm-eval"])
                each = [f"{lm.wall_s / cu.wall_s:.2f} ({lm.score_s / cu.score_s:.2f})" for cu, lm in pairs]
                print(f"{'':<8} {condition:<9} lm-eval/cube wall (scoring), each pair: {', '.join(each)}")
        if {"quiet", "contended"} <= set(by_condition):
            for tool in by_condition["quiet"]:
                quiet, busy = by_condition["quiet"].get(tool, []), by_condition["contended"].get(tool, [])
                if quiet and busy:
                    slow = np.median([r.wall_s for r in busy]) / np.median([r.wall_s for r in quiet])
                    per_token = (np.median([r.cpu_s / r.forward_tokens for r in busy])
                                 / np.median([r.cpu_s / r.forward_tokens for r in quiet]))
                    busy_cores = np.median([r.cpu_s / r.wall_s for r in busy])
                    print(f"{'':<8} {tool}: contended/quiet wall {slow:.2f}x, CPU-s per forward token "
                          f"{per_token:.2f}x, busy cores when contended {busy_cores:.2f} (medians over pairs)")
        worst, same, n, mismatches = agree[mode]
        print(f"{'':<8} minimum: per request {work.minimum_tokens}, prefix tree per item "
              f"{work.prefix_tree_per_item}, over all items {work.prefix_tree_all}; log-likelihood "
              f"agreement over {n} options: max |d| {worst:.1e} (fp32 target <= 1e-3), argmax {same:.0%}; "
              f"prompts byte-equal: {'yes' if not mismatches else 'NO: ' + ', '.join(mismatches[:3])}")
    print("items/s: scoring alone (cube: the run log's wall_s; lm-eval: its process less imports and model "
          "load), best of the pairs; (process): the whole process, best; ratio: time / cube's; wall s, CPU-s "
          "(user + system, spinning included), tok/CPU-s: the fastest whole process; /min: forward "
          "tokens over the per-request minimum, /tree: over the prefix-tree minimum of the whole run (every "
          "cell and item sharing: cube's runner shares within each 50-item shard); GFLOP/s: "
          "2 x parameters x tokens of every matmul run (padding included, attention scores not) over the "
          "scoring time.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2-135m-instruct",
                        help="comma-separated demo models (the real measurement: qwen2.5-coder-0.5b-instruct)")
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="letters,cloze,full")
    parser.add_argument("--pairs", type=int, default=2, help="interleaved (cube, lm-eval) pairs per workload")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lm-eval-batch-size", type=int, default=16, help="cube's own default batch size")
    parser.add_argument("--with-1.5b", dest="with_15b", action="store_true",
                        help="also qwen2.5-coder-1.5b-instruct (utilisation at a larger model)")
    parser.add_argument("--vllm", action=argparse.BooleanOptionalAction, default=None,
                        help=f"also cube's vLLM backend, with its prefix cache and without (default: when "
                             f"{VLLM_VENV} is installed)")
    parser.add_argument("--data", help="the CMMLU folder (default: cube's own lookup)")
    parser.add_argument("--conditions", default="quiet",
                        help="quiet, contended or both (quiet,contended): contended runs each process beside a "
                             "fixed competitor (--competitor-threads of fp32 matmuls in another process)")
    parser.add_argument("--competitor-threads", type=int, default=2)
    args = parser.parse_args()
    conditions = [c for c in args.conditions.split(",") if c]
    if not conditions or any(c not in ("quiet", "contended") for c in conditions):
        parser.error(f"--conditions takes quiet and/or contended, got {args.conditions!r}")
    if args.competitor_threads < 1:
        parser.error(f"--competitor-threads must be at least 1, got {args.competitor_threads}")

    from cube.harness.models import ensure_model, model_source, model_tokenizer

    models = [m for m in args.models.split(",") if m]
    if args.with_15b and "qwen2.5-coder-1.5b-instruct" not in models:
        models.append("qwen2.5-coder-1.5b-instruct")
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown workload {unknown[0]!r}; known: {', '.join(MODES)}")
    if args.vllm is None:
        args.vllm = (VLLM_VENV / ".installed").exists()
    if args.vllm and not (VLLM_VENV / ".installed").exists():
        parser.error(f"--vllm needs {VLLM_VENV} (scripts/install_vllm_env.sh)")
    python = lm_eval_python()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    peak = matmul_peak(args.threads)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"{cpu}, {os.cpu_count()} cores, {args.threads} threads; fp32 matmul peak {peak / 1e9:.0f} GFLOP/s")

    with tempfile.TemporaryDirectory(prefix="cube-vs-lm-eval-") as tmp:
        scratch = Path(tmp)
        no_cache_env = {**env, "CUBE_CONFIG_DIR": str(config_without_prefix_cache(scratch / "config-nocache"))}
        competitor = Competitor(args.competitor_threads, scratch, env)
        for model in models:
            model_dir = ensure_model(model)
            tokenizer = model_tokenizer(model_source(model))
            runs: list[Run] = []
            works, agree = {}, {}
            for mode in modes:
                spec = cube_spec(cube_config(model, args.items, args.seed, mode, scratch / "probe", args.data))
                items = list(spec.items)
                works[mode] = work = cube_workload(spec, tokenizer)
                folder = scratch / f"tasks-{model}-{mode}"
                tasks = write_lm_eval_tasks(folder, items, mode)
                problems = prompt_mismatches(work, items, lm_eval_requests(python, folder, tasks))
                if problems:
                    raise SystemExit(f"lm-eval's prompts are not cube's: {', '.join(problems[:5])}")
                for k, condition in ((k, c) for k in range(args.pairs) for c in conditions):
                    print(f"{model} {mode}: pair {k + 1}/{args.pairs}, {condition}", file=sys.stderr, flush=True)
                    tag = f"{mode}-{k}-{condition}"

                    def beside(run: Run) -> None:  # one run, under this pair's condition
                        run.condition = condition
                        runs.append(run)

                    def measured(start):  # the competitor runs for the whole of each contended run
                        if condition == "quiet":
                            return start()
                        with competitor:
                            return start()

                    out = scratch / f"cube-{model}-{tag}"
                    beside(measured(lambda: run_cube(cube_argv(model, args.items, args.seed, mode, out, args.data),
                                                     mode, scratch, env)))
                    lm_out = scratch / f"lmeval-{model}-{tag}"
                    beside(measured(lambda: run_lm_eval(python, model_dir, tasks, folder, lm_out, mode, scratch,
                                                        env, args.lm_eval_batch_size)))
                    if args.vllm:
                        for tool, tool_env in (("vllm", env), ("vllm-nocache", no_cache_env)):
                            vout = scratch / f"{tool}-{model}-{tag}"
                            argv = cube_argv(model, args.items, args.seed, mode, vout, args.data, "vllm")
                            beside(measured(lambda: run_cube(argv, mode, scratch, tool_env, tool,
                                                             VLLM_VENV / "bin" / "python")))
                first_cube = next(r for r in runs if r.mode == mode and r.tool == "cube")
                first_lm = next(r for r in runs if r.mode == mode and r.tool == "lm-eval")
                agree[mode] = agreement(first_cube.out, first_lm.out, items, work)
            report(model, args.items, runs, works, agree, parameter_counts(model_dir), peak)
        if competitor.rates:
            rates = ", ".join(f"{r:.1f}" for r in competitor.rates)
            print(f"\ncompetitor: {args.competitor_threads}-thread fp32 1024^2 matmuls, matmuls/s beside each "
                  f"contended run: {rates}")
    print(f"\nmeasured {time.strftime('%Y-%m-%d %H:%M')}; peak RSS per process (ru_maxrss of the child); "
          f"python {platform.python_version()}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
