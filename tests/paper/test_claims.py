"""The sources' results as quoted data (cube.paper.citations), the verdict rule (cube.paper.claims), the
rows' rendering (cube.paper.claims_render) and the row builders (cube.paper.claims_paper, claims_whitespace,
claims_ladder, claims_practice)."""

from __future__ import annotations

from dataclasses import replace

import os
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from cube.analysis.footrule import NoiseFloor
from cube.config import REPO_ROOT
from cube.errors import ConfigError
from cube.models_config import study_checkpoints
from cube.paper.citations import PaperResult, Scale, load_paper, number_in_quote, quote_found, scalars
from cube.paper.claims import (IMPLEMENTED, NOT_HERE, NO_POWER, REPRODUCED, SMALLER, Reproduction, Row, compare,
                               verdict, verdict_counts)
from cube.paper.claims_ladder import LadderGap, baseline_range, exact_value, ladder_accuracy_not_predict, ladder_gap
from cube.paper.claims_paper import (audit_matrix, collisions_all_way, degenerate_cells, footrule_row, leakage_row,
                                     partial_collision, recovery_cells, sequence_recovers, timing_row)
from cube.paper.claims_practice import (CotComparison, ceval_items, ceval_structure, cot_vs_answer_only, few_shot_dev,
                                        parse_failure_row)
from cube.paper.claims_render import not_reproduced_text, rows_html, verdict_summary
from cube.paper.claims_whitespace import (CalibrationRatio, WhitespaceEffect, whitespace_accuracy, whitespace_ece,
                                          whitespace_rank)
from cube.tokenizers.audit import read_prediction

PAPER = load_paper()
PREDICTION = read_prediction(REPO_ROOT / "data" / "predictions" / "audit_frozen.json")
CHECKPOINTS = study_checkpoints()
REFERENCES = Path(os.environ.get("CUBE_REFERENCES", REPO_ROOT.parent / "shared" / "references"))


def reference_text(source: str) -> str:
    path = REFERENCES / PAPER.sources[source].file
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the source texts are not at {REFERENCES} (set CUBE_REFERENCES)")
        pytest.skip(f"the source texts are not at {REFERENCES} (set CUBE_REFERENCES)")
    return path.read_text(encoding="utf-8")


# ---- the sources, quoted ------------------------------------------------------------------------

def test_the_papers_scale_is_its_own_7_families_18_checkpoints_12925_items():
    assert PAPER.title.startswith("Same Exam, Different Scores") and PAPER.venue == "NLPCC 2026"
    assert PAPER.citation.startswith("Zhang and Xia, ")
    assert PAPER.scale == Scale(models=18, items=12925, families=7, note=PAPER.scale.note)
    assert len(PAPER.families) == 7 and PAPER.families["Qwen2.5/Qwen3"] == ("qwen2.5", "qwen3", "r1-distill-qwen")
    assert len(PAPER.tokenizers) == 9 and PAPER.benchmark == "C-Eval + CMMLU"
    roles = [c.role for c in CHECKPOINTS.values()]
    assert len(CHECKPOINTS) == 18 and roles.count("label") == PAPER.label_scoring_models == 16


@pytest.mark.parametrize("result", PAPER.results, ids=lambda r: r.id)
def test_every_result_quotes_its_source_verbatim_and_its_numbers_are_in_the_quote(result):
    text = reference_text(result.source)
    assert quote_found(result.quote, text), f"{result.id}: quote not in {PAPER.sources[result.source].file}"
    numbers = {k: v for k, v in result.numbers.items() if k != "matrix"}
    for value in scalars(numbers):
        assert number_in_quote(value, result.quote), f"{result.id}: {value!r} is not in its quote"


@pytest.mark.parametrize("key", sorted(PAPER.sources))
def test_every_sources_scale_is_quoted_from_it(key):
    source = PAPER.sources[key]
    text = reference_text(key)
    assert quote_found(source.quote, text) and quote_found(source.scale_quote, text)
    for value in (source.scale.models, source.scale.items, source.scale.families):
        if value is not None:
            stated = number_in_quote(value, source.quote + source.scale_quote)
            # "八个模型": the ladder study spells its model count in Chinese
            assert stated or (key == "ladder" and value == 8 and "八个模型" in source.scale_quote), (key, value)


