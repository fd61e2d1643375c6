"""A local ``vllm serve`` of one model folder, started and stopped around a block of work.

What it is for: checking the served backend (``cube run --backend served``) against a real
OpenAI-compatible server on one's own machine before pointing it at a shared one, and the two
places in this repository that need one: the parity test (tests/harness/backends/test_served_vllm.py)
and the benchmark against lm-eval's ``local-completions`` (benchmarks/served_vs_lm_eval.py). One
definition, so that the test and the benchmark serve the model alike.

vLLM lives in an environment of its own (``make vllm-env``: ``.venv-vllm``, or ``CUBE_VLLM_PYTHON``);
its CPU wheel's ``vllm`` command stops on the wheel's distribution name, so the server starts as
``python -m vllm.entrypoints.openai.api_server``. The server listens on loopback only, on a free
port, in its own process group, which is stopped (TERM, then KILL) when the block ends.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cube.config import REPO_ROOT

VLLM_PYTHON = Path(os.environ.get("CUBE_VLLM_PYTHON", REPO_ROOT / ".venv-vllm" / "bin" / "python"))
START_TIMEOUT_S = 1200  # a cold start on a busy 2-core machine takes a few minutes


class ServerStartError(RuntimeError):
    """The server exited, or did not answer in time; the message ends with its log's tail."""


def free_port() -> int:
    """A loopback port no process listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def local_vllm(folder: str | Path, served_name: str, log: Path, dtype: str = "float32",
               python: Path = VLLM_PYTHON, start_timeout_s: float = START_TIMEOUT_S,
               extra_args: tuple[str, ...] = ()) -> Iterator[str]:
    """``vllm serve`` of ``folder`` as ``served_name`` in ``dtype``, its output in ``log``; yields
    the base URL (``http://127.0.0.1:PORT/v1``) once ``/v1/models`` lists the model."""
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
           "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND",
                                                        f"0-{len(os.sched_getaffinity(0)) - 1}"),
           "PYTHONPATH": str(REPO_ROOT)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
             "--served-model-name", served_name, "--dtype", dtype, "--host", "127.0.0.1", "--port", str(port),
             "--max-model-len", "4096", "--enforce-eager", "--seed", "0", *extra_args],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_serving(proc, url, served_name, log, start_timeout_s)
        yield url
    finally:
        _stop(proc)


def _wait_until_serving(proc: subprocess.Popen, url: str, served_name: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ServerStartError(f"vllm serve exited with {proc.returncode}: {_tail(log)}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=5) as answer:
                if served_name in answer.read().decode():
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise ServerStartError(f"vllm serve did not answer within {timeout_s:.0f} s: {_tail(log)}")
        time.sleep(2)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
