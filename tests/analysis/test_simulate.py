"""The synthetic cube: marked synthetic, ties exactly where predicted, truth recovered."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest
from scipy.stats import spearmanr

from cube.analysis.confirm import confirm, model_families
from cube.analysis.rescore import rescore
from cube.analysis.slices import select
from cube.analysis.simulate import (
    DEFAULT_PREDICTION,
    SIM_CELLS,
    SIM_ITEMS,
    Cell,
    draw_truth,
    sim_items,
    sim_models,
    simulate,
)
from cube.errors import ConfigError, RecordsError
from cube.records.store import read_manifest, read_records
from cube.tokenizers.audit import read_prediction


@pytest.fixture(scope="module")
def cube_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "cube"
    simulate(out, fraction=0.02, seed=0)
    return out


@pytest.fixture(scope="module")
def records(cube_dir):
    return read_records(cube_dir)


def test_paper_scale_arithmetic_and_fractions():
    models = sim_models()
    assert len(models) == 18 and all(m.startswith("sim-") for m in models)
    assert len(sim_items(1.0).uids) == SIM_ITEMS == 12_925
    assert 18 * SIM_ITEMS * len(SIM_CELLS) == 2_559_150
    small, larger = sim_items(0.01), sim_items(0.02)
    assert len(small.uids) == 129 and set(small.uids) < set(larger.uids)
    assert len({u.split("/")[1] for u in small.uids}) == 67
    with pytest.raises(ConfigError, match="fraction must lie in"):
        sim_items(0.0)


def test_store_is_marked_synthetic(cube_dir, records):
    manifest = read_manifest(cube_dir)
    assert manifest["synthetic"] is True
    assert "SYNTHETIC" in manifest["metadata"]["note"]
    assert set(manifest["metadata"]["families"]) == set(sim_models())
    assert records.num_rows == 18 * len(sim_items(0.02).uids) * len(SIM_CELLS)
    assert all(m.startswith("sim-") for m in pc.unique(records.column("model")).to_pylist())
    assert pc.all(pc.starts_with(records.column("uid"), "sim/")).as_py()


def test_ties_exactly_in_the_predicted_cells(cube_dir, records):
    report = confirm(records, read_prediction(DEFAULT_PREDICTION),
                     model_families(read_manifest(cube_dir)))
    assert report.mismatches == []
    assert report.confirmed == report.predicted == 14 * 5  # 14 audited models x 5 strict cells
    unpredicted = {c.observed.model for c in report.cells if c.status == "unpredicted"}
    assert unpredicted == {"sim-glm-4-9b", "sim-internlm3-8b-instruct", "sim-yi-1.5-9b",
                           "sim-map-neo-7b"}
    others = select(records, scorer=["M1-seq", "M6-strict", "M6-lenient"])
    assert pc.all(pc.equal(others.column("tie_groups"), "")).as_py()


def test_smaller_fraction_is_a_subset_with_the_same_draws(tmp_path, records):
    simulate(tmp_path / "small", fraction=0.01, seed=0)
    small = read_records(tmp_path / "small")
    key = ["model", "uid", "scorer", "label_set", "context", "shots", "order"]
    columns = [*key, "pred", "scores"]

    def by_key(t):
        return {tuple(r[k] for k in key): (r["pred"], r["scores"])
                for r in t.select(columns).to_pylist()}

    big = by_key(records)
    assert all(big[k] == v for k, v in by_key(small).items())


def test_rescoring_recovers_the_generating_accuracies(cube_dir, records):
    truth = draw_truth(sim_models(), seed=0)
    items = sim_items(0.02)
    rows = rescore(records, "overall").rows.to_pylist()
    checked = 0
    for row in rows:
        if row["aggregation"] != "micro" or row["scorer"] != "M1-seq":
            continue
        cell = Cell(row["scorer"], row["label_set"], row["context"], row["shots"], row["order"])
        expected = truth.expected_accuracy(row["model"], cell, items.index)
        sd = np.sqrt(expected * (1 - expected) / row["n"])
        assert abs(row["accuracy"] - expected) < 4 * sd, (row["model"], cell.name)
        checked += 1
    assert checked == 18 * 4
    base = [r for r in rows if r["aggregation"] == "micro" and r["scorer"] == "M1-seq"
            and r["context"] == "zh_cue" and r["shots"] == 0]
    rho = spearmanr([truth.ability[r["model"]] for r in base], [r["accuracy"] for r in base])
    assert rho.statistic > 0.9


def test_lenient_failures_are_a_subset_of_strict_ones(records):
    def failed(scorer):
        part = select(records, scorer=scorer)
        mask = part.column("parse_failed")
        return set(zip(part.column("model").filter(mask).to_pylist(),
                       part.column("uid").filter(mask).to_pylist()))

    strict, lenient = failed("M6-strict"), failed("M6-lenient")
    assert lenient < strict and len(strict) > 0


def test_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "x").write_text("occupied")
    with pytest.raises(RecordsError, match="not empty"):
        simulate(tmp_path, fraction=0.01)