def test_table2_is_the_papers_matrix_row_by_row():
    text = reference_text("paper")
    matrix = PAPER.result("table2").numbers["matrix"]
    assert sorted(matrix) == sorted(PAPER.tokenizers)
    for row, cells in matrix.items():
        line = f"{row} {{" + ", ".join(f"'{ls}': '{v}'" for ls, v in cells.items()) + "}"
        assert quote_found(line, text), line


def test_the_quote_checks_can_fail():
    assert not quote_found("12 of 65 (16 label-scoring", reference_text("paper"))
    assert number_in_quote(0.02, "超过 2% 就") and not number_in_quote(0.03, "超过 2% 就")
    assert number_in_quote(12925, "C-Eval + CMMLU, 12,925 shared items")
    assert number_in_quote(11, "Eleven of the twelve") and not number_in_quote(10, "Eleven of the twelve")


def test_each_non_paper_result_names_a_source_other_than_the_paper():
    by_claim = {r.id: r.source for r in PAPER.results}
    assert {by_claim[i] for i in ("whitespace_accuracy", "whitespace_ece", "whitespace_rank")} == {"whitespace"}
    assert {by_claim[i] for i in ("guesser_expectation", "exam_baselines", "ladder_gap")} == {"ladder"}
    assert {by_claim[i] for i in ("ceval_structure", "few_shot_dev", "cot_vs_answer_only")} == {"practice"}
    assert PAPER.result("ladder_gap").scale.models == 8 and PAPER.result("whitespace_ece").scale.models == 15


def test_load_paper_names_the_bad_entry(tmp_path):
    raw = yaml.safe_load((REPO_ROOT / "config" / "paper.yaml").read_text(encoding="utf-8"))
    raw["results"][1]["quote"] = ""
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"results\[1\]: missing quote"):
        load_paper(path)
    raw["results"][1] = dict(raw["results"][0], source="nowhere")
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown source 'nowhere'"):
        load_paper(path)
    raw["results"][1] = dict(raw["results"][0])
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    with pytest.raises(ConfigError, match="id 'table2' is used twice"):
        load_paper(path)


# ---- the verdict rule ---------------------------------------------------------------------------

@pytest.mark.parametrize("ours, expected", [
    (Reproduction("v", Scale(18, 12925, 7), True), "reproduced"),
    (Reproduction("v", Scale(4, 600), True), "reproduced at smaller scale"),
    (Reproduction("v", Scale(families=5), True), "reproduced at smaller scale"),
    (Reproduction("v", Scale(4, 600), False), "contradicted"),
    (Reproduction("v", Scale(4, 600), None, "no key here"), "not reproducible here (no key here)"),
    (Reproduction("v", Scale(4, 600), None, "at chance", no_power=True), "no power at this scale (at chance)"),
    (Reproduction("v", Scale(), True, kind="setting"), "implemented as the source states"),
    (Reproduction("v", Scale(), False, kind="setting"), "implemented differently from the source"),
])
def test_the_verdict_rule(ours, expected):
    result = PaperResult("x", "1", "paper", "Table 2", "r", "v", "q", Scale(18, 12925, 7))
    assert verdict(result, ours) == expected


def test_a_setting_is_never_counted_as_reproduced():
    result = PAPER.result("few_shot_dev")
    row = few_shot_dev(result, 4, 134, "cmmlu", 5)
    assert verdict(result, row) == IMPLEMENTED
    rows = [Row(result, row, verdict(result, row))]
    counts = verdict_counts(rows)
    assert counts[REPRODUCED] == counts[SMALLER] == 0 and counts[IMPLEMENTED] == 1
    assert verdict_summary(rows).startswith("Of 0 results that state something testable, 0 were tested here")
    parse = parse_failure_row(PAPER.result("parse_failure_warning"), 0.02, [], 3)
    assert verdict(PAPER.result("parse_failure_warning"), parse) == IMPLEMENTED
    smoke = timing_row(PAPER.result("smoke_seconds"), 4.0, "cube smoke")
    assert verdict(PAPER.result("smoke_seconds"), smoke) == IMPLEMENTED


