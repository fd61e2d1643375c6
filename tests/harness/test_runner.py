"""The runner on a tiny random-weight model with the real Qwen3 tokenizer and real CMMLU items."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")

from cube.errors import ConfigError, RecordsError  # noqa: E402
from cube.harness.backends.hf import HFBackend  # noqa: E402
from cube.harness.resume import pending_jobs  # noqa: E402
from cube.harness.run_config import RunSettings  # noqa: E402
from cube.harness.run_spec import RunSpec, plan_jobs  # noqa: E402
from cube.harness.runner import run  # noqa: E402
from cube.protocol.items import load_cmmlu, stratified_sample  # noqa: E402
from cube.protocol.label_sets import load_label_sets  # noqa: E402
from cube.protocol.prompts import Cell  # noqa: E402
from cube.records.schema import KEY_COLUMNS, RECORD_SCHEMA  # noqa: E402

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def items(benchmarks_root):
    loaded = load_cmmlu(benchmarks_root / "cmmlu", subjects=["anatomy", "marketing", "virology"])
    return tuple(stratified_sample(loaded, 6, seed=0))


@pytest.fixture(scope="module")
def spec(items):
    sets = load_label_sets()
    cells = (Cell(sets["L1_halfwidth"], "zh_cue", 0), Cell(sets["L4_circled"], "zh_cue", 0))
    return RunSpec(model="tiny", items=items, cells=cells,
                   scorers=("M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "M6"),
                   shard_size=4, batch_size=4, max_new_tokens=3)


def backend(tiny_qwen3, qwen3_tokenizer):
    return HFBackend(tiny_qwen3, qwen3_tokenizer, progress=False)


def read(out):
    return pq.read_table(sorted((out / "tiny").glob("*.parquet"))).to_pylist()


def test_every_record_follows_the_schema_and_carries_no_text_but_generations(tmp_path, spec, tiny_qwen3, qwen3_tokenizer):
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    table = pq.read_table(sorted((tmp_path / "tiny").glob("*.parquet")))
    assert table.schema.remove_metadata() == RECORD_SCHEMA
    rows = table.to_pylist()
    # 6 items: 2 cells x (2 label scorers + 2 M6 extractors) + 4 cloze scorers
    assert len(rows) == 6 * (2 * 4 + 4)
    keys = [tuple(r[k] for k in KEY_COLUMNS) for r in rows]
    assert len(set(keys)) == len(keys)
    assert all(r["generation"] is None for r in rows if not r["scorer"].startswith("M6"))


def test_first_token_ties_follow_the_tokenizer(tmp_path, spec, tiny_qwen3, qwen3_tokenizer):
    """The Qwen3 tokenizer maps ①②③④ to one shared first token: M1-strict ties on every item."""
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    strict = [r for r in read(tmp_path) if r["scorer"] == "M1-strict"]
    circled = [r for r in strict if r["label_set"] == "L4_circled"]
    halfwidth = [r for r in strict if r["label_set"] == "L1_halfwidth"]
    assert all(r["tied"] and r["tie_groups"] == "0=1=2=3" and r["pred"] == 0 for r in circled)
    assert len({tuple(r["first_token_ids"]) for r in circled}) == 1
    assert not any(r["tied"] or r["tie_groups"] for r in halfwidth)
    # the full label sequence separates the labels where the first token cannot
    seq = [r for r in read(tmp_path) if r["scorer"] == "M1-seq" and r["label_set"] == "L4_circled"]
    assert not any(r["tied"] for r in seq)


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path, spec, tiny_qwen3, qwen3_tokenizer):
    reference_dir = tmp_path / "ref"
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, reference_dir, progress=False)

    class Dies(Exception):
        pass

    flaky = backend(tiny_qwen3, qwen3_tokenizer)
    real_score, calls = flaky.score, []

    def score_then_die(requests, batch_size=16):
        calls.append(1)
        if len(calls) == 2:  # one score call per chunk of items: the second chunk dies
            raise Dies()
        return real_score(requests, batch_size)

    flaky.score = score_then_die
    out = tmp_path / "resumed"
    with pytest.raises(Dies):
        run(flaky, spec, out, progress=False)
    partial = sorted(p.name for p in (out / "tiny").glob("*.parquet"))
    assert 0 < len(partial) < len(plan_jobs(spec))
    assert not list((out / "tiny").glob(".*tmp"))  # nothing half-written

    log = run(backend(tiny_qwen3, qwen3_tokenizer), spec, out, progress=False)
    assert log["jobs_skipped"] == len(partial)
    key = lambda r: tuple(r[k] for k in KEY_COLUMNS)  # noqa: E731
    resumed, ref = sorted(read(out), key=key), sorted(read(reference_dir), key=key)
    assert [key(r) for r in resumed] == [key(r) for r in ref]
    assert [(r["pred"], r["tie_groups"]) for r in resumed] == [(r["pred"], r["tie_groups"]) for r in ref]


def test_a_run_killed_between_the_shards_of_one_chunk_resumes_to_the_same_bits(
        tmp_path, monkeypatch, spec, tiny_qwen3, qwen3_tokenizer):
    """A kill between two shard writes of one chunk (its cells share one ``score`` call) leaves part
    of that call on disk. Scoring only the rest would run another prefix tree, packed and batched
    otherwise, whose floats differ in the last bits (the Slurm test caught 1.5e-5 on a log-prob):
    the resume scores the whole chunk again and writes only what is missing, so the resumed store
    is bit for bit an uninterrupted one's."""
    import dataclasses

    import cube.harness.runner as runner

    scoring = dataclasses.replace(spec, scorers=("M1-seq", "M1-strict", "M2", "M3", "M4", "M5"))
    reference_dir = tmp_path / "ref"
    run(backend(tiny_qwen3, qwen3_tokenizer), scoring, reference_dir, progress=False)

    class Killed(Exception):
        pass

    real_write, written = runner.write_job_shard, []

    def write_then_die(*args, **kwargs):
        if len(written) == 1:  # the first chunk's second shard: its call's first shard is on disk
            raise Killed()
        written.append(real_write(*args, **kwargs))

    monkeypatch.setattr(runner, "write_job_shard", write_then_die)
    out = tmp_path / "resumed"
    with pytest.raises(Killed):
        run(backend(tiny_qwen3, qwen3_tokenizer), scoring, out, progress=False)
    monkeypatch.setattr(runner, "write_job_shard", real_write)
    first_chunk = [j for j in plan_jobs(scoring) if j.chunk == 0]
    assert len(first_chunk) >= 3 and len(list((out / "tiny").glob("*.parquet"))) == 1

    log = run(backend(tiny_qwen3, qwen3_tokenizer), scoring, out, progress=False)
    assert log["jobs_skipped"] == 1 and log["jobs_rescored"] == 1
    key = lambda r: tuple(r[k] for k in KEY_COLUMNS)  # noqa: E731
    assert sorted(read(out), key=key) == sorted(read(reference_dir), key=key)  # every float, every bit
    assert sorted(p.name for p in (out / "tiny").glob("*.parquet")) == \
        sorted(p.name for p in (reference_dir / "tiny").glob("*.parquet"))


