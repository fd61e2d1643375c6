"""cube report's numbers are cube rescore's and cube explain's on the same store, its tests are
exact McNemar with Holm over every comparison (checked against scipy and a naive Holm), and a
store that cannot support a section gets the one line saying how to produce it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from scipy.stats import binomtest

from cube.cli import main
from cube.config import REPO_ROOT
from cube.errors import ConfigError
from cube.protocol.chat import record_context
from cube.report.analysis import analyse
from cube.report.model import read_analysis
from cube.report.sensitivity import minimum_detectable_effect

RECORDS = REPO_ROOT / "data" / "records"
HARNESS = REPO_ROOT / "data" / "harnesses" / "cube-smollm2-24"
EVALSCOPE = REPO_ROOT / "data" / "imported" / "evalscope-smollm2"
INSPECT = REPO_ROOT / "data" / "imported" / "inspect-smollm2"
LM_EVAL = REPO_ROOT / "data" / "imported" / "lm-eval-smollm2"


@pytest.fixture(scope="module")
def archived():
    return analyse([RECORDS], replicates=200)


def _rescore_json(capsys, store: Path, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["rescore", str(store), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_cell_is_cube_rescores_overall_micro_row(archived, capsys):
    rows = _rescore_json(capsys, RECORDS)["rows"]
    micro = {(r["model"], r["scorer"], r["label_set"], r["context"], r["shots"], r["order"]): r
             for r in rows if r["level"] == "overall" and r["aggregation"] == "micro"}
    assert len(archived.cells) == len(micro) == 100
    for cell in archived.cells:
        context = record_context(cell.cue, cell.chat_template)
        r = micro[(cell.model, cell.scorer, cell.label_set, context, cell.shots, cell.order)]
        assert (cell.n, cell.n_correct, cell.accuracy, cell.ci_lo, cell.ci_hi) == (
            r["n"], r["n_correct"], r["accuracy"], r["ci_lo"], r["ci_hi"])
        assert cell.within_noise_rate == r["within_noise_rate"]


def test_a_comparison_is_cube_rescore_versus_with_an_exact_mcnemar_p_and_a_naive_holm(archived, capsys):
    model = "qwen2.5-coder-1.5b-instruct"
    c = next(c for c in archived.comparisons if c.model == model and c.dimension == "label_set"
             and c.level == "L4_circled")
    versus = _rescore_json(capsys, RECORDS, "--model", model, "--scorer", "M1-seq", "--label-set", "L1_halfwidth",
                           "--context", "zh_cue", "--shots", "0", "--order", "original",
                           "--versus", "label_set=L4_circled")["overall"]
    assert (c.n, c.acc_a, c.acc_b, c.delta, c.delta_lo, c.delta_hi, c.p_value) == (
        versus["n"], versus["acc_a"], versus["acc_b"], versus["delta"], versus["delta_lo"], versus["delta_hi"],
        versus["p_value"])
    b, d = c.a_only_right, c.b_only_right
    assert c.p_value == pytest.approx(binomtest(b, b + d, 0.5).pvalue, rel=1e-9)
    # Holm by hand: sorted p, multiplied by the number left, running maximum, capped at 1
    ps = [x.p_value for x in archived.comparisons]
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    holm, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        holm[i] = running
    assert [x.p_holm for x in archived.comparisons] == pytest.approx(holm)


def test_pairs_at_two_precisions_are_refused_never_compared(archived):
    refused = [r for r in archived.refused if "precision" in r.reason]
    assert refused, "the archive pairs bf16 and fp32 cells (5-shot): they must be refused"
    for c in archived.comparisons:
        assert "mixed" not in c.precision and "+" not in c.precision


def test_four_models_give_the_rank_section_and_one_summary_sentence_each(archived):
    assert archived.ranks and all(len(r.models) == 4 for r in archived.ranks)
    assert len(archived.summaries) == 4
    assert archived.summaries[2].startswith("qwen2.5-coder-1.5b-instruct: across 8 cells, M1-seq ranges 0.45–0.50")
    assert "harnesses" in archived.missing and "cube import" in archived.missing["harnesses"]


def test_the_analysis_reads_back_from_its_json_unchanged(archived, tmp_path):
    path = tmp_path / "report.json"
    path.write_text(archived.to_json(), encoding="utf-8")
    assert read_analysis(path) == archived
    path.write_text(json.dumps({"version": "cube.report/0"}), encoding="utf-8")
    with pytest.raises(ConfigError, match="version 'cube.report/0', expected cube.report/1"):
        read_analysis(path)


@pytest.mark.parametrize(("imported", "label"), [(EVALSCOPE, "EvalScope"), (INSPECT, "inspect_ai")])
def test_a_cube_run_and_an_import_of_one_model_get_explains_gap(capsys, imported, label):
    a = analyse([HARNESS, imported], replicates=100)
    assert len(a.harness_gaps) == 1
    gap = a.harness_gaps[0]
    assert gap.side_a.startswith("cube: ") and gap.side_b.startswith(f"{label}: ")
    # the same numbers cube explain prints for those two cells
    cell_a = next(c for c in a.cells if c.store == str(HARNESS) and gap.side_a.endswith(c.name))
    cell_b = next(c for c in a.cells if c.store == str(imported) and gap.side_b.endswith(c.name))
    capsys.readouterr()
    assert main(["explain", f"{HARNESS}:scorer={cell_a.scorer},label_set={cell_a.label_set},context={cell_a.cue}",
                 f"{imported}:scorer={cell_b.scorer},label_set={cell_b.label_set},context={cell_b.cue}",
                 "--json", "--bootstrap", "200"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert gap.n_common == explained["items"]["both"]
    assert gap.gap == pytest.approx(explained["gap"]["value"])
    assert gap.score_a == pytest.approx(explained["a"]["score"]["value"])
    # the import's model is kept apart from cube's (one store each), never pooled
    assert {c.model for c in a.cells} == {"smollm2-135m-instruct",
                                         f"smollm2-135m-instruct ({label}, {imported.name})"}


def test_a_renamed_model_keeps_its_columns_type_so_the_sections_can_join_two_stores():
    """cube's run and lm-eval's import of one model: the import's model is renamed, and the renamed
    column had lost its not-null flag, so joining the two stores' tables for the rankings section
    raised ArrowInvalid (a schema mismatch) instead of a report."""
    from cube.report.stores import load_stores

    stores = load_stores([HARNESS, LM_EVAL], allow_incomplete=False)
    assert len({s.table.schema.field("model") for s in stores}) == 1
    a = analyse([HARNESS, LM_EVAL], replicates=50)
    assert {c.model for c in a.cells} == {"smollm2-135m-instruct", f"smollm2-135m-instruct (lm-eval, {LM_EVAL.name})"}


def test_a_store_without_the_cells_gets_one_line_per_missing_section():
    a = analyse([EVALSCOPE], replicates=50)
    assert "--scorers M1-strict" in a.missing["audit"]
    assert "ranks" in a.missing and "harnesses" in a.missing
    assert not a.audit and not a.ranks


def test_an_incomplete_store_is_refused_unless_allowed_and_then_marked(tmp_path):
    store = tmp_path / "killed"
    shutil.copytree(HARNESS, store)
    manifest = json.loads((store / "MANIFEST.json").read_text(encoding="utf-8"))
    name = sorted(manifest["files"])[-1]
    del manifest["files"][name]
    (store / name).unlink()
    (store / "MANIFEST.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    for log in store.glob("*/runlog.jsonl"):  # a killed run logs nothing
        log.unlink()
    with pytest.raises(ConfigError, match="incomplete store: .*--allow-incomplete"):
        analyse([store])
    marked = analyse([store], allow_incomplete=True, replicates=50)
    assert marked.incomplete and str(store) in marked.incomplete[0]


def test_bad_reference_and_out_are_one_line_before_any_record_is_read(tmp_path, capsys):
    assert main(["report", str(HARNESS), "--out", str(tmp_path / "r"), "--reference", "label_set=L9"]) == 2
    assert "--reference label_set=L9: no cell of these stores has it" in capsys.readouterr().err
    assert main(["report", str(HARNESS), "--out", str(tmp_path / "r"), "--reference", "colour=red"]) == 2
    assert "FIELD one of scorer" in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["report", str(HARNESS), "--out", str(busy)]) == 2
    assert "not a cube report" in capsys.readouterr().err
    assert (busy / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert main(["report", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r")]) == 2
    assert "no such store" in capsys.readouterr().err


def test_the_mde_solves_connors_sample_size_formula():
    from scipy.stats import norm

    n, psi = 600, 0.3
    d = minimum_detectable_effect(n, psi)
    za, zb = norm.ppf(0.975), norm.ppf(0.8)
    assert (za * psi ** 0.5 + zb * (psi - d * d) ** 0.5) ** 2 / d ** 2 == pytest.approx(n, rel=1e-6)
    assert minimum_detectable_effect(5, 0.01) is None  # nothing detectable with 5 items
