"""vLLM's log lines go to a file, not among `cube run`'s results on stdout (issue 45)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cube.config import REPO_ROOT

VLLM_PYTHON = Path(os.environ.get("CUBE_VLLM_PYTHON", REPO_ROOT / ".venv-vllm" / "bin" / "python"))

# vLLM's own logger, after cube routed it: info to the file only, a warning to the file and stderr.
LOG_THROUGH_VLLM = """
import sys
from cube.harness.backends.vllm_logs import route_vllm_logs
log = route_vllm_logs()
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging, init_logger
configure_logging(LoggingConfig())  # what vLLM's engine does as it starts: its defaults read the environment
init_logger("vllm.engine.cube_test").info("engine started: INFO LINE")
init_logger("vllm.engine.cube_test").warning("WARNING LINE")
print(log)
"""


def _run(python: Path, code: str, cache: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(CUBE_CACHE=str(cache), PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                          timeout=600)


def test_the_routing_config_sends_the_vllm_logger_to_its_file(tmp_path):
    """The configuration as Python's logging applies it (what vLLM does with the file)."""
    code = ("import json, logging, logging.config, os\n"
            "from cube.harness.backends.vllm_logs import route_vllm_logs\n"
            "log = route_vllm_logs()\n"
            "logging.config.dictConfig(json.load(open(os.environ['VLLM_LOGGING_CONFIG_PATH'])))\n"
            "logging.getLogger('vllm.engine').info('INFO LINE'); logging.getLogger('vllm.engine').warning('WARNING LINE')\n"
            "print(log)\n")
    proc = _run(Path(sys.executable), code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    log = Path(proc.stdout.strip())
    assert log.parent == tmp_path / "logs" and "INFO LINE" not in proc.stdout + proc.stderr
    assert "WARNING LINE" in proc.stderr
    text = log.read_text(encoding="utf-8")
    assert "INFO LINE" in text and "WARNING LINE" in text


def test_a_users_own_vllm_logging_config_is_kept(tmp_path, monkeypatch):
    from cube.harness.backends.vllm_logs import route_vllm_logs

    monkeypatch.setenv("CUBE_CACHE", str(tmp_path))
    monkeypatch.setenv("VLLM_LOGGING_CONFIG_PATH", "/theirs.json")
    assert route_vllm_logs() is None and os.environ["VLLM_LOGGING_CONFIG_PATH"] == "/theirs.json"
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH")
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "0")
    assert route_vllm_logs() is None and "VLLM_LOGGING_CONFIG_PATH" not in os.environ


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"vLLM not installed ({VLLM_PYTHON} missing): `make vllm-env`")
def test_vllms_own_logger_writes_to_the_file_not_stdout(tmp_path):
    proc = _run(VLLM_PYTHON, LOG_THROUGH_VLLM, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = Path(proc.stdout.strip().splitlines()[-1])
    assert "INFO LINE" not in proc.stdout and proc.stdout.strip().splitlines() == [str(log)]
    assert "WARNING LINE" in proc.stderr and "INFO LINE" not in proc.stderr
    text = log.read_text(encoding="utf-8")
    assert "engine started: INFO LINE" in text and "WARNING LINE" in text
