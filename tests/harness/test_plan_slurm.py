"""A plan on a real Slurm: one node (munge, slurmctld, slurmd) started in a temporary folder.

2 demo models x 2 label sets x 12 CMMLU items = 4 array tasks. One task is stopped after its first
shard and cancelled (what a node failure or a pre-emption leaves), the plan's status names it,
resubmitting that array index finishes it, the merge takes the plan's shards, the merged store
equals a single-process `cube run` of the same protocol, and a claim notebook runs on it.
`make test-prereqs` installs Slurm and munge (``scripts/slurm_local.sh install``); without them,
or without root to start the daemons, the test skips saying so.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.test_plan import records

REPO = Path(__file__).resolve().parents[2]
SLURM = REPO / "scripts" / "slurm_local.sh"
MODELS = ("smollm2-135m-instruct", "gemma-3-270m")
RUN_OPTIONS = ("--sample", "12", "--label-sets", "L1_halfwidth,L4_circled", "--dtype", "float32",
               "--shard-size", "1", "--batch-size", "4")
WAIT_S = 900  # the whole array on a busy 2-core machine; each wait below ends as soon as its state is reached

pytestmark = pytest.mark.skipif(
    not all(shutil.which(c) or Path("/usr/sbin", c).exists() for c in ("slurmctld", "slurmd", "munged", "sbatch"))
    or os.geteuid() != 0,
    reason="needs Slurm and munge (make test-prereqs: scripts/slurm_local.sh install) and root to start them")


def cube(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "cube", *args], capture_output=True, text=True)
    assert result.returncode in (0, 1), f"cube {' '.join(args)}: {result.stderr[-2000:]}"
    return result


@pytest.fixture()
def slurm(tmp_path):
    folder = tmp_path / "slurm"
    subprocess.run([str(SLURM), "start", str(folder)], check=True, capture_output=True, text=True, timeout=120)
    env = dict(os.environ, SLURM_CONF=str(folder / "slurm.conf"))
    try:
        yield env
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, capture_output=True)
        subprocess.run([str(SLURM), "stop", str(folder)], capture_output=True, timeout=60)


def sbatch(env: dict, *args: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", *args], env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip().split(";")[0]


def queued(env: dict, job: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], env=env, capture_output=True, text=True)
    return out.stdout.split("\n") if out.stdout.strip() else []


def wait_for(condition, what: str, timeout: float = WAIT_S, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def listed_shards(store: Path) -> int:
    import json

    try:
        return len(json.loads((store / "MANIFEST.json").read_text())["files"])
    except (OSError, ValueError, KeyError):
        return 0


def run_process(store: Path) -> int | None:
    """The pid of the `cube run` writing ``store`` (its --out), if one is running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"run" in argv and str(store).encode() in argv:
            return int(entry.name)
    return None


def test_a_plan_runs_as_a_slurm_array_survives_a_killed_task_and_merges(slurm, tmp_path, benchmarks_root):
    plan = tmp_path / "plan"
    cube("plan", "make", "--out", str(plan), "--models", ",".join(MODELS), "--items-per-job", "6",
         "--", *RUN_OPTIONS)
    array = sbatch(slurm, str(plan / "slurm.sh"))
    victim = plan / "jobs" / "0001"
    # Stop task 1 after its first shard (of 12), then cancel it: what a failed node leaves.
    wait_for(lambda: listed_shards(victim) >= 1 and run_process(victim), "task 1's first shard")
    pid = run_process(victim)
    os.kill(pid, signal.SIGSTOP)
    written = listed_shards(victim)
    subprocess.run(["scancel", f"{array}_1"], env=slurm, check=True)
    wait_for(lambda: run_process(victim) is None, "task 1 to end", timeout=120, every=0.2)
    assert 1 <= written < 12
    wait_for(lambda: not queued(slurm, array), "the array to finish", every=1)
    status = cube("plan", "status", str(plan))
    assert status.returncode == 1, status.stdout
    assert "job    1" in status.stdout and "is incomplete" in status.stdout
    assert "3 of 4 jobs complete; rerun: cube plan run" in status.stdout and "sbatch --array=1 " in status.stdout
    refused = subprocess.run([sys.executable, "-m", "cube", "merge", str(tmp_path / "early"), "--plan", str(plan)],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "job 1 is incomplete" in refused.stderr
    assert not (tmp_path / "early").exists()

    again = sbatch(slurm, "--array=1", str(plan / "slurm.sh"))  # resubmit the one task: it resumes
    wait_for(lambda: not queued(slurm, again), "the resubmitted task", every=1)
    assert cube("plan", "status", str(plan)).returncode == 0
    merged = tmp_path / "merged"
    cube("merge", str(merged), "--plan", str(plan))

    single = tmp_path / "single"
    for model in MODELS:
        cube("run", "--model", model, "--out", str(single), *RUN_OPTIONS)
    assert records(merged) == records(single)

    # A claim notebook rebuilt on the merged store (the pre-registered tests: its DEGEN cell is SmolLM2's L4).
    book = tmp_path / "book"
    result = subprocess.run([sys.executable, "-m", "cube", "book", "execute", "--only", "02_preregistered_tests",
                             "--param", f"records={merged}", "--as", "slurm_run", "--out", str(book)],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    executed = (book / "slurm_run.ipynb").read_text(encoding="utf-8")
    assert "smollm2-135m-instruct" in executed and "L4_circled" in executed
