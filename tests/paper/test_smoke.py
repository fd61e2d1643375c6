"""The smoke test on the committed sample (data/sample), and each of its steps made to fail.

The full run recomputes the audit from every frozen tokenizer once; the failure cases call the
steps directly on altered copies of the sample, so that each verdict is shown to be able to fail.
"""

from __future__ import annotations

import argparse
import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cube.analysis.confirm import model_families
from cube.paper import smoke
from cube.records.store import read_manifest, read_records
from cube.tokenizers.audit import canonical_sha256, read_prediction

SAMPLE = smoke.DEFAULT_RECORDS
PREDICTION = smoke.DEFAULT_PREDICTION


@pytest.fixture(scope="module")
def sample():
    if not (SAMPLE / "MANIFEST.json").is_file():
        pytest.fail(f"the committed sample is missing: {SAMPLE}")
    return read_records(SAMPLE)


@pytest.fixture(scope="module")
def prediction():
    return read_prediction(PREDICTION)


@pytest.fixture(scope="module")
def families():
    return model_families(read_manifest(SAMPLE))


def with_scores(table: pa.Table, mask: np.ndarray, make) -> pa.Table:
    """``table`` with the scores of the rows in ``mask`` replaced by ``make(row_scores)``."""
    scores = table.column("scores").to_pylist()
    for row in np.flatnonzero(mask):
        scores[row] = make(scores[row])
    position = table.column_names.index("scores")
    return table.set_column(position, table.schema.field(position),
                            pa.array(scores, type=table.schema.field("scores").type))


def rows(table: pa.Table, **fields) -> np.ndarray:
    mask = np.ones(table.num_rows, dtype=bool)
    for name, value in fields.items():
        mask &= pc.equal(table.column(name), value).to_numpy(zero_copy_only=False)
    return mask


# ---------------------------------------------------------------------------- the whole run


def test_the_committed_sample_tells_the_whole_story(capsys):
    result = smoke.run_smoke()
    text = smoke.format_verdicts(result)
    assert result.passed, text
    assert [c.name for c in result.checks] == [
        "records materialise", "audit = frozen prediction", "DEGEN cells tie",
        "other cells never tie", "M1-seq separates labels"], text
    assert text.splitlines()[-1].startswith("smoke test PASS: 5/5 checks passed in "), text


def test_the_sample_is_small_real_and_free_of_text(sample):
    """Committed data must stay small, be our own demo model's records, and carry no text."""
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size < 1_000_000, size
    assert read_manifest(SAMPLE)["synthetic"] is False
    assert pc.unique(sample.column("model")).to_pylist() == ["smollm2-135m-instruct"]
    assert sample.column("generation").null_count == sample.num_rows
    assert set(pc.unique(sample.column("scorer")).to_pylist()) == {"M1-seq", "M1-strict"}


def test_a_corrupt_sample_and_a_missing_prediction_fail_without_stopping(tmp_path):
    copy = tmp_path / "sample"
    shutil.copytree(SAMPLE, copy)
    shard = next(copy.rglob("*.parquet"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    result = smoke.run_smoke(copy, tmp_path / "absent.json")
    assert not result.passed
    verdicts = {c.name: c for c in result.checks}
    assert not verdicts["records materialise"].passed
    assert "does not match the manifest" in verdicts["records materialise"].detail
    assert not verdicts["frozen prediction"].passed
    assert "frozen prediction not found" in verdicts["frozen prediction"].detail


def test_the_command_prints_the_table_and_exits_1_on_failure(tmp_path, capsys):
    from cube.commands import smoke as command

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    args = parser.parse_args(["smoke", "--records", str(tmp_path / "none"),
                              "--prediction", str(tmp_path / "none.json")])
    assert args.func(args) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("FAIL  records materialise  ")
    assert out.splitlines()[-1].startswith("smoke test FAIL: 0/")


# ---------------------------------------------------------------------------- each step can fail


def test_the_audit_step_fails_when_the_prediction_differs(prediction):
    """A prediction for the sample's own tokenizer only (fast), first as frozen, then altered."""
    def only_smollm2(doc):
        body = {k: v for k, v in doc.items() if k != "content_sha256"}
        body["sources"] = {"smollm2": doc["sources"]["smollm2"]}
        body["skipped"] = {}
        body["cells"] = [c for c in doc["cells"] if c["family"] == "smollm2"]
        return {**body, "content_sha256": canonical_sha256(body)}

    doc = only_smollm2(prediction)
    assert smoke.check_audit(doc).passed
    altered = json.loads(json.dumps(doc))
    cell = next(c for c in altered["cells"] if c["verdict"] == "DEGEN")
    cell["verdict"], cell["collision"], cell["collision_groups"] = "max1tok", None, []
    check = smoke.check_audit(altered)
    assert not check.passed
    assert check.detail.startswith("1 difference(s); first: cell smollm2/"), check.detail


def test_a_degen_cell_that_does_not_tie_fails(sample, prediction, families):
    degen = next(c for c in prediction["cells"]
                 if c["family"] == "smollm2" and c["verdict"] == "DEGEN" and c["context"] == "zh_cue")
    mask = rows(sample, scorer="M1-strict", label_set=degen["label_set"])
    first = np.flatnonzero(mask)[0]
    one = np.zeros_like(mask)
    one[first] = True
    broken = with_scores(sample, one, lambda s: [v - 0.1 * k for k, v in enumerate(s)])
    checks, _ = smoke.check_confirmation(broken, prediction, families)
    verdict = {c.name: c for c in checks}["DEGEN cells tie"]
    assert not verdict.passed and degen["label_set"] in verdict.detail, verdict.detail
    assert {c.name: c for c in checks}["other cells never tie"].passed


def test_a_tie_outside_the_degen_cells_fails(sample, prediction, families):
    other = next(c for c in prediction["cells"]
                 if c["family"] == "smollm2" and c["verdict"] != "DEGEN" and c["context"] == "zh_cue")
    mask = rows(sample, scorer="M1-strict", label_set=other["label_set"])
    one = np.zeros_like(mask)
    one[np.flatnonzero(mask)[0]] = True
    broken = with_scores(sample, one, lambda s: [max(s)] * len(s))
    checks, _ = smoke.check_confirmation(broken, prediction, families)
    verdicts = {c.name: c for c in checks}
    assert verdicts["DEGEN cells tie"].passed
    assert not verdicts["other cells never tie"].passed


def test_a_sequence_scorer_that_ties_like_first_token_fails(sample, prediction, families):
    checks, degen = smoke.check_confirmation(sample, prediction, families)
    assert all(c.passed for c in checks) and degen
    assert smoke.check_separation(sample, degen).passed
    target = degen[0].observed.label_set
    tied = with_scores(sample, rows(sample, scorer="M1-seq", label_set=target),
                       lambda s: [-1.0] * len(s))
    check = smoke.check_separation(tied, degen)
    assert not check.passed and f"{target}: " in check.detail and "[FAIL]" in check.detail


def test_top_shared_matches_a_naive_count():
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 4, size=(500, 4)).astype(float)  # many exact ties
    naive = [sum(v == max(row) for v in row) > 1 for row in scores.tolist()]
    assert smoke.top_shared(scores).tolist() == naive
