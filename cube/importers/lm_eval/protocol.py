"""The protocol an lm-eval task scored under, reconstructed from its logged configuration.

lm-eval's ``acc`` (argmax of the summed log-likelihood of ``target_delimiter + choice``) is cube's
M1-seq when the choices are labels (``doc_to_choice: [A, B, C, D]``) and M2 when they are the
option texts; ``acc_norm`` (the same divided by the choice's characters) is ``M4-char``. Which
labels, which cue the prompt ends in and which delimiter stands before the label decide the cell
cube names the records by: a frozen label set and one of cube's answer contexts where they are
the same, else a new ``lmeval-`` name. Apart from reading the files because it is the one place
that interprets a task's configuration, which the manifest keeps (``TaskProtocol.to_json``) and
``cube explain`` reads back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from cube.checksums import sha256_bytes
from cube.errors import HarnessImportError
from cube.importers.lm_eval.reading import TaskRun
from cube.protocol.label_sets import load_label_sets

LM_EVAL_TOKENIZATION = "lm-eval"  # context and continuation cut as lm-eval 0.4 does (cube.importers.lm_eval.audit)


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
