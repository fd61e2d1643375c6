"""The report's tables and charts, from a :class:`~cube.report.model.ReportAnalysis`.

Pages call these and show what they return; nothing here computes a statistic (the analysis
did). Tables go through the book's one table function (``cube.paper.tables.html_table``) and
charts through its offline renderer (``cube.paper.charts``), so a report looks and loads as the
paper's book does.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from cube.paper.tables import html_table
from cube.report.model import DIMENSION_NAMES, DIMENSIONS, CellScore, ReportAnalysis

CHART_WIDTH = 300  # px: a chart fits a 400 px window's column with its labels


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _acc(cell: CellScore) -> str:
    return f"{cell.accuracy:.3f} [{cell.ci_lo:.3f}, {cell.ci_hi:.3f}]"


def _p(p: float) -> str:
    return f"{p:.2g}"


def banners(a: ReportAnalysis) -> str:
    """The warnings every page carries: an incomplete store, benchmark text on the page."""
    out = []
    if a.incomplete:
        shown = "; ".join(a.incomplete[:3]) + (f"; and {len(a.incomplete) - 3} more" if len(a.incomplete) > 3 else "")
        out.append('<div class="admonition warning cube-incomplete"><p class="admonition-title">Incomplete</p>'
                   f"<p>Built with --allow-incomplete from stores whose cells are short of what their runs promise "
                   f"({html.escape(shown)}): every number covers only the records present.</p></div>")
    if a.show_items:
        out.append('<div class="admonition danger cube-items"><p class="admonition-title">Holds benchmark text</p>'
                   "<p>Built with --show-items: this site quotes benchmark items read from a local copy. "
                   "Do not publish it.</p></div>")
    return "\n".join(out)


def missing(a: ReportAnalysis, section: str) -> str | None:
    """The one line standing in for a section the records cannot support."""
    line = a.missing.get(section)
    return None if line is None else f"**Not in these records:** {line}."


def summary_table(a: ReportAnalysis) -> str:
    """Per model and scorer: the reference score, the range over the scorer's cells, chance (the
    cells at each end are named in the table of every cell below)."""
    rows = []
    for r in a.ranges:
        rows.append([r.model, r.scorer, r.n_cells, _acc(r.reference) if r.reference else "no reference cell",
                     f"{r.low.accuracy:.3f}–{r.high.accuracy:.3f}", f"{(r.high.accuracy - r.low.accuracy) * 100:.1f}",
                     f"{r.chance:.3f}"])
    return html_table(["model", "scorer", "cells", "at the reference [95% CI]", "range", "range (pp)", "chance"], rows)


def summary_lines(a: ReportAnalysis) -> str:
    """The summary, one model per bullet (the sentence holds one clause per model)."""
    return "\n".join(f"- **{line}**" for line in a.summaries)


def health_table(a: ReportAnalysis) -> str:
    """Per model: cells, DEGEN cells by the audit, tie, parse-failure and within-noise shares."""
    rows = []
    for model in sorted({c.model for c in a.cells}):
        cells = [c for c in a.cells if c.model == model]
        degen = [x for x in a.audit if x.model == model and x.predicted == "DEGEN"]
        ties = ", ".join(f"{x.label_set}/{x.context} {x.n_tied}/{x.n}" for x in degen) or "–"
        noise = [c.within_noise_rate for c in cells if c.within_noise_rate is not None]
        n_all = sum(c.n for c in cells)
        rows.append([model, len(cells), f"{len(degen)}: {ties}" if degen else "0",
                     _pct(sum(c.tie_rate * c.n for c in cells) / n_all),
                     _pct(sum(c.parse_failure_rate * c.n for c in cells) / n_all),
                     _pct(sum(noise) / len(noise)) if noise else "not known",
                     ", ".join(sorted({c.dtype for c in cells}))])
    return html_table(["model", "cells", "DEGEN by the audit (items tied)", "tied", "parse failures",
                       "within precision noise", "precision"], rows)


def cells_table(a: ReportAnalysis) -> str:
    rows = [[c.model, c.name, c.n, _acc(c), f"{c.chance:.3f}", _pct(c.tie_rate), _pct(c.parse_failure_rate),
             _pct(c.within_noise_rate), c.dtype] for c in sorted(a.cells, key=lambda c: (c.model, c.name))]
    return html_table(["model", "cell", "n", "accuracy [95% CI]", "chance", "tied", "parse failures", "in noise",
                       "precision"], rows)


def audit_table(a: ReportAnalysis) -> str:
    rows = [[x.model, x.label_set, x.context, x.predicted, f"{x.n_tied}/{x.n}", x.status, x.explanation]
            for x in a.audit]
    return html_table(["model", "label set", "context", "audit before the run", "items tied", "verdict", "why"],
                      rows)


def comparison_table(a: ReportAnalysis, model: str) -> str:
    """One row per comparison, few enough columns to read at 1280 px without scrolling."""
    rows = []
    for c in (c for c in a.comparisons if c.model == model):
        mde = "none" if c.mde is None else f"{c.mde * 100:.1f}"
        power = "" if c.power is None else f" ({c.power:.2f})"
        also = f" (also {', '.join(c.relaxed)})" if c.relaxed else ""
        rows.append([f"{DIMENSION_NAMES[c.dimension]}: {c.level}{also} vs {c.reference_level}", c.n,
                     f"{c.acc_b:.3f} vs {c.acc_a:.3f}",
                     f"{c.delta * 100:+.1f} [{c.delta_lo * 100:+.1f}, {c.delta_hi * 100:+.1f}]",
                     f"{_p(c.p_holm)} ({_p(c.p_value)})", mde + power, c.precision])
    return html_table(["level vs reference", "n", "accuracy", "Δ pp [exact 95%]", "Holm p (p)",
                       "MDE pp (power)", "precision"], rows)


def refused_lines(a: ReportAnalysis, model: str) -> list[str]:
    return [f"{DIMENSION_NAMES[r.dimension]} {r.level}: {r.reason}" for r in a.refused if r.model == model]


def sensitivity_chart(a: ReportAnalysis, model: str):
    """Each cell's score with its interval, grouped by the dimension it changes; the reference
    cell's score as a rule in every group."""
    import altair as alt

    ref = next((c for c in a.cells if c.model == model and all(str(c.value(d)) == a.reference[d]
                                                                 for d in DIMENSIONS)), None)
    if ref is None:
        return None
    by_name = {c.name: c for c in a.cells if c.model == model}
    values = []
    for c in (c for c in a.comparisons if c.model == model):
        cell = by_name[c.cell_b]
        values.append({"dimension": DIMENSION_NAMES[c.dimension], "level": c.level, "accuracy": cell.accuracy,
                       "lo": cell.ci_lo, "hi": cell.ci_hi, "significant": "Holm p < 0.05" if c.p_holm < 0.05 else "not"})
    for dim in sorted({c.dimension for c in a.comparisons if c.model == model}):
        values.append({"dimension": DIMENSION_NAMES[dim], "level": f"{a.reference[dim]} (reference)",
                       "accuracy": ref.accuracy, "lo": ref.ci_lo, "hi": ref.ci_hi, "significant": "reference"})
    if not values:
        return None
    # one layered chart per dimension, stacked (a facet of layers with independent scales makes
    # vega-lite warn about unioned domains in the console)
    charts = []
    for dim in dict.fromkeys(v["dimension"] for v in values):
        mine = [v for v in values if v["dimension"] == dim]
        base = alt.Chart(alt.Data(values=mine)).encode(y=alt.Y("level:N", title=None))
        bars = base.mark_rule().encode(x=alt.X("lo:Q", title="accuracy (95% Wilson interval)",
                                               scale=alt.Scale(zero=False)), x2="hi:Q")
        points = base.mark_point(filled=True, size=60).encode(
            x="accuracy:Q", color=alt.Color("significant:N", title=None, legend=alt.Legend(orient="bottom"),
                                            scale=alt.Scale(domain=["reference", "Holm p < 0.05", "not"])),
            tooltip=["level:N", alt.Tooltip("accuracy:Q", format=".3f")])
        charts.append((bars + points).properties(width=CHART_WIDTH, title=dim))
    return alt.vconcat(*charts, title=f"{model}: each cell against the reference")


