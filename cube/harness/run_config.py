"""One run's configuration, typed, with each default stated once (``RunConfig``).

``cube run``'s settings used to live in eight places (argparse, the logged command's option list,
an untyped ``extra`` dict, the spec, the recorded settings, the cell configurations, the run-log
dict, and provenance's re-parse of a logged command), with shard size 50 written three times;
resume safety depended on all of them agreeing. Here they are one frozen ``RunConfig``: argparse
reads its defaults from it (``from_cli``), a benchmark or a notebook builds one without argparse,
the run log records it (``to_log``) and a logged run reads back as one (``from_log``, older lines
through their command), and the runner's ``RunSpec`` takes its defaults from it.
``cube.harness.build.build_spec`` turns it into the ``RunSpec`` the runner executes.

What a resume compares is ``cube.harness.run_spec.cell_configs`` of the spec (one dict per cell, in
the store's manifest), and ``RunSpec.config_hash`` is its digest: the one identity of a run.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from cube.errors import ConfigError

# The options a logged command spells out, in the order it spells them: all but ``data`` and
# ``device``, which name this machine (``device`` is still logged, in the cell configurations).
COMMAND_FIELDS = ("model", "benchmark", "card", "split", "sample", "within", "seed", "subjects", "label_sets", "scorers",
                  "shots", "contexts", "orders", "chat_templates", "thinking", "backend", "dtype", "batch_size", "shard_size", "shard",
                  "max_new_tokens", "out")
LIST_FIELDS = ("subjects", "label_sets", "scorers", "shots", "contexts", "orders", "chat_templates", "thinking")
# Spelt out in a logged command only where they are not the default, so that a run without them
# logs the command it logged before they existed.
COMMAND_IF_SET = ("chat_templates", "thinking")
POSITIVE_FIELDS = ("sample", "within", "max_new_tokens", "batch_size", "shard_size", "concurrency")
# The options of a model behind a server (``--backend openai``, cube.harness.backends.served); the
# API key is read from the environment variable ``api_key_env`` names, never given as an option.
SERVER_FIELDS = ("base_url", "revision", "tokenizer", "api_key_env", "concurrency", "request_timeout", "server_dtype")


def flag(name: str) -> str:
    """The command-line option of a field (``contexts`` is spelt ``--cues``, ``chat_templates``
    ``--chat-template``)."""
    return {"contexts": "--cues", "chat_templates": "--chat-template"}.get(name) or "--" + name.replace("_", "-")


@dataclass(frozen=True)
class RunConfig:
    """What ``cube run`` is asked to do; every field has the CLI option of its name (``flag``)."""

    model: str
    benchmark: str = "cmmlu"
    split: str = "test"
    sample: int | None = None
    within: int | None = None
    seed: int = 0
    subjects: tuple[str, ...] | None = None
    # None: the benchmark's own (``cube.protocol.label_sets.default_label_sets``): L1_halfwidth, or
    # A10_halfwidth where some item has more than 4 options; resolved by ``build_spec``, which says so
    label_sets: tuple[str, ...] | None = None
    scorers: tuple[str, ...] = ("M1-seq", "M1-strict")
    shots: tuple[int, ...] = (0,)
    # None: the benchmark's own (``Benchmark.contexts``): zh_cue for CMMLU and C-Eval, en_label_space
    # for a file in the English format, a card's own contexts; resolved by ``build_spec``
    contexts: tuple[str, ...] | None = None
    orders: tuple[str, ...] = ("original",)
    chat_templates: tuple[str, ...] = ("none",)  # cube.protocol.chat: none (plain text) and/or model
    # cube.protocol.chat.THINKING_MODES: each `model` cell rendered with enable_thinking off and/or on;
    # None: the template's default (a cell axis only where given)
    thinking: tuple[str, ...] | None = None
    backend: str = "hf"
    dtype: str = "auto"
    batch_size: int = 16
    shard_size: int = 50
    shard: tuple[int, int] = (0, 1)  # (K, N): run only chunks with index % N == K
    max_new_tokens: int | None = None
    out: Path | None = None
    data: Path | None = None  # the benchmark folder; None: the lookup of ``cube data list``
    device: str = "cpu"
    strict_audit: bool = False  # a first-token scorer on a DEGEN cell is an error, not a warning
    trust_remote_code: bool = False  # only for an hf:ORG/NAME@<commit> model (cube.harness.model_spec)
    card: Path | None = None  # a user's benchmark file's card (README: Your benchmark); None: the one beside it
    base_url: str | None = None  # --backend openai: the server's OpenAI-compatible URL
    revision: str | None = None  # --backend openai: the revision the user declares the served weights are
    tokenizer: str | None = None  # --backend openai: a SPEC whose tokenizer the server's tokens must match
    api_key_env: str | None = None  # --backend openai: the variable holding the API key (None: OPENAI_API_KEY)
    concurrency: int | None = None  # --backend openai: requests in flight (None: 4)
    request_timeout: float | None = None  # --backend openai: seconds per request (None: 120)
    # --backend openai: the precision the user declares the server runs in, where the server does not
    # say (cube.harness.backends.served_info); None: the server's word, else not recorded
    server_dtype: str | None = None
    key_over_http: bool = False  # --backend openai: the API key may go over plain HTTP to another machine

    def __post_init__(self) -> None:
        from cube.protocol.scorers import run_scorers  # the scorer table itself: no pyarrow for a config

        for name in LIST_FIELDS:  # lists arrive as lists from JSON and argparse: stored as tuples
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "shard", tuple(self.shard))
        for name in ("out", "data", "card"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value))
        for name in POSITIVE_FIELDS:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{flag(name)} {value} must be at least 1")
        from cube.protocol.chat import check_chat_templates

        check_chat_templates(self.chat_templates)
        known = run_scorers()
        unknown = [s for s in self.scorers if s not in known]
        if unknown:
            raise ConfigError(f"unknown scorer {unknown[0]!r}; known: {', '.join(known)}")
        if self.thinking is not None:
            from cube.protocol.chat import check_thinking
            from cube.protocol.scorers import SCORERS

            check_thinking(self.thinking, self.chat_templates)
            scored = [s for s in self.scorers if SCORERS[s].reads != "generation"]
            if "on" in self.thinking and scored:
                raise ConfigError(f"--thinking on with scorer {scored[0]}: a log-likelihood scorer would score the "
                                  "label mid-thought, in the turn the template opened for thinking; score it with "
                                  "--thinking off (after the template's empty thinking block), or generate (M6, M6-cot)")
        k, n = self.shard
        if not (n >= 1 and 0 <= k < n):
            raise ConfigError(f"--shard {k}/{n}: need 0 <= K < N")
        if self.within is not None and (self.sample is None or self.sample > self.within):
            raise ConfigError(f"--within {self.within} needs a --sample of at most {self.within}")
        if self.request_timeout is not None:
            object.__setattr__(self, "request_timeout", float(self.request_timeout))
            if self.request_timeout <= 0:
                raise ConfigError(f"--request-timeout {self.request_timeout:g} must be more than 0 seconds")
        if self.backend == "openai" and self.base_url is None:
            raise ConfigError("--backend openai needs --base-url URL of an OpenAI-compatible server "
                              "(e.g. http://127.0.0.1:8000/v1) and the model id it serves as --model")
        if self.backend == "openai" and self.dtype != "auto":
            raise ConfigError(f"--dtype {self.dtype} is the precision cube loads a model in; a server runs its own: "
                              f"declare it with --server-dtype {self.dtype} (or let the server say)")
        if self.server_dtype is not None:
            from cube.harness.backends.served_info import check_server_dtype

            object.__setattr__(self, "server_dtype", check_server_dtype(self.server_dtype))
        given = [name for name in SERVER_FIELDS if getattr(self, name) is not None]
        if self.key_over_http and self.backend != "openai":
            given = given or ["key_over_http"]
        if self.backend != "openai" and given:
            raise ConfigError(f"{flag(given[0])} is an option of --backend openai (a model behind a server), "
                              f"not of --backend {self.backend}")

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of field ``name``: what argparse offers, stated here only."""
        field = next(f for f in fields(cls) if f.name == name)
        if field.default is MISSING:
            raise ConfigError(f"run configuration field {name!r} has no default")
        return field.default

    @classmethod
    def from_cli(cls, namespace: argparse.Namespace) -> RunConfig:
        """The configuration of a parsed ``cube run`` command line (``--shard`` still ``K/N`` text)."""
        values = {f.name: getattr(namespace, f.name) for f in fields(cls) if hasattr(namespace, f.name)}
        if isinstance(values.get("shard"), str):
            values["shard"] = parse_shard(values["shard"])
        return cls(**values)

    @classmethod
    def from_command(cls, command: str) -> RunConfig:
        """The configuration of a logged ``cube run`` command (``command_line``'s own form)."""
        parts = shlex.split(command)
        if parts[:2] != ["cube", "run"] or len(parts) % 2:
            raise ConfigError(f"not a logged `cube run` command: {command!r}")
        by_flag = {flag(f.name): f.name for f in fields(cls)} | {"--contexts": "contexts"}
        values: dict[str, Any] = {}
        for option, text in zip(parts[2::2], parts[3::2]):
            name = by_flag.get(option)
            if name is None:
                raise ConfigError(f"unknown option {option!r} in the logged command {command!r}")
            values[name] = _from_text(name, text)
        if "model" not in values:
            raise ConfigError(f"the logged command {command!r} names no --model")
        return cls(**values)

    @classmethod
    def from_log(cls, entry: Mapping[str, Any]) -> RunConfig:
        """The configuration a run log line records: its ``config``, else its (rebuilt) command."""
        if isinstance(entry.get("config"), Mapping):
            return cls(**entry["config"])
        from cube.records.provenance import run_command

        return cls.from_command(run_command(entry))

    def to_log(self) -> dict[str, Any]:
        """The configuration as the run log records it (JSON values; no ``data``, a local path)."""
        logged = asdict(self)
        del logged["data"]
        for name, value in logged.items():
            if isinstance(value, tuple):
                logged[name] = list(value)
            elif isinstance(value, Path):
                logged[name] = str(value)
        return logged

    def command_line(self) -> str:
        """The run as one explicit command (every option spelled out), for the run log and provenance."""
        parts = ["cube", "run"]
        for name in COMMAND_FIELDS + SERVER_FIELDS:  # a server's options only where given (None otherwise)
            value = getattr(self, name)
            if name in COMMAND_IF_SET and value == self.default(name):
                continue
            if value is not None:
                parts += [flag(name), _as_text(name, value)]
        return shlex.join(parts)


