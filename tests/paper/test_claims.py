"""cube.paper.claims: the paper's results as data, the verdict rule, and the row builders."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from cube.analysis.stats import NoiseFloor
from cube.config import REPO_ROOT
from cube.errors import ConfigError
from cube.paper import claims as P
from cube.tokenizers.audit import read_prediction

PAPER = P.load_paper()
# the results issue #13 lists, each of which must be a row of the paper page
LISTED = ["table2", "degenerate_cells", "predictions_confirmed", "sequence_recovers", "internlm3_partial",
          "footrule_strict", "footrule_lenient", "records_no_text", "smoke_seconds", "whitespace_accuracy",
          "whitespace_ece", "whitespace_rank", "guesser_expectation", "exam_baselines", "best_fixed_string",
          "cohort_percentiles", "ceval_structure", "few_shot_dev", "parse_failure_warning"]


def test_the_paper_is_named_and_every_listed_result_is_data_with_a_section():
    assert PAPER.title.startswith("Same Exam, Different Scores") and PAPER.venue == "NLPCC 2026"
    assert PAPER.citation.startswith("Zhang and Xia, ")
    assert [r.id for r in PAPER.results] == LISTED
    assert all(r.section and r.value and r.claim for r in PAPER.results)
    assert PAPER.scale == P.Scale(models=18, families=9) and len(PAPER.families) == 9
    assert PAPER.result("footrule_strict").numbers == {"footrule": 0.472, "multiple_of_mean": 77}


def test_load_paper_names_the_bad_entry(tmp_path):
    raw = yaml.safe_load((REPO_ROOT / "config" / "paper.yaml").read_text(encoding="utf-8"))
    raw["results"][1]["section"] = ""
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"results\[1\]: missing section"):
        P.load_paper(path)
    raw["results"][1] = dict(raw["results"][0])
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    with pytest.raises(ConfigError, match="id 'table2' is used twice"):
        P.load_paper(path)


@pytest.mark.parametrize("ours, expected", [
    (P.Reproduction("v", P.Scale(18, 600, 9), True), "reproduced"),
    (P.Reproduction("v", P.Scale(4, 600), True), "reproduced at smaller scale"),
    (P.Reproduction("v", P.Scale(families=5), True), "reproduced at smaller scale"),
    (P.Reproduction("v", P.Scale(4, 600), False), "contradicted"),
    (P.Reproduction("v", P.Scale(4, 600), None, "no key here"), "not reproducible here (no key here)"),
])
def test_the_verdict_rule(ours, expected):
    result = P.PaperResult("x", "1", "Table 2", "r", "v", P.Scale(18, None, 9))
    assert P.verdict(result, ours) == expected


def test_scale_compares_only_what_both_state():
    assert not P.Scale(note="closed form").smaller_than(P.Scale(note="closed form"))
    assert not P.Scale(4).smaller_than(P.Scale(items=600))
    assert P.Scale(4, 600).text() == "4 models, 600 items" and P.Scale().text() == "not stated"


def test_compare_answers_every_result_and_only_those():
    answers = {r.id: P.Reproduction("v", r.scale, True) for r in PAPER.results}
    rows = P.compare(PAPER, answers)
    assert [r.paper.id for r in rows] == LISTED
    html = P.rows_html(rows)
    assert all(f'data-result="{i}"' in html for i in LISTED) and html.count("<tr data-result") == len(LISTED)
    with pytest.raises(ConfigError, match="no reproduction for result.* table2"):
        P.compare(PAPER, {k: v for k, v in answers.items() if k != "table2"})
    with pytest.raises(ConfigError, match="unknown result.* extra"):
        P.compare(PAPER, {**answers, "extra": answers["table2"]})


def effect(model, acc_strict, acc_seq, p):
    return SimpleNamespace(model=model, label_set="L4_circled", acc_strict=acc_strict, acc_seq=acc_seq, p_value=p)


def test_recovery_is_judged_cell_by_cell():
    up = effect("big", 0.235, 0.445, 1e-12)
    assert P.sequence_recovers([up], 4, 600).holds is True
    chance = P.sequence_recovers([up, effect("tiny", 0.28, 0.267, 0.23)], 4, 600)
    assert chance.holds is None and "tiny / L4_circled (0.280 vs 0.267, p = 0.23)" in chance.why
    assert P.sequence_recovers([up, effect("bad", 0.4, 0.3, 0.001)], 4, 600).holds is False


def shift(observed, p95, n=4):
    floor = NoiseFloor(p95 / 2, p95, np.array([0.0, p95]))
    own = NoiseFloor(p95 / 4, p95 / 2, np.array([0.0, p95 / 2]))
    return SimpleNamespace(models=[f"m{i}" for i in range(n)], n_items=600, observed=observed, floor=floor,
                           floor_a=own, floor_b=own, multiple_of_mean=observed / floor.mean,
                           multiple_of_p95=observed / p95)


def test_a_footrule_inside_a_floor_wider_than_the_papers_effect_has_no_power():
    result = PAPER.result("footrule_strict")  # 0.472
    assert P.footrule_row(result, shift(0.6, 0.5), "M6-strict").holds is True
    weak = P.footrule_row(result, shift(0.125, 0.5), "M6-strict")
    assert weak.holds is None and weak.why.startswith("no power with 4 models")
    assert "n = 4 models" in weak.value and "⌊n²/2⌋" in weak.value
    assert P.footrule_row(result, shift(0.1, 0.3), "M6-strict").holds is False  # the floor would have shown it


def test_a_floor_at_the_largest_attainable_footrule_is_no_power_not_within_the_floor():
    result = PAPER.result("footrule_lenient")  # 0.167: below the floor's p95, so not the other no-power case
    row = P.footrule_row(result, shift(0.125, 1.0, n=3), "M6-lenient")
    assert row.holds is None
    assert row.why == "no power with 3 models: the floor's p95 1.000 is the largest footrule 3 models can reach"
    assert "n = 3 models, normalised by ⌊n²/2⌋ = 4" in row.value
    assert "each protocol's own p95: 0.500 and 0.500" in row.value


def test_the_closed_forms_against_the_papers_values():
    from cube.analysis.credit import expected_score, load_exam, random_guess_baseline, resolve_scheme

    row = P.exact_value(PAPER.result("guesser_expectation"), "expected", expected_score(resolve_scheme("ladder")), "")
    assert row.holds is True
    percents = {}
    for name in ("thpt2025_standard", "thpt2025_math"):
        exam = load_exam(name)
        percents[name] = 100 * random_guess_baseline(exam).total / exam.total_points
    assert P.baseline_range(PAPER.result("exam_baselines"), percents, "").holds is True
    assert P.baseline_range(PAPER.result("exam_baselines"), {"a": Fraction(20)}, "").holds is False


def test_the_partial_collision_of_a_missing_tokenizer_names_its_substitute():
    prediction = read_prediction(REPO_ROOT / "data" / "predictions" / "audit_frozen.json")
    report = SimpleNamespace(cells=[])
    row = P.partial_collision(PAPER.result("internlm3_partial"), prediction, report)
    assert row.holds is None and row.why.startswith("internlm3: no offline source")
    assert row.substitute.startswith("smollm2's 甲 乙 丙 丁 partial collision (丙 = 丁")


def test_the_audit_row_counts_only_the_papers_families():
    prediction = read_prediction(REPO_ROOT / "data" / "predictions" / "audit_frozen.json")
    row = P.audit_matrix(PAPER, prediction, True)
    assert row.scale == P.Scale(families=5) and row.holds is True
    assert "not available offline: glm4, internlm3, yi1.5, map-neo" in row.value and "audited besides: smollm2" in row.value
    assert P.verdict(PAPER.result("table2"), row) == "reproduced at smaller scale"


def test_a_ranking_claim_about_other_models_is_not_contradicted_by_ours():
    kept = P.whitespace_rank(["a", "b", "c"], [0.5, 0.4, 0.3], [0.5, 0.3, 0.4], 600)
    assert kept.holds is None and "keep their places" in kept.value
    assert P.whitespace_rank(["a", "b"], [0.5, 0.4], [0.3, 0.4], 600).holds is True


def test_leakage_reads_claim_5s_values_and_says_when_it_did_not_run():
    assert P.leakage_row({"leak_n_records": "48,140", "leak_hits": "0"}, 4).holds is True
    assert P.leakage_row({"leak_n_records": "48,140", "leak_hits": "2"}, 4).holds is False
    skipped = P.leakage_row({"leak_hits": "not run here (no benchmark items)"}, 4)
    assert skipped.holds is None and "benchmark items" in skipped.why
    assert P.leakage_row(None, 4).holds is None