def test_scale_compares_only_what_both_state():
    assert not Scale(note="closed form").smaller_than(Scale(note="closed form"))
    assert not Scale(4).smaller_than(Scale(items=600))
    assert Scale(cells=48).smaller_than(Scale(cells=64))
    assert Scale(4, 600).text() == "4 models, 600 items" and Scale().text() == "not stated"


def test_compare_answers_every_result_and_only_those():
    answers = {r.id: Reproduction("v", r.scale, True) for r in PAPER.results}
    rows = compare(PAPER, answers)
    ids = [r.id for r in PAPER.results]
    html = rows_html(rows, PAPER)
    assert all(f'data-result="{i}"' in html for i in ids) and html.count("<tr data-result") == len(ids)
    assert html.index("verdict-") < html.index(PAPER.result("table2").result)  # the verdict comes first
    with pytest.raises(ConfigError, match="no reproduction for result.* table2"):
        compare(PAPER, {k: v for k, v in answers.items() if k != "table2"})
    with pytest.raises(ConfigError, match="unknown result.* extra"):
        compare(PAPER, {**answers, "extra": answers["table2"]})


# ---- the paper's degenerate cells ---------------------------------------------------------------

def test_degenerate_cells_rest_on_table2_row_by_row_and_the_roster_count_is_a_settings_check():
    """Issue 47: "9 of its 12" counted checkpoints of our own 16-model roster, which copies the
    paper's and so reproduces its 12 by construction. The verdict rests on Table 2's rows whose
    tokenizer is here (3 DEGEN of 20 cells under zh_cue, 3 families); the roster is a check."""
    row = degenerate_cells(PAPER, PAPER.result("degenerate_cells"), PREDICTION, CHECKPOINTS)
    assert row.holds is True and row.scale == Scale(families=3, cells=20)
    assert "the frozen audit marks 3 of 20 cells DEGEN, exactly Table 2's 3" in row.value
    assert ("A check of our settings, not evidence: our 16-model roster (config/models.yaml) times Table 2 gives "
            "the paper's 12 of 64 by construction; 48 of those cells can be audited here (9 DEGEN)") in row.value
    assert verdict(PAPER.result("degenerate_cells"), row) == SMALLER
    # the verdict does not move with the roster: dropping checkpoints changes the check only
    smollm2 = [c for c in PREDICTION["cells"] if c["family"] == "smollm2" and c["context"] == "zh_cue"
               and c["verdict"] == "DEGEN"]
    assert len(smollm2) == 3 and "smollm2" not in row.value


def test_a_prediction_that_departs_from_table2_contradicts_it():
    changed = dict(PREDICTION, cells=[dict(c, verdict="max1tok", collision_groups=[])
                                      if (c["family"], c["label_set"], c["context"]) == ("qwen3", "L4_circled", "zh_cue")
                                      else c for c in PREDICTION["cells"]])
    row = degenerate_cells(PAPER, PAPER.result("degenerate_cells"), changed, CHECKPOINTS)
    assert row.holds is False and row.why == "differs in qwen3 / L4_circled"
    matrix = audit_matrix(PAPER, PAPER.result("table2"), changed, True)
    assert matrix.holds is False and "qwen3 / L4_circled: paper DEGEN, here max1tok" in matrix.why


def test_table2_row_compares_every_audited_cell():
    row = audit_matrix(PAPER, PAPER.result("table2"), PREDICTION, True)
    assert row.holds is True and row.scale == Scale(families=3, cells=20)
    assert "no offline tokenizer: glm4, internlm3, yi1.5, map-neo" in row.value
    assert "audited besides (not in the paper): smollm2" in row.value
    assert verdict(PAPER.result("table2"), row) == SMALLER
    assert audit_matrix(PAPER, PAPER.result("table2"), PREDICTION, False).holds is False


