"""The release bundle on real CMMLU items: scrub, refusal, checksums, interruption, tarball.

Records are written here with invented generations into which spans of real items are planted at
run time; no benchmark text is in this file, and failures never print a generation.

PYTEST_DONT_REWRITE: introspection would print compared values, i.e. benchmark text, into logs.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tarfile
import unicodedata
from collections import Counter
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube.config import REPO_ROOT
from cube.errors import CubeError, RecordsError, WriteError
from cube.models_config import models_config
from cube.paper.plan import load_plan
from cube.records import leakage
from cube.records.leakage import MARKER, normalize_for_match
from cube.records.schema import SCHEMA_VERSION
from cube.records.store import PROTOCOL_COLUMNS, read_manifest, read_records, write_records
from cube.release import bundle as release
from tests.record_tables import record, table

PREDICTION = REPO_ROOT / "data" / "predictions" / "audit_frozen.json"
DEMO_MODEL = "smollm2-135m-instruct"  # in config/models.yaml (demo_models)
OWN_MODEL = "tiny-model"  # in no config: the manifest must still describe it


class Bench:
    """The real items, their leakage index and the chosen items, behind a repr without text:
    pytest prints a failing test's arguments, and these hold benchmark text."""

    def __init__(self, items, index):
        self.items, self.index = items, index
        self.own: list = []
        self.other = None

    def __repr__(self) -> str:
        return f"<Bench: {len(self.items)} CMMLU items>"


class Quiet(list):
    def __repr__(self) -> str:
        return f"<{len(self)} texts>"


def normal(text: str) -> str:
    return normalize_for_match(text)[0]


def question_span(item, n: int = 25) -> str:
    """``n`` normalised characters of the item's question, as they appear in the original."""
    norm, source = normalize_for_match(item.question)
    return item.question[source[3] : source[3 + n - 1] + 1]


def disguise(text: str) -> str:
    """Full-width ASCII and a line break every 6 characters: the scrub must see through both."""
    wide = "".join(chr(ord(c) + 0xFEE0) if 0x21 <= ord(c) <= 0x7E else c for c in text)
    return "\n".join(wide[k : k + 6] for k in range(0, len(wide), 6))


def long_option(item) -> str | None:
    return next((o for o in item.options if 6 <= len(normal(o)) < 20), None)


