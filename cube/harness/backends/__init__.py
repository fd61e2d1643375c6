"""Scoring backends: one interface (``base.Backend``), the engines ``cube run`` offers, and the
naive yardsticks (``reference``).

``BACKENDS`` names each engine ``cube run --backend`` can open, as ``module:Class``, imported only
when chosen (in the spirit of lm-eval's lazy model mapping): both need torch, and vLLM its own
venv, which importing this package must not. Each class opens through ``from_config(model,
dtype=, device=)``.
"""

import importlib

from cube.errors import ConfigError
from cube.harness.backends.base import (
    Backend,
    ContinuationLogprobs,
    ForwardCounter,
    GenerationResult,
    ScoreRequest,
)

BACKENDS: dict[str, str] = {
    "hf": "cube.harness.backends.hf:HFBackend",  # transformers, CPU or CUDA
    "vllm": "cube.harness.backends.vllm:VLLMBackend",  # vLLM with automatic prefix caching
    "openai": "cube.harness.backends.served:ServedBackend",  # any OpenAI-compatible /v1/completions server
}


def open_backend(name: str, model: str, dtype: str | None = None, device: str | None = None) -> Backend:
    """The backend ``name`` started on ``model``; an unknown name is one line naming the known."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls).from_config(model, dtype=dtype, device=device)


__all__ = ["BACKENDS", "Backend", "ContinuationLogprobs", "ForwardCounter", "GenerationResult", "ScoreRequest",
           "open_backend"]
