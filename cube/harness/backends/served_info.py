"""What a server says about itself: the precision it runs the model in, and its prefix cache.

Why a module of its own: a served run used to record the local CPU's ``--dtype auto`` choice as
the precision of a model it never loaded (issue 46 §3): "bfloat16 (auto: the CPU has
avx512_bf16 ...)" on every record of a server running ``--dtype float32``, so ``rescore`` marked
decisions "within precision noise" by bf16's bound and ``cube explain`` named a precision factor
that did not exist. A served run's precision is the server's, and only the server (or the user,
for it) can say what it is:

1. what the server says, where it says it: a ``dtype`` in its ``/v1/models`` card (servers that
   add one), vLLM's ``/server_info`` (``model_config.dtype``; only under ``VLLM_SERVER_DEV_MODE=1``:
   vLLM 0.32.0's ``/v1/models`` and ``/metrics`` do not tell the model's dtype, only the KV cache's),
   SGLang's ``/get_server_info`` (``dtype``), a ``/metrics`` series with a ``dtype`` label;
2. else ``--server-dtype`` as the user declares it (recorded as declared, not checked);
3. else, on a resume, the dtype the store's records already carry (a resume keeps its store's);
4. else not recorded (None): noise marks read "-" (not known), ``explain``'s precision factor
   "unknown", never a local guess.

A server that says one precision where the user declared another is refused in one line.

The prefix cache: vLLM's ``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits`` counters
(``/metrics``), read before and after a run, so that the run log says how many prompt tokens the
cache served (the fast path is built to be served by it; the echo path with prompt
log-probabilities is not, vllm#17251).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from cube.errors import ConfigError, CubeError

class ServerError(CubeError):
    """The server failed, or answered in a way that cannot be scored (``cube.harness.backends.served``'s
    docstring); here so that the fast path's module raises it without an import circle."""


# What cube records; a server's spellings of each (torch's, vLLM's and llama.cpp's aliases)
SERVER_DTYPES = ("bfloat16", "float16", "float32")
_ALIASES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
            "f16": "float16", "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32"}
_METRIC_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN|[+-]Inf)\s*$")
_DTYPE_LABEL = re.compile(r'(?:^|[{,])\s*dtype="([^"]+)"')
PREFIX_CACHE_METRICS = {"vllm:prefix_cache_queries": "queries", "vllm:prefix_cache_hits": "hits"}


def normalise_dtype(text: Any) -> str | None:
    """``torch.float32``, ``fp32``, ``float`` ... as cube's name (``float32``); None for anything
    else (``auto`` says nothing about what the server chose)."""
    if not isinstance(text, str):
        return None
    name = text.strip().lower().removeprefix("torch.")
    return _ALIASES.get(name)


def check_server_dtype(value: str | None) -> str | None:
    """``--server-dtype`` as cube records it, or one line naming the bad value."""
    if value is None:
        return None
    name = normalise_dtype(value)
    if name is None:
        raise ConfigError(f"--server-dtype {value!r}: declare one of {', '.join(SERVER_DTYPES)} (what the server "
                          "runs the model in, e.g. vllm serve --dtype float32)")
    return name


@dataclass(frozen=True)
class ServerDtype:
    """The precision a server says it runs in, and where it said so."""

    dtype: str
    source: str  # e.g. "/server_info model_config.dtype 'torch.float32'"


@dataclass(frozen=True)
class ServedPrecision:
    """A served run's recorded precision (None: not recorded) and why (the run log's ``dtype_reason``)."""

    dtype: str | None
    reason: str


def _model_card_dtype(text: str, model: str) -> ServerDtype | None:
    try:
        answer = json.loads(text)
    except ValueError:
        return None
    cards = answer.get("data") if isinstance(answer, dict) else None
    for card in cards if isinstance(cards, list) else []:
        if isinstance(card, dict) and card.get("id") == model:
            for key in ("dtype", "torch_dtype"):
                name = normalise_dtype(card.get(key))
                if name is not None:
                    return ServerDtype(name, f"/v1/models {key} {card[key]!r}")
    return None


