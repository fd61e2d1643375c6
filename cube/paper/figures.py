"""The paper's figures as Altair charts, built from cube's own results.

Each builder takes the objects the analysis already returns and only decides encoding, so a
notebook stays a few calls long. Data is inlined as records (no pandas needed), and every
sort order is explicit so the same input always gives the same spec, and hence the same chart
id in the book (see ``cube.paper.charts``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import numpy as np

from cube.analysis.credit import CreditScheme, correct_count_distribution
from cube.analysis.footrule import NoiseFloor
from cube.tokenizers.audit import CellAudit

# Categories of a degeneracy-matrix cell, in legend order, with fixed colours so that a figure
# reads the same whatever subset of cells it shows.
CELL_STATUS = {
    "DEGEN: all labels tie": "#b2182b",
    "DEGEN: some labels tie": "#ef8a62",
    "distinct, 1 token each": "#67a9cf",
    "distinct, multi-token": "#d1e5f0",
}


TOOLTIP_FIELDS = ["family:N", "label set:N", "context:N", "verdict:N", "ties:N", "token ids:N"]
# strokeDash of footrule_chart: the noise floor's rules dashed, each observed footrule solid
FLOOR_DASH = {"floor": [6, 4], "observed": [1, 0]}


def _title(text: str | Sequence[str]) -> alt.TitleParams:
    """A chart's title, flush left with the whole chart (axis labels included), not centred over
    the plot: centred, a title wider than a narrow plot ran off both sides on a phone."""
    return alt.TitleParams(text=text if isinstance(text, str) else list(text), anchor="start", frame="bounds")


def cell_status(cell: CellAudit) -> str:
    if cell.degenerate:
        return "DEGEN: all labels tie" if cell.collision == "full" else "DEGEN: some labels tie"
    return "distinct, 1 token each" if cell.verdict == "max1tok" else "distinct, multi-token"


def _label_ids_text(cell: CellAudit) -> str:
    """Each label's token ids and the tokens as a person reads them (hex where a token is part of
    a character), so the tooltip shows which bytes the labels share."""
    return "  ".join(f"{lt.label}→{list(lt.ids)} [{', '.join(lt.shown)}]" for lt in cell.labels)


def degeneracy_heatmap(cells: Sequence[CellAudit],
                       title: str = "First-token scoring: tokenizer family × label set") -> alt.FacetChart:
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
        tooltip=TOOLTIP_FIELDS,
    )
    # the text sits on top of the rect and takes the pointer over most of the cell: it carries
    # the same tooltip, or hovering the cell's middle would show nothing
    text = alt.Chart().mark_text(fontSize=10).encode(x=x, y=y, text="verdict:N", tooltip=TOOLTIP_FIELDS)
    return (
        alt.layer(rect, text, data=alt.Data(values=records))
        .properties(width=50 * len(label_sets), height=24 * len(families))
        .facet(facet=alt.Facet("context:N", sort=contexts, title="answer context"), columns=2)
        .properties(title=_title(title))
    )


def credit_ladder_chart(schemes: Sequence[CreditScheme],
                        title: str = "Credit per group of statements, and a guesser's odds") -> alt.LayerChart:
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
    return alt.layer(prob, credit).resolve_scale(y="independent").properties(width="container", height=220, title=_title(title))


def _cell_title(row: Mapping[str, Any]) -> str:
    """model · label set · context, plus shots and order when they are not the defaults."""
    parts = [str(row["model"]), str(row["label_set"]), str(row["context"])]
    if int(row.get("shots", 0)):
        parts.append(f"{int(row['shots'])}-shot")
    if row.get("order", "original") != "original":
        parts.append(str(row["order"]))
    return " · ".join(parts)


def scorer_accuracy_chart(
    rows: Sequence[Mapping[str, Any]], chance: float | None = None,
    title: str = "Accuracy by scorer in each flagged cell",
) -> alt.LayerChart:
    """Accuracy with its 95% interval per scorer, one group of bars per protocol cell.

    ``rows`` are rescoring rows (``cube.analysis.rescore.RESULT_COLUMNS``: model, label_set, context,
    shots, order, scorer, accuracy, ci_lo, ci_hi, n). In a flagged cell the first-token bar
    is the tie-break's accuracy, so the chance line (``chance``, e.g. 1/4) is where it should sit.

    The bars run sideways, one row per cell (its title broken at each " · "), and the chart is as
    wide as the page's column: side by side, the cells' panels were wider than the column and
    their scorer names ran together.
    """
    records = [
        {
            "cell": _cell_title(r),
            "scorer": str(r["scorer"]),
            "accuracy": float(r["accuracy"]),
            "ci_lo": float(r["ci_lo"]),
            "ci_hi": float(r["ci_hi"]),
            "n": int(r["n"]),
        }
        for r in rows
    ]
    cells = list(dict.fromkeys(r["cell"] for r in records))
    scorers = sorted({r["scorer"] for r in records})
    y = alt.Y("cell:N", sort=cells, title=None,
              axis=alt.Axis(labelExpr="split(datum.label, ' · ')", labelLimit=220, labelPadding=4))
    offset = alt.YOffset("scorer:N", sort=scorers)
    x = alt.X("accuracy:Q", title="accuracy (95% interval)", scale=alt.Scale(domain=[0, 1]))
    bars = alt.Chart().mark_bar().encode(
        y=y, yOffset=offset, x=x,
        color=alt.Color("scorer:N", sort=scorers, legend=alt.Legend(title="scorer", orient="top")),
        tooltip=["cell:N", "scorer:N", alt.Tooltip("accuracy:Q", format=".3f"),
                 alt.Tooltip("ci_lo:Q", format=".3f"), alt.Tooltip("ci_hi:Q", format=".3f"), "n:Q"],
    )
    whiskers = alt.Chart().mark_rule(color="black").encode(y=y, yOffset=offset, x="ci_lo:Q", x2="ci_hi:Q")
    layers = [bars, whiskers]
    if chance is not None:
        layers.append(alt.Chart().mark_rule(strokeDash=[4, 3], color="grey").encode(
            x=alt.datum(float(chance))))
    # 18 px a bar (there is an offset channel: a cell's row holds its bars). A fixed height, not a
    # step: vega-lite drops a step height beside a width sized to the column, with a console warning
    # ("Dropping fit-y because spec has discrete height", issue 47)
    return alt.layer(*layers, data=alt.Data(values=records)).properties(
        width="container", height=BAR_PX * len(cells) * len(scorers), title=_title(title))


BAR_PX = 18  # one bar's height in the scorer chart


def footrule_chart(floor: NoiseFloor, observed: Mapping[str, float], bins: int = 30,
                   title: str | None = None) -> alt.LayerChart:
    """The within-protocol noise floor (histogram) and each observed between-protocol footrule.

    The histogram is binned here (numpy) so the chart carries ``bins`` counts, not thousands of
    replicates, drawn up from zero; the dashed rules are the floor's mean and 95th percentile
    (``FLOOR_DASH``), and each solid rule is one protocol change. A footrule takes few values
    (with 4 models, multiples of 1/8), so rules often coincide, and one of 0 lies on the axis:
    the x axis is padded off the plot's edge, each rule carries a marker at a height of its own,
    and the legend gives every rule's value. ``title`` defaults to the protocol changes shown.
    """
    samples = np.asarray(floor.samples, dtype=np.float64)
    top = max([float(samples.max()), *map(float, observed.values()), 1e-9])
    counts, edges = np.histogram(samples, bins=bins, range=(0.0, top))
    hist = [
        {"lo": float(lo), "hi": float(hi), "replicates": int(n)}
        for lo, hi, n in zip(edges[:-1], edges[1:], counts)
    ]
    marks = [
        {"what": "noise floor: mean", "footrule": float(floor.mean), "kind": "floor"},
        {"what": "noise floor: 95th percentile", "footrule": float(floor.p95), "kind": "floor"},
    ] + [{"what": str(name), "footrule": float(v), "kind": "observed"} for name, v in observed.items()]
    tallest = max(int(counts.max()), 1)
    for i, m in enumerate(marks):
        m["legend"] = f"{m['what']}: {m['footrule']:.3f}"
        m["marker"] = tallest * (1.0 - 0.09 * i)  # one height per rule, so coinciding rules all show
    if title is None:
        title = ["Footrule against the paired noise floor:", *map(str, observed)]
    scale = alt.Scale(domain=[0, top], padding=12, nice=False, zero=False)
    x = alt.X("lo:Q", title="normalised footrule", scale=scale)
    # y2 = 0: a bar with a ranged x is otherwise drawn as a floating tick at its count
    histogram = alt.Chart(alt.Data(values=hist)).mark_bar(color="#cccccc").encode(
        x=x, x2="hi:Q", y=alt.Y("replicates:Q", title="bootstrap replicates", scale=alt.Scale(zero=True)),
        y2=alt.datum(0),
        tooltip=[alt.Tooltip("lo:Q", format=".3f"), alt.Tooltip("hi:Q", format=".3f"), "replicates:Q"],
    )
    colour = alt.Color("legend:N", sort=[m["legend"] for m in marks], title=None,
                       legend=alt.Legend(orient="bottom", columns=1, labelLimit=0))
    tooltip = ["what:N", alt.Tooltip("footrule:Q", format=".4f")]
    rules = alt.Chart(alt.Data(values=marks)).mark_rule(size=2).encode(
        x=alt.X("footrule:Q", scale=scale),
        color=colour,
        strokeDash=alt.StrokeDash("kind:N", legend=None,
                                  scale=alt.Scale(domain=list(FLOOR_DASH), range=list(FLOOR_DASH.values()))),
        tooltip=tooltip,
    )
    markers = alt.Chart(alt.Data(values=marks)).mark_point(shape="diamond", filled=True, size=90, opacity=1).encode(
        x=alt.X("footrule:Q", scale=scale), y=alt.Y("marker:Q", title="bootstrap replicates"),
        color=colour, tooltip=tooltip,
    )
    return alt.layer(histogram, rules, markers).properties(width="container", height=220, title=_title(title))


def reliability_chart(tables: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
                      title: str = "Reliability: accuracy against confidence, per model") -> alt.FacetChart:
    """Reliability diagrams: accuracy against mean confidence per bin, one panel per model.

    ``tables`` maps (panel, series), e.g. (model, answer context), to a
    ``cube.analysis.calibration.reliability_table``. Empty bins are left out (they have no accuracy); point
    size is the bin's item count, and the diagonal is perfect calibration.
    """
    records = []
    for (panel, series), table in tables.items():
        for lo, hi, n, acc, conf in zip(table["bin_lo"], table["bin_hi"], table["count"],
                                        table["accuracy"], table["confidence"]):
            if int(n) > 0:
                records.append({"panel": str(panel), "series": str(series), "bin_lo": float(lo),
                                "bin_hi": float(hi), "items": int(n), "accuracy": float(acc),
                                "confidence": float(conf)})
    panels = list(dict.fromkeys(str(p) for p, _ in tables))
    series = list(dict.fromkeys(str(s) for _, s in tables))
    x = alt.X("confidence:Q", title="mean confidence in bin", scale=alt.Scale(domain=[0, 1]))
    y = alt.Y("accuracy:Q", title="accuracy in bin", scale=alt.Scale(domain=[0, 1]))
    colour = alt.Color("series:N", sort=series, title=None, legend=alt.Legend(orient="bottom"))
    line = alt.Chart().mark_line(point=False).encode(x=x, y=y, color=colour, order="confidence:Q")
    points = alt.Chart().mark_circle().encode(
        x=x, y=y, color=colour, size=alt.Size("items:Q", legend=None),
        tooltip=["panel:N", "series:N", alt.Tooltip("bin_lo:Q", format=".2f"),
                 alt.Tooltip("bin_hi:Q", format=".2f"), "items:Q",
                 alt.Tooltip("confidence:Q", format=".3f"), alt.Tooltip("accuracy:Q", format=".3f")],
    )
    diagonal = alt.Chart().mark_rule(strokeDash=[4, 3], color="grey").encode(
        x=alt.datum(0), y=alt.datum(0), x2=alt.datum(1), y2=alt.datum(1))
    return (
        alt.layer(diagonal, line, points, data=alt.Data(values=records))
        .properties(width=200, height=200)
        .facet(facet=alt.Facet("panel:N", sort=panels, title=None), columns=2)
        .properties(title=_title(title))
    )
