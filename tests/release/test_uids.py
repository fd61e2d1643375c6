"""A user's string ids and Chinese subject names in a release bundle (cube.release.uids)."""

from __future__ import annotations

import json
import re

from cube.protocol.benchmarks import resolve
from cube.records.leakage.tables import ID_FORMS
from cube.records.store import read_records, write_records
from cube.release import bundle as release
from cube.release.uids import BENCHMARK_FORM, ID_FORM, SPLIT_FORM, SUBJECT_FORM, UID_FORM, escaped, released_uid
from tests.record_tables import record, table
from tests.release.test_bundle import DEMO_MODEL, PREDICTION

ROWS = [{"id": "e1", "subject": "算术", "question": "一加一等于几？", "choices": ["一", "二", "三"], "answer": "B"},
        {"id": "e2", "subject": "算术", "question": "二加三等于几？", "choices": ["四", "五", "六", "七"], "answer": 1},
        {"id": 7, "subject": "units", "question": "How many metres in a kilometre?",
         "choices": ["10", "100", "1000", "10000", "1"], "answer": "C"}]


def test_the_uid_form_is_its_components_forms():
    assert UID_FORM == f"^{BENCHMARK_FORM}/{SUBJECT_FORM}/{SPLIT_FORM}/{ID_FORM}$" == ID_FORMS["uid"]
    assert released_uid("cmmlu/anatomy/test/12") == "cmmlu/anatomy/test/12"  # CMMLU's bundles unchanged
    assert released_uid("quiz/算术/test/e1") == f"quiz/{escaped('算术')}/test/{escaped('e1')}"


def test_string_ids_and_chinese_subjects_build_and_verify_with_their_mapping(tmp_path):
    """What `cube run` accepts, `cube release build` releases: it refused 'column uid, row 0: a
    26-character value not of the form ...'. The uid, subject and benchmark columns hold the escaped
    form, the manifest maps it back, and verify with the file's items matches every record."""
    path = tmp_path / "quiz.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS), encoding="utf-8")
    items = resolve(str(path)).load(splits=("test",))
    rows = []
    for item in items:
        k = len(item.options)
        rows.append(record(model=DEMO_MODEL, uid=item.uid, subject=item.subject, benchmark=item.benchmark,
                           qhash=item.qhash, gold=item.answer, label_set="A10_halfwidth", pred=0,
                           scores=[-1.0 - j for j in range(k)]))
    write_records(tmp_path / "records", table(rows))
    result = release.build_bundle(tmp_path / "records", tmp_path / "bundle", items, PREDICTION)
    released = read_records(result.bundle / "records")
    assert all(re.fullmatch(UID_FORM, uid) for uid in released.column("uid").to_pylist())
    manifest = json.loads((result.bundle / "MANIFEST.json").read_text(encoding="utf-8"))
    assert manifest["uid_escapes"] == {escaped("e1"): "e1", escaped("e2"): "e2", escaped("算术"): "算术"}
    assert set(released.column("subject").to_pylist()) == {escaped("算术"), "units"}
    restored = {"/".join(manifest["uid_escapes"].get(part, part) for part in uid.split("/"))
                for uid in released.column("uid").to_pylist()}
    assert restored == {item.uid for item in items}
    report = release.verify_bundle(result.bundle, items)
    assert report.ok and report.problems == [] and report.n_items_audited == len(items)
