"""``cube release audit``: real CMMLU items, small Parquet records written here, exit codes and the
printed report (which must never contain the leaked text).

PYTEST_DONT_REWRITE: introspection would print compared values, i.e. benchmark text, into logs.
"""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube.cli import main
from cube.config import REPO_ROOT
from cube.records.leakage import normalize_for_match


@pytest.fixture(scope="module")
def cmmlu_root(benchmarks_root):
    return benchmarks_root / "cmmlu"


@pytest.fixture(scope="module")
def leaks(cmmlu_items):
    """A 30-character question span in full-width with line breaks, and a long option of another item."""
    items = cmmlu_items(("dev", "test"))
    quoted = next(i for i in items if len(normalize_for_match(i.question)[0]) >= 40)
    norm, source = normalize_for_match(quoted.question)
    span = quoted.question[source[5] : source[34] + 1]
    disguised = "\n".join(
        "".join(chr(ord(c) + 0xFEE0) if 0x21 <= ord(c) <= 0x7E else c for c in span[k : k + 7])
        for k in range(0, len(span), 7)
    )
    option = next(
        o.strip() for i in items[len(items) // 2 :] for o in i.options
        if 8 <= len(normalize_for_match(o)[0]) < 20
    )
    return disguised, option


def write_records(path, generations, notes):
    n = len(generations)
    table = pa.table({
        "uid": [f"cmmlu/own/test/{k}" for k in range(n)],
        "model": ["tiny-model"] * n,
        "generation": generations,
        "note": pa.array(notes, type=pa.large_string()),
        "score": [0.5] * n,
    })
    pq.write_table(table, path)


def run(capsys, *argv):
    code = main(["release", "audit", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_audit_reports_each_leak_by_row_uid_field_and_offset(tmp_path, capsys, cmmlu_root, leaks):
    question_leak, option_leak = leaks
    prefix = "模型输出：|"
    generations = ["答案是B", prefix + question_leak, "这是一个普通的回答。", None]
    notes = ["", "无", "备注|" + option_leak, "以上都对"]
    records = tmp_path / "records.parquet"
    write_records(records, generations, notes)

    code, out, _ = run(capsys, records, "--items", cmmlu_root)
    assert code == 1, code
    leak_lines = [line for line in out.splitlines() if line.startswith("LEAK ")]
    assert len(leak_lines) == 2, leak_lines
    first_kept = int(normalize_for_match(question_leak)[1][0])
    assert leak_lines[0].startswith(f"LEAK {records}:1 uid=cmmlu/own/test/1 field=generation "
                                    f"offset={len(prefix) + first_kept} "), leak_lines[0]
    assert "kind=question item=cmmlu/" in leak_lines[0], leak_lines[0]
    option_offset = len("备注|") + int(normalize_for_match(option_leak)[1][0])
    assert leak_lines[1].startswith(
        f"LEAK {records}:2 uid=cmmlu/own/test/2 field=note offset={option_offset} "), leak_lines[1]
    assert "kind=option" in leak_lines[1], leak_lines[1]
    summary = out.splitlines()[-1]
    # every string column is scanned: uid, model, generation, note
    assert summary.startswith("leakage audit FAIL: 2 hit(s) in 4 records (16 text fields"), summary
    assert "window 20" in summary and "min option chars 4" in summary, summary


def test_the_report_never_contains_the_leaked_text(tmp_path, capsys, cmmlu_root, leaks):
    question_leak, option_leak = leaks
    records = tmp_path / "records.parquet"
    write_records(records, [question_leak, option_leak], [option_leak, question_leak])
    code, out, err = run(capsys, records, "--items", cmmlu_root)
    assert code == 1, code
    report, _ = normalize_for_match(out + err)
    for leak in leaks:
        norm, _ = normalize_for_match(leak)
        pieces = [norm[k : k + 6] for k in range(0, len(norm) - 5, 3)]
        leaked = [k for k, piece in enumerate(pieces) if piece in report]
        assert not leaked, f"report contains pieces {leaked} of a leak"


def test_clean_records_in_a_folder_exit_zero(tmp_path, capsys, cmmlu_root):
    folder = tmp_path / "records"
    (folder / "part").mkdir(parents=True)
    write_records(folder / "a.parquet", ["甲方回答：选C。"] * 3, ["无"] * 3)
    write_records(folder / "part" / "b.parquet", ["我不确定。"], [None])
    code, out, _ = run(capsys, folder, "--items", cmmlu_root, "--min-option-chars", "5")
    assert code == 0, out
    assert out.startswith("leakage audit clean: 0 hit(s) in 4 records (16 text fields, 2 file(s))"), out
    assert "min option chars 5" in out, out


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: None, "records not found"),
        (lambda p: p.mkdir(), "no *.parquet files"),
        (lambda p: p.write_bytes(b"not parquet"), "cannot read Parquet file"),
        (lambda p: pq.write_table(pa.table({"id": ["x"], "text": ["y"]}), p), "has no 'uid' column"),
        (lambda p: pq.write_table(pa.table({"uid": ["x"], "texts": [["y", "z"]]}), p), "column 'texts'"),
    ],
)
def test_bad_records_are_one_line_errors_with_exit_2(tmp_path, capsys, setup, message):
    path = tmp_path / "records.parquet"
    setup(path)
    code, out, err = run(capsys, path)
    assert code == 2, code
    assert err.startswith("cube: error: ") and message in err and str(path) in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_bad_threshold_is_an_error(tmp_path, capsys):
    path = tmp_path / "records.parquet"
    write_records(path, ["x"], ["y"])
    code, _, err = run(capsys, path, "--window", "0")
    assert code == 2 and "--window must be at least 1, got 0" in err, err