def test_the_audited_collisions_are_all_way():
    row = collisions_all_way(PAPER, PAPER.result("collisions_all_way"), PREDICTION, CHECKPOINTS)
    assert row.holds is True and row.scale == Scale(families=1, cells=3)
    assert "3 of its 3 degenerate cells in rows audited here are all-way" in row.value
    assert "its other degenerate rows (glm4, internlm3, yi1.5) cannot be audited here" in row.value
    assert "A check of our settings, not evidence" in row.value


# ---- recovery in the flagged cells --------------------------------------------------------------

def effect(model, acc_strict, acc_seq, n=600):
    return SimpleNamespace(model=model, label_set="L4_circled", acc_strict=acc_strict, acc_seq=acc_seq, n_paired=n)


FAMILIES = {"big": "qwen2.5", "tiny": "qwen2.5", "demo": "smollm2"}


def test_a_chance_level_flagged_cell_has_no_power():
    cells = recovery_cells([effect("big", 0.235, 0.445), effect("tiny", 0.235, 0.268)],
                           {"big": (302, 600), "tiny": (145, 600)})
    assert [c.verdict for c in cells] == ["reproduced", "no power"]
    row = sequence_recovers(cells, PAPER, FAMILIES, 600)
    assert row.holds is True and "1 cell without power" in row.why
    only_tiny = recovery_cells([effect("tiny", 0.235, 0.268)], {"tiny": (145, 600)})
    none = sequence_recovers(only_tiny, PAPER, FAMILIES, 600)
    assert none.holds is None and none.no_power and verdict(PAPER.result("sequence_recovers"), none).startswith(NO_POWER)


def test_recovery_is_judged_against_chance_not_the_tiebreak_and_holm_corrected():
    # above the tie-break (0.235) but not above chance once corrected over two cells
    weak = recovery_cells([effect("big", 0.235, 0.285), effect("tiny", 0.235, 0.27)],
                          {"big": (302, 600), "tiny": (145, 600)})
    assert weak[0].verdict == "contradicted" and weak[0].p_seq >= 0.05
    row = sequence_recovers(weak, PAPER, FAMILIES, 600)
    assert row.holds is False and "big / L4_circled" in row.why


def test_a_cell_that_recovers_less_than_its_own_abcd_accuracy_on_the_same_items_says_so():
    """0.445 against its own ABCD 0.503 on the same 600 items, McNemar p 3.7e-4 (issues 33, 47):
    the verdict says partial and that it rests on one cell of one model, and the page prints the
    "most, not all" sentence once (it was in both the value and the reason, so twice in a cell)."""
    (cell,) = recovery_cells([effect("big", 0.235, 0.445)], {"big": (302, 600)})
    partial = replace(cell, same_items_reference=0.503, same_items_p=3.7e-4, same_items_n=600)
    row = sequence_recovers([partial], PAPER, FAMILIES, 600)
    assert row.holds is True
    assert ("big / L4_circled recovers most of its accuracy, not all: M1-seq 0.445 against its own ABCD 0.503 on "
            "the same items (exact McNemar p = 0.00037; 77% of its accuracy above chance)") in row.why
    assert verdict(PAPER.result("sequence_recovers"), row) == (
        "reproduced at smaller scale (partial: rests on 1 cell of 1 model (big / L4_circled))")
    page = rows_html([Row(PAPER.result("sequence_recovers"), row, verdict(PAPER.result("sequence_recovers"), row))])
    assert page.count("recovers most of its accuracy, not all") == 1
    whole = replace(cell, same_items_reference=0.45, same_items_p=0.8, same_items_n=600)
    full = sequence_recovers([whole], PAPER, FAMILIES, 600)
    assert "not all" not in full.why and full.verdict_note == "rests on 1 cell of 1 model (big / L4_circled)"


def test_cells_of_models_outside_the_papers_families_are_reported_not_counted():
    cells = recovery_cells([effect("demo", 0.235, 0.232)], {"demo": (164, 600)})
    row = sequence_recovers(cells, PAPER, FAMILIES, 600)
    assert row.holds is None and not row.no_power and "no flagged cell of the paper's families" in row.value


# ---- claim 3 ------------------------------------------------------------------------------------

