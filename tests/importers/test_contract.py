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


def test_the_committed_imports_say_their_precision_chat_form_and_exemplars():
    """What `cube explain` compares of the lm-eval and OpenCompass imports, read back from their
    manifests: the precision each run logged (lm-eval's model_dtype, OpenCompass's torch_dtype),
    no chat template (lm-eval logged none; OpenCompass's base model class), and the exemplars."""
    import json

    from cube.analysis.explain_protocol import describe
    from cube.config import REPO_ROOT
    from cube.importers.contract import EXEMPLARS_ANSWER, EXEMPLARS_NONE, dtype_name

    lm = json.loads((REPO_ROOT / "data/imported/lm-eval-smollm2/MANIFEST.json").read_text(encoding="utf-8"))
    runs = lm["metadata"]["lm_eval"]["runs"].values()
    assert {r["config"]["model_args"]["dtype"] for r in runs} == {"float32"}
    cell = {"model": "smollm2-135m-instruct", "scorer": "M1-seq", "label_set": "L1_halfwidth",
            "context": "zh_cue", "shots": 0, "order": "original"}
    p = describe(lm, cell)
    assert (p.dtype, p.chat_template, p.exemplars) == ("float32", "none", EXEMPLARS_NONE)
    oc = json.loads((REPO_ROOT / "data/imported/opencompass-smollm2/MANIFEST.json").read_text(encoding="utf-8"))
    dataset = next(d for d in oc["metadata"]["opencompass"]["datasets"].values() if d["mode"] == "ppl")
    p = describe(oc, {**cell, "scorer": "OC-ppl", "context": dataset["context"], "shots": dataset["shots"]})
    assert p.dtype == "float32" and p.chat_template == "none"
    assert p.exemplars == f"{dataset['shots']} exemplars: {EXEMPLARS_ANSWER}"
    assert "{{exemplars}}" in p.prompt and p.text_without_exemplars() == p.full_text().replace("{{exemplars}}", "")
    assert [dtype_name(v) for v in ("torch.bfloat16", "float32", "auto", None)] == ["bfloat16", "float32", None, None]
    assert p.chat_template_sha256 is None and describe(lm, cell).chat_template_sha256 is None  # no template, no digest
    # the averaging of each harness's own number (agg=harness): OpenCompass's summary is the mean of
    # its subjects (naive_average), lm-eval's groups weight by size (the records' mean)
    assert (p.headline, describe(lm, cell).headline) == ("macro", "micro")


def test_lm_evals_chat_template_digest_is_the_sha256_of_the_templates_text():
    """lm-eval logs ``chat_template_sha`` as the sha256 of the template's UTF-8 text, as cube records
    its own (``ChatTemplate.sha256``): one template gives one digest on both sides, so explain can
    tell two chat templates apart; runs that disagree, or one not applied, give none."""
    import copy
    import hashlib
    import json

    from cube.analysis.explain_protocol import describe
    from cube.config import REPO_ROOT
    from cube.protocol.chat import ChatTemplate

    lm = json.loads((REPO_ROOT / "data/imported/lm-eval-smollm2/MANIFEST.json").read_text(encoding="utf-8"))
    cell = {"model": "smollm2-135m-instruct", "scorer": "M1-seq", "label_set": "L1_halfwidth",
            "context": "zh_cue", "shots": 0, "order": "original"}
    template = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()
    assert ChatTemplate(template, "ours").sha256 == digest
    chat = copy.deepcopy(lm)
    for run in chat["metadata"]["lm_eval"]["runs"].values():
        run.update(chat_template_used=True, chat_template_sha=digest)
    p = describe(chat, cell)
    assert p.chat_template_sha256 == digest and p.chat_template == f"model (template sha256 {digest[:12]}...)"
    runs = chat["metadata"]["lm_eval"]["runs"]
    first = next(iter(runs.values()))
    runs["another run"] = {**first, "chat_template_sha": "0" * 64}  # two runs, two templates: no one digest
    assert describe(chat, cell).chat_template_sha256 is None
    del runs["another run"]
    first["chat_template_used"] = False
    assert describe(chat, cell).chat_template_sha256 is None