def test_cells_that_join_a_finished_store_do_not_score_its_done_cells_again(tmp_path, spec, tiny_qwen3, qwen3_tokenizer):
    """Only a run that never finished can have cut a call short: the shards a finished run logged
    are skipped, not scored again beside the new cells (that would cost the whole store again)."""
    import dataclasses

    first = dataclasses.replace(spec, cells=spec.cells[:1], scorers=("M1-seq", "M1-strict"))
    run(backend(tiny_qwen3, qwen3_tokenizer), first, tmp_path, progress=False)
    both = dataclasses.replace(first, cells=spec.cells)
    calls = []
    joined = backend(tiny_qwen3, qwen3_tokenizer)
    real_score = joined.score
    joined.score = lambda requests, batch_size=16: calls.append(len(requests)) or real_score(requests, batch_size)
    log = run(joined, both, tmp_path, progress=False)
    n_first = len(plan_jobs(first))
    assert log["jobs_skipped"] == n_first and log["jobs_run"] == n_first and log["jobs_rescored"] == 0
    from cube.harness.passes import SCORING_WORK

    new_requests = sum(len(SCORING_WORK[j.kind](both, j).requests) for j in plan_jobs(both) if j.cell == spec.cells[1])
    assert sum(calls) == new_requests


def test_every_scoring_cell_of_a_chunk_shares_one_call_and_scores_as_each_cell_alone(
        tmp_path, spec, tiny_qwen3, qwen3_tokenizer):
    """Whole-protocol prefix sharing (issue 12): one ``score`` call per chunk of items over every
    label set and cloze; the records equal those of running each cell in a run of its own, and
    the forward tokens are the prefix-tree minimum, below the per-request minimum."""
    import dataclasses

    from cube.harness.backends.base import plan_request, prefix_tree_minimum
    from cube.harness.passes import SCORING_WORK

    scoring = dataclasses.replace(spec, scorers=("M1-seq", "M1-strict", "M2", "M3", "M4", "M5"))
    together = backend(tiny_qwen3, qwen3_tokenizer)
    real_score, calls = together.score, []
    together.score = lambda requests, batch_size=16: calls.append(len(requests)) or real_score(requests, batch_size)
    log = run(together, scoring, tmp_path / "together", progress=False)
    chunks = sorted({j.chunk for j in plan_jobs(scoring)})
    assert len(calls) == len(chunks) == 2

    want = {}
    for one in [dataclasses.replace(scoring, cells=(c,), scorers=("M1-seq", "M1-strict")) for c in spec.cells] + [
            dataclasses.replace(scoring, scorers=("M2", "M3", "M4", "M5"))]:
        alone = tmp_path / f"alone-{len(want)}"
        run(backend(tiny_qwen3, qwen3_tokenizer), one, alone, progress=False)
        want.update({tuple(r[k] for k in KEY_COLUMNS): r for r in read(alone)})
    got = {tuple(r[k] for k in KEY_COLUMNS): r for r in read(tmp_path / "together")}
    assert got.keys() == want.keys()
    for key, row in got.items():
        assert row["pred"] == want[key]["pred"] and row["tie_groups"] == want[key]["tie_groups"]
        assert max(abs(a - b) for a, b in zip(row["scores"], want[key]["scores"])) <= 1e-4

    per_chunk = [[plan_request(qwen3_tokenizer, r) for job in plan_jobs(scoring) if job.chunk == c
                  for r in SCORING_WORK[job.kind](scoring, job).requests] for c in chunks]
    tree = sum(prefix_tree_minimum(plans) for plans in per_chunk)
    assert log["forward_tokens"] == log["tree_minimum_tokens"] == tree
    assert tree < sum(p.minimum_tokens for plans in per_chunk for p in plans)