def shift(observed, p95, n=4):
    floor = NoiseFloor(p95 / 2, p95, np.array([0.0, p95]))
    own = NoiseFloor(p95 / 4, p95 / 2, np.array([0.0, p95 / 2]))
    return SimpleNamespace(models=[f"m{i}" for i in range(n)], n_items=600, observed=observed, floor=floor,
                           floor_a=own, floor_b=own, multiple_of_mean=observed / floor.mean,
                           multiple_of_p95=observed / p95)


def test_a_footrule_inside_a_floor_wider_than_the_papers_effect_has_no_power():
    result = PAPER.result("footrule_strict")  # 0.472
    assert footrule_row(result, shift(0.6, 0.5), "M6-strict").holds is True
    weak = footrule_row(result, shift(0.125, 0.5), "M6-strict")
    assert weak.holds is None and weak.no_power
    assert weak.why == ("no power at n = 4 for a shift of 0.472: within the floor, and only a footrule above "
                        "its 95th percentile 0.500 could exceed it")
    assert "n = 4 models" in weak.value and "B = 2" in weak.value and "Monte Carlo" in weak.value
    assert footrule_row(result, shift(0.1, 0.3), "M6-strict").holds is False  # the floor would have shown it


def test_a_floor_at_the_largest_attainable_footrule_is_no_power():
    row = footrule_row(PAPER.result("footrule_lenient"), shift(0.125, 1.0, n=3), "M6-lenient")
    assert row.holds is None and row.no_power
    assert row.why == "no power at n = 3: the floor's 95th percentile is the largest footrule 3 models can reach"


# ---- the whitespace study -----------------------------------------------------------------------

def ws(model, delta, p_holm, power, lo=-0.01, hi=0.02):
    return WhitespaceEffect(model, 600, 0.25, 0.25 + delta, delta, lo, hi, p_holm, p_holm, power)


def test_whitespace_accuracy_separates_no_power_from_contradiction():
    result = PAPER.result("whitespace_accuracy")
    low = whitespace_accuracy(result, [ws("a", 0.01, 1, 0.2), ws("b", 0.045, 0.23, 0.17), ws("c", -0.003, 1, 1.0)], 600)
    assert low.holds is None and low.no_power and "2 of 3 models change in the source's direction" in low.value
    flat = whitespace_accuracy(result, [ws("a", 0.0, 1, 0.9), ws("b", 0.0, 1, 0.95), ws("c", 0.01, 1, 0.2)], 600)
    assert flat.holds is False
    assert whitespace_accuracy(result, [ws("a", -0.03, 0.01, 0.9)], 600).holds is False
    assert whitespace_accuracy(result, [ws("a", 0.03, 0.01, 0.9), ws("b", 0.02, 0.02, 0.9)], 600).holds is True


def test_a_power_computed_at_the_floored_discordance_says_so():
    """SmolLM2's whitespace pair: 6 discordant items of 600 (1 %), below the 2.5 points the source
    found, so its power is computed at a discordance floored there; the row must say it."""
    from cube.analysis.paired_tests import mcnemar_power

    result = PAPER.result("whitespace_accuracy")
    floored = replace(ws("smollm2", 0.0, 1, mcnemar_power(600, 0.025, 0.025)), discordant=6)
    row = whitespace_accuracy(result, [floored], 600)
    assert "power 1.00, at a discordance floored at 2.5 % (observed 6 pairs, 1.0 %)" in row.value
    assert "at a discordance floored" not in whitespace_accuracy(result, [replace(floored, discordant=60)], 600).value
    assert "(exact McNemar power at each model's n and observed discordance, floored at 2.5 points)" in row.value


def ratio(model, a, b, lo, hi):
    return CalibrationRatio(model, a, b, a / b, lo, hi, 10, 2000)