# The settings every cell configuration records (``cube.harness.run_spec.cell_configs``), in order.
RECORDED_SETTINGS = ("model_sha256", "dtype", "backend", "device", "benchmark", "split", "subjects",
                     "sample", "within", "seed", "model_files", "benchmark_sha256")


@dataclass(frozen=True)
class RunSettings:
    """What a run records beside its items and cells: one typed record from the command line
    (``cube.harness.build.build_spec`` fills it from a ``RunConfig``) to the cell configurations
    (``recorded``) and the run log (``to_log``, flat: the keys older run logs had, plus the new).

    It replaces ``RunSpec.extra``, a dict read by key in three places where a misspelt key read as
    None. Each field defaults to None, what a missing key of that dict read as, so a spec built
    without a configuration (tests, tools) records what it did before. A new setting is one field
    here (and one name in ``RECORDED_SETTINGS`` if it decides records).
    """

    benchmark: str | None = None
    split: str | None = None
    sample: int | None = None
    within: int | None = None
    seed: int | None = None
    subjects: tuple[str, ...] | None = None
    model_sha256: str | None = None  # the model's identity (cube.harness.model_spec.ModelIdentity.digest)
    model_files: tuple[tuple[str, str], ...] | None = None  # each file the load reads -> sha256 (None: demo)
    model_source: str | None = None  # "folder /path", "hub hf:ORG/NAME@REV", "gguf f.gguf", "demo NAME"
    chat_template: Any = None  # cube.protocol.chat.ChatTemplate, read where a cell asks for it (chat cells record it)
    # cube.protocol.thinking.ThinkingMarkers: where a generation's thinking block ends (None: the default pair,
    # no token ids); a generation cell records a pair other than the default
    thinking_markers: Any = None
    device: str | None = None
    dtype: str | None = None
    dtype_reason: str | None = None
    backend: str | None = None
    config: RunConfig | None = None
    audit: tuple[Any, ...] = ()  # cube.tokenizers.audit.RunCellAudit, made before the weights load
    # A user's benchmark file (and card): its sha256, so that a resume on a changed file is refused
    # (the items' uid + question hash would not show a changed option or answer). None: a registered one.
    benchmark_sha256: str | None = None
    # --backend openai: where the model is served and what it says it is (the identity in
    # model_sha256 digests all three; nothing hashes the weights); None for a model loaded here
    server_url: str | None = None
    served_model_id: str | None = None
    served_revision: str | None = None
    audit_checked_against: str | None = None  # the local tokenizer the server's tokens were held to
    # What the run chose because the command did not say (an English file's prompt, the ten-label
    # sets): printed by ``cube run``; the choices themselves are in ``config`` and the cells
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("subjects", "model_files"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(tuple(v) if isinstance(v, list) else v for v in value)
                                   if name == "model_files" else tuple(value))

    def recorded(self) -> dict[str, Any]:
        """The settings a cell configuration records, as JSON values (the manifest compares them).

        ``model_files`` only where there are some: a demo model's cells (identity: the pinned GGUF
        sha256) record what they recorded before it existed, so their configuration hash stays.
        ``benchmark_sha256`` likewise only for a user's file: CMMLU's cells keep their hash."""
        out = {}
        for name in RECORDED_SETTINGS:
            value = getattr(self, name)
            if name in ("model_files", "benchmark_sha256"):
                if value is None:
                    continue
                value = dict(value) if name == "model_files" else value
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out

    def to_log(self) -> dict[str, Any]:
        """The run log's settings (flat, as older lines had them), with the audit made before the run."""
        logged = self.recorded()
        logged.update(model_source=self.model_source, dtype_reason=self.dtype_reason,
                      command=self.config.command_line() if self.config is not None else None,
                      config=self.config.to_log() if self.config is not None else None)
        if self.audit:
            logged["audit"] = [cell.to_log() for cell in self.audit]
        if self.chat_template is not None:
            logged["chat_template"] = self.chat_template.to_log()
        if self.thinking_markers is not None:
            logged["thinking_markers"] = self.thinking_markers.to_log()
        for name in ("server_url", "served_model_id", "served_revision", "audit_checked_against"):
            if getattr(self, name) is not None:  # a model loaded here logs what it logged before
                logged[name] = getattr(self, name)
        return logged

    @classmethod
    def from_log(cls, entry: Mapping[str, Any]) -> RunSettings:
        """The settings of a run log line, older lines migrated on read: a line without
        ``model_files``, ``model_source`` or ``audit`` (before issue 37) reads them as None/empty,
        and a line without ``config`` gets the one its command says (``RunConfig.from_log``). The
        audit stays in its logged (JSON) form."""
        names = {f.name for f in fields(cls)} - {"config", "audit", "chat_template", "notes", "thinking_markers"}
        values = {n: entry.get(n) for n in names}
        if isinstance(values["model_files"], Mapping):
            values["model_files"] = tuple(sorted(values["model_files"].items()))
        config = None
        if entry.get("config") is not None or entry.get("command") or entry.get("cells"):
            config = RunConfig.from_log(entry)
        return cls(**values, config=config, audit=tuple(entry.get("audit") or ()))


def parse_shard(value: str) -> tuple[int, int]:
    """``K/N`` as (K, N); checked for 0 <= K < N by ``RunConfig``."""
    try:
        k, n = (int(x) for x in str(value).split("/"))
    except ValueError:
        raise ConfigError(f"--shard {value!r} must look like K/N, e.g. 0/4") from None
    return k, n


def _as_text(name: str, value: Any) -> str:
    if name == "shard":
        return f"{value[0]}/{value[1]}"
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def _from_text(name: str, text: str) -> Any:
    if name == "shard":
        return parse_shard(text)
    if name in LIST_FIELDS:
        entries = text.split(",")
        return tuple(int(e) for e in entries) if name == "shots" else tuple(entries)
    if name == "request_timeout":
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{flag(name)} {text!r} is not a number of seconds") from None
    if name in POSITIVE_FIELDS or name == "seed":
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{flag(name)} {text!r} is not an integer") from None
    return text


__all__ = ["COMMAND_FIELDS", "COMMAND_IF_SET", "LIST_FIELDS", "POSITIVE_FIELDS", "RECORDED_SETTINGS", "SERVER_FIELDS",
           "RunConfig", "RunSettings", "flag",
           "parse_shard"]
