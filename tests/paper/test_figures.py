"""cube.paper.figures: the paper's figures carry exactly the numbers they are built from."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from cube.analysis.credit import additive_scheme, load_named_schemes
from cube.analysis.calibration import reliability_table
from cube.analysis.footrule import NoiseFloor
from cube.paper.figures import (
    CELL_STATUS,
    cell_status,
    credit_ladder_chart,
    degeneracy_heatmap,
    footrule_chart,
    reliability_chart,
    scorer_accuracy_chart,
)
from cube.tokenizers.audit import CellAudit, LabelTokens


def cell(family: str, label_set: str, context: str, ids: list[tuple[int, ...]]) -> CellAudit:
    """An invented cell whose verdict follows from its token ids, as in cube.tokenizers.audit."""
    labels = tuple(LabelTokens(f"L{i}", t, tuple(f"t{x}" for x in t), False) for i, t in enumerate(ids))
    firsts: dict[int, list[str]] = {}
    for lt in labels:
        firsts.setdefault(lt.ids[0], []).append(lt.label)
    groups = tuple(tuple(g) for g in firsts.values() if len(g) > 1)
    if groups:
        verdict = "DEGEN"
        collision = "full" if len(groups) == 1 and len(groups[0]) == len(labels) else "partial"
    else:
        verdict, collision = f"max{max(len(t) for t in ids)}tok", None
    return CellAudit(family, label_set, context, verdict, collision, groups, (), labels)


CELLS = [
    cell("fam_b", "set1", "ctx_z", [(1,), (2,), (3,)]),
    cell("fam_b", "set2", "ctx_z", [(9, 1), (9, 2), (9, 3)]),
    cell("fam_a", "set1", "ctx_z", [(4, 5), (6,), (7,)]),
    cell("fam_a", "set2", "ctx_z", [(8, 1), (8, 2), (5,)]),
    cell("fam_b", "set1", "ctx_y", [(1,), (2,), (3,)]),
    cell("fam_b", "set2", "ctx_y", [(1,), (2,), (3,)]),
    cell("fam_a", "set1", "ctx_y", [(1,), (2,), (3,)]),
    cell("fam_a", "set2", "ctx_y", [(1,), (2,), (3,)]),
]


def test_cell_status_names_each_kind_of_cell():
    assert [cell_status(c) for c in CELLS[:4]] == [
        "distinct, 1 token each", "DEGEN: all labels tie", "distinct, multi-token", "DEGEN: some labels tie",
    ]
    assert set(map(cell_status, CELLS)) <= set(CELL_STATUS)


def test_heatmap_has_one_record_per_cell_with_every_token_id():
    spec = degeneracy_heatmap(CELLS).to_dict()
    records = spec["data"]["values"]
    assert len(records) == len(CELLS)
    for c, r in zip(CELLS, records):
        assert (r["family"], r["label set"], r["context"], r["verdict"]) == (c.family, c.label_set, c.context, c.verdict)
        for lt in c.labels:
            assert f"{lt.label}→{list(lt.ids)}" in r["token ids"]
    assert records[1]["ties"] == "L0=L1=L2" and records[0]["ties"] == "none"


def test_heatmap_tooltip_shows_the_bytes_circled_labels_share():
    circled = [LabelTokens(label, (48312, 254 + i), ("âĳ", "ł"), False, (b"\xe2\x91", bytes([0xA0 + i])))
               for i, label in enumerate("①②③④")]
    degen = CellAudit("qwen2.5", "L4_circled", "zh_cue", "DEGEN", "full", (("①", "②", "③", "④"),), (), tuple(circled))
    tooltip = degeneracy_heatmap([degen]).to_dict()["data"]["values"][0]["token ids"]
    assert "①→[48312, 254] [<E2 91>, <A0>]" in tooltip and "④→[48312, 257] [<E2 91>, <A3>]" in tooltip
    assert "âĳ" not in tooltip


def test_heatmap_keeps_the_input_order_and_fixed_colours():
    spec = degeneracy_heatmap(CELLS).to_dict()
    layers = spec["spec"]["layer"]
    assert spec["facet"]["sort"] == ["ctx_z", "ctx_y"]
    assert layers[0]["encoding"]["y"]["sort"] == ["fam_b", "fam_a"]
    assert layers[0]["encoding"]["x"]["sort"] == ["set1", "set2"]
    scale = layers[0]["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"])) == CELL_STATUS


def test_ladder_chart_plots_each_schemes_points_and_the_binomial_odds():
    ladder = load_named_schemes()["ladder"]
    additive = additive_scheme(4)
    spec = credit_ladder_chart([ladder, additive]).to_dict()
    bars, lines = spec["layer"][0]["data"]["values"], spec["layer"][1]["data"]["values"]
    assert [b["probability"] for b in bars] == [comb(4, j) / 16 for j in range(5)]
    for s in (ladder, additive):
        plotted = [r["credit"] for r in lines if r["scheme"] == s.name]
        assert plotted == [float(p) for p in s.points]
    assert [r["credit"] for r in lines if r["scheme"] == "ladder"][3] == float(Fraction(1, 2))


def test_scorer_accuracy_chart_carries_each_rows_accuracy_and_interval():
    rows = [
        {"model": "m", "label_set": "L2", "context": "zh_cue", "shots": 0, "order": "original",
         "scorer": "M1-strict", "accuracy": 0.25, "ci_lo": 0.2, "ci_hi": 0.3, "n": 100},
        {"model": "m", "label_set": "L2", "context": "zh_cue", "shots": 5, "order": "shift1",
         "scorer": "M1-seq", "accuracy": 0.4, "ci_lo": 0.35, "ci_hi": 0.45, "n": 100},
    ]
    spec = scorer_accuracy_chart(rows, chance=0.25).to_dict()
    values = spec["data"]["values"]
    assert [(v["cell"], v["scorer"], v["accuracy"], v["ci_lo"], v["ci_hi"]) for v in values] == [
        ("m · L2 · zh_cue", "M1-strict", 0.25, 0.2, 0.3),
        ("m · L2 · zh_cue · 5-shot · shift1", "M1-seq", 0.4, 0.35, 0.45),
    ]
    assert spec["layer"][2]["encoding"]["x"]["datum"] == 0.25


def test_scorer_accuracy_chart_fits_the_column_with_a_legend():
    """Figure 2 was 4 facet panels side by side: wider than the page's column, its scorer names
    ran together ("M1-seqM1-strict") and no legend told the colours apart."""
    rows = [{"model": f"m{i}", "label_set": "L4", "context": "zh_cue", "shots": 0, "order": "original",
             "scorer": scorer, "accuracy": 0.3, "ci_lo": 0.2, "ci_hi": 0.4, "n": 50}
            for i in range(5) for scorer in ("M1-seq", "M1-strict")]
    spec = scorer_accuracy_chart(rows).to_dict()
    assert "facet" not in spec and spec["width"] == "container"
    bars = spec["layer"][0]["encoding"]
    assert bars["y"]["field"] == "cell" and bars["yOffset"]["field"] == "scorer"
    assert bars["color"]["legend"]["title"] == "scorer"
    # issue 47: a step height beside the column's width made vega warn "Dropping fit-y"; a fixed
    # height of 18 px a bar (5 cells × 2 scorers) keeps the bars' size without the warning
    assert spec["height"] == 18 * 5 * 2


CHARTS = {
    "heatmap": lambda: degeneracy_heatmap(CELLS),
    "ladder": lambda: credit_ladder_chart([load_named_schemes()["ladder"], additive_scheme(4)]),
    "scorers": lambda: scorer_accuracy_chart([{"model": "m", "label_set": "L2", "context": "zh_cue", "shots": 0,
                                               "order": "original", "scorer": "M1-seq", "accuracy": 0.4,
                                               "ci_lo": 0.3, "ci_hi": 0.5, "n": 10}]),
    "footrule": lambda: footrule_chart(NoiseFloor(0.1, 0.2, np.linspace(0, 0.3, 50)), {"strict": 0.0}),
    "reliability": lambda: reliability_chart({("m", "a"): reliability_table(np.full((4, 4), 0.25), np.arange(4), 10)}),
}


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_every_figure_has_a_title(name):
    """A chart without a caption (page 03's three histograms) still says what it shows."""
    title = CHARTS[name]().to_dict().get("title", {}).get("text")
    assert title and all(str(t).strip() for t in (title if isinstance(title, list) else [title]))


def test_footrule_chart_bins_every_replicate_and_marks_floor_and_observations():
    samples = np.random.default_rng(0).random(500) * 0.2
    floor = NoiseFloor(float(samples.mean()), float(np.quantile(samples, 0.95)), samples)
    spec = footrule_chart(floor, {"strict": 0.3, "lenient": 0.1}, bins=20).to_dict()
    hist, marks = spec["layer"][0]["data"]["values"], spec["layer"][1]["data"]["values"]
    assert len(hist) == 20 and sum(h["replicates"] for h in hist) == 500
    assert hist[-1]["hi"] == 0.3  # the axis reaches the largest observation
    assert [(m["what"], m["footrule"]) for m in marks] == [
        ("noise floor: mean", floor.mean), ("noise floor: 95th percentile", floor.p95),
        ("strict", 0.3), ("lenient", 0.1)]


def test_reliability_chart_plots_the_filled_bins_of_each_table():
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(4), size=50)
    gold = rng.integers(0, 4, size=50)
    table = reliability_table(probs, gold, n_bins=10)
    spec = reliability_chart({("m1", "a"): table, ("m1", "b"): table}).to_dict()
    values = spec["data"]["values"]
    filled = int((table["count"] > 0).sum())
    assert len(values) == 2 * filled
    assert sum(v["items"] for v in values if v["series"] == "a") == 50
    first = next(i for i in range(10) if table["count"][i] > 0)
    assert values[0]["accuracy"] == table["accuracy"][first]
    assert values[0]["confidence"] == table["confidence"][first]