def test_shards_split_the_work_without_overlap(spec):
    all_jobs = {(j.kind, j.filename) for j in plan_jobs(spec)}
    parts = [{(j.kind, j.filename) for j in plan_jobs(RunSpec(**{**spec.__dict__, "shard": (k, 2)}))} for k in (0, 1)]
    assert parts[0] | parts[1] == all_jobs and not parts[0] & parts[1]


def test_bad_specs_are_rejected(items):
    with pytest.raises(ConfigError, match="unknown scorer 'M9'"):
        RunSpec(model="x", items=items, cells=(), scorers=("M9",))
    with pytest.raises(ConfigError, match="--shard 2/2"):
        RunSpec(model="x", items=items, cells=(), scorers=("M1-seq",), shard=(2, 2))


def test_true_false_groups_feed_the_partial_credit_ladder(tmp_path, items, tiny_qwen3, qwen3_tokenizer, capsys):
    from fractions import Fraction

    from cube.analysis.credit import credit_gap, judgments_from_records, resolve_scheme
    from cube.cli import main
    from cube.records.store import read_records

    spec = RunSpec(model="tiny", items=items, cells=(), scorers=("TF",), shard_size=4, batch_size=8)
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    table = read_records(tmp_path)
    rows = table.to_pylist()
    assert len(rows) == len(items) and {r["scorer"] for r in rows} == {"TF"}
    counts = judgments_from_records(table)["tiny"]
    # independent recount: statement i is judged true when its margin is positive
    expected = [sum((m > 0) == (i == r["gold"]) for i, m in enumerate(r["scores"])) for r in rows]
    assert sorted(counts.correct.tolist()) == sorted(expected)
    gap = credit_gap(counts, resolve_scheme("ladder"))
    ladder = [Fraction(0), Fraction(1, 10), Fraction(1, 4), Fraction(1, 2), Fraction(1)]
    assert gap.mean_scheme == sum(ladder[c] for c in expected) / len(expected)
    assert gap.mean_additive == Fraction(sum(expected), 4 * len(expected))
    assert main(["credit", "gap", str(tmp_path), "--summary"]) == 0
    assert "model tiny:" in capsys.readouterr().out