@pytest.fixture(scope="module")
def bench(cmmlu_items, cmmlu_leak_index):
    """Three test items with a 40+ character question and a 6..19 character option, and one more
    item (another subject) whose question no chosen item shares."""
    items = cmmlu_items(("dev", "test"))
    b = Bench(items, cmmlu_leak_index)
    pool = [i for i in items if i.split == "test" and len(normal(i.question)) >= 40 and long_option(i)]
    b.own = [pool[0], pool[len(pool) // 2], pool[-1]]
    b.other = next(i for i in pool[1:] if i.subject not in {o.subject for o in b.own}
                   and normal(question_span(i)) not in "".join(normal(o.question) for o in b.own))
    return b


def rows_for(item, model: str, generation: str | None) -> list[dict]:
    """M1-strict and M1-seq rows in two label sets, and one M6 row carrying ``generation``."""
    base = {"model": model, "uid": item.uid, "qhash": item.qhash, "gold": item.answer}
    out = []
    for label_set in ("L1_halfwidth", "L4_circled"):
        out.append(record(**base, scorer="M1-strict", label_set=label_set, pred=0,
                          scores=[-1.0, -1.0, -1.0, -1.0], tie_groups="0=1=2=3"))
        out.append(record(**base, scorer="M1-seq", label_set=label_set, pred=2,
                          scores=[-3.0, -2.0, -0.5, -4.0]))
    out.append(record(**base, scorer="M6-strict", label_set="L1_halfwidth", pred=1,
                      scores=[0.0, 1.0, 0.0, 0.0], generation=generation))
    return out


def make_store(path, bench, generations) -> object:
    own = bench.own
    rows = []
    for item, generation in zip(own, generations):
        rows += rows_for(item, DEMO_MODEL, generation)
    rows += rows_for(own[0], OWN_MODEL, None)
    write_records(path, table(rows), metadata={"note": "test store"})
    (path / DEMO_MODEL / "runlog.jsonl").write_text('{"model": "smollm2-135m-instruct", "wall_s": 1.0}\n')
    return path


def own_leak(item) -> str:
    return "思考过程：" + disguise(question_span(item)) + "。所以答案是" + long_option(item) + "。"


@pytest.fixture()
def clean_generations(bench):
    return Quiet([own_leak(bench.own[0]), "我选择第二个选项，因为它最合理。", None])


def build(tmp_path, bench, generations, **kwargs):
    records = make_store(tmp_path / "records", bench, generations)
    return release.build_bundle(records, tmp_path / "out" / "bundle", bench.items, PREDICTION,
                                index=bench.index, **kwargs)


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ---------------------------------------------------------------------------- scrub


def test_scrub_records_removes_the_own_item_text_and_counts_it(bench, tmp_path):
    own = bench.own
    generations = [own_leak(own[0]), "我选择第二个选项，因为它最合理。", None]
    store = make_store(tmp_path / "records", bench, generations)
    before = read_records(store)
    after, stats = release.scrub_records(before, bench.items)

    texts_before = before.column("generation").to_pylist()
    texts_after = after.column("generation").to_pylist()
    leaked = [k for k, t in enumerate(texts_before) if t == generations[0]]
    clean = [k for k, t in enumerate(texts_before) if t == generations[1]]
    assert len(leaked) == 1 and len(clean) == 1
    scrubbed = texts_after[leaked[0]]
    assert normal(question_span(own[0])) not in normal(scrubbed), "question span survived"
    assert normal(long_option(own[0])) not in normal(scrubbed), "option survived"
    assert scrubbed.startswith("思考过程：" + MARKER) and MARKER in scrubbed.rsplit("答案是", 1)[1]
    assert texts_after[clean[0]] == generations[1]
    assert [t is None for t in texts_after] == [t is None for t in texts_before]
    # everything but the free text is untouched
    assert after.drop_columns(["generation"]).equals(before.drop_columns(["generation"]))
    # each removed span became one marker: the lengths account for every removed character
    assert stats.n_texts == 2 and stats.n_changed == 1 and stats.n_spans == 2
    assert len(generations[0]) - stats.n_chars + stats.n_spans * len(MARKER) == len(scrubbed)
    # and the scrubbed text passes the audit against every item
    assert leakage.audit_texts([scrubbed], bench.index) == []


def test_scrub_refuses_a_text_whose_item_it_does_not_know(bench, tmp_path):
    own = bench.own
    store = make_store(tmp_path / "records", bench, ["一段文字", None, None])
    t = read_records(store)
    unknown = [i for i in bench.items if i.uid != own[0].uid]
    with pytest.raises(RecordsError, match=f"{own[0].uid!r} is not in the item set"):
        release.scrub_records(t, unknown)
    other_question = {i.uid: i for i in bench.items}
    other_question[own[0].uid] = next(i for i in bench.items if i.qhash != own[0].qhash)
    with pytest.raises(RecordsError, match="different question text"):
        release.scrub_records(t, other_question)


# ---------------------------------------------------------------------------- build


def test_build_writes_a_complete_bundle_and_tarball(bench, clean_generations, tmp_path):
    result = build(tmp_path, bench, clean_generations)
    bundle = result.bundle
    names = release.bundle_files(bundle)
    assert set(names) >= {"MANIFEST.json", "CLAIMS.md", "CITATION.cff", "README.md",
                          "predictions/audit_frozen.json", "records/MANIFEST.json"}
    assert sorted(p for p in names if p.startswith("records/") and p.endswith(".parquet")) == [
        f"records/{DEMO_MODEL}/part-00000.parquet", f"records/{OWN_MODEL}/part-00000.parquet"]
    assert result.n_files == len(names) + 1 and result.n_records == 20
    assert leftovers(bundle.parent) == ["bundle", "bundle.tar.gz"], "temp files left behind"

    # SHA256SUMS is what coreutils computes and checks
    sums = {line.split("  ", 1)[1]: line.split("  ", 1)[0]
            for line in (bundle / "SHA256SUMS").read_text().splitlines()}
    assert sorted(sums) == names
    for name, digest in sums.items():
        assert hashlib.sha256((bundle / name).read_bytes()).hexdigest() == digest, name
    check = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=bundle,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    # the records: scrubbed, otherwise the same, in a valid store with its own manifest
    original = read_records(tmp_path / "records")
    shipped = read_records(bundle / "records")
    assert shipped.num_rows == original.num_rows
    key = ["model", "uid", "scorer", "label_set"]
    o, s = original.sort_by([(k, "ascending") for k in key]), shipped.sort_by([(k, "ascending") for k in key])
    assert s.drop_columns(["generation"]).equals(o.drop_columns(["generation"]))
    assert all(MARKER not in (t or "") for t in o.column("generation").to_pylist())
    assert sum(MARKER in (t or "") for t in s.column("generation").to_pylist()) == 1
    assert read_manifest(bundle / "records")["metadata"] == {"note": "test store"}
    assert (bundle / "predictions/audit_frozen.json").read_bytes() == PREDICTION.read_bytes()
    runlog = (tmp_path / "records" / DEMO_MODEL / "runlog.jsonl").read_bytes()
    assert (bundle / "runs" / f"{DEMO_MODEL}.runlog.jsonl").read_bytes() == runlog
    assert not (bundle / "records" / DEMO_MODEL / "runlog.jsonl").exists()

    # the tarball holds exactly the folder, byte for byte
    with tarfile.open(result.tarball, "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        assert sorted(members) == sorted(f"bundle/{n}" for n in [*names, "SHA256SUMS"])
        for name, member in members.items():
            assert tar.extractfile(member).read() == (bundle.parent / name).read_bytes(), name


def test_manifest_describes_models_protocols_items_and_licences(
        bench, clean_generations, tmp_path):
    result = build(tmp_path, bench, clean_generations)
    manifest = json.loads((result.bundle / "MANIFEST.json").read_text())
    records = read_records(tmp_path / "records")

    assert manifest["bundle_schema"] == release.BUNDLE_SCHEMA
    assert manifest["records_schema"] == SCHEMA_VERSION  # the bundle rewrites every record (scrubbed): this schema
    assert {pq.read_schema(p).metadata[b"cube.schema"] for p in (result.bundle / "records").glob("*/*.parquet")} == {
        SCHEMA_VERSION.encode()}
    assert manifest["n_records"] == records.num_rows
    # protocols: every (scorer, label set, context, shots, order) with its count, computed naively
    naive: dict[tuple, int] = {}
    for row in records.select(list(PROTOCOL_COLUMNS)).to_pylist():
        key = tuple(row[c] for c in PROTOCOL_COLUMNS)
        naive[key] = naive.get(key, 0) + 1
    assert {tuple(p[c] for c in PROTOCOL_COLUMNS): p["records"]
            for p in manifest["protocols"]} == naive
    own = bench.own
    assert manifest["items"] == {"cmmlu": {"test": len(own)}}
    assert {b: v["licence"] for b, v in manifest["benchmark_licences"].items()} == {
        "cmmlu": "CC BY-NC-SA 4.0", "ceval": "CC BY-NC-SA 4.0"}
    # models: the demo model with its pinned GGUF and the tokenizer the frozen audit used
    demo = manifest["models"][DEMO_MODEL]
    assert demo["gguf_sha256"] == models_config().demo_model(DEMO_MODEL).gguf_sha256
    frozen = json.loads(PREDICTION.read_text())
    assert demo["tokenizer"] == frozen["sources"]["smollm2"]
    assert manifest["models"][OWN_MODEL]["kind"] == "unknown"
    assert manifest["prediction"]["content_sha256"] == frozen["content_sha256"]
    assert manifest["scrub"]["n_changed"] == 1 and manifest["leakage_audit"]["hits"] == 0
    assert manifest["leakage_audit"]["n_items"] == len(bench.items)


def test_claims_checklist_lists_every_planned_claim_and_marks_missing_notebooks(tmp_path):
    """The claims come from the plan: claim 9 was missing from the hand-written list."""
    plan = load_plan()
    text = release.claims_checklist(plan, REPO_ROOT)
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    planned = sorted(int(r.name[:2]) for r in plan
                     if r.name[:2].isdigit() and r.name != "00_paper" and r.name == r.source.stem)
    assert [int(r.split("|")[1]) for r in rows] == planned and planned[:9] == list(range(1, 10))
    for claim, row in zip(release.claims(plan), rows):
        assert "| present |" in row and f"cube book execute --only {claim.notebook}" in row, row
        assert f"notebooks/{claim.notebook}.md" in row
    assert f"{len(rows)} of {len(rows)} claim notebooks present." in text
    # a claim notebook not yet written keeps its row, and says so
    missing = replace(plan[0], name="99_unwritten", source=tmp_path / "99_unwritten.md")
    row = release.claims_checklist([*plan, missing], REPO_ROOT).splitlines()
    row = next(line for line in row if line.startswith("| 99 |"))
    assert "not yet written" in row and "cube book execute" not in row


def test_a_claim_notebook_whose_heading_names_another_claim_is_refused(tmp_path):
    source = tmp_path / "03_wrong.md"
    source.write_text("# Claim 4: not the third\n", encoding="utf-8")
    run = replace(load_plan()[0], name="03_wrong", source=source)
    with pytest.raises(CubeError, match="is not 'Claim 3: <title>'"):
        release.claims([run])


def test_an_existing_bundle_is_replaced_only_with_force(bench, clean_generations, tmp_path):
    first = build(tmp_path, bench, clean_generations)
    (first.bundle / "stray.txt").write_text("left from an older bundle")
    with pytest.raises(CubeError, match="already exists; remove it or pass --force"):
        release.build_bundle(tmp_path / "records", first.bundle, bench.items, PREDICTION, index=bench.index)
    again = release.build_bundle(tmp_path / "records", first.bundle, bench.items, PREDICTION,
                                 index=bench.index, force=True)
    assert not (again.bundle / "stray.txt").exists()
    report = release.verify_bundle(again.bundle)
    assert report.ok, report.problems
    assert leftovers(first.bundle.parent) == ["bundle", "bundle.tar.gz"]


def test_the_tarball_is_reproducible(bench, clean_generations, tmp_path):
    first = build(tmp_path, bench, clean_generations).tarball.read_bytes()
    second = release.build_bundle(tmp_path / "records", tmp_path / "again" / "bundle", bench.items,
                                  PREDICTION, index=bench.index).tarball.read_bytes()
    assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest()


# ---------------------------------------------------------------------------- refusal


def test_a_leak_of_another_item_refuses_the_build_and_writes_nothing(bench, tmp_path):
    own, other = bench.own, bench.other
    quoting_other = "模型写道：" + disguise(question_span(other, 30)) + "。"
    with pytest.raises(RecordsError) as caught:
        build(tmp_path, bench, [own_leak(own[0]), quoting_other, None])
    message = str(caught.value)
    assert "refusing to build" in message and "1 hit(s)" in message
    assert f"uid={own[1].uid} field=generation" in message and f"item={other.uid}" in message
    assert "\n" not in message
    assert normal(question_span(other, 20)) not in normal(message), "the report leaks the text"
    assert leftovers(tmp_path / "out") == [], "a refused build left files behind"


def test_the_same_span_of_the_own_item_is_scrubbed_not_refused(bench, tmp_path):
    own = bench.own
    quoting_own = "模型写道：" + disguise(question_span(own[1], 30)) + "。"
    result = build(tmp_path, bench, [None, quoting_own, None])
    assert result.scrub.n_changed == 1
    assert release.verify_bundle(result.bundle, bench.items, bench.index).ok


# ---------------------------------------------------------------------------- interruption


@pytest.mark.parametrize("step", ["write_records", "citation_cff", "sha256sums", "write_tarball"])
def test_an_interrupted_build_leaves_no_partial_bundle(bench, clean_generations,
                                                       tmp_path, monkeypatch, step):
    """Fail at each stage, after records (and for the tarball, all its bytes) are written."""
    import cube.records.store

    module = cube.records.store if step == "write_records" else release  # build imports it late
    real = getattr(module, step)

    def fail_after(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(module, step, fail_after)
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path, bench, clean_generations)
    assert leftovers(tmp_path / "out") == [], f"interrupted at {step}: files left behind"


def refuse_the_tarball_rename(monkeypatch) -> None:
    """The tarball's rename (the build's last step) fails as on a full disk."""
    real_replace = release.os.replace

    def refuse_tarball(src, dst, *args, **kwargs):
        if str(dst).endswith(".tar.gz"):
            raise OSError("disk full")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(release.os, "replace", refuse_tarball)


def test_a_failed_tarball_rename_removes_the_bundle_too(bench, clean_generations,
                                                        tmp_path, monkeypatch):
    refuse_the_tarball_rename(monkeypatch)
    with pytest.raises(WriteError, match="disk full; nothing was replaced"):
        build(tmp_path, bench, clean_generations)
    assert leftovers(tmp_path / "out") == []


def test_a_forced_rebuild_whose_tarball_rename_fails_keeps_the_old_pair(bench, clean_generations,
                                                                        tmp_path, monkeypatch):
    """Issue 22, 1.5: the old code removed the new folder and kept the old tarball alone."""
    first = build(tmp_path, bench, clean_generations)
    before = {p: p.read_bytes() for p in (first.tarball, first.bundle / "SHA256SUMS")}
    bigger = make_bigger_store(tmp_path / "bigger", bench, clean_generations)
    refuse_the_tarball_rename(monkeypatch)
    with pytest.raises(WriteError, match="disk full"):
        release.build_bundle(bigger, first.bundle, bench.items, PREDICTION, index=bench.index, force=True)
    assert {p: p.read_bytes() for p in before} == before
    assert leftovers(first.bundle.parent) == ["bundle", "bundle.tar.gz"]
    for target in (first.bundle, first.tarball):
        report = release.verify_bundle(target)
        assert report.ok and report.n_records == 20, report.problems


# ---------------------------------------------------------------------------- killed between the renames (issue 22, 1.5)


def make_bigger_store(path, bench, generations):
    """The store of ``make_store`` and one more model's rows: a build of it differs from the first."""
    rows = [r for item, g in zip(bench.own, generations) for r in rows_for(item, DEMO_MODEL, g)]
    rows += rows_for(bench.own[0], OWN_MODEL, None) + rows_for(bench.own[1], "third-model", None)
    write_records(path, table(rows), metadata={"note": "test store"})
    return path


KILL_SCRIPT = """
import os, pickle, signal, sys
from pathlib import Path
from cube.release import bundle

items_path, records, out, prediction, point, name = sys.argv[1:7]
items = pickle.loads(Path(items_path).read_bytes())
real_rename, real_replace = os.rename, os.replace

def stop():
    os.kill(os.getpid(), getattr(signal, name))

def rename(src, dst, *args, **kwargs):
    if point == "folder" and Path(dst) == Path(out) and Path(src).name.endswith(".tmp"):
        stop()
    return real_rename(src, dst, *args, **kwargs)

def replace(src, dst, *args, **kwargs):
    if point == "tarball" and str(dst).endswith(".tar.gz"):
        stop()
    return real_replace(src, dst, *args, **kwargs)

os.rename, os.replace = rename, replace
bundle.build_bundle(records, out, items, prediction, force=True)
print("finished")
"""


def killed_build(tmp_path, bench, records, out, point: str, signal_name: str):
    """A real ``build_bundle --force`` in a subprocess that sends itself ``signal_name`` just before
    the rename ``point`` (the new folder's, or the tarball's)."""
    import pickle
    import sys

    items = tmp_path / "items.pickle"
    items.write_bytes(pickle.dumps(bench.own + [bench.other]))
    return subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(items), str(records), str(out),
                           str(PREDICTION), point, signal_name],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
                          # under nohup SIGHUP arrives ignored, and an ignored signal stays ignored
                          # across exec: the child starts with every catchable signal at its default
                          preexec_fn=_default_signals)


def _default_signals() -> None:
    import signal

    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def test_sigkill_between_the_renames_is_named_by_verify_and_a_rerun_cleans_it(bench, clean_generations, tmp_path):
    first = build(tmp_path, bench, clean_generations)
    bigger = make_bigger_store(tmp_path / "bigger", bench, clean_generations)
    proc = killed_build(tmp_path, bench, bigger, first.bundle, "tarball", "SIGKILL")
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert any(name.endswith(".old") for name in leftovers(first.bundle.parent)), "nothing was killed mid-swap"
    # bundle/ is new (25 records), bundle.tar.gz old (20): each checks out alone, the pair does not
    for target in (first.bundle, first.tarball):
        report = release.verify_bundle(target)
        assert not report.ok and len(report.problems) == 1, report.problems
        problem = report.problems[0]
        assert f"{first.bundle} and {first.tarball} are not one build" in problem
        assert f"{first.tarball} is the older" in problem and "\n" not in problem
    again = release.build_bundle(bigger, first.bundle, bench.items, PREDICTION, index=bench.index, force=True)
    assert leftovers(first.bundle.parent) == ["bundle", "bundle.tar.gz"]
    for target in (again.bundle, again.tarball):
        report = release.verify_bundle(target)
        assert report.ok and report.n_records == 25, report.problems


def test_sigkill_after_the_old_folder_moved_aside_is_undone_by_the_rerun(bench, clean_generations, tmp_path):
    first = build(tmp_path, bench, clean_generations)
    bigger = make_bigger_store(tmp_path / "bigger", bench, clean_generations)
    proc = killed_build(tmp_path, bench, bigger, first.bundle, "folder", "SIGKILL")
    assert proc.returncode == -9 and not first.bundle.exists(), proc.stderr[-2000:]
    assert release.verify_bundle(first.tarball).ok  # the old tarball, alone and whole
    # issue 32 §5: verify of the folder said only "bundle not found"; it names where the old one is
    moved = next(first.bundle.parent.glob(".bundle.*.old")) / "bundle"
    with pytest.raises(CubeError, match=rf"killed `cube release build --force` left the previous bundle at "
                                        rf"{re.escape(str(moved))}: move it back") as caught:
        release.verify_bundle(first.bundle)
    assert "\n" not in str(caught.value)
    again = release.build_bundle(bigger, first.bundle, bench.items, PREDICTION, index=bench.index, force=True)
    assert leftovers(first.bundle.parent) == ["bundle", "bundle.tar.gz"]
    assert release.verify_bundle(again.bundle).ok and release.verify_bundle(again.tarball).ok


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_catchable_signal_between_the_renames_waits_for_both(bench, clean_generations, tmp_path, signal_name):
    """SIGTERM after the folder swap left bundle/ new beside bundle.tar.gz old; now the swap
    finishes first, then the signal takes effect."""
    first = build(tmp_path, bench, clean_generations)
    bigger = make_bigger_store(tmp_path / "bigger", bench, clean_generations)
    proc = killed_build(tmp_path, bench, bigger, first.bundle, "tarball", signal_name)
    assert proc.returncode != 0 and "finished" not in proc.stdout, proc.stderr[-2000:]
    assert leftovers(first.bundle.parent) == ["bundle", "bundle.tar.gz"]
    for target in (first.bundle, first.tarball):
        report = release.verify_bundle(target)
        assert report.ok and report.n_records == 25, report.problems


def test_a_second_build_into_the_same_folder_is_refused_while_one_runs(bench, clean_generations, tmp_path):
    import fcntl
    import os

    (tmp_path / "out").mkdir()
    fd = os.open(tmp_path / "out", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a running build holds
        with pytest.raises(CubeError, match=r"another `cube release build` is writing into .*out; wait"):
            build(tmp_path, bench, clean_generations)
    finally:
        os.close(fd)
    assert leftovers(tmp_path / "out") == []


def test_a_full_disk_during_the_build_is_one_line_and_leaves_nothing(bench, clean_generations, tmp_path,
                                                                     full_disk):
    """Issue 22, section 3: an OSError traceback (the temp files were cleaned)."""
    records = make_store(tmp_path / "records", bench, clean_generations)
    (full_disk / "filler").write_bytes(b"x" * (200 << 10))  # the records alone then fit, the bundle does not
    with pytest.raises(WriteError, match="No space left on device"):
        release.build_bundle(records, full_disk / "bundle", bench.items, PREDICTION, index=bench.index)
    assert leftovers(full_disk) == ["filler"]


# ---------------------------------------------------------------------------- verify


@pytest.fixture()
def bundle(bench, clean_generations, tmp_path):
    return build(tmp_path, bench, clean_generations).bundle


def flip_byte(path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    at = len(data) // 2 if at is None else at
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_an_intact_bundle_verifies_as_folder_and_as_tarball(bundle, bench):
    for target in (bundle, release.tarball_path(bundle)):
        report = release.verify_bundle(target, bench.items, bench.index)
        assert report.ok, report.problems
        assert report.n_records == 20 and report.n_items_audited == len(bench.items)
        assert report.n_files == len(release.bundle_files(bundle))


def test_a_store_whose_run_log_vouches_for_its_shards_builds_a_bundle_that_verifies(bench, clean_generations, tmp_path):
    """The bundle repacks shards; the store's run log names the originals, so it must not sit
    inside the bundle's records, where it would report every cell as gone."""
    import json

    from cube.records.store import write_shard

    records = tmp_path / "records"
    rows = [r for item, g in zip(bench.own, clean_generations) for r in rows_for(item, DEMO_MODEL, g)]
    shard = "label--L1_halfwidth__zh_cue__0shot__original--00000.parquet"  # as cube run names it
    write_shard(records, f"{DEMO_MODEL}/{shard}", table(rows))
    (records / DEMO_MODEL / "runlog.jsonl").write_text(
        json.dumps({"model": DEMO_MODEL, "files": [f"{DEMO_MODEL}/{shard}"]}) + "\n")
    result = release.build_bundle(records, tmp_path / "out" / "bundle", bench.items, PREDICTION, index=bench.index)
    report = release.verify_bundle(result.bundle, bench.items, bench.index)
    assert report.ok, report.problems
    assert report.n_records == result.n_records == len(rows)


def test_a_flipped_byte_in_any_file_fails_verify_naming_that_file(bundle):
    for name in release.bundle_files(bundle):
        copy = bundle.parent / "copy"
        shutil.copytree(bundle, copy)
        flip_byte(copy / name)
        report = release.verify_bundle(copy)
        assert not report.ok, name
        assert report.problems == [f"{copy / name}: sha256 does not match SHA256SUMS (file changed)"]
        shutil.rmtree(copy)


def test_a_flipped_byte_in_sha256sums_fails_verify(bundle):
    sums = bundle / "SHA256SUMS"
    text = sums.read_bytes()
    for at in (0, 64, 66, len(text) - 2):  # in a digest, the separator, a path
        flip_byte(sums, at)
        assert not release.verify_bundle(bundle).ok, at
        sums.write_bytes(text)
    assert release.verify_bundle(bundle).ok


def test_added_and_removed_files_fail_verify(bundle):
    (bundle / "records" / "extra.txt").write_text("not published")
    report = release.verify_bundle(bundle)
    assert report.problems == [f"{bundle / 'records/extra.txt'}: not listed in SHA256SUMS"]
    (bundle / "records" / "extra.txt").unlink()
    (bundle / "CITATION.cff").unlink()
    report = release.verify_bundle(bundle)
    assert report.problems == [f"{bundle / 'CITATION.cff'}: listed in SHA256SUMS but missing"]


def test_verify_with_items_finds_a_leak_behind_consistent_checksums(bundle, bench):
    """A bundle re-checksummed after a leak was put in: the checksums hold, the audit does not."""
    other = bench.other
    store = bundle / "records"
    shipped = read_records(store)
    leaked = "复述：" + question_span(other, 30)
    texts = [leaked if t is not None else None for t in shipped.column("generation").to_pylist()]
    shutil.rmtree(store)
    write_records(store, shipped.set_column(
        shipped.column_names.index("generation"), "generation",
        pa.array(texts, type=shipped.schema.field("generation").type)))
    (store / ".manifest.lock").unlink()
    (bundle / "SHA256SUMS").write_text(release.sha256sums(bundle))

    problems = release.verify_bundle(bundle).problems  # the tarball beside it is the original
    assert len(problems) == 1 and f"{bundle} and {release.tarball_path(bundle)} are not one build" in problems[0]
    release.tarball_path(bundle).unlink()  # a forger who replaces the folder alone
    assert release.verify_bundle(bundle).ok  # without items: nothing to compare against
    report = release.verify_bundle(bundle, bench.items, bench.index)
    n_texts = sum(t is not None for t in texts)
    assert len(report.problems) == n_texts
    assert all(" leak uid=" in p and f"item={other.uid}" in p for p in report.problems)
    assert all(normal(question_span(other, 20)) not in normal(p) for p in report.problems)


def _forge(bundle, name: str, change) -> None:
    """Edit one file of the bundle and update SHA256SUMS to match, as a careless forger would;
    the tarball goes, or verify would name the folder and tarball as two builds first."""
    path = bundle / name
    path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")
    (bundle / "SHA256SUMS").write_text(release.sha256sums(bundle))
    release.tarball_path(bundle).unlink(missing_ok=True)


def test_a_manifest_whose_counts_and_flags_contradict_the_records_fails_verify(bundle):
    """Issue 22, section 5: ``n_records: 99999, synthetic: true`` with its sum updated passed verify."""
    def lie(text: str) -> str:
        manifest = json.loads(text)
        manifest.update(n_records=99999, synthetic=True)
        manifest["items"]["cmmlu"]["test"] = 1
        return json.dumps(manifest, indent=1, sort_keys=True) + "\n"

    _forge(bundle, "MANIFEST.json", lie)
    problems = release.verify_bundle(bundle).problems
    assert [p.split(": ", 1)[1].split(" ", 1)[0] for p in problems] == ["n_records", "synthetic", "items"], problems
    assert all(p.startswith(f"{bundle / 'MANIFEST.json'}: ") and "does not match the records" in p for p in problems)


def test_a_manifest_naming_other_models_or_another_prediction_fails_verify(bundle):
    def lie(text: str) -> str:
        manifest = json.loads(text)
        manifest["models"]["gpt-9"] = manifest["models"].pop(OWN_MODEL)
        manifest["prediction"]["content_sha256"] = "0" * 64
        return json.dumps(manifest, indent=1, sort_keys=True) + "\n"

    _forge(bundle, "MANIFEST.json", lie)
    problems = release.verify_bundle(bundle).problems
    assert len(problems) == 2 and "prediction" in problems[0] and "models ['gpt-9', " in problems[1], problems


def test_a_readme_that_says_other_than_its_manifest_fails_verify(bundle):
    _forge(bundle, "README.md", lambda text: text.replace(": 0 hits.", ": 0 hits; reviewed by hand.", 1))
    assert release.verify_bundle(bundle).problems == [
        f"{bundle / 'README.md'}: does not say what MANIFEST.json says (re-rendered from it, it differs)"]


def test_verify_refuses_what_is_not_a_bundle(tmp_path):
    with pytest.raises(CubeError, match="bundle not found"):
        release.verify_bundle(tmp_path / "nothing")
    (tmp_path / "folder").mkdir()
    with pytest.raises(CubeError, match="no SHA256SUMS; not a release bundle"):
        release.verify_bundle(tmp_path / "folder")
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(CubeError, match="not a readable .tar.gz"):
        release.verify_bundle(tmp_path / "broken.tar.gz")


# ---------------------------------------------------------------------------- every column (issue 11.9)


def test_text_planted_in_tie_groups_refuses_audit_build_and_verify(bench, tmp_path):
    """tie_groups is not scrubbed: any value that is not tie groups is refused, never shipped."""
    own = bench.own
    records = make_store(tmp_path / "records", bench, Quiet([None, None, None]))
    shipped = read_records(records)
    planted = [question_span(own[1], 30) if g == "0=1=2=3" else g
               for g in shipped.column("tie_groups").to_pylist()]
    forged = shipped.set_column(shipped.column_names.index("tie_groups"), "tie_groups",
                                pa.array(planted, type=pa.string()))
    shutil.rmtree(records)
    write_records(records, forged)
    for run in (lambda: release.audit_table(read_records(records), bench.index),
                lambda: release.build_bundle(records, tmp_path / "out" / "bundle", bench.items,
                                             PREDICTION, index=bench.index)):
        with pytest.raises(RecordsError) as caught:
            run()
        message = str(caught.value)
        assert "column tie_groups, row" in message and "\n" not in message
        assert normal(question_span(own[1], 12)) not in normal(message), "the error leaks the text"
    assert leftovers(tmp_path / "out") == []
    parquet, columns = release.open_parquet(next(records.rglob("*.parquet")))
    assert "tie_groups" in columns
    with pytest.raises(RecordsError):
        list(release.audit_parquet(parquet, columns, bench.index, "shard"))


def test_a_leak_in_an_identifier_or_a_binary_column_is_found(bench, tmp_path):
    """The audit scans every string and binary column, not only generation."""
    other = bench.other
    rows = rows_for(bench.own[0], DEMO_MODEL, None)
    base = table(rows)
    leak = "复述：" + question_span(other, 30)
    # an identifier column that holds text is refused by its form
    context = pa.array([leak] * base.num_rows)
    with pytest.raises(RecordsError) as caught:
        release.audit_table(base.set_column(base.column_names.index("context"), "context", context),
                            bench.index)
    assert "column context, row 0" in str(caught.value)
    # a binary column of a plain Parquet file (cube release audit reads any) is read as UTF-8
    blob = [leak.encode() if k == 2 else b"ok" for k in range(base.num_rows)]
    extra = base.append_column("notes", pa.array(blob, type=pa.binary()))
    hits = release.audit_table(extra, bench.index)
    assert [(h.row, h.column, h.hit.kind, h.hit.item_uid) for h in hits] == [
        (2, "notes", "question", other.uid)], [release.describe_hit(h) for h in hits]
    path = tmp_path / "plain.parquet"
    import pyarrow.parquet as pq

    pq.write_table(extra, path)
    parquet, columns = release.open_parquet(path)
    assert "notes" in columns and "model" in columns and "tie_groups" in columns
    found = list(release.audit_parquet(parquet, columns, bench.index, str(path)))
    assert [(h.row, h.column) for h in found] == [(2, "notes")]


def test_the_build_scrubs_a_near_copy_of_the_own_question(bench, tmp_path):
    """The archive's case: a run one character away from the item's own text."""
    k = 0
    option = question_span(bench.own[k], 24)
    source = normalize_for_match(option)[1]
    at = int(source[len(source) // 2])
    near = option[:at] + ("乙" if option[at] != "乙" else "丙") + option[at + 1 :]
    assert normal(near) != normal(option)
    generations = [None, None, None]
    generations[k] = "我认为是：" + near + "。"
    result = build(tmp_path, bench, Quiet(generations))
    assert result.scrub.n_changed == 1 and result.scrub.n_spans == 1
    shipped = read_records(result.bundle / "records").column("generation").to_pylist()
    assert sum(t is not None and MARKER in t for t in shipped) == 1
    assert release.verify_bundle(result.bundle, bench.items, bench.index).ok


# ---------------------------------------------------------------------------- the raw form (issue 22.4)


def as_written(text: str) -> str:
    """The raw form, stated independently: NFKC, whitespace and invisible characters dropped."""
    return "".join(c for c in unicodedata.normalize("NFKC", text)
                   if not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf"))


def latex_option(bench):
    """(item, option): a real option counted only as written (e.g. a LaTeX fraction of 14
    characters whose normal form has 3): >= 8 characters as written, 2 or 3 normalised, held by
    that one item only and not a stock answer in the normal form either."""
    by_raw: dict[str, list] = {}
    by_normal: Counter = Counter()
    for item in bench.items:
        by_normal.update({normal(o) for o in item.options} | {normal(item.question)})
        for option in item.options:
            by_raw.setdefault(as_written(option), []).append((item, option))
    own = {i.uid for i in bench.own}
    return next(pairs[0] for raw, pairs in by_raw.items()
                if len(raw) >= 8 and 2 <= len(normal(pairs[0][1])) < leakage.MIN_OPTION_CHARS
                and len(pairs) == 1 and by_normal[normal(pairs[0][1])] < leakage.STOCK_ITEMS
                and pairs[0][0].uid not in own)


def test_the_audit_and_the_build_find_a_latex_option_of_another_item_as_written(bench, tmp_path):
    item, option = latex_option(bench)
    generation = "推导得出" + option + "。"
    hits = release.audit_table(table(rows_for(bench.own[0], DEMO_MODEL, generation)), bench.index)
    assert [(h.column, h.hit.kind, h.hit.item_uid, h.hit.offset, h.hit.n_chars) for h in hits] == [
        ("generation", "raw-option", item.uid, 4, len(option))], [release.describe_hit(h) for h in hits]
    with pytest.raises(RecordsError) as caught:
        build(tmp_path, bench, Quiet([None, generation, None]))
    message = str(caught.value)
    assert "refusing to build" in message and f"item={item.uid}" in message and "kind=raw-option" in message
    assert leftovers(tmp_path / "out") == [], "a refused build left files behind"


def test_scrub_records_removes_a_latex_option_of_the_own_item_as_written(bench):
    item, option = latex_option(bench)
    before = table(rows_for(item, DEMO_MODEL, "解：" + option + "，故选之。"))
    after, stats = release.scrub_records(before, bench.items)
    assert [g for g in after.column("generation").to_pylist() if g is not None] == [f"解：{MARKER}，故选之。"]
    assert (stats.n_changed, stats.n_spans, stats.n_chars) == (1, 1, len(option))
    assert release.audit_table(after, bench.index) == []