def _server_info_dtype(text: str) -> ServerDtype | None:
    """vLLM's ``/server_info?config_format=json`` (``vllm_config.model_config.dtype``) or SGLang's
    ``/get_server_info`` (``dtype`` at the top)."""
    try:
        answer = json.loads(text)
    except ValueError:
        return None
    if not isinstance(answer, dict):
        return None
    config = answer.get("vllm_config")
    model_config = config.get("model_config") if isinstance(config, dict) else None
    if isinstance(model_config, dict) and normalise_dtype(model_config.get("dtype")):
        return ServerDtype(normalise_dtype(model_config["dtype"]),
                           f"/server_info model_config.dtype {model_config['dtype']!r}")
    if normalise_dtype(answer.get("dtype")):
        return ServerDtype(normalise_dtype(answer["dtype"]), f"/get_server_info dtype {answer['dtype']!r}")
    return None


def _metrics_dtype(text: str) -> ServerDtype | None:
    """A ``/metrics`` series labelled ``dtype="..."`` (not ``cache_dtype``: the KV cache's)."""
    for line in text.splitlines():
        match = _METRIC_LINE.match(line)
        label = _DTYPE_LABEL.search(match[2] or "") if match else None
        if label and normalise_dtype(label[1]):
            return ServerDtype(normalise_dtype(label[1]), f"/metrics {match[1]} dtype={label[1]!r}")
    return None


def server_dtype(client) -> ServerDtype | None:
    """What the server behind ``client`` (a ``ServerClient``) says its precision is, or None
    where none of the places of the module docstring says (each asked once, never retried)."""
    model = client.settings.model
    readers = (("/v1/models", lambda text: _model_card_dtype(text, model)),
               ("/server_info?config_format=json", _server_info_dtype),
               ("/get_server_info", _server_info_dtype),
               ("/metrics", _metrics_dtype))
    for path, read in readers:
        text = client.get_text(path)
        found = read(text) if text else None
        if found is not None:
            return found
    return None


def served_precision(told: ServerDtype | None, declared: str | None, recorded: str | None,
                     model: str) -> ServedPrecision:
    """The precision a served run records (module docstring, in order); a server that says one
    precision where ``--server-dtype`` declares another is refused."""
    declared = check_server_dtype(declared)
    if told is not None:
        if declared is not None and declared != told.dtype:
            raise ConfigError(f"--server-dtype {declared}, but the server serving {model} says {told.dtype} "
                              f"({told.source}): drop --server-dtype or serve the model in {declared}")
        return ServedPrecision(told.dtype, f"the server says so ({told.source})")
    if declared is not None:
        return ServedPrecision(declared, "--server-dtype, as declared (the server does not say; not checked)")
    if recorded is not None:
        return ServedPrecision(recorded, f"resuming a store whose records are {recorded} (the server does not say)")
    return ServedPrecision(None, "not recorded: the server does not say its precision; declare it with "
                                 "--server-dtype")


def prefix_cache_counters(client) -> dict[str, float] | None:
    """vLLM's prefix-cache totals (``queries``, ``hits``: prompt tokens looked up and found), summed
    over its engines; None where ``/metrics`` is not there or does not count them."""
    text = client.get_text("/metrics")
    if not text:
        return None
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = _METRIC_LINE.match(line)
        if not match:
            continue
        name = match[1].removesuffix("_total")
        if name in PREFIX_CACHE_METRICS:
            key = PREFIX_CACHE_METRICS[name]
            totals[key] = totals.get(key, 0.0) + float(match[3])
    return totals if set(totals) == set(PREFIX_CACHE_METRICS.values()) else None


__all__ = ["PREFIX_CACHE_METRICS", "SERVER_DTYPES", "ServedPrecision", "ServerDtype", "ServerError", "check_server_dtype",
           "normalise_dtype", "prefix_cache_counters", "served_precision", "server_dtype"]