def test_generations_are_scrubbed_of_every_items_text_before_they_reach_disk(tmp_path, items, tiny_qwen3, qwen3_tokenizer):
    """A model that quotes its own option and another item's: the lenient extractor reads the
    quote, the record keeps markers, so benchmark text never reaches a record file."""
    from cube.harness.backends.base import GenerationResult
    from cube.records.leakage import MARKER, audit_texts, build_index

    index = build_index(items)
    long_option = [(it, k) for it in items for k, o in enumerate(it.options)
                   if len(o) >= 6 and len(audit_texts([o], index)) == 1]
    assert len({it.uid for it, _ in long_option}) >= 2, "the fixture sample needs two items with long options"
    item, k = long_option[0]
    other = next(it.options[j] for it, j in long_option if it.uid != item.uid)

    class QuotesOptions(HFBackend):
        def generate(self, prompts, max_new_tokens, batch_size=8):
            return [GenerationResult(f"我认为是{item.options[k]}，不是{other}" if item.question in p else "不知道", (), "stop")
                    for p in prompts]

    sets = load_label_sets()
    spec = RunSpec(model="tiny", items=(item,), cells=(Cell(sets["L1_halfwidth"], "zh_cue", 0),),
                   scorers=("M6",), shard_size=4, batch_size=4, max_new_tokens=3, leakage_index=index)
    run(QuotesOptions(tiny_qwen3, qwen3_tokenizer, progress=False), spec, tmp_path, progress=False)
    rows = {r["scorer"]: r for r in read(tmp_path)}
    assert rows["M6-lenient"]["pred"] == k  # extracted from the raw quote
    assert rows["M6-strict"]["parse_failed"]
    assert rows["M6-lenient"]["generation"] == f"我认为是{MARKER}，不是{MARKER}"
    assert not audit_texts([r["generation"] for r in rows.values()], index)


def test_a_separate_tokenization_context_scores_the_bare_label(tmp_path, items, tiny_qwen3, qwen3_tokenizer):
    """en_prompt_space in context scores ' A' (the prompt's space merged back); the separate
    variant scores the bare 'A' after a lone space token, as lm-evaluation-harness does."""
    sets = load_label_sets()
    cells = (Cell(sets["L1_halfwidth"], "en_prompt_space", 0), Cell(sets["L1_halfwidth"], "en_prompt_space_separate", 0))
    spec = RunSpec(model="tiny", items=items[:2], cells=cells, scorers=("M1-strict",), shard_size=4, batch_size=4)
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    firsts = {r["context"]: tuple(r["first_token_ids"]) for r in read(tmp_path)}
    bare = tuple(qwen3_tokenizer.encode(x, add_special_tokens=False).ids[0] for x in "ABCD")
    spaced = tuple(qwen3_tokenizer.encode(" " + x, add_special_tokens=False).ids[0] for x in "ABCD")
    assert firsts == {"en_prompt_space": spaced, "en_prompt_space_separate": bare}


# --- issue 11: a resume never mixes configurations --------------------------------------------


def label_only(items, **changes):
    sets = load_label_sets()
    fields = dict(model="tiny", items=items, cells=(Cell(sets["L1_halfwidth"], "zh_cue", 0),), scorers=("M1-seq",),
                  shard_size=4, batch_size=4, settings=RunSettings(seed=0, dtype="float32", backend="hf"))
    fields.update(changes)
    return RunSpec(**fields)