def test_footrule_histogram_stands_on_zero_and_only_the_floor_is_dashed():
    """Claim 3's bars floated as dashes (no baseline), and its floor lines were drawn solid."""
    samples = np.random.default_rng(0).random(200) * 0.2
    floor = NoiseFloor(float(samples.mean()), float(np.quantile(samples, 0.95)), samples)
    spec = footrule_chart(floor, {"strict": 0.3}).to_dict()
    bars, rules = spec["layer"][0], spec["layer"][1]
    assert bars["encoding"]["y2"] == {"datum": 0} and bars["encoding"]["y"]["scale"]["zero"] is True
    dash = rules["encoding"]["strokeDash"]["scale"]
    assert dict(zip(dash["domain"], dash["range"])) == {"floor": [6, 4], "observed": [1, 0]}


def test_footrule_rules_off_the_axis_and_apart():
    """Page 03: observed footrules of 0 lay on the y axis, and equal ones hid each other."""
    samples = np.random.default_rng(0).random(200) * 0.5
    floor = NoiseFloor(float(samples.mean()), float(np.quantile(samples, 0.95)), samples)
    spec = footrule_chart(floor, {"strict": 0.0, "lenient": 0.0}).to_dict()
    rules, markers = spec["layer"][1], spec["layer"][2]
    assert rules["encoding"]["x"]["scale"]["padding"] > 0 and rules["encoding"]["x"]["scale"]["zero"] is False
    heights = [m["marker"] for m in markers["data"]["values"]]
    assert len(set(heights)) == len(heights) == 4
    legend = [m["legend"] for m in rules["data"]["values"]]
    assert legend[2:] == ["strict: 0.000", "lenient: 0.000"]
    assert spec["title"]["text"] == ["Footrule against the paired noise floor:", "strict", "lenient"]


def test_heatmap_tooltip_covers_the_cell_text_too():
    """The verdict text lies over the cell: without its own tooltip, only the cell's edges had one."""
    spec = degeneracy_heatmap(CELLS).to_dict()
    rect, text = spec["spec"]["layer"]
    assert text["mark"]["type"] == "text"
    assert text["encoding"]["tooltip"] == rect["encoding"]["tooltip"]
