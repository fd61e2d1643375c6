"""HTML tables for the notebooks' glue: the book's one table style.

Cross-page glue takes HTML, not DataFrames, and every table in the book goes through this one
function so that they scroll, escape and wrap alike (``book/static/cube.css``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from cube.analysis.paired_slices import MIXED_PRECISION
from cube.errors import PrecisionMismatch


def html_table(header: list[str], rows: Iterable[Iterable[Any]]) -> str:
    """An escaped HTML table, for glueing tables into the prose (cross-page glue takes HTML).

    A cell that says a pair was compared in two precisions (``check_one_precision``'s "mixed: A
    …, B …") is refused: no page of the book prints a mixed pair, it pairs a one-precision rerun
    or nothing (issue 47)."""
    rows = [list(row) for row in rows]
    for row in rows:
        for value in row:
            if str(value).startswith(MIXED_PRECISION):
                raise PrecisionMismatch(f"a table cell pairs two precisions ({value!r}): pair the one-precision "
                                        "rerun of one side (cube.paper.evidence.one_precision_pair) instead")
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    # data-label: each cell names its column, for the stacked layout (book/static/cube.css)
    labels = [html.escape(str(h), quote=True) for h in header]
    body = "".join("<tr>" + "".join(_cell(v, label) for v, label in zip(row, labels)) + "</tr>" for row in rows)
    stacked = " cube-stacked" if len(header) >= STACK_COLUMNS else ""
    # The table scrolls inside its own box (book/static/cube.css) rather than widen the page;
    # only cells holding a long unbroken token (a sha256, a package path) may break inside a
    # word, so that narrow columns never break "L4_circled" or "600" letter by letter.
    # A table of STACK_COLUMNS columns or more is laid out one block per row, each cell under its
    # column's name: ten columns of a claim-6 table were 1,448 px in the 676 px column at 1280 px,
    # p and Holm behind a sideways scroll (issue 47). Narrower tables stack on a phone only.
    return (f'<table class="table cube-table{stacked}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


LONG_TOKEN = 24  # characters: longer unbroken runs may wrap anywhere
STACK_COLUMNS = 5  # columns from which a table is stacked at every width


def _cell(value: Any, label: str) -> str:
    text = str(value)
    long = any(len(word) > LONG_TOKEN for word in text.split())
    return (f'<td class="cube-long" data-label="{label}">{html.escape(text)}</td>' if long
            else f'<td data-label="{label}">{html.escape(text)}</td>')