def test_a_resume_under_another_configuration_is_refused_naming_the_fields(tmp_path, items, tiny_qwen3, qwen3_tokenizer):
    from dataclasses import replace

    from cube.errors import ResumeMismatch
    from cube.records.store import read_records

    first = label_only(items)
    run(backend(tiny_qwen3, qwen3_tokenizer), first, tmp_path, progress=False)
    rows = read_records(tmp_path).num_rows
    cases = [
        (replace(first, items=items[:4]), r"items \S+ -> \S+; n_items 6 -> 4"),  # another sample
        (replace(first, settings=replace(first.settings, seed=1)), r"seed 0 -> 1"),
        (replace(first, scorers=("M1-seq", "M1-strict")), r'scorers \["M1-seq"\] -> \["M1-seq", "M1-strict"\]'),
    ]
    for spec, needle in cases:
        for attempt in (lambda: pending_jobs(spec, tmp_path), lambda: run(None, spec, tmp_path, progress=False)):
            with pytest.raises(ResumeMismatch, match=needle) as caught:
                attempt()  # refused before the backend (None here) is touched
            assert "\n" not in str(caught.value) and "label--L1_halfwidth__zh_cue__0shot__original" in str(caught.value)
    # a new cell may join when the fields shared by the model's cells agree ...
    sets = load_label_sets()
    more = replace(first, cells=first.cells + (Cell(sets["L4_circled"], "zh_cue", 0),))
    assert len(pending_jobs(more, tmp_path)[0]) == len(plan_jobs(more)) // 2
    # ... and not when they do not
    with pytest.raises(ResumeMismatch, match=r"new cell tiny/label--L4_circled.* dtype \"float32\" -> \"bfloat16\""):
        pending_jobs(replace(more, cells=more.cells[1:], settings=replace(first.settings, dtype="bfloat16")), tmp_path)
    assert read_records(tmp_path).num_rows == rows


def test_a_store_without_recorded_cell_configurations_is_refused(tmp_path, items, tiny_qwen3, qwen3_tokenizer):
    """The archive's stores predate the recorded configurations: a resume cannot be checked, so it fails."""
    import json

    from cube.errors import ResumeMismatch
    from cube.records.store import MANIFEST_NAME, read_records

    spec = label_only(items)
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    del manifest["cells"]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert read_records(tmp_path).num_rows == len(items)  # still readable
    with pytest.raises(ResumeMismatch, match="written before cube recorded cell configurations"):
        pending_jobs(spec, tmp_path)


def test_orphaned_temp_files_are_cleaned_on_resume(tmp_path, items, tiny_qwen3, qwen3_tokenizer):
    spec = label_only(items)
    job = plan_jobs(spec)[0]
    folder = tmp_path / "tiny"
    folder.mkdir()
    orphan = folder / f".{job.filename}.k1ll3d.tmp"  # what atomic_write_bytes leaves when killed
    orphan.write_bytes(b"half a shard")
    other = folder / ".someone-elses.parquet.x.tmp"  # not this run's: left to its writer
    other.write_bytes(b"")
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    assert not orphan.exists() and other.exists()


def test_shards_deleted_with_their_manifest_entries_are_reported(tmp_path, items, tiny_qwen3, qwen3_tokenizer):
    import json

    from cube.records.store import MANIFEST_NAME, read_records

    spec = label_only(items)
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    victim = f"tiny/{plan_jobs(spec)[1].filename}"
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    del manifest["files"][victim]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    (tmp_path / victim).unlink()
    with pytest.raises(RecordsError, match=r"cells incomplete: tiny/label--L1_halfwidth__zh_cue__0shot__original "
                                           r"\(1 of 2 shards gone"):
        read_records(tmp_path)


# --- issue 22: a resume re-checks what it skips; a failed start records nothing ----------------


def _rewrite_manifest(out, name, **entry):
    import json

    from cube.records.store import MANIFEST_NAME

    manifest = json.loads((out / MANIFEST_NAME).read_text())
    manifest["files"][name].update(entry)
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))


