"""A store as a killed ``cube run --sample 30 --shard-size 5`` leaves it: 2 of its 6 shards.

Made by the real runner on the tiny random-weight Qwen3 (``tests/conftest.py``) and real CMMLU
items, with a backend that dies in its third ``score`` call (one call per chunk of items): what
SIGKILL after two shards leaves, without timing a signal. Shared by the readers' tests (rescore,
confirm, release build, the store), which must all tell this store from a finished one.
"""

from __future__ import annotations

from pathlib import Path

N_ITEMS, SHARD_SIZE, FINISHED = 30, 5, 2


class Killed(Exception):
    """Stands for the SIGKILL."""


def killed_run_spec(benchmarks_root: Path):
    from cube.harness.run_config import RunSettings
    from cube.harness.run_spec import RunSpec
    from cube.protocol.items import load_cmmlu, stratified_sample
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import Cell

    items = tuple(stratified_sample(load_cmmlu(benchmarks_root / "cmmlu"), N_ITEMS, seed=0))
    cell = Cell(load_label_sets()["L1_halfwidth"], "zh_cue", 0)
    return RunSpec(model="tiny", items=items, cells=(cell,), scorers=("M1-seq", "M1-strict"),
                   shard_size=SHARD_SIZE, batch_size=8,
                   settings=RunSettings(benchmark="cmmlu", split="test", sample=N_ITEMS, seed=0, dtype="float32",
                                        backend="hf"))


def killed_run(out: Path, benchmarks_root: Path, model, tokenizer, finished: int | None = FINISHED):
    """Run into ``out`` and die after ``finished`` shards (None: run to the end); the spec."""
    from cube.harness.backends.hf import HFBackend
    from cube.harness.runner import run

    spec = killed_run_spec(benchmarks_root)
    backend = HFBackend(model, tokenizer, progress=False)
    if finished is not None:
        real_score, calls = backend.score, []

        def score_then_die(requests, batch_size=16):
            calls.append(1)
            if len(calls) > finished:
                raise Killed()
            return real_score(requests, batch_size)

        backend.score = score_then_die
        try:
            run(backend, spec, out, progress=False)
        except Killed:
            return spec
        raise AssertionError("the run was meant to die")
    run(backend, spec, out, progress=False)
    return spec