def test_the_ece_rule_is_one_rule_for_every_model_whatever_its_accuracy():
    """Issue 47: the falls of two chance-level models counted as support while the chance-level
    SmolLM2's rise was excused as "confident guessing". Every model now counts alike, with its
    accuracy and confidence shown and not interpreted; the paper page's one-precision numbers."""
    def ratio(model, a, b, lo, hi, acc=None, conf=None):
        return CalibrationRatio(model, a, b, a / b, lo, hi, 10, 2000, "bfloat16", acc, conf)

    ratios = [ratio("gemma", 0.382, 0.110, 2.8, 4.6, 0.255, 0.36), ratio("qwen", 0.460, 0.141, 2.5, 4.4, 0.253, 0.40),
              ratio("big", 0.180, 0.091, 1.4, 2.8, 0.490, 0.55), ratio("smollm2", 0.328, 0.563, 0.55, 0.61, 0.235, 0.80)]
    row = whitespace_ece(PAPER.result("whitespace_ece"), ratios, 600)
    assert row.holds is True and "guessing" not in row.value
    assert "smollm2 0.328 → 0.563 (0.58× [0.55, 0.61], merged accuracy 0.235, mean confidence 0.80)" in row.value
    assert "gemma 0.382 → 0.110 (3.47× [2.80, 4.60], merged accuracy 0.255, mean confidence 0.36)" in row.value
    assert ("Rule, the same for every model whatever its accuracy: lower (higher) under the merged form when the "
            "interval lies above (below) 1; lower for 3 of 4 (gemma, qwen, big), higher for 1 (smollm2)") in row.value
    assert verdict(PAPER.result("whitespace_ece"), row) == (
        "reproduced at smaller scale (lower for 3 of 4 models, higher for 1)")
    assert "the source's one rise (Qwen 2.5 7B 2.88 → 3.05) carries no significance star" in row.value
    assert "whitespace_ece_reversal" not in {r.id for r in PAPER.results}
    mostly_worse = [ratio("a", 0.1, 0.3, 0.2, 0.5), ratio("b", 0.1, 0.2, 0.3, 0.7), ratio("c", 0.3, 0.1, 2, 4)]
    assert whitespace_ece(PAPER.result("whitespace_ece"), mostly_worse, 600).holds is False
    unclear = [ratio("a", 0.1, 0.11, 0.7, 1.3), ratio("b", 0.3, 0.1, 2, 4)]
    assert whitespace_ece(PAPER.result("whitespace_ece"), unclear, 600).no_power


def test_a_ranking_claim_about_other_models_is_not_contradicted_by_ours():
    kept = whitespace_rank(["a", "b", "c"], [0.5, 0.4, 0.3], [0.5, 0.3, 0.4], 600)
    assert kept.holds is None and "keep their order" in kept.value and "2 of 3 models change rank" in kept.value
    assert "(a first under both forms)" in kept.value  # not "a first under the separate space, a under the merged"
    assert whitespace_rank(["a", "b"], [0.5, 0.4], [0.3, 0.4], 600).holds is True


def test_a_tie_broken_by_the_other_form_counts_as_a_rank_change_as_the_footrule_does():
    # two models tied under one form, separated under the other: the footrule is 1/8 (n = 4), and
    # the rank count must say the same models moved (they share rank 2.5, then take 2 and 3)
    row = whitespace_rank(["a", "b", "c", "d"], [0.5, 0.3, 0.3, 0.2], [0.5, 0.31, 0.3, 0.2], 600)
    assert "2 of 4 models change rank (b, c)" in row.value and "footrule 0.125" in row.value


# ---- the ladder and the practice guide ----------------------------------------------------------

def test_the_closed_forms_against_the_ladder_studys_values():
    from cube.analysis.credit import expected_score, load_exam, random_guess_baseline, resolve_scheme

    row = exact_value(PAPER.result("guesser_expectation"), "expected", expected_score(resolve_scheme("ladder")), "")
    assert row.holds is True
    percents = {}
    for name in ("thpt2025_standard", "thpt2025_math"):
        exam = load_exam(name)
        percents[name] = 100 * random_guess_baseline(exam).total / exam.total_points
    assert baseline_range(PAPER.result("exam_baselines"), percents, "").holds is True
    assert baseline_range(PAPER.result("exam_baselines"), {"a": Fraction(20)}, "").holds is False


