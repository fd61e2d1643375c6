"""Matching an OpenCompass prediction to its benchmark item, and checking the prompt asked it.

A prediction names its item by the hash of the question its prompt asks (the last ``题目：`` block,
or for C-Eval's template the last question-and-options block), narrowed by the dataset's subject
and split and checked against the row the config's ``test_range`` puts there. The prompt is then
checked to show the item's own options in their order and the config's number of in-context
examples. Refused, each in one line, because the records would then not be the run's decisions on
the items they name: a prompt whose question block does not carry the item's own options in its
order, a ``test_range`` the predictions do not fill, or a prediction at a row the range does not
put there, prompts with another number of in-context examples than the config's retriever asks
for. Apart from the records because which item a prediction is decides nothing about how it was
scored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from cube.errors import HarnessImportError
from cube.importers.opencompass.reading import DatasetRun
from cube.protocol.items import Item, qhash

LABELS = ("A", "B", "C", "D")


def range_rows(test_range: str, n: int, where: str, n_split: int | None = None) -> range:
    """The test rows ``test_range`` (``"[a:b]"``, OpenCompass's slice of the split) selected.

    ``n_split``: the rows of the split in the benchmark in use; given, the slice must select
    exactly the ``n`` predictions the file holds (``[0:4]`` with one prediction is a run cut
    short or a config that is not this run's).
    """
    if not test_range:
        rows = range(n if n_split is None else n_split)
    else:
        m = re.fullmatch(r"\[\s*(\d*)\s*:\s*(\d*)\s*\]", test_range)
        if not m:
            raise HarnessImportError(f"{where}: test_range {test_range!r} is not a plain [a:b] slice")
        start = int(m.group(1) or 0)
        stop = int(m.group(2)) if m.group(2) else (n_split if n_split is not None else start + n)
        rows = range(n_split if n_split is not None else stop)[start:stop]
    if len(rows) != n:
        raise HarnessImportError(f"{where}: {n} prediction(s), but the config's test_range "
                                 f"{test_range or '(all)'} selects {len(rows)} row(s) of the split; the "
                                 "predictions are not of this config (or its inference did not finish)")
    return rows


_QUESTION = re.compile(r"题目：(.*?)\nA\. ", re.S)


def question_of(prompt: str, where: str) -> str:
    """The test question of a rendered prompt: the last ``题目：...\\nA. `` block (OpenCompass's
    CMMLU and C-Eval templates; in-context examples come before it)."""
    found = _QUESTION.findall(prompt)
    if not found:
        raise HarnessImportError(f"{where}: the prompt has no 题目：...A. block to read the question from")
    return found[-1]


def _question_by_block(prompt: str, pool: Sequence[Item]) -> str | None:
    """The question of the pool's item whose ``question\nA. option`` block ends the prompt last (the
    test item follows the in-context examples): for templates without CMMLU's 题目： (C-Eval's)."""
    best, at = None, -1
    for item in pool:
        pos = prompt.rfind(f"{item.question}\nA. {item.options[0]}")
        if pos > at:
            best, at = item.question, pos
    return best


def match_item(prompt: str, dataset: DatasetRun, row: int, by_hash: Mapping[str, Sequence[Item]],
               where: str, pool: Sequence[Item] = ()) -> Item:
    """The prediction's item: question hash, narrowed by subject and split, checked against the row."""
    question = _question_by_block(prompt, pool) if "题目：" not in prompt else None
    h = qhash(question if question is not None else question_of(prompt, where))
    candidates = [c for c in by_hash.get(h, ()) if c.subject == dataset.subject and c.split == dataset.split]
    if not candidates:
        raise HarnessImportError(f"{where}: question hash {h} matches no {dataset.benchmark} {dataset.subject} "
                                 f"{dataset.split} item (another copy of the benchmark? pass it with --data)")
    at_row = [c for c in candidates if c.row == row]
    if not at_row:
        raise HarnessImportError(f"{where}: its question is that of {candidates[0].uid}, but test_range puts row "
                                 f"{row} of {dataset.subject} {dataset.split} there (predictions of another "
                                 "config?)")
    return at_row[0]


def check_block(prompt: str, item: Item, where: str) -> None:
    """The prompt asks the item's own question with the item's own options, in their order.

    A question hash names the item but not what was asked about it: swapped options, or another
    item's options under this question, imported as this item (the lm-eval import refuses both).
    OpenCompass's CMMLU and C-Eval templates write the question and then ``A. ...`` to ``D. ...``
    one per line; the test item is the last block (the in-context examples come first).
    """
    block = item.question + "".join(f"\n{label}. {option}" for label, option in zip(LABELS, item.options))
    at = prompt.rfind(block)
    if at < 0 or prompt.rfind(f"\n{LABELS[0]}. ") > at + len(item.question):
        raise HarnessImportError(f"{where}: the prompt's options are not item {item.uid}'s, in its order "
                                 "(swapped, or another item's); the decision is not one on this item")


def shots_in(prompt: str) -> int:
    """In-context examples before the test question: the ``A. `` option lines before the last."""
    return max(prompt.count(f"\n{LABELS[0]}. ") - 1, 0)
