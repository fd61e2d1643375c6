"""Matching an lm-eval doc to its benchmark item, by question hash and lm-eval's own fields.

A doc is benchmark text, never written: it names its item by the hash of its question
(``cube.protocol.items.qhash``), narrowed by its options and, for lm-eval's own CMMLU and C-Eval
tasks, their subject and split. The doc fields named here (``QUESTION_FIELDS``, ``OPTION_FIELDS``)
are those of lm-eval's CMMLU and C-Eval docs, which a local task writes too
(``cube.importers.lm_eval.local_task``). Apart from the records because which item a doc is
decides nothing about how it was scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cube.errors import HarnessImportError
from cube.importers.contract import items_by_hash
from cube.importers.lm_eval.reading import TaskRun
from cube.protocol.items import Item, qhash

QUESTION_FIELDS = ("Question", "question")  # lm-eval's cmmlu docs (haonan-li/cmmlu), ceval docs
OPTION_FIELDS = ("A", "B", "C", "D")
# Task datasets lm-eval ships for the two benchmarks: (benchmark, the split cube names it by).
KNOWN_DATASETS = {"haonan-li/cmmlu": "cmmlu", "ceval/ceval-exam": "ceval"}


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
