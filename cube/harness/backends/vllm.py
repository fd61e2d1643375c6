"""The vLLM backend: the engine users need for 7B-70B checkpoints on GPUs (it also runs on CPU).

cube, not vLLM, decides which tokens are scored. Every continuation is tokenized by the shared
in-context rule (``cube.harness.backends.base.plan_request``) and sent as token ids
(``TokensPrompt``), so a boundary merge or a multi-token label means exactly what it means for
the transformers backend and the naive reference. vLLM's ``prompt_logprobs`` then gives the
log-probability of each actual prompt token; we keep the continuation's. Text never crosses the
boundary in either direction (``detokenize=False``; we decode generations with our tokenizer).

Prefix caching (``enable_prefix_caching`` in config/serving.yaml, on by default): the shared
context of an item's cells is computed once and read from vLLM's block cache (whole blocks of
``block_size`` tokens, 32 in serving.yaml) by every later sequence that starts with it. vLLM
skips the cache for ``prompt_logprobs`` requests unless told otherwise, because it leaves the
log-probabilities of cached positions unwritten (``torch.empty``: whatever memory held). cube
tells it otherwise and keeps only what is valid: a sequence whose scored tokens start after its
``num_cached_tokens`` is read as is; one whose scored tokens reach into its cached blocks is sent
again with the cache off. vLLM reports ``num_cached_tokens`` for a request's first prefill only,
so if any request was preempted (``vllm:num_preemptions``, which needs ``disable_log_stats:
false``) the whole call is scored again with the cache off. Identical sequences are sent once.

Greedy generation is ``temperature=0`` with our end-of-sequence ids as stop tokens (and vLLM's
own EOS rule off), so it stops exactly where the reference's argmax loop stops.

Serving settings (dtype, context length, memory, parallelism, CPU KV cache) come from
``config/serving.yaml``. On CPU, vLLM starts its engine in a spawned process: a script that
builds this backend must do so under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cube.config import config_dir, load_yaml
from cube.errors import ConfigError, CubeError
from cube.harness.backends.base import (
    Backend,
    ContinuationLogprobs,
    ForwardCounter,
    GenerationResult,
    finish_reason,
    ScoreRequest,
    count_plans,
    plan_request,
)
from cube.protocol.tokenization import Encoder, encode_ids

SERVING_FILE = "serving.yaml"
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float32": "float32", "fp32": "float32",
          "float16": "float16", "fp16": "float16"}
ALL_CORES = "all"


@dataclass(frozen=True)
class ServingSettings:
    llm: dict[str, Any]  # keyword arguments of vllm.LLM
    env: dict[str, str]  # engine environment; variables already set win


# ---- config/serving.yaml ----------------------------------------------------------------------

SERVING_KEYS = ("llm", "env")


def _entry(value: Any, where: str) -> dict:
    """A ``defaults`` or model entry: a mapping of ``llm`` and ``env`` only (a misspelt key would
    otherwise be read as no settings at all)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping with {' and/or '.join(SERVING_KEYS)}, got {value!r}")
    unknown = sorted(str(k) for k in set(value) - set(SERVING_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (expected {', '.join(SERVING_KEYS)})")
    return value


def _model_entry(models: dict, name: str, path: Path) -> dict:
    """The served model's entry; a near spelling of its name under ``models`` is an error, not
    silently the defaults (a local checkpoint's folder name may be any name, so only a near one
    is taken for a misspelling)."""
    import difflib

    if name in models:
        return _entry(models[name], f"{path}: model {name!r}")
    near = difflib.get_close_matches(name, [str(k) for k in models], n=1, cutoff=0.85)
    if near:
        raise ConfigError(f"{path}: no entry for model {name!r} but one for {near[0]!r}; "
                          "fix the spelling (or rename the entry) so that its settings apply")
    return {}


def _section(entry: Any, key: str, where: str) -> dict:
    value = entry.get(key) if isinstance(entry, dict) else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: `{key}` must be a mapping, got {value!r}")
    return dict(value)


def serving_settings(model: str, dtype: str | None = None, path: str | Path | None = None) -> ServingSettings:
    """The defaults of ``config/serving.yaml`` overridden by the model's entry, then by ``dtype``.

    ``model`` is a demo model name or a checkpoint folder; a folder is looked up by its name.
    """
    path = Path(path) if path is not None else config_dir() / SERVING_FILE
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with `defaults` and `models`")
    unknown = sorted(set(data) - {"defaults", "models"})
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key {unknown[0]!r} (expected defaults, models)")
    models = data.get("models") or {}
    if not isinstance(models, dict):
        raise ConfigError(f"{path}: `models` must be a mapping of model name to settings")
    name = Path(model).name if Path(model).is_dir() else model
    for key, value in models.items():
        _entry(value, f"{path}: model {key!r}")
    entry = _model_entry(models, name, path)
    _entry(data.get("defaults"), f"{path}: defaults")
    llm = {**_section(data.get("defaults"), "llm", f"{path}: defaults"),
           **_section(entry, "llm", f"{path}: model {name!r}")}
    env = {**_section(data.get("defaults"), "env", f"{path}: defaults"),
           **_section(entry, "env", f"{path}: model {name!r}")}
    if dtype is not None:
        llm["dtype"] = dtype
    if "dtype" in llm:
        if str(llm["dtype"]) not in DTYPES:
            raise ConfigError(f"{path}: dtype {llm['dtype']!r} for {name!r}; use one of {', '.join(DTYPES)}")
        llm["dtype"] = DTYPES[str(llm["dtype"])]
    for key, value in env.items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{path}: env.{key} must be a string or number, got {value!r}")
    check_prefix_caching(llm, f"{path}: model {name!r}")
    return ServingSettings(llm, {str(k): str(v) for k, v in env.items()})


def check_prefix_caching(llm_args: dict[str, Any], where: str) -> None:
    """Prefix caching (vLLM's default when the key is absent) is only safe with preemptions visible.

    Scoring reads ``num_cached_tokens``, which vLLM reports for a request's first prefill only;
    the preemption count that says when it is stale comes from the stats ``disable_log_stats``
    turns off (and ``vllm.LLM`` turns off unless told).
    """
    if llm_args.get("enable_prefix_caching", True) and llm_args.get("disable_log_stats", True) is not False:
        raise ConfigError(
            f"{where}: enable_prefix_caching needs disable_log_stats: false (cube reads "
            "vllm:num_preemptions to know which cached log-probabilities are valid)"
        )


def cpu_ranges(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``: the form VLLM_CPU_OMP_THREADS_BIND takes."""
    cpus = sorted(set(cpus))
    if not cpus:
        raise CubeError("no CPU available to bind vLLM's threads to")
    runs = [[cpus[0], cpus[0]]]
    for cpu in cpus[1:]:
        if cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def engine_environment(settings: ServingSettings, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables to set before the engine starts: configured ones the environment lacks."""
    environ = os.environ if environ is None else environ
    out = {}
    for key, value in settings.env.items():
        if key in environ:
            continue
        if key == "VLLM_CPU_OMP_THREADS_BIND" and value == ALL_CORES:
            value = cpu_ranges(sorted(os.sched_getaffinity(0)))
        out[key] = value
    return out


def check_engine_args(llm_args: dict[str, Any]) -> None:
    """Refuse a setting vLLM does not know, by name, before a slow engine start fails on it."""
    from vllm import EngineArgs

    known = {f.name for f in dataclasses.fields(EngineArgs)}
    unknown = sorted(set(llm_args) - known)
    if unknown:
        raise ConfigError(f"{SERVING_FILE}: llm.{unknown[0]} is not a vLLM engine argument")


class _WarningsOnly(logging.Filter):
    """Passes a record of WARNING or above; vLLM's periodic stats line is INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def quiet_periodic_stats() -> None:
    """Keep vLLM's stats (``vllm:num_preemptions`` for :meth:`VLLMBackend._preemptions`), drop
    their periodic log line (``Avg prompt throughput: ...`` every few seconds) from the terminal.

    ``disable_log_stats: false`` turns on two stat loggers: Prometheus metrics, which
    ``LLM.get_metrics`` reads, and a logging one that prints a line every
    ``VLLM_LOG_STATS_INTERVAL`` seconds. The logging one's records are dropped by a filter on its
    module's logger; vLLM's other loggers, and that one's warnings, print as before. A filter, not
    a level: vLLM re-applies its logging config while the engine starts, which resets the levels
    of its loggers (``logging.config.dictConfig``) but keeps their filters.
    """
    try:
        from vllm.v1.metrics.loggers import LoggingStatLogger
    except ImportError:  # a layout without it: nothing of ours to quiet
        return
    log = logging.getLogger(LoggingStatLogger.__module__)
    if not any(isinstance(f, _WarningsOnly) for f in log.filters):
        log.addFilter(_WarningsOnly())


def folder_eos_ids(folder: Path) -> frozenset[int]:
    """End-of-sequence ids of a checkpoint folder: generation_config.json, else config.json."""
    ids: set[int] = set()
    for fname in ("generation_config.json", "config.json"):
        path = folder / fname
        if not path.exists():
            continue
        value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
        if value is not None:
            ids.update([value] if isinstance(value, int) else value)
    return frozenset(ids)


def model_folder(model) -> Path:
    """The folder vLLM loads for ``--model SPEC`` (``cube.harness.model_spec``): a local or hub
    folder as it is, a demo model's or a GGUF's converted store folder (converted on first use).

    A GGUF is served from cube's bf16 conversion, the folder the HF backend loads too: vLLM's own
    GGUF loader reads the tokenizer its own way and supports fewer architectures, and both backends
    must score the same token ids."""
    from cube.harness.model_spec import parse_model

    return (parse_model(model) if isinstance(model, (str, Path)) else model).folder()


# ---- picking log-probabilities out of vLLM's answer --------------------------------------------

def picked_logprobs(prompt_logprobs: Sequence[Any], token_ids: Sequence[int], start: int) -> np.ndarray:
    """log p(token_ids[k] | token_ids[:k]) for k >= start, from vLLM's per-position dicts.

    Position k of ``prompt_logprobs`` maps token ids to ``Logprob`` objects (position 0 is None:
    nothing precedes it). With ``prompt_logprobs=0`` each holds the actual token only; with top-k
    it holds more, so the actual token is picked by id, never by position in the dict.
    """
    if len(prompt_logprobs) != len(token_ids):
        raise CubeError(f"vLLM returned {len(prompt_logprobs)} prompt log-probabilities for {len(token_ids)} tokens")
    out = np.empty(len(token_ids) - start, dtype=np.float64)
    for k in range(start, len(token_ids)):
        entry = prompt_logprobs[k]
        if entry is None or token_ids[k] not in entry:
            raise CubeError(f"vLLM returned no log-probability for token {token_ids[k]} at position {k}")
        out[k - start] = float(entry[token_ids[k]].logprob)
    return out


# ---- the backend -------------------------------------------------------------------------------

class VLLMBackend(Backend):
    """Scores and generates through a ``vllm.LLM``, sending and receiving token ids only.

    ``batch_size`` is accepted for the interface and ignored: vLLM schedules its own batches
    (``max_num_seqs``, ``max_num_batched_tokens`` in config/serving.yaml).
    """

    def __init__(
        self, llm, tokenizer: Encoder, eos_ids: frozenset[int], add_special_tokens: bool = True,
        progress: bool = True,
    ):
        self.llm = llm
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(eos_ids)
        self.add_special_tokens = add_special_tokens
        self.progress = progress
        self.max_model_len = int(llm.llm_engine.model_config.max_model_len)
        self.counter = ForwardCounter()

    @classmethod
    def from_config(
        cls, model: str | Path, dtype: str | None = None, settings_path: str | Path | None = None,
        progress: bool = True, device: str | None = None, **llm_overrides: Any,
    ) -> VLLMBackend:
        """Start vLLM on ``--model SPEC`` (a string or a parsed ``ModelSpec``), with config/serving.yaml.

        ``device`` is accepted so that every backend opens alike (``open_backend``); vLLM's own
        build decides where it runs (its CPU or its CUDA wheel).

        Every spec is scored with its ``ModelSpec.tokenizer``, exactly as the transformers backend
        scores it (a demo model's: ``model_tokenizer``, which its converted folder carries; a
        folder's: its own), so both backends score the same token ids.
        """
        import sys

        from cube.harness.backends.vllm_logs import route_vllm_logs

        log = route_vllm_logs()  # before vLLM's import, which reads where its logger writes
        if log is not None:
            print(f"vLLM's own log lines: {log}", file=sys.stderr)
        from vllm import LLM

        from cube.harness.model_spec import check_fits, parameter_count, parse_model

        spec = parse_model(str(model)) if isinstance(model, (str, Path)) else model
        folder = spec.folder()
        settings = serving_settings(spec.name, dtype, settings_path)  # a folder by its name, as before
        llm_args = {**settings.llm, **llm_overrides}
        if llm_overrides:  # serving_settings checked the file's own settings
            check_prefix_caching(llm_args, f"{SERVING_FILE} with overrides {sorted(llm_overrides)}")
        check_engine_args(llm_args)
        os.environ.update(engine_environment(settings))
        if device is not None and device.startswith("cuda"):
            check_fits(spec.name, parameter_count(folder), settings.llm.get("dtype", "bfloat16"), device)
        tokenizer = spec.tokenizer()  # the one the run's audit read, as for the HF backend
        eos = folder_eos_ids(folder)
        if not eos:
            raise ConfigError(f"{folder}: no eos_token_id in generation_config.json or config.json")
        quiet_periodic_stats()
        return cls(LLM(model=str(folder), trust_remote_code=spec.trust_remote_code, **llm_args), tokenizer, eos,
                   progress=progress)

    def _check_length(self, ids: Sequence[int], extra: int, what: str) -> None:
        if len(ids) + extra > self.max_model_len:
            raise CubeError(
                f"{what} of {len(ids)} tokens (+{extra}) exceeds max_model_len {self.max_model_len}; "
                f"raise it in config/{SERVING_FILE}"
            )

    @property
    def prefix_caching(self) -> bool:
        return bool(self.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching)

    def _preemptions(self) -> float:
        """vLLM's running count of preempted requests, summed over engines (the guard on ``num_cached_tokens``)."""
        counts = [float(m.value) for m in self.llm.get_metrics() if m.name == "vllm:num_preemptions"]
        if not counts:
            raise CubeError("vLLM reported no vllm:num_preemptions: is disable_log_stats false?")
        return sum(counts)

    def _prompt_logprobs(self, sequences: list[tuple[int, ...]], read_cache: bool) -> list[Any]:
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0, detokenize=False,
                                skip_reading_prefix_cache=not read_cache)
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(s)) for s in sequences], params, use_tqdm=self.progress,
        )
        for seq, out in zip(sequences, outputs):
            cached = int(out.num_cached_tokens or 0) if read_cache else 0
            # prompt_logprobs are computed from the first uncached position on (logits at
            # position k score token k + 1), so every token after the cached ones gets a row
            self.counter.forward_tokens += len(seq) - cached
            self.counter.padded_tokens += len(seq) - cached
            self.counter.head_rows += len(seq) - cached
            self.counter.cached_tokens += cached
        return outputs

    def score(self, requests: list[ScoreRequest], batch_size: int = 16) -> list[list[ContinuationLogprobs]]:
        plans = [plan_request(self.tokenizer, r, self.add_special_tokens) for r in requests]
        count_plans(self.counter, plans)
        first_scored: dict[tuple[int, ...], int] = {}  # sequence -> earliest scored position
        for plan in plans:
            for cont in plan.continuations:
                if cont.continuation_ids:
                    if cont.full_ids not in first_scored:
                        self._check_length(cont.full_ids, 1, "scored sequence")
                    first_scored[cont.full_ids] = min(first_scored.get(cont.full_ids, cont.prefix_len), cont.prefix_len)
        sequences = sorted(first_scored)  # neighbours share prefixes: cache hits while blocks are fresh
        answers: dict[tuple[int, ...], Any] = {}
        if sequences and self.prefix_caching:
            preempted = self._preemptions()
            outputs = self._prompt_logprobs(sequences, read_cache=True)
            if self._preemptions() == preempted:
                answers = {s: out for s, out in zip(sequences, outputs)
                           if int(out.num_cached_tokens or 0) < first_scored[s]}
        again = [s for s in sequences if s not in answers]
        if again:
            if self.prefix_caching:
                self.counter.rescored_tokens += sum(len(s) for s in again)
            answers.update(zip(again, self._prompt_logprobs(again, read_cache=False)))

        results = []
        for plan in plans:
            per_item = []
            for cont in plan.continuations:
                if cont.continuation_ids:
                    out = answers[cont.full_ids]
                    logprobs = picked_logprobs(out.prompt_logprobs, cont.full_ids, cont.prefix_len)
                else:
                    logprobs = np.zeros(0, dtype=np.float64)
                per_item.append(ContinuationLogprobs(cont.continuation_ids, logprobs, cont.boundary_merge))
            results.append(per_item)
        return results

    def generate(self, prompts: list[str], max_new_tokens: int, batch_size: int = 8) -> list[GenerationResult]:
        from vllm import SamplingParams, TokensPrompt

        encoded = [encode_ids(self.tokenizer, p, self.add_special_tokens) for p in prompts]
        for p, ids in zip(prompts, encoded):
            if not ids:
                raise CubeError(f"generation prompt {p!r} has no tokens (empty and no BOS token)")
            self._check_length(ids, max_new_tokens, "generation prompt")
        if max_new_tokens < 1 or not prompts:
            return [GenerationResult("", (), "length") for _ in prompts]
        params = SamplingParams(
            temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=sorted(self.eos_ids),
            ignore_eos=True,  # stop on OUR eos ids only, exactly like the reference's loop
            detokenize=False,
        )
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(ids)) for ids in encoded], params, use_tqdm=self.progress,
        )
        self.counter.forward_tokens += sum(len(ids) for ids in encoded)
        results = []
        for out in outputs:
            ids = tuple(out.outputs[0].token_ids)
            stopped = bool(ids) and ids[-1] in self.eos_ids
            if stopped:
                ids = ids[:-1]
            self.counter.forward_tokens += max(len(ids) - 1, 0)
            # vLLM's own reason ("stop" on a stop token, "length" at max_tokens), checked against the tokens
            reason = out.outputs[0].finish_reason or ("stop" if stopped else finish_reason(ids, max_new_tokens))
            if reason not in ("stop", "length"):
                reason = "stop" if stopped else finish_reason(ids, max_new_tokens)
            results.append(GenerationResult(self.tokenizer.decode(list(ids)), ids, reason))
        return results


__all__ = [
    "ServingSettings", "VLLMBackend", "check_engine_args", "check_prefix_caching", "cpu_ranges",
    "engine_environment", "folder_eos_ids", "model_folder", "picked_logprobs", "quiet_periodic_stats",
    "serving_settings",
]
