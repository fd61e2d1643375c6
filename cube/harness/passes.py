"""The passes: each job's prompts as backend requests, and the backend's outputs as records.

Work is grouped so that what a protocol needs is computed once and every scorer reads it:
one label pass per (item, cell) feeds M1-seq and M1-strict; one cloze pass per item (conditional
and unconditional) feeds M2-M5, whatever the cells; one greedy generation per (item, cell) feeds
both M6 extractors. A scoring job is its requests and the function that turns their scores into
its records (``ScoringWork``), so that every scoring job of one chunk of items goes to the
backend in one call (``run_scoring_jobs``); a generation job runs alone (``GENERATION_RUNNERS``).

Why a module of its own: what a pass asks of a model and what it records are pure functions of
(item, cell, dev items), apart from the loop that schedules the jobs and writes their shards
(``cube.harness.runner``); so every prompt a run will build can be tried before a model loads
(``preflight``), and a failed start records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from cube.errors import ConfigError
from cube.harness.backends.base import Backend, ContinuationLogprobs, GenerationResult, ScoreRequest
from cube.harness.run_spec import Job, RunSpec, chat_template, plan_jobs
from cube.protocol.chat import NO_CHAT, record_context
from cube.protocol.items import Item
from cube.protocol.prompts import Cell, cloze_prompt, judgement_prompts, render_prompt
from cube.protocol.scorers import PASSES, SCORERS, ContinuationScores, ScoreResult, pass_scorers
from cube.protocol.thinking import DEFAULT_MARKERS, prompt_opens_thinking, split_thinking, thinking_outcome, \
    thinking_tokens


from cube.records.leakage import scrub
from cube.records.schema import record_row


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
