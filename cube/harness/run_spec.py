"""A run's specification and its plan: the shard jobs it writes and what each cell records.

A run is items x protocol cells x scorers (``RunSpec``), cut into jobs of ``shard_size`` items, one
Parquet shard each, with a deterministic name (``plan_jobs``): a re-run with the same arguments
plans the same files, which is what lets it resume. Each cell's configuration (``cell_configs``)
is everything that decides its records, recorded in the store's manifest with its first shard;
a run whose cells disagree with the store's is refused (``cube.harness.resume``).

Why a module of its own: the plan is read by everything that must agree on a run's files without
running it: the runner, the resume checks, ``cube plan``'s decomposition of a run into cluster
jobs (``cube.harness.plan``), the store tests and the run-log migration.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

from cube.errors import ConfigError
from cube.harness.run_config import RunConfig, RunSettings
from cube.protocol.chat import MODEL_CHAT, NO_CHAT, record_context, thinking_of
from cube.protocol.items import Item
from cube.protocol.prompts import Cell
from cube.protocol.scorers import PASSES, pass_scorers
from cube.protocol.thinking import DEFAULT_MARKERS
from cube.records.leakage import LeakageIndex
from cube.records.schema import ALL_SCORERS, cell_shard_file


@dataclass(frozen=True)
class RunSpec:
    model: str
    items: tuple[Item, ...]
    cells: tuple[Cell, ...]
    scorers: tuple[str, ...]
    dev_items: tuple[Item, ...] = ()
    shard_size: int = RunConfig.default("shard_size")  # each default stated once, in RunConfig
    batch_size: int = RunConfig.default("batch_size")
    shard: tuple[int, int] = RunConfig.default("shard")  # (K, N): this process runs chunks with index % N == K
    max_new_tokens: int | None = None
    settings: RunSettings = field(default_factory=RunSettings)  # recorded per cell and logged
    # Every item of the benchmark, indexed, so that a generation quoting ANOTHER item is scrubbed
    # before it is written too (cube.records.leakage); None scrubs against the record's own item only.
    leakage_index: LeakageIndex | None = field(default=None, compare=False, repr=False)
    # The benchmark's templates (``Benchmark.templates``: its prompt format and card); None: the exam
    # format of config/templates.yaml, as every spec had before formats existed.
    templates: dict | None = field(default=None, compare=False, repr=False)

    def prompt_templates(self) -> dict:
        """The templates every prompt of this run is rendered with."""
        if self.templates is not None:
            return self.templates
        from cube.protocol.prompts import templates_for

        return templates_for()

    def __post_init__(self) -> None:
        unknown = [s for s in self.scorers if s not in ALL_SCORERS]
        if unknown:
            raise ConfigError(f"unknown scorer {unknown[0]!r}; known: {', '.join(ALL_SCORERS)}")
        k, n = self.shard
        if not (n >= 1 and 0 <= k < n):
            raise ConfigError(f"--shard {k}/{n}: need 0 <= K < N")
        if self.shard_size < 1:
            raise ConfigError(f"shard size must be at least 1, got {self.shard_size}")

    def config_hash(self) -> str:
        """The run's one identity: a digest of what a resume compares (``cell_configs``).

        Version 3 (``CONFIG_HASH_VERSION``, logged beside it). Version 1, in run-log lines without
        a ``config_hash_version``, digested the model, items, cells, scorers, shard size, generation
        length and templates but not the dtype, backend, device, batch size or model sha256, so a
        run under another dtype carried the same hash; no check reads either version back (the
        resume check compares the manifest's cell configurations), so old lines stay as written.
        Version 3 leaves out the batch size, which changes a record only by floating-point noise:
        a cell recorded with one (version 2) resumes under any (``NOT_BINDING``), no migration needed.
        """
        return _digest({"version": CONFIG_HASH_VERSION, "cells": cell_configs(self)})


CONFIG_HASH_VERSION = 3


def _digest(value: object) -> str:
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# What decides a cell's records besides the cell itself: ``RunSpec.settings.recorded()``
# (``cube.harness.build.build_spec`` fills them in from a ``RunConfig``). STORE_FIELDS are shared by every cell of one model in a store, so
# a new cell may join a store only when they agree, and a resumed cell must agree on all fields.
STORE_FIELDS = ("model", "model_sha256", "dtype", "backend", "device")


@dataclass(frozen=True)
class Job:
    """One shard's worth of work: a kind, the cell it runs under, and a chunk of items."""

    kind: str  # "label" | "cloze" | "gen" | "cot"
    cell: Cell | None
    chunk: int
    items: tuple[Item, ...]
    chat: str = NO_CHAT  # a pass run once per item (cell None): shown plain or in the model's chat template

    @property
    def chat_form(self) -> str:
        """'none' or 'model': the cell's chat template, or the once-per-item pass's own."""
        return self.cell.chat if self.cell is not None else self.chat

    @property
    def cell_name(self) -> str:
        """The shards of one cell share this prefix; the store records its configuration under it.

        A pass run once per item, whatever the cells, is named by its fixed cell's context (marked
        ``@chat`` where it is shown in the chat template)."""
        cell = (self.cell.key.replace("|", "__") if self.cell
                else record_context(PASSES[self.kind].fixed_cell[1], self.chat))
        return f"{self.kind}--{cell}"

    def fixed_cell(self) -> tuple[str, str, int, str]:
        """The cell a once-per-item pass's records carry: its pass's, the context marked in chat."""
        label_set, context, shots, order = PASSES[self.kind].fixed_cell
        return label_set, record_context(context, self.chat), shots, order

    @property
    def filename(self) -> str:
        return cell_shard_file(self.cell_name, self.chunk)


def plan_jobs(spec: RunSpec) -> list[Job]:
    chunks = [spec.items[i:i + spec.shard_size] for i in range(0, len(spec.items), spec.shard_size)]
    mine = [(i, c) for i, c in enumerate(chunks) if i % spec.shard[1] == spec.shard[0]]
    jobs: list[Job] = []
    passes = [p for p in PASSES.values() if pass_scorers(p.kind, spec.scorers)]  # the passes asked for
    for cell in spec.cells:  # the per-cell passes cell by cell, then the others, in PASSES order
        jobs += [Job(p.kind, cell, i, c) for p in passes if p.cells == "each" for i, c in mine]
    chats = list(dict.fromkeys(c.chat for c in spec.cells)) or [NO_CHAT]  # once-per-item passes: once per form
    for p in passes:
        if p.cells == "none":
            jobs += [Job(p.kind, None, i, c, chat) for chat in chats for i, c in mine]
        elif p.cells == "label_set_shots":
            cells = {(c.label_set.name, c.shots, c.chat): c for c in spec.cells}
            jobs += [Job(p.kind, cell, i, c) for cell in cells.values() for i, c in mine]
    return jobs


def chat_template(spec: RunSpec, chat: str):
    """The model's chat template where ``chat`` is a chat form ('model', or with its thinking mode:
    'model+nothink' renders enable_thinking=False), None for a plain prompt; a spec without one is
    refused (``cube.harness.build`` reads it before any model loads)."""
    if chat == NO_CHAT:
        return None
    if spec.settings.chat_template is None:
        raise ConfigError(f"a chat cell of {spec.model} needs the model's chat template (RunSettings.chat_template)")
    return spec.settings.chat_template.with_thinking(thinking_of(chat))


KIND_SCORERS = {kind: pass_scorers(kind) for kind in PASSES}  # the run scorers each pass feeds


def cell_configs(spec: RunSpec) -> dict[str, dict]:
    """``<model>/<cell name>`` -> every setting that decides the records of that cell.

    The items enter as a digest of the ordered (uid, qhash) list (so a different sample, seed,
    subject list or benchmark copy shows), the templates as a digest of all but the other cells'
    answer contexts, the label set by its labels: a resume compares these field by field.
    """
    templates = spec.prompt_templates()
    common = {k: v for k, v in templates.items() if k not in ("contexts", "audit_item", "default_context")}
    base = {"model": spec.model, **spec.settings.recorded(),
            "items": _digest([[i.uid, i.qhash] for i in spec.items]), "n_items": len(spec.items),
            "shard_size": spec.shard_size}  # not the batch size: floating-point noise (NOT_BINDING)
    configs: dict[str, dict] = {}
    for job in plan_jobs(replace(spec, shard=(0, 1))):
        key = f"{spec.model}/{job.cell_name}"
        if key in configs:
            continue
        config = dict(base, kind=job.kind, scorers=[s for s in KIND_SCORERS[job.kind] if s in spec.scorers])
        if job.chat_form != NO_CHAT:  # a plain cell records what it recorded before the axis existed
            template = chat_template(spec, job.chat_form)
            # the template by its digest (where it was read is the run log's: a copied folder is the same model)
            config.update(chat_template=MODEL_CHAT, chat_template_sha256=template.sha256,
                          chat_template_bos_added=template.bos_added)
            if template.thinking is not None:  # --thinking: enable_thinking as rendered (a `model` cell: as before)
                config["thinking"] = template.thinking
        if job.cell is not None:
            cell = job.cell
            config.update(label_set=cell.label_set.name, labels=_digest(list(cell.label_set.labels)),
                          context=cell.context, shots=cell.shots, order=cell.order,
                          templates=_digest([common, templates["contexts"].get(cell.context)]),
                          dev_items=_digest([[i.uid, i.qhash] for i in spec.dev_items]) if cell.shots else None)
        else:
            config["templates"] = _digest(common)
        if job.kind in ("gen", "cot"):
            config["max_new_tokens"] = spec.max_new_tokens or templates["generation"][
                "cot_max_new_tokens" if job.kind == "cot" else "answer_only_max_new_tokens"]
            markers = spec.settings.thinking_markers or DEFAULT_MARKERS
            if (markers.open, markers.close) != (DEFAULT_MARKERS.open, DEFAULT_MARKERS.close):
                config["thinking_markers"] = [markers.open, markers.close]  # the default pair: as before the axis
        configs[key] = config
    return configs
