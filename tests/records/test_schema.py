"""The record schema's scorer groups come from the scorer table, and its one record builder."""

from __future__ import annotations

import math

import numpy as np

from cube.protocol.items import Item
from cube.protocol.scorers import PASSES, SCORERS, decide
from cube.records import schema


def test_the_groups_are_the_tables_and_keep_their_names_and_order():
    # cube's own first, in the order the archive's readers list them; an import's may follow
    assert schema.SCORER_NAMES[:10] == ("M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "M6-strict", "M6-lenient",
                                        "TF", "M4-char")
    assert schema.LABEL_SCORERS == ("M1-seq", "M1-strict")
    assert schema.CLOZE_SCORERS == ("M2", "M3", "M4", "M5")
    assert schema.GENERATION_SCORERS == ("M6", "M6-cot")
    assert schema.GENERATION_RECORD_SCORERS == ("M6-strict", "M6-lenient")
    assert schema.JUDGEMENT_SCORERS == ("TF",)
    assert schema.ALL_SCORERS == ("M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "M6", "M6-cot", "TF")
    assert (schema.CLOZE_CELL, schema.JUDGEMENT_CELL) == (("-", "cloze", 0, "original"),
                                                           ("-", "judgement", 0, "original"))
    # every run scorer has a pass, every stored name a writer
    assert set(schema.ALL_SCORERS) == {s.name for s in SCORERS.values() if s.pass_kind in PASSES}
    assert set(schema.SCORER_NAMES) == {r for s in SCORERS.values() for r in s.records}
    assert schema.record_names(["TF", "M6-cot", "M6", "M1-seq"]) == ("M1-seq", "M6-strict", "M6-lenient", "TF")


ITEM = Item(benchmark="cmmlu", subject="anatomy", split="test", row=3, question="q", options=("a", "b", "c", "d"),
            answer=2)


def test_a_scored_record_keeps_scores_their_softmax_and_ties():
    row = schema.record_row("m", ITEM, "M1-strict", ("L1", "zh_cue", 0, "original"), 2,
                            decide(np.array([-1.0, -1.0, -3.0, -2.0]), ((0, 1),)),
                            first_token_ids=[5, 5, 6, 7], n_tokens=[1, 1, 1, 1])
    assert set(row) == set(schema.RECORD_SCHEMA.names)
    assert (row["pred"], row["correct"], row["tied"], row["tie_groups"], row["parse_failed"]) == (0, False, True, "0=1", False)
    weights = [math.exp(s) for s in (-1.0, -1.0, -3.0, -2.0)]
    expected = [np.float32(w / math.fsum(weights)) for w in weights]
    assert row["probs"] == [float(p) for p in expected]
    assert (row["uid"], row["qhash"], row["first_token_ids"]) == (ITEM.uid, ITEM.qhash, [5, 5, 6, 7])


def test_a_generation_record_is_one_hot_or_a_parse_failure():
    cell = ("L1", "zh_cue", 0, "original")
    answered = schema.record_row("m", ITEM, "M6-strict", cell, 2, None, pred=2, generation="答案：C")
    assert (answered["pred"], answered["correct"], answered["probs"]) == (2, True, [0.0, 0.0, 1.0, 0.0])
    assert all(math.isnan(s) for s in answered["scores"])
    failed = schema.record_row("m", ITEM, "M6-strict", cell, 2, None, pred=None, generation="?")
    assert (failed["pred"], failed["parse_failed"], failed["correct"], failed["probs"]) == (-1, True, False, [0.0] * 4)