def test_a_resume_reruns_a_truncated_or_edited_shard(tmp_path, items, tiny_qwen3, qwen3_tokenizer):
    """Issue 22: a truncated shard whose manifest sha256 was updated, and a shard edited after
    writing, were both 'done' on resume ("0 shards to run") while every reader refused them."""
    from cube.checksums import sha256_file
    from cube.harness.resume import resume_plan
    from cube.records.store import read_records

    spec = label_only(items)
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    reference = read_records(tmp_path).sort_by("uid")
    first, second = (f"tiny/{job.filename}" for job in plan_jobs(spec))
    reference_sha = sha256_file(tmp_path / first)
    assert resume_plan(spec, tmp_path).todo == []

    data = (tmp_path / first).read_bytes()
    (tmp_path / first).write_bytes(data[: len(data) // 2])  # truncated, and the manifest made to agree
    _rewrite_manifest(tmp_path, first, sha256=sha256_file(tmp_path / first))
    fewer = pq.read_table(tmp_path / second).slice(0, 1)  # a valid shard with fewer rows, manifest agreeing
    pq.write_table(fewer, tmp_path / second)
    _rewrite_manifest(tmp_path, second, sha256=sha256_file(tmp_path / second), rows=1)
    plan = resume_plan(spec, tmp_path)
    assert [f"tiny/{job.filename}" for job in plan.todo] == [first, second] and plan.done == 0
    assert plan.broken == [f"{tmp_path / first}: not a readable Parquet file; running it again",
                           f"{tmp_path / second}: 1 rows where its cell promises 2; running it again"]
    log = run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    assert log["jobs_run"] == 2
    assert read_records(tmp_path).sort_by("uid").equals(reference)

    (tmp_path / first).write_bytes((tmp_path / first).read_bytes() + b"x")  # edited, manifest not
    broken = resume_plan(spec, tmp_path).broken
    assert broken == [f"{tmp_path / first}: sha256 {sha256_file(tmp_path / first)[:12]}... does not match the "
                      f"manifest's {reference_sha[:12]}...; running it again"]
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)
    assert read_records(tmp_path).sort_by("uid").equals(reference)


def test_a_run_that_fails_before_its_first_shard_records_no_cell(tmp_path, items, tiny_qwen3, qwen3_tokenizer):
    """Issue 22: a cell was recorded at start, so a failed start bound the store to a configuration
    no record was ever written under; the corrected run was refused (labels "67bd..." -> "5574...")."""
    import json
    from dataclasses import replace

    from cube.errors import ResumeMismatch
    from cube.harness.run_spec import cell_configs
    from cube.records.store import MANIFEST_NAME, read_manifest, read_records

    class Dies(Exception):
        pass

    dying = backend(tiny_qwen3, qwen3_tokenizer)

    def die(requests, batch_size=16):
        raise Dies()

    dying.score = die
    spec = label_only(items)
    with pytest.raises(Dies):
        run(dying, spec, tmp_path, progress=False)
    assert read_manifest(tmp_path).get("cells", {}) == {} and read_manifest(tmp_path)["files"] == {}

    # what today's main left: the cell recorded, without records, under other labels
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    stale = {key: {**config, "labels": "0" * 16} for key, config in cell_configs(spec).items()}
    manifest["cells"] = stale
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)  # not refused: nothing bound it
    assert read_manifest(tmp_path)["cells"] == cell_configs(spec)
    assert read_records(tmp_path).num_rows == len(items)
    with pytest.raises(ResumeMismatch, match="seed 0 -> 1"):
        pending_jobs(replace(spec, settings=replace(spec.settings, seed=1)), tmp_path)  # now records bind it


