"""The verdicts as the book page shows them: the HTML table of rows and the abstract's sentences.

:mod:`cube.paper.claims` decides each row's verdict; this module only writes rows that are
already judged: the table of ``notebooks/00_paper.md`` (each cell escaped, each verdict with the
class ``book/static/cube.css`` colours, each cell naming its column for the stacked layout), and
the one-sentence counts the abstract quotes. It stands alone so that a change of wording or
markup can never touch a verdict.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from cube.paper.citations import Paper, PaperResult
from cube.paper.claims import (CONTRADICTED, DIFFERS, IMPLEMENTED, NO_POWER, NOT_HERE, REPRODUCED, SMALLER, TESTED,
                               Row, verdict_counts, verdict_head)


VERDICT_CLASS = {REPRODUCED: "reproduced", SMALLER: "smaller", NO_POWER: "no-power", CONTRADICTED: "contradicted",
                 NOT_HERE: "not-here", IMPLEMENTED: "implemented", DIFFERS: "differs"}


def verdict_class(text: str) -> str:
    return VERDICT_CLASS[verdict_head(text)]


def source_label(paper: Paper, result: PaperResult) -> str:
    source = paper.sources[result.source]
    return "the paper" if result.source == "paper" else source.citation.split(",")[0].strip("“”")


_CODE_SPAN = re.compile(r"`([^`]+)`")


def cell_html(text: str) -> str:
    """A table cell's text, escaped, with Markdown code spans (`cube smoke`) as <code>: the
    table is HTML, where Markdown is not rendered and the backticks showed as they are."""
    return _CODE_SPAN.sub(r"<code>\1</code>", html.escape(text))


def rows_html(rows: Sequence[Row], paper: Paper | None = None) -> str:
    """The table of the book page: one row per result, the verdict first, each cell escaped."""
    head = ["verdict", "result (source, section)", "source's value", "source's scale", "here", "scale here"]
    body = []
    for row in rows:
        here = row.ours.value
        if row.ours.substitute:
            here += f"; substitute: {row.ours.substitute}"
        if row.ours.why and row.ours.holds is not None:
            here += f" ({row.ours.why})"
        who = source_label(paper, row.paper) if paper is not None else row.paper.source
        cells = [f'<span class="verdict verdict-{verdict_class(row.verdict)}">{html.escape(row.verdict)}</span>',
                 cell_html(row.paper.result) + f"<br><small>{cell_html(who)}, {cell_html(row.paper.section)}</small>",
                 cell_html(row.paper.value), cell_html(row.paper.scale.text()), cell_html(here),
                 cell_html(row.ours.scale.text())]
        # data-label: each cell names its column, for the book's stacked layout (book/static/cube.css)
        body.append(f'<tr data-result="{html.escape(row.paper.id)}">'
                    + "".join(f'<td data-label="{html.escape(h)}">{c}</td>' for h, c in zip(head, cells)) + "</tr>")
    thead = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (f'<table class="table cube-paper-table"><thead><tr>{thead}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def verdict_summary(rows: Sequence[Row]) -> str:
    """The counts as one sentence (the abstract's line): the rows that test a source's statement,
    of them those tested here and those that could not be, then the settings. "Tested" counts only
    rows whose test ran (issue 47: "of 22 results tested" counted 9 not reproducible here)."""
    counts = verdict_counts(rows)
    ran = [v for v in TESTED if v != NOT_HERE]
    statements = sum(counts[v] for v in TESTED)
    tested = sum(counts[v] for v in ran)
    parts = [f"{counts[v]} {v}" for v in ran if counts[v]]
    text = (f"Of {statements} results that state something testable, {tested} were tested here "
            f"({', '.join(parts) or 'none'})")
    if counts[NOT_HERE]:
        text += f" and {counts[NOT_HERE]} {'is' if counts[NOT_HERE] == 1 else 'are'} {NOT_HERE}"
    settings = counts[IMPLEMENTED] + counts[DIFFERS]
    if settings:
        text += (f"; {settings} more state{'s' if settings == 1 else ''} a setting adopted from a source "
                 f"({counts[IMPLEMENTED]} {IMPLEMENTED}"
                 + (f", {counts[DIFFERS]} {DIFFERS}" if counts[DIFFERS] else "") + "), not a test")
    return text


def not_reproduced_text(rows: Sequence[Row]) -> str:
    """The tested rows that did not reproduce, grouped by verdict, for the abstract."""
    parts = []
    for head in (CONTRADICTED, NO_POWER, NOT_HERE):
        names = [r.paper.result for r in rows if verdict_head(r.verdict) == head]
        if names:
            parts.append(f"{head} ({len(names)}): " + "; ".join(names))
    return ". ".join(parts) or "none"
