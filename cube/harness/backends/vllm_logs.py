"""vLLM's own log lines to a file, so that ``cube run --backend vllm``'s stdout holds results only.

vLLM configures its ``vllm`` logger to write to stdout (``VLLM_LOGGING_STREAM``): a run in process
printed about 50 lines of engine start-up among the scores. vLLM reads a logging configuration
file named by ``VLLM_LOGGING_CONFIG_PATH`` when it is first imported, in this process and in its
engine's worker processes (they inherit the environment); this module writes one that sends the
``vllm`` logger to a file under cube's cache, its warnings and errors also to stderr. A user's
own ``VLLM_LOGGING_CONFIG_PATH``, or ``VLLM_CONFIGURE_LOGGING=0``, is left as it is.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from cube.config import cache_dir

CONFIG_ENV = "VLLM_LOGGING_CONFIG_PATH"


def logging_config(log: Path) -> dict:
    """A ``logging.config.dictConfig`` document: the ``vllm`` logger to ``log``; warnings also to stderr."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(levelname)s %(asctime)s %(name)s: %(message)s"}},
        "handlers": {
            "file": {"class": "logging.FileHandler", "filename": str(log), "formatter": "plain", "level": "DEBUG",
                     "encoding": "utf-8"},
            "stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "plain",
                       "level": "WARNING"},
        },
        "loggers": {"vllm": {"handlers": ["file", "stderr"], "level": "INFO", "propagate": False}},
    }


def route_vllm_logs() -> Path | None:
    """Point vLLM's logging at a new file under ``cache_dir()/logs``, before vLLM is imported; the
    file's path, or None where the user configured vLLM's logging already."""
    if os.environ.get(CONFIG_ENV) or os.environ.get("VLLM_CONFIGURE_LOGGING", "1") == "0":
        return None
    folder = cache_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    log = folder / f"vllm-{stamp}.log"
    config = folder / f"vllm-{stamp}.logging.json"
    config.write_text(json.dumps(logging_config(log), indent=1) + "\n", encoding="utf-8")
    os.environ[CONFIG_ENV] = str(config)
    return log
