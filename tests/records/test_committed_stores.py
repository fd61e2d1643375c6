"""Every records store committed under data/ (cube's own runs and every import) carries no CMMLU
text: the leakage audit, run here on the stores as committed, finds 0 hits, and each store reads
back with every file's sha256 as its manifest recorded it.

A store added later (another harness's import, a new run) is audited by being committed: the test
finds the stores by their manifests, not by a list.
"""

from __future__ import annotations

import pytest

from cube.config import REPO_ROOT
from cube.records.leakage.tables import audit_table
from cube.records.store import read_records

STORES = sorted(p.parent for p in (REPO_ROOT / "data").glob("**/MANIFEST.json")
                if not any(part.startswith(".") for part in p.relative_to(REPO_ROOT).parts))


def test_the_stores_are_found():
    names = {p.relative_to(REPO_ROOT).as_posix() for p in STORES}
    assert {"data/records", "data/harnesses/cube-smollm2-24", "data/imported/lm-eval-smollm2",
            "data/imported/opencompass-smollm2"} <= names


@pytest.mark.parametrize("store", STORES, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_a_committed_store_reads_back_and_quotes_no_benchmark_text(store, cmmlu_leak_index):
    table = read_records(store, verify=True, allow_incomplete=True)
    if "benchmark" in table.column_names:
        assert set(table.column("benchmark").to_pylist()) <= {"cmmlu"}, "only CMMLU's text is audited here"
    hits = audit_table(table, cmmlu_leak_index)
    assert not hits, f"{len(hits)} leakage hit(s), e.g. {hits[0]}"


def test_the_audit_finds_a_planted_quote(tmp_path, cmmlu_items, cmmlu_leak_index):
    """The check above can fail: a committed store whose generation quotes a question is caught."""
    from cube.records.store import write_records
    from tests.record_tables import record, table

    item = cmmlu_items(("test",))[0]
    planted = record(uid=item.uid, qhash=item.qhash, subject=item.subject, scorer="M6-strict",
                     scores=[float("nan")] * 4, probs=[1.0, 0.0, 0.0, 0.0], generation=f"我记得：{item.question}")
    write_records(tmp_path / "s", table([planted]))
    assert audit_table(read_records(tmp_path / "s"), cmmlu_leak_index)