def calibration_table(a: ReportAnalysis, model: str) -> str:
    rows = [[c.cell, c.n, f"{c.ece:.3f} [{c.ece_lo:.3f}, {c.ece_hi:.3f}]"] for c in a.calibration if c.model == model]
    return html_table(["cell", "n", "ECE [95% bootstrap]"], rows)


def reliability_chart(a: ReportAnalysis, model: str):
    """The reliability diagram of the model's reference-scorer cells (accuracy against confidence
    per bin, the diagonal the calibrated line)."""
    import altair as alt

    cells = [c for c in a.calibration if c.model == model and c.cell.startswith(a.reference["scorer"] + " ")]
    if not cells:
        return None
    values = [{"cell": c.cell, "confidence": conf, "accuracy": acc, "items": n}
              for c in cells for conf, acc, n in zip(c.confidence, c.accuracy, c.count)]
    diagonal = alt.Chart(alt.Data(values=[{"x": 0, "y": 0}, {"x": 1, "y": 1}])).mark_line(
        strokeDash=[4, 4], color="gray").encode(x="x:Q", y="y:Q")
    points = alt.Chart(alt.Data(values=values)).mark_line(point=True).encode(
        x=alt.X("confidence:Q", title="confidence (top option)", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("accuracy:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("cell:N", legend=alt.Legend(orient="bottom", columns=1, labelLimit=280)),
        tooltip=["cell:N", alt.Tooltip("confidence:Q", format=".2f"), alt.Tooltip("accuracy:Q", format=".2f"),
                 "items:Q"])
    return (diagonal + points).properties(width=CHART_WIDTH, height=CHART_WIDTH,
                                          title=f"{model}: reliability, {a.reference['scorer']} cells")


def group_table(a: ReportAnalysis, model: str, level: str) -> str:
    rows = [[g.group, g.n, f"{g.accuracy:.3f} [{g.ci_lo:.3f}, {g.ci_hi:.3f}]"]
            for g in a.groups if g.model == model and g.level == level]
    return html_table([level, "n", "accuracy [95% Wilson]"], rows)


def rank_table(a: ReportAnalysis) -> str:
    rows = [[r.cell, r.n_items, f"{r.footrule:.3f}", f"{r.floor_p95:.3f}", f"{r.multiple_of_p95:.2f}", r.verdict]
            for r in a.ranks]
    return html_table(["protocol against the reference", "items", "footrule", "noise floor p95",
                       "multiple of p95", "verdict"], rows)


def accuracy_by_model_table(a: ReportAnalysis) -> str:
    models = sorted({c.model for c in a.cells})
    ref_cells = {c.model: c for c in a.cells if all(str(c.value(d)) == a.reference[d] for d in DIMENSIONS)}
    rows = [[m, _acc(ref_cells[m]) if m in ref_cells else "–"] for m in models]
    return html_table(["model", "accuracy at the reference cell [95% CI]"], rows)


def harness_table(a: ReportAnalysis) -> str:
    rows = []
    for g in a.harness_gaps:
        factors = "; ".join(f"{name} {share:+.0%} ({status})" for name, share, status in g.factors[:4])
        rows.append([g.model, g.side_a, g.side_b, f"{g.score_a:.3f}", f"{g.score_b:.3f}", g.n_common,
                     f"{g.gap * 100:+.1f} pp", _p(g.mcnemar_p), factors or "–"])
    return html_table(["model", "A", "B", "score A", "score B", "shared items", "gap", "McNemar p",
                       "carried by (share of the gap)"], rows)


def flip_table(a: ReportAnalysis, model: str) -> tuple[str, str] | None:
    f = next((f for f in a.flips if f.model == model), None)
    if f is None:
        return None
    header = ["uid", "subject", "gold", "reference", "other"] + (["item"] if a.show_items else [])
    rows = [[x.uid, x.subject, x.gold, x.pred_a, x.pred_b] + ([x.text or ""] if a.show_items else [])
            for x in f.items]
    line = (f"{model}: {f.cell_a} (reference) against {f.cell_b}: {f.b_only_right + f.a_only_right} items flip, "
            f"{f.a_only_right} right only at the reference, {f.b_only_right} right only in the other cell"
            + (f"; the first {len(f.items)} by uid" if len(f.items) < f.a_only_right + f.b_only_right else ""))
    return line, html_table(header, rows)


def provenance_tables(a: ReportAnalysis) -> list[tuple[str, str]]:
    out = []
    for p in a.provenance:
        keys = list(dict.fromkeys(k for m in p.models for k in m))
        table = html_table(keys, [[m.get(k, "–") for k in keys] for m in p.models])
        out.append((f"{p.path} ({p.harness}, {p.schema_version})", table))
    return out


def models_in(a: ReportAnalysis) -> Sequence[str]:
    return sorted({c.model for c in a.cells})


__all__ = ["accuracy_by_model_table", "audit_table", "banners", "calibration_table", "cells_table",
           "comparison_table", "flip_table", "group_table", "harness_table", "health_table", "missing",
           "models_in", "provenance_tables", "rank_table", "refused_lines", "reliability_chart",
           "sensitivity_chart", "summary_table"]
