"""Building an lm-eval import: each task's decisions, and the manifest's metadata of the run.

Each doc's logged log-likelihoods are decided as lm-eval decided them (``acc``: the first maximum;
``acc_norm``: ``M4-char``), each checked against the acc and acc_norm lm-eval logged. When every
label is a single token, the same numbers are first-token scores, so M1-strict records are
written too and ``cube confirm`` judges them against the frozen audit. The manifest keeps what
lm-eval logged about how it scored (``run_metadata``) and each task's protocol, counts and audit
(``task_json``), which ``cube explain`` reads back (``cube.importers.lm_eval.importer``). Apart
from reading, protocol and matching because it is the one step that turns a run into records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from cube.checksums import sha256_file
from cube.errors import HarnessImportError
from cube.importers.contract import Decision, Imported
from cube.importers.lm_eval.audit import ProtocolAudit, audit_protocol, lm_eval_pair
from cube.importers.lm_eval.matching import ItemMatcher
from cube.importers.lm_eval.protocol import TaskProtocol, task_protocol
from cube.importers.lm_eval.reading import LmEvalRun, TaskRun, add_bos, model_name, read_samples
from cube.protocol.items import Item
from cube.protocol.scorers import SCORERS, decide, tie_groups
from cube.protocol.tokenization import Encoder, tokens_in_context

ACC_NORM_SCORER = "M4-char"  # lm-eval's acc_norm, an entry of the scorer table (cube.protocol.scorers)


@dataclass
class TaskImport:
    """What one task contributed, for the report and the manifest."""

    protocol: TaskProtocol
    n_docs: int
    scorers: list[str]
    n_tied: int  # docs whose top log-likelihood is shared: lm-eval's tie-break chose
    n_identical: int  # docs with two choices scored on the very same tokens
    n_first_token_shared: int | None  # docs whose choices share a first token (with a tokenizer)
    n_differs_from_cube: int | None  # docs where lm-eval's continuation tokens are not cube's
    max_tokens: int | None
    audit: ProtocolAudit | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def _loglikelihood(value: Any) -> float:
    """One logged log-likelihood: a number or its text (lm-eval 0.4.13 logs "-1.25"); a boolean
    (Python's True is 1.0) or anything else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(value)
    return float(value)


def _loglikelihoods(sample: dict, n: int | None, where: str) -> np.ndarray:
    resps = sample["filtered_resps"]
    try:
        values = np.array([_loglikelihood(r[0] if isinstance(r, (list, tuple)) else r) for r in resps],
                          dtype=np.float64)
    except (TypeError, ValueError, IndexError):
        raise HarnessImportError(f"{where}: filtered_resps are not (log-likelihood, is_greedy) pairs "
                                 "of numbers") from None
    if n is not None and values.size != n:
        raise HarnessImportError(
            f"{where}: {values.size} log-likelihoods for {n} choices (acc_mutual_info or "
            "multiple inputs are not imported)"
        )
    if not np.all(np.isfinite(values)):
        raise HarnessImportError(f"{where}: a log-likelihood is not a finite number")
    if np.any(values > 0):  # a sum of log-probabilities: at most 0 (log_softmax is exactly <= 0)
        raise HarnessImportError(f"{where}: log-likelihood {values[values > 0][0]:+g} is positive; "
                                 "a log-probability is at most 0 (not an lm-eval log-likelihood)")
    return values


def _arguments(sample: dict, where: str) -> list[tuple[str, str]]:
    args = sample["arguments"]
    rows = args.values() if isinstance(args, dict) else args
    out = []
    for row in rows:
        pair = [row.get("arg_0"), row.get("arg_1")] if isinstance(row, dict) else list(row)[:2]
        if len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise HarnessImportError(f"{where}: arguments are not (context, continuation) pairs")
        out.append((pair[0], pair[1]))
    return out


def _gold(sample: dict, labels: tuple[str, ...] | None, where: str) -> int:
    target = sample["target"]
    if isinstance(target, str) and target.strip().lstrip("-").isdigit():
        return int(target)
    if isinstance(target, int):
        return target
    if labels is not None and target in labels:
        return labels.index(target)
    raise HarnessImportError(f"{where}: target {str(target)[:12]!r} is not a choice index or label")


def import_task(task: TaskRun, samples: Sequence[dict], matcher: ItemMatcher,
                tokenizer: Encoder | None = None, add_special_tokens: bool = True) -> tuple[list[Decision], TaskImport]:
    """The decisions of one task (acc, acc_norm, and M1-strict where labels are single tokens)."""
    protocol = task_protocol(task)
    rows: list[Decision] = []
    n_tied = n_identical = n_shared = n_differs = 0
    max_tokens = 0
    strict_rows: list[Decision] = []
    used: set[str] = set()
    strict_possible = protocol.labels is not None and tokenizer is not None
    for sample in samples:
        where = f"{task.samples_path.name} doc {sample['doc_id']}"
        n_choices = len(protocol.labels) if protocol.labels is not None else None
        lls = _loglikelihoods(sample, n_choices, where)
        args = _arguments(sample, where)
        if len(args) != lls.size:
            raise HarnessImportError(f"{where}: {len(args)} prompts for {lls.size} log-likelihoods")
        item = matcher.match(sample["doc"], task, where, used)
        if lls.size != len(item.options):
            raise HarnessImportError(f"{where}: {lls.size} choices, but item {item.uid} has {len(item.options)} options")
        gold = _gold(sample, protocol.labels, where)
        if gold != item.answer:
            raise HarnessImportError(
                f"{where}: lm-eval's gold is choice {gold} but item {item.uid} has answer "
                f"{item.answer} (another copy of the benchmark?)"
            )
        choices = [cont[len(protocol.target_delimiter):] if cont.startswith(protocol.target_delimiter) else cont
                   for _, cont in args]
        first_ids = n_tokens = None
        groups: tuple[tuple[int, ...], ...] = ()
        if tokenizer is not None:
            conts = [lm_eval_pair(tokenizer, ctx, cont, add_special_tokens)[1] for ctx, cont in args]
            cube_ids = [tokens_in_context(tokenizer, ctx, cont, add_special_tokens).continuation_ids
                        for ctx, cont in args]
            n_differs += any(a != b for a, b in zip(conts, cube_ids))
            groups = tie_groups(conts)
            n_identical += bool(groups)
            firsts = [ids[0] if ids else -1 for ids in conts]
            n_shared += bool(tie_groups(firsts))
            first_ids, n_tokens = firsts, [len(ids) for ids in conts]
            max_tokens = max(max_tokens, *n_tokens)
            strict_possible &= all(n == 1 for n in n_tokens)
        # acc and acc_norm as lm-eval decides them (the first maximum), with the tie groups of the
        # tokens it scored; the scores are its logged ones, not equalised within a group.
        cell = (protocol.label_set, protocol.context, protocol.shots, "original")
        acc = replace(decide(lls), tie_groups=groups)
        acc_norm = replace(SCORERS[ACC_NORM_SCORER].score(lls, choices), tie_groups=groups)
        for scorer, result, metric in ((protocol.acc_scorer, acc, "acc"), (ACC_NORM_SCORER, acc_norm, "acc_norm")):
            logged = sample.get(metric)
            if logged is not None and bool(float(logged)) != (result.pred == gold):
                raise HarnessImportError(
                    f"{where}: lm-eval logged {metric} {logged} but its own log-likelihoods give "
                    f"{float(result.pred == gold)}"
                )
            rows.append(Decision(item, scorer, cell, gold, result, first_token_ids=first_ids, n_tokens=n_tokens))
        n_tied += acc.tied
        if protocol.labels is not None and tokenizer is not None:
            strict = replace(decide(lls), tie_groups=tie_groups(first_ids))
            strict_rows.append(Decision(item, "M1-strict", cell, gold, strict, first_token_ids=first_ids,
                                        n_tokens=n_tokens))
    scorers = [protocol.acc_scorer, ACC_NORM_SCORER]
    if strict_possible:  # each label one token: its log-likelihood IS its first-token score
        rows += strict_rows
        scorers.append("M1-strict")
    known = tokenizer is not None
    summary = TaskImport(protocol, len(samples), scorers, n_tied, n_identical,
                         n_shared if known else None, n_differs if known else None,
                         max_tokens if known else None, metrics=dict(task.metrics))
    return rows, summary


def run_metadata(run: LmEvalRun, files: Mapping[str, Path]) -> dict[str, Any]:
    """What the manifest keeps of the run: everything lm-eval logged about how it scored."""
    results = run.results
    keep = ("config", "lm_eval_version", "transformers_version", "model_source", "model_name",
            "tokenizer_pad_token", "tokenizer_eos_token", "tokenizer_bos_token", "eot_token_id",
            "max_length", "chat_template_sha", "system_instruction_sha", "fewshot_as_multiturn",
            "task_hashes", "n-shot", "versions", "date")
    logged = {k: results[k] for k in keep if k in results}
    logged["chat_template_used"] = results.get("chat_template") is not None
    return {**logged, "files": {name: sha256_file(path) for name, path in sorted(files.items())}}


def import_runs(runs: Sequence[LmEvalRun], items: Sequence[Item], model: str | None = None,
                tokenizer: Encoder | None = None, family: str | None = None,
                tokenizer_source: str | None = None) -> Imported:
    """Records and report of every task of ``runs`` (one model), nothing written yet."""
    names = {model_name(run, model) for run in runs}
    if len(names) != 1:
        raise HarnessImportError(f"the folder holds runs of {len(names)} models ({', '.join(sorted(names))}); "
                                 "import each model's folder on its own")
    name = names.pop()
    matcher = ItemMatcher(items)
    rows: list[Decision] = []
    tasks: list[TaskImport] = []
    logged: dict[str, Any] = {}
    for run in runs:
        bos = add_bos(run)
        files = {run.results_path.name: run.results_path}
        for task in run.tasks:
            if any(t.protocol.task == task.name for t in tasks):
                raise HarnessImportError(f"task {task.name} appears in two results files; import one run at a time")
            task_rows, summary = import_task(task, read_samples(task), matcher, tokenizer, bos)
            if tokenizer is not None:
                summary.audit = audit_protocol(summary.protocol, tokenizer, family or name, bos)
            rows += task_rows
            tasks.append(summary)
            files[task.samples_path.name] = task.samples_path
        logged[run.results_path.name] = run_metadata(run, files)
    metadata = {
        "source": "lm-evaluation-harness",
        "lm_eval": {
            "runs": logged,
            "tasks": {t.protocol.task: task_json(t, run_config(runs, t.protocol.task)) for t in tasks},
            "tokenizer": tokenizer_source,
        },
    }
    if family:
        metadata["families"] = {name: family}
    return Imported(name, rows, tasks, metadata)


def run_config(runs: Sequence[LmEvalRun], task: str) -> dict[str, Any]:
    for run in runs:
        for t in run.tasks:
            if t.name == task:
                return t.config
    raise KeyError(task)


def task_json(t: TaskImport, config: Mapping[str, Any]) -> dict[str, Any]:
    out = {
        "protocol": t.protocol.to_json(), "config": dict(config), "metrics": t.metrics,
        "n_docs": t.n_docs, "scorers": t.scorers, "n_tied": t.n_tied, "n_identical": t.n_identical,
        "n_first_token_shared": t.n_first_token_shared, "n_differs_from_cube": t.n_differs_from_cube,
        "max_tokens": t.max_tokens,
    }
    if t.audit is not None:
        from cube.tokenizers.audit import cells_to_json

        lm, cube_cell = cells_to_json([t.audit.lm_eval, t.audit.in_context])
        out["audit"] = {"lm_eval": lm, "in_context": cube_cell,
                        "tokenization_differs": t.audit.tokenization_differs}
    return out
