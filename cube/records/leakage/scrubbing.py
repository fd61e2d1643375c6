"""The scrub: a free-text field without its own item's text (and, given an index, any other item's)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

from cube.records.leakage.rules import (
    MARKER,
    MIN_OPTION_CHARS,
    MIN_QUESTION_CHARS,
    RAW_MIN_OPTION_CHARS,
    WINDOW,
)
from cube.records.leakage.index import ItemText, LeakageIndex, build_index
from cube.records.leakage.audit import audit_texts


@dataclass(frozen=True)
class ScrubResult:
    text: str
    n_removed_spans: int  # all removed spans, own item and other items
    n_removed_chars: int
    n_other_item_spans: int = 0  # of those, spans the audit matched to another item (``index``)


def scrub(
    text: str,
    question: str,
    options: Sequence[str],
    window: int = WINDOW,
    marker: str = MARKER,
    min_option_chars: int = MIN_OPTION_CHARS,
    min_question_chars: int = MIN_QUESTION_CHARS,
    index: "LeakageIndex | None" = None,
    raw_min_option_chars: int = RAW_MIN_OPTION_CHARS,
) -> ScrubResult:
    """Remove the item's own text from a free-text field before release.

    Whatever the audit would count as a leak of the record's own item is removed, by the audit
    itself run against an index of that one item (so the two can never disagree): every
    occurrence of each option with at least ``min_option_chars`` normalised characters (shorter
    ones, such as "对", are ordinary words: deleting them would shred the text and they identify
    no item), of the whole question when it is shorter than ``window`` but has at least
    ``min_question_chars``, every span of ``window`` or more normalised characters that also occurs
    in the question, and every near copy of those (see the module docstring); and the same exact
    rules in the raw form, the text as written (options of ``raw_min_option_chars`` characters as
    written and ``RAW_MIN_SYMBOLS`` normalised: a one-symbol option such as ``$\\alpha$`` stays,
    as "对" does). Stock answers are
    removed too: for its own item even "以上都对" is a quote. Each removed span, widened to whole
    original characters (a whole HTML entity or tag), becomes ``marker`` so that readers see that
    something was cut; touching spans become one marker.

    With ``index``, whatever the audit would still find afterwards (a model quoting ANOTHER item,
    in practice a short option from the same subject, such as a term of art) is removed too, so
    the result passes the audit against every indexed item by construction.
    """
    own_index = _own_index(question, tuple(options), window, min_option_chars, min_question_chars,
                           raw_min_option_chars)
    spans = _touching_merged([(h.offset, h.offset + h.n_chars) for h in audit_texts([text], own_index)])
    own = _replace_spans(text, spans, marker)
    if index is None:
        return ScrubResult(own, len(spans), sum(end - begin for begin, end in spans))
    others = _touching_merged([(h.offset, h.offset + h.n_chars) for h in audit_texts([own], index)])
    return ScrubResult(
        text=_replace_spans(own, others, marker),
        n_removed_spans=len(spans) + len(others),
        n_removed_chars=sum(end - begin for begin, end in spans + others),
        n_other_item_spans=len(others),
    )


@functools.lru_cache(maxsize=1024)
def _own_index(
    question: str, options: tuple[str, ...], window: int, min_option_chars: int, min_question_chars: int,
    raw_min_option_chars: int = RAW_MIN_OPTION_CHARS,
) -> "LeakageIndex":
    """The index of one item; cached, since a harness scrubs every generation of an item in turn."""
    # stock_items=2: with one item nothing is stock, so stock answers are removed for the own item
    return build_index([ItemText("own", question, options)], window=window,
                       min_option_chars=min_option_chars, stock_items=2,
                       min_question_chars=min_question_chars, raw_min_option_chars=raw_min_option_chars)


def _touching_merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return [(begin, end) for begin, end in merged]


def _replace_spans(text: str, spans: list[tuple[int, int]], marker: str) -> str:
    """``text`` with each sorted, disjoint [begin, end) span replaced by ``marker``."""
    pieces, cursor = [], 0
    for begin, end in spans:
        pieces += [text[cursor:begin], marker]
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)
