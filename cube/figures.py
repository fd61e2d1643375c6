"""The paper's figures as Altair charts, built from cube's own results.

Each builder takes the objects the analysis already returns and only decides encoding, so a
notebook stays a few calls long. Data is inlined as records (no pandas needed), and every
sort order is explicit so the same input always gives the same spec, and hence the same chart
id in the book (see ``cube.charts``).
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt

from cube.audit import CellAudit
from cube.credit import CreditScheme, correct_count_distribution

# Categories of a degeneracy-matrix cell, in legend order, with fixed colours so that a figure
# reads the same whatever subset of cells it shows.
CELL_STATUS = {
    "DEGEN: all labels tie": "#b2182b",
    "DEGEN: some labels tie": "#ef8a62",
    "distinct, 1 token each": "#67a9cf",
    "distinct, multi-token": "#d1e5f0",
}


def cell_status(cell: CellAudit) -> str:
    if cell.degenerate:
        return "DEGEN: all labels tie" if cell.collision == "full" else "DEGEN: some labels tie"
    return "distinct, 1 token each" if cell.verdict == "max1tok" else "distinct, multi-token"


def _label_ids_text(cell: CellAudit) -> str:
    return "  ".join(f"{lt.label}→{list(lt.ids)}" for lt in cell.labels)


def degeneracy_heatmap(cells: Sequence[CellAudit]) -> alt.FacetChart:
    """The degeneracy matrix: family × label set, one panel per answer context.

    The cell text is the verdict; the tooltip holds every label's token ids, so a reader can see
    *which* token the labels share.
    """
    records = [
        {
            "family": c.family,
            "label set": c.label_set,
            "context": c.context,
            "verdict": c.verdict,
            "status": cell_status(c),
            "ties": " | ".join("=".join(g) for g in c.collision_groups) or "none",
            "token ids": _label_ids_text(c),
        }
        for c in cells
    ]
    families = list(dict.fromkeys(c.family for c in cells))
    label_sets = list(dict.fromkeys(c.label_set for c in cells))
    contexts = list(dict.fromkeys(c.context for c in cells))
    x = alt.X("label set:N", sort=label_sets, title=None, axis=alt.Axis(labelAngle=-40))
    y = alt.Y("family:N", sort=families, title=None)
    rect = alt.Chart().mark_rect(stroke="white").encode(
        x=x,
        y=y,
        color=alt.Color(
            "status:N",
            scale=alt.Scale(domain=list(CELL_STATUS), range=list(CELL_STATUS.values())),
            legend=alt.Legend(title="first-token scoring", orient="bottom", columns=2),
        ),
        tooltip=["family:N", "label set:N", "context:N", "verdict:N", "ties:N", "token ids:N"],
    )
    text = alt.Chart().mark_text(fontSize=10).encode(x=x, y=y, text="verdict:N")
    return (
        alt.layer(rect, text, data=alt.Data(values=records))
        .properties(width=58 * len(label_sets), height=24 * len(families))
        .facet(facet=alt.Facet("context:N", sort=contexts, title="answer context"), columns=2)
    )


def credit_ladder_chart(schemes: Sequence[CreditScheme]) -> alt.LayerChart:
    """Credit paid for j of k statements right under each scheme, with the guesser's odds.

    The bars are P(j right) for a uniform guesser: the expected score is the bars weighted by
    the line, which is why a convex ladder pays a guesser less than additive credit.
    """
    k = schemes[0].statements
    lines = [
        {"statements right": j, "credit": float(p), "scheme": s.name}
        for s in schemes for j, p in enumerate(s.points)
    ]
    bars = [
        {"statements right": j, "probability": float(p)}
        for j, p in enumerate(correct_count_distribution(k))
    ]
    x = alt.X("statements right:O", title=f"statements right (of {k})", axis=alt.Axis(labelAngle=0))
    prob = alt.Chart(alt.Data(values=bars)).mark_bar(color="#dddddd").encode(
        x=x,
        y=alt.Y("probability:Q", title="P(j right) for a guesser", axis=alt.Axis(orient="right")),
        tooltip=["statements right:O", alt.Tooltip("probability:Q", format=".4f")],
    )
    credit = alt.Chart(alt.Data(values=lines)).mark_line(point=True).encode(
        x=x,
        y=alt.Y("credit:Q", title="credit per group"),
        color=alt.Color("scheme:N", sort=[s.name for s in schemes]),
        tooltip=["scheme:N", "statements right:O", "credit:Q"],
    )
    return alt.layer(prob, credit).resolve_scale(y="independent").properties(width=320, height=220)
