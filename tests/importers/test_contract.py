"""The importer contract (cube.importers.contract) and its registry: one record builder, one writer,
and a protocol every registered importer describes for ``cube explain``."""

from __future__ import annotations

import numpy as np
import pytest

from cube.errors import HarnessImportError
from cube.importers.contract import Decision, Imported, ScoringProtocol, records, write_store
from cube.importers.registry import IMPORTERS, importer_of
from cube.protocol.items import Item
from cube.protocol.scorers import decide
from cube.records.store import read_records

ITEM = Item("cmmlu", "sociology", "test", 3, "q", ("a", "b", "c", "d"), 2)
CELL = ("L1_halfwidth", "zh_cue", 0, "original")


def test_records_are_built_as_the_harness_builds_them():
    scored = Decision(ITEM, "M1-seq", CELL, 2, decide(np.array([-3.0, -1.0, -1.0, -2.0])))
    generated = Decision(ITEM, "M6-strict", CELL, 2, None, pred=None, generation="no idea")
    a, b = records("m", [scored, generated])
    # independent expectations: the first maximum wins and a shared top score is a tie
    assert (a["pred"], a["tied"], a["correct"], a["parse_failed"]) == (1, True, False, False)
    scores = np.array([-3.0, -1.0, -1.0, -2.0])
    assert a["probs"] == pytest.approx((np.exp(scores) / np.exp(scores).sum()).tolist(), rel=1e-6)
    assert (b["pred"], b["parse_failed"], b["probs"], b["generation"]) == (-1, True, [0.0] * 4, "no idea")
    assert all(np.isnan(b["scores"]))


def test_the_writer_refuses_a_used_folder_and_writes_all_or_nothing(tmp_path):
    imported = Imported("m", [Decision(ITEM, "M1-seq", CELL, 2, decide(np.array([0.0, -1.0, -2.0, -3.0])))], [],
                        {"source": "test"})
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(HarnessImportError, match="exists and is not an empty folder"):
        write_store(tmp_path / "used", imported)
    with pytest.raises(HarnessImportError, match="no records to write"):
        write_store(tmp_path / "empty", Imported("m", [], [], {}))
    assert not (tmp_path / "empty").exists()
    write_store(tmp_path / "store", imported)
    assert read_records(tmp_path / "store").column("pred").to_pylist() == [0]


@pytest.mark.parametrize("name", sorted(IMPORTERS))
def test_every_importer_describes_a_cell_of_its_store_without_explain_knowing_it(name):
    importer = IMPORTERS[name]
    assert importer_of({"source": importer.source}) is importer
    protocol = importer.describe({}, {"scorer": "M6-strict", "label_set": "L1_halfwidth", "context": "x",
                                      "shots": 0, "order": "original", "model": "m"}, [], "n")
    assert isinstance(protocol, ScoringProtocol) and protocol.harness == importer.label
    assert protocol.extractor and protocol.aggregation  # an empty manifest still names both
    assert importer_of({"source": "cube-run"}) is None