def test_bad_cells_fail_before_the_backend_is_touched(tmp_path, items):
    """Issue 22 §2: each failed only after the model loaded (the backend here is None)."""
    import re
    from dataclasses import replace

    from cube.errors import ItemsError
    from cube.protocol.label_sets import LabelSet
    from cube.records.store import MANIFEST_NAME

    spec = label_only(items)
    sets = load_label_sets()
    cases = [
        (replace(spec, cells=(Cell(sets["L1_halfwidth"], "zh_cue", 6),)), ItemsError, "needs 6 dev items"),
        (replace(spec, cells=(Cell(sets["L1_halfwidth"], "zh_cue", 0, "shift4"),)), ConfigError,
         "option order 'shift4' is not 'original' or shift1..shift3"),
        (replace(spec, cells=(Cell(LabelSet("three", ("A", "B", "C")), "zh_cue", 0),)), ConfigError,
         "label set 'three' has 3 labels but"),
        (replace(spec, cells=(Cell(LabelSet("az", tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")), "zh_cue", 0),)),
         ConfigError, "label set 'az' has 26 labels but"),
        (replace(spec, cells=(Cell(LabelSet("a/b", ("A", "B", "C", "D")), "zh_cue", 0),)), ConfigError,
         "label set name 'a/b' cannot name a record shard"),
        (replace(spec, cells=(Cell(LabelSet("a|b", ("A", "B", "C", "D")), "zh_cue", 0),)), ConfigError,
         "label set name 'a|b'"),
        (replace(spec, items=(replace(items[0], answer=None),)), ConfigError, "has no answer"),
    ]
    for bad, error, needle in cases:
        with pytest.raises(error, match=re.escape(needle)) as caught:
            run(None, bad, tmp_path, progress=False)
        assert "\n" not in str(caught.value)
        assert not (tmp_path / MANIFEST_NAME).exists()  # nothing recorded


def test_a_run_given_its_plan_tries_the_prompts_and_plans_the_resume_once(tmp_path, items, tiny_qwen3, qwen3_tokenizer,
                                                                         monkeypatch):
    """Issue 25: ``cube run`` planned the resume and tried every prompt, then ``run`` did both again."""
    import json

    import cube.harness.runner as runner

    calls = {"preflight": 0, "resume_plan": 0}
    counted_of = {}
    for name in calls:  # patched where the runner calls them (it imports both from their modules)
        real = getattr(runner, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        counted_of[name] = counted
        monkeypatch.setattr(runner, name, counted)
    spec = label_only(items)
    run(backend(tiny_qwen3, qwen3_tokenizer), spec, tmp_path, progress=False)  # no plan: run makes its own
    assert calls == {"preflight": 1, "resume_plan": 1}
    more = label_only(items, cells=spec.cells + (Cell(load_label_sets()["L4_circled"], "zh_cue", 0),))
    counted_of["preflight"](more)
    plan = counted_of["resume_plan"](more, tmp_path)  # as cube run does, before the model loads
    log = run(backend(tiny_qwen3, qwen3_tokenizer), more, tmp_path, progress=False, plan=plan)
    assert calls == {"preflight": 2, "resume_plan": 2}  # the given plan is used as it is
    assert (log["jobs_run"], log["jobs_skipped"]) == (len(plan.todo), plan.done) == (2, 2)
    logged = json.loads((tmp_path / "tiny" / "runlog.jsonl").read_text().splitlines()[-1])
    assert logged["config_hash"] == more.config_hash() and logged["config_hash_version"] == 3


@pytest.mark.parametrize("max_new_tokens", [3, 40])
def test_each_generation_records_its_length_and_why_it_ended_as_transformers_generates_it(tmp_path, items, max_new_tokens):
    """The real demo model (SmolLM2-135M, fp32): gen_tokens and finish_reason of every M6 record
    against transformers' own greedy ``generate`` of the same prompt, one prompt at a time (no
    padding): the count of new tokens before any end token, and whether an end token came. A
    budget of 3 tokens cannot hold an answer line, so every generation there hits the limit."""
    import torch

    from cube.harness.backends import open_backend
    from cube.harness.passes import _generation_prompt
    from cube.protocol.tokenization import encode_ids

    model = "smollm2-135m-instruct"
    backend = open_backend("hf", model, dtype="float32")
    chosen = items[:4]
    cell = Cell(load_label_sets()["L1_halfwidth"], "zh_cue", 0)
    spec = RunSpec(model=model, items=chosen, cells=(cell,), scorers=("M6",), shard_size=4, batch_size=4,
                   max_new_tokens=max_new_tokens, settings=RunSettings(dtype="float32"))
    run(backend, spec, tmp_path, progress=False)
    rows = [r for r in pq.read_table(sorted((tmp_path / model).glob("*.parquet"))).to_pylist()
            if r["scorer"] == "M6-strict"]
    got = {r["uid"]: (r["gen_tokens"], r["finish_reason"], r["dtype"]) for r in rows}
    want = {}
    eos = sorted(backend.eos_ids)
    for item in chosen:
        prompt, _ = _generation_prompt(item, cell, spec, cot=False)
        ids = torch.tensor([list(encode_ids(backend.tokenizer, prompt, backend.add_special_tokens))])
        out = backend.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                     do_sample=False, eos_token_id=eos, pad_token_id=eos[0])
        new = out[0, ids.shape[1]:].tolist()
        stopped = bool(new) and new[-1] in eos
        want[item.uid] = (len(new) - stopped, "stop" if stopped else "length", "float32")
    assert got == want
    if max_new_tokens == 3:
        assert {reason for _, reason, _ in got.values()} == {"length"}
