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


# What each engine needs importable beside torch, and how to get it: checked before any item
# loads (``check_backend``), where a missing vLLM was a traceback after the items and the probe.
BACKEND_PACKAGES: dict[str, tuple[str, str]] = {
    "vllm": ("vllm", "vLLM lives in its own environment: build it with `scripts/install_vllm_env.sh` "
                     "(or `make vllm-env`; GPU users: VLLM_SPEC=vllm) and run cube from it, "
                     "`.venv-vllm/bin/python -m cube run ... --backend vllm`; or use --backend hf"),
}


def check_backend(name: str) -> str:
    """``name`` if its engine can be imported here, else one ConfigError line saying how to get it.
    Finds the package without importing it (vLLM's import alone takes seconds)."""
    import importlib.util
    import sys

    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    if name in BACKEND_PACKAGES:
        package, how = BACKEND_PACKAGES[name]
        if importlib.util.find_spec(package) is None:
            raise ConfigError(f"--backend {name}: {package} is not installed in this environment "
                              f"({sys.executable}); {how}")
    return name


def open_backend(name: str, model: str, dtype: str | None = None, device: str | None = None) -> Backend:
    """The backend ``name`` started on ``model``; an unknown name is one line naming the known."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls).from_config(model, dtype=dtype, device=device)


__all__ = ["BACKENDS", "BACKEND_PACKAGES", "Backend", "ContinuationLogprobs", "ForwardCounter", "GenerationResult",
           "ScoreRequest", "check_backend", "open_backend"]