def test_audit_covers_every_store_below_a_folder_and_several_stores(tmp_path, capsys, cmmlu_root, leaks):
    """Issue 47: the book reads data/reruns (and the harness runs, the imports) beside
    data/records; one audit covers them all, a leak in a nested store included."""
    _, option_leak = leaks
    (tmp_path / "data" / "records").mkdir(parents=True)
    (tmp_path / "data" / "reruns" / "m").mkdir(parents=True)
    write_records(tmp_path / "data" / "records" / "a.parquet", ["普通的回答"], ["无"])
    write_records(tmp_path / "data" / "reruns" / "m" / "b.parquet", ["选 " + option_leak], ["无"])
    code, out, _ = run(capsys, tmp_path / "data", "--items", cmmlu_root)
    assert code == 1 and out.count("LEAK ") == 1 and "reruns/m/b.parquet:0" in out, out
    assert "1 hit(s) in 2 records" in out and "2 file(s)" in out
    code, out, _ = run(capsys, tmp_path / "data" / "records", tmp_path / "data", "--items", cmmlu_root)
    assert code == 1 and "1 hit(s) in 2 records" in out, out  # a file named twice is read once


def test_python_dash_m_cube_runs_the_audit(tmp_path, cmmlu_root):
    path = tmp_path / "records.parquet"
    write_records(path, ["普通的回答"], ["无"])
    done = subprocess.run(
        [sys.executable, "-m", "cube", "release", "audit", str(path), "--items", str(cmmlu_root)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "leakage audit clean: 0 hit(s) in 1 records" in done.stdout, done.stdout


def test_cli_defaults_are_the_library_defaults():
    from cube.cli import build_parser
    from cube.records import leakage

    args = build_parser().parse_args(["release", "audit", "records.parquet"])
    assert (args.window, args.min_option_chars, args.min_question_chars, args.stock_items) == (
        leakage.WINDOW, leakage.MIN_OPTION_CHARS, leakage.MIN_QUESTION_CHARS, leakage.STOCK_ITEMS)


# ---------------------------------------------------------------------------- build and verify


def write_store(folder, items, generations):
    """A records store (cube.records.store) of real uids/qhashes with the given M6 generations."""
    from cube.records.store import write_records as write_store_records
    from tests.record_tables import record, table

    rows = []
    for item, generation in zip(items, generations):
        base = {"model": "tiny-model", "uid": item.uid, "qhash": item.qhash, "gold": item.answer}
        rows.append(record(**base, scorer="M1-seq", pred=1, scores=[-2.0, -0.5, -3.0, -4.0]))
        rows.append(record(**base, scorer="M6-strict", pred=1, scores=[0.0, 1.0, 0.0, 0.0],
                           generation=generation))
    write_store_records(folder, table(rows))
    return folder


@pytest.fixture(scope="module")
def some_items(cmmlu_items):
    items = cmmlu_items(("test",))
    return [items[0], items[len(items) // 3], items[2 * len(items) // 3]]


def test_build_then_verify_from_the_command_line(tmp_path, capsys, cmmlu_root, some_items):
    records = write_store(tmp_path / "records", some_items, ["我选A。", None, "这道题我倾向于选第一个。"])
    out = tmp_path / "release" / "bundle"
    code = main(["release", "build", str(records), "--out", str(out), "--items", str(cmmlu_root)])
    printed, err = capsys.readouterr()
    assert code == 0, err
    assert printed.startswith(f"bundle {out} (") and "6 records" in printed, printed
    assert "leakage audit clean against" in printed, printed
    assert sorted(p.name for p in out.parent.iterdir()) == ["bundle", "bundle.tar.gz"]

    for target in (out, out.with_name("bundle.tar.gz")):
        code = main(["release", "verify", str(target), "--items", str(cmmlu_root)])
        printed, _ = capsys.readouterr()
        assert code == 0 and printed.startswith("bundle OK: ") and "leakage audit clean" in printed, printed

    shard = next((out / "records" / "tiny-model").glob("*.parquet"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    code = main(["release", "verify", str(out)])
    printed, _ = capsys.readouterr()
    assert code == 1, printed
    assert printed.splitlines() == [
        f"FAIL {shard}: sha256 does not match SHA256SUMS (file changed)",
        f"bundle FAILED: 1 problem(s) in {out}",
    ], printed

    code = main(["release", "build", str(records), "--out", str(out), "--items", str(cmmlu_root)])
    _, err = capsys.readouterr()
    assert code == 2 and "already exists" in err and len(err.strip().splitlines()) == 1, err


def test_build_refuses_a_leak_of_another_item_in_one_line(tmp_path, capsys, cmmlu_root, some_items, leaks):
    question_leak, _ = leaks  # a span of an item not among some_items, disguised
    records = write_store(tmp_path / "records", some_items, ["普通回答", "引用：" + question_leak, None])
    out = tmp_path / "release" / "bundle"
    code = main(["release", "build", str(records), "--out", str(out), "--items", str(cmmlu_root)])
    printed, err = capsys.readouterr()
    assert code == 2, printed
    assert err.startswith("cube: error: ") and "refusing to build" in err, err
    assert f"uid={some_items[1].uid} field=generation" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert normalize_for_match(question_leak)[0][:20] not in normalize_for_match(err)[0]
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_verify_of_a_missing_bundle_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run_action(capsys, "verify", tmp_path / "absent")
    assert code == 2 and err == f"cube: error: bundle not found: {tmp_path / 'absent'} (a bundle folder or its .tar.gz)\n", err


def run_action(capsys, action, *argv):
    code = main(["release", action, *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.registry
def test_build_refuses_a_killed_runs_store_unless_allowed(tmp_path, capsys, cmmlu_root, tiny_qwen3, qwen3_tokenizer):
    """Issue 22: 2 of the 6 shards of `--sample 30 --shard-size 5` were released as if complete."""
    pytest.importorskip("torch")
    from tests.killed_run import killed_run

    records, out = tmp_path / "records", tmp_path / "release" / "bundle"
    killed_run(records, cmmlu_root.parent, tiny_qwen3, qwen3_tokenizer)
    code = main(["release", "build", str(records), "--out", str(out), "--items", str(cmmlu_root)])
    printed, err = capsys.readouterr()
    assert code == 2 and printed == "" and err.count("\n") == 1, err
    assert "incomplete store: tiny/label--L1_halfwidth__zh_cue__0shot__original: 2 of 6 shards, 10 of 30 items" in err
    assert not out.exists() and not out.with_name("bundle.tar.gz").exists()
    code = main(["release", "build", str(records), "--out", str(out), "--items", str(cmmlu_root),
                 "--allow-incomplete"])
    printed, err = capsys.readouterr()
    assert code == 0 and "20 records" in printed, err


def test_issue32_an_allow_incomplete_bundle_says_so_to_verify_and_every_reader(tmp_path, capsys, cmmlu_root,
                                                                               some_items):
    """Issue 32 §1: `release build --allow-incomplete` wrote a bundle that `verify` called "bundle OK" and
    whose records `rescore` and `confirm` read with rc 0 and no warning (the repacked records lost the
    cell configuration that told a reader the cell was short). The store here: a cell configuration
    promising 30 items in shards of 5, none written (as a run killed before its first shard of it)."""
    import json

    from cube.records.store import write_records as write_store_records
    from tests.record_tables import record, table

    rows = [record(model="tiny-model", uid=i.uid, qhash=i.qhash, gold=i.answer, scorer=s, pred=1,
                   scores=[-2.0, -0.5, -3.0, -4.0]) for i in some_items for s in ("M1-seq", "M1-strict")]
    records = tmp_path / "records"
    write_store_records(records, table(rows))
    manifest = json.loads((records / "MANIFEST.json").read_text(encoding="utf-8"))
    cell = "tiny-model/label--L1_halfwidth__zh_cue__0shot__original"
    manifest["cells"] = {cell: {"kind": "label", "scorers": ["M1-seq"], "n_items": 30, "shard_size": 5}}
    (records / "MANIFEST.json").write_text(json.dumps(manifest), encoding="utf-8")
    short = f"{cell}: 0 of 6 shards, 0 of 30 items"

    out = tmp_path / "release" / "bundle"
    code, printed, err = run_action(capsys, "build", records, "--out", out, "--items", cmmlu_root, "--allow-incomplete")
    assert code == 0, err
    assert f"INCOMPLETE {short}" in printed and "bundle INCOMPLETE" in printed, printed
    bundle_manifest = json.loads((out / "MANIFEST.json").read_text(encoding="utf-8"))
    assert len(bundle_manifest["incomplete"]) == 1 and bundle_manifest["incomplete"][0].startswith(short)
    assert "**INCOMPLETE**" in (out / "README.md").read_text(encoding="utf-8")

    for target in (out, out.with_name("bundle.tar.gz")):
        code, printed, err = run_action(capsys, "verify", target, "--items", cmmlu_root)
        assert code == 0 and printed.startswith("bundle OK: "), printed + err
        assert f"INCOMPLETE marked incomplete when written: {short}" in printed, printed
        assert printed.splitlines()[-1].startswith("bundle INCOMPLETE: "), printed

    needle = f"incomplete cell (a killed or unfinished run?): marked incomplete when written: {short}"
    code = main(["rescore", str(out / "records"), "--scorer", "M1-seq"])
    printed, err = capsys.readouterr()
    assert code == 0 and needle in printed and needle in err, printed + err
    code = main(["rescore", str(out / "records"), "--allow-incomplete"])  # an unknown argument before
    printed, err = capsys.readouterr()
    assert code == 0 and needle in printed, err
    code = main(["rescore", str(out)])  # the bundle itself: "manifest has no 'files' object" before
    printed, err = capsys.readouterr()
    assert code == 2 and f"is a release bundle, not a records store: its records are {out / 'records'}" in err, err

    prediction = REPO_ROOT / "data" / "predictions" / "audit_frozen.json"
    confirm = ["confirm", str(out / "records"), "--prediction", str(prediction), "--family", "tiny-model=qwen3"]
    code = main(confirm)
    printed, err = capsys.readouterr()
    assert code == 2 and printed == "" and "incomplete store: marked incomplete when written" in err, err
    code = main([*confirm, "--allow-incomplete"])
    printed, err = capsys.readouterr()
    assert code in (0, 1) and needle in printed and needle in err, printed + err

    # the mark cannot be edited out of the bundle's manifest without verify saying so
    del bundle_manifest["incomplete"]
    (out / "MANIFEST.json").write_text(json.dumps(bundle_manifest), encoding="utf-8")
    from cube.release.bundle import sha256sums

    (out / "SHA256SUMS").write_text(sha256sums(out), encoding="utf-8")
    code, printed, _ = run_action(capsys, "verify", out)
    assert code == 1 and "incomplete [] does not match the records" in printed, printed


def test_issue32_metadata_quoting_an_option_refuses_the_build_and_fails_verify(tmp_path, capsys, cmmlu_root,
                                                                               some_items, unique_short_option):
    """Issue 32 §4: a unique 5-8 character option in a store's metadata (an imported config) shipped in
    the bundle's MANIFEST.json, and `release verify --items` said the leakage audit was clean."""
    import json

    from cube.records.store import write_records as write_store_records
    from cube.release.bundle import sha256sums
    from tests.record_tables import record, table

    uid, option = unique_short_option
    rows = [record(model="tiny-model", uid=i.uid, qhash=i.qhash, gold=i.answer, pred=1, scores=[-2.0, -0.5, -3.0, -4.0])
            for i in some_items]
    records = tmp_path / "records"
    write_store_records(records, table(rows), metadata={"lm_eval": {"config": {"description": f"{option}。"}}})
    out = tmp_path / "release" / "bundle"
    code, printed, err = run_action(capsys, "build", records, "--out", out, "--items", cmmlu_root)
    assert code == 2 and "in the metadata MANIFEST.json would carry" in err and err.count("\n") == 1, err
    assert f"item {uid}" in err and not out.exists()

    clean = tmp_path / "clean"
    write_store_records(clean, table(rows))
    code, printed, err = run_action(capsys, "build", clean, "--out", out, "--items", cmmlu_root)
    assert code == 0, err
    manifest = json.loads((out / "MANIFEST.json").read_text(encoding="utf-8"))
    manifest["records_metadata"] = {"note": "".join(f"%{b:02X}" for b in option.encode())}  # %-encoded
    (out / "MANIFEST.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    (out / "SHA256SUMS").write_text(sha256sums(out), encoding="utf-8")
    code, printed, _ = run_action(capsys, "verify", out, "--items", cmmlu_root)
    assert code == 1 and f"kind=option encoding=percent item={uid}" in printed, printed
