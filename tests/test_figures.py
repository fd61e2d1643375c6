"""cube.figures: the paper's figures carry exactly the numbers they are built from."""

from __future__ import annotations

from fractions import Fraction
from math import comb

from cube.audit import CellAudit, LabelTokens
from cube.credit import additive_scheme, load_named_schemes
from cube.figures import CELL_STATUS, cell_status, credit_ladder_chart, degeneracy_heatmap


def cell(family: str, label_set: str, context: str, ids: list[tuple[int, ...]]) -> CellAudit:
    """An invented cell whose verdict follows from its token ids, as in cube.audit."""
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