def test_accuracy_not_predicting_the_gap_has_no_power_with_four_models():
    gaps = [LadderGap(m, 67, acc, gap) for m, acc, gap in
            [("a", 0.25, 0.15), ("b", 0.29, 0.157), ("c", 0.37, 0.175), ("d", 0.38, 0.173)]]
    row = ladder_accuracy_not_predict(gaps)
    assert row.no_power and "smallest attainable p is 0.083" in row.why
    # issue 47: ρ +0.80 with its exact p, 8 of the 24 orderings of 4 models
    assert "+0.80 (exact two-sided p = 0.33, all 24 orderings)" in row.value
    # with what the models judged true: a recast where they call statements true regardless cannot test it
    judged = [replace(g, judged_true=t) for g, t in zip(gaps, (1.0, 0.74, 0.9, 0.8))]
    row = ladder_accuracy_not_predict(judged)
    assert verdict(PAPER.result("ladder_accuracy_not_predict"), row).startswith("not reproducible here")
    assert "judge 74–100 % of statements true (a every one, so its gap is a constant)" in row.why
    assert "statement accuracies of 0.25–0.38 are below a coin flip" in row.why
    assert ladder_gap(PAPER.result("ladder_gap"), gaps).holds is None


def test_the_ceval_map_agrees_with_the_guides_categories_and_is_a_setting():
    from cube.protocol.taxonomy import load_taxonomy

    row = ceval_structure(PAPER.result("ceval_structure"), load_taxonomy("ceval"))
    assert row.holds is True and row.kind == "setting" and "52 subjects" in row.value
    assert verdict(PAPER.result("ceval_structure"), row) == IMPLEMENTED
    assert ceval_items(PAPER.result("ceval_items"), {"dev": 260, "val": 1346, "test": 12342}).holds is True
    assert ceval_items(PAPER.result("ceval_items"), {"dev": 260, "val": 1346, "test": 11000}).holds is False


def cot(model, ao, c, p_holm, fail, extractor="M6-strict"):
    return CotComparison(model, extractor, 67, ao, c, p_holm, p_holm, fail)


def test_cot_where_no_model_passes_the_guides_parse_failure_rule_is_not_testable_and_says_what_was_found():
    """Issue 47: every model's CoT fails to parse on 10–98 % of items, so the guide's statement
    (CoT below answer-only means truncation) cannot be tested here; the rule fell through to "no
    power … no significant difference" beside two Holm-significant drops (−23.9 and −28.4 points)."""
    comparisons = [cot("gemma", 0.313, 0.074, 0.0001, 0.98), cot("qwen-0.5b", 0.403, 0.119, 0.00002, 0.90),
                   cot("qwen-1.5b", 0.537, 0.448, 0.6, 0.10), cot("smollm2", 0.239, 0.224, 1.0, 0.97)]
    row = cot_vs_answer_only(comparisons, 0.02)
    assert row.holds is None and not row.no_power
    assert verdict(PAPER.result("cot_vs_answer_only"), row).startswith(NOT_HERE)
    assert row.why == ("the guide's statement is not testable here: no model's CoT passes the guide's own 2% "
                       "parse-failure rule (M6-strict parse failures 10–98 %), and whether a failure was a truncation "
                       "is not recorded for the archived generations; found: gemma -23.9 points (Holm p = 0.0001, "
                       "98% parse failures), qwen-0.5b -28.4 points (Holm p = 2e-05, 90% parse failures): drops where "
                       "the model cannot follow the answer format")
    recorded = [replace(c, truncation_recorded=c.model != "gemma") for c in comparisons]
    assert "is not recorded for gemma;" in cot_vs_answer_only(recorded, 0.02).why


