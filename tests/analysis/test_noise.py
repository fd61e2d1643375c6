"""Decisions within the precision's measured noise (issue 32 §1), counted per cell beside ties."""

from __future__ import annotations

import pytest

from cube.analysis.noise import DECISION_NOISE, cell_dtypes, margins, mark_within_noise
from cube.analysis.rescore import rescore
from tests.record_tables import record, table


def test_the_bounds_are_measured_and_bf16_is_the_wider():
    assert DECISION_NOISE["bfloat16"] > DECISION_NOISE["float32"] > 0


def _records(model, margin_list):
    return [record(model=model, uid=f"cmmlu/arts/test/{i}", pred=0, scores=[-1.0, -1.0 - m, -5.0, -6.0])
            for i, m in enumerate(margin_list)]


def test_margins_and_marks_match_a_naive_count():
    bound = DECISION_NOISE["bfloat16"]
    close = [bound * 0.5, bound, bound * 0.99]  # within: at most the bound
    far = [bound * 1.01 + 1e-9, bound * 3, 2.0]
    recs = _records("bf", close + far) + _records("fp", close + far) + _records("unknown", close)
    recs.append(record(model="bf", uid="cmmlu/arts/test/99", pred=0, scores=[-1.0, -1.0, -3.0, -4.0]))  # a tie
    manifest = {"cells": {
        "bf/label--x": {"kind": "label", "model": "bf", "scorers": ["M1-seq"], "label_set": "L1_halfwidth",
                        "context": "zh_cue", "shots": 0, "order": "original", "dtype": "bfloat16"},
        "fp/label--x": {"kind": "label", "model": "fp", "scorers": ["M1-seq"], "label_set": "L1_halfwidth",
                        "context": "zh_cue", "shots": 0, "order": "original", "dtype": "float32"},
    }}
    t = table(recs)
    assert margins(t).tolist()[:6] == pytest.approx(close + far)
    marked = mark_within_noise(t, cell_dtypes(manifest))
    rows = {r["model"]: r for r in rescore(marked, "overall").rows.to_pylist() if r["aggregation"] == "micro"}
    naive_fp = sum(m <= DECISION_NOISE["float32"] for m in close + far)
    assert rows["bf"]["n_within_noise"] == 3 and rows["bf"]["n_tied"] == 1  # the tie is not counted twice
    assert rows["fp"]["n_within_noise"] == naive_fp
    assert rows["bf"]["within_noise_rate"] == pytest.approx(3 / 7)
    assert rows["unknown"]["n_within_noise"] is None  # precision not recorded: not known, never 0


def test_generations_are_never_within_noise():
    recs = [record(model="g", scorer="M6-strict", uid="cmmlu/arts/test/0", pred=0, scores=[float("nan")] * 4)]
    marked = mark_within_noise(table(recs), {("g", "M6-strict", "L1_halfwidth", "zh_cue", 0, "original"): "float32"})
    assert marked.column("within_noise").null_count == 1