def test_cot_among_trusted_models_is_kept_out_of_the_counts_for_power():
    from cube.analysis.paired_tests import mcnemar_power

    # 67 pairs, 12 discordant: the exact power against +5 and +10 points, computed here independently
    flat = cot_vs_answer_only([replace(cot("q", 0.53, 0.44, 0.3, 0.01), discordant=12)], 0.02)
    want5, want10 = mcnemar_power(67, 12 / 67, 0.05), mcnemar_power(67, 12 / 67, 0.10)
    assert f"power at n = 67 is {want5:.2f} to detect +5 points, {want10:.2f} to detect +10 points" in flat.why
    two = cot_vs_answer_only([replace(cot("q", 0.53, 0.44, 0.3, 0.01), discordant=12),
                              replace(cot("r", 0.3, 0.35, 0.3, 0.01), discordant=30)], 0.02)
    low = mcnemar_power(67, 30 / 67, 0.05)
    assert f"{low:.2f}–{want5:.2f} to detect +5 points" in two.why
    assert "q points the other way" in flat.why and flat.no_power
    below = cot_vs_answer_only([cot("a", 0.5, 0.3, 0.001, 0.01)], 0.02)
    assert below.holds is False
    above = cot_vs_answer_only([cot("a", 0.4, 0.55, 0.01, 0.0), cot("b", 0.3, 0.06, 0.002, 0.78)], 0.02)
    assert above.holds is True
    lenient_only = cot_vs_answer_only([cot("a", 0.4, 0.55, 0.01, 0.0, extractor="M6-lenient")], 0.02)
    assert lenient_only.holds is None and not lenient_only.no_power


def test_the_summary_counts_as_tested_only_the_rows_whose_test_ran():
    """Issue 47: "Of 22 results tested" counted 9 rows not reproducible here."""
    r = PAPER.result("whitespace_rank")
    rows = ([Row(r, Reproduction("v", Scale(), True), REPRODUCED)] * 4
            + [Row(r, Reproduction("v", Scale(), None, "x"), f"{NOT_HERE} (x)")] * 9
            + [Row(r, Reproduction("v", Scale(), None, "y", no_power=True), f"{NO_POWER} (y)")] * 9)
    assert verdict_summary(rows) == ("Of 22 results that state something testable, 13 were tested here "
                                     "(4 reproduced, 9 no power at this scale) and 9 are not reproducible here")


def test_the_partial_collision_of_a_missing_tokenizer_names_its_substitute():
    report = SimpleNamespace(cells=[])
    row = partial_collision(PAPER.result("internlm3_partial"), PREDICTION, report)
    assert row.holds is None and row.why.startswith("internlm3: no offline source")
    assert row.substitute.startswith("smollm2's 甲 乙 丙 丁 partial collision (丙 = 丁")


def test_leakage_reads_claim_5s_values_and_says_when_it_did_not_run():
    assert leakage_row({"leak_n_records": "48,140", "leak_hits": "0"}, 4).holds is True
    assert leakage_row({"leak_n_records": "48,140", "leak_hits": "2"}, 4).holds is False
    skipped = leakage_row({"leak_hits": "not run here (no benchmark items)"}, 4)
    assert skipped.holds is None and "benchmark items" in skipped.why
    assert leakage_row(None, 4).holds is None


def test_the_abstracts_list_of_what_did_not_reproduce_groups_by_verdict():
    r = PAPER.result("whitespace_rank")
    rows = [Row(r, Reproduction("v", Scale(), None, "x"), "not reproducible here (x)"),
            Row(r, Reproduction("v", Scale(), None, "y", no_power=True), "no power at this scale (y)"),
            Row(r, Reproduction("v", Scale(), True), "reproduced")]
    assert not_reproduced_text(rows) == (f"no power at this scale (1): {r.result}. "
                                         f"not reproducible here (1): {r.result}")


def test_a_verdict_over_a_pair_of_two_precisions_is_refused_not_marked():
    """Issue 47: a figure "[mixed: A bfloat16, B float32 precision, compared anyway]" was printed;
    a verdict now pairs a one-precision rerun or refuses."""
    from cube.errors import PrecisionMismatch

    mixed = replace(ws("a", 0.01, 1, 0.2), precision="mixed: A bfloat16, B float32")
    with pytest.raises(PrecisionMismatch, match="pairs two precisions"):
        whitespace_accuracy(PAPER.result("whitespace_accuracy"), [mixed], 600)
    rerun = replace(mixed, precision="float32 (side B re-run)")
    assert "[float32 (side B re-run)]" in whitespace_accuracy(PAPER.result("whitespace_accuracy"), [rerun], 600).value
