"""Run logs, the commands read back from them, and the item sample by uid."""

from __future__ import annotations

import json
import shlex

import pyarrow as pa
import pytest

from cube.cli import build_parser
from cube.errors import RecordsError
from cube.records.provenance import read_run_logs, run_command, run_rows, sample_by_subject, zero_shot_sample_size

OLD_LINE = {  # a run log line from before commands were logged
    "model": "m1", "benchmark": "cmmlu", "split": "test", "sample": 600, "seed": 0, "dtype": "bfloat16",
    "backend": "hf", "scorers": ["M1-seq", "M1-strict"], "n_items": 600, "jobs_run": 24, "wall_s": 90.5,
    "records_written": 4800, "items_per_s": 13.2, "versions": {"torch": "2.13.0+cpu"},
    "cells": [f"{ls}|{ctx}|{n}shot|original" for ls in ("L1_halfwidth", "L4_circled")
              for ctx in ("zh_cue", "en_label_space") for n in (0, 5)],
}


def write_log(store, model, lines):
    (store / model).mkdir(parents=True, exist_ok=True)
    (store / model / "runlog.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_rebuilt_command_parses_back_to_the_logged_run():
    args = build_parser().parse_args(shlex.split(run_command(OLD_LINE))[1:])
    assert (args.model, args.sample, args.seed, args.dtype) == ("m1", 600, 0, "bfloat16")
    assert args.label_sets == ["L1_halfwidth", "L4_circled"] and args.contexts == ["zh_cue", "en_label_space"]
    assert (args.shots, args.orders, args.scorers) == ([0, 5], ["original"], ["M1-seq", "M1-strict"])
    cells = [f"{ls}|{c}|{n}shot|{o}" for ls in args.label_sets for c in args.contexts
             for n in args.shots for o in args.orders]
    assert sorted(cells) == sorted(OLD_LINE["cells"])


def test_a_logged_command_is_used_as_logged_and_odd_cells_are_refused():
    assert run_command({**OLD_LINE, "command": "cube run --model m1 --out x"}) == "cube run --model m1 --out x"
    with pytest.raises(RecordsError, match="not one product"):
        run_command({**OLD_LINE, "cells": OLD_LINE["cells"][:3]})
    with pytest.raises(RecordsError, match="label_set|context"):
        run_command({**OLD_LINE, "cells": ["L1_halfwidth|zh_cue"]})


def test_run_logs_are_read_per_model_and_bad_lines_name_the_file(tmp_path):
    write_log(tmp_path, "m1", [OLD_LINE, {**OLD_LINE, "jobs_run": 0}])
    write_log(tmp_path, "m2", [{**OLD_LINE, "model": "m2", "wall_s": 9.5}])
    logs = read_run_logs(tmp_path)
    assert [e["model"] for e in logs] == ["m1", "m1", "m2"]
    rows = run_rows(logs)  # a run that only found finished shards did no work: not a row
    assert [(r["model"], r["wall s"]) for r in rows] == [("m1", 90.5), ("m2", 9.5)]
    write_log(tmp_path, "m3", [{**OLD_LINE, "model": "other"}])
    with pytest.raises(RecordsError, match="m3/runlog.jsonl:1: logs model 'other'"):
        read_run_logs(tmp_path)
    (tmp_path / "m3" / "runlog.jsonl").write_text("{not json\n")
    with pytest.raises(RecordsError, match="runlog.jsonl:1: not a JSON line"):
        read_run_logs(tmp_path)


def test_the_sample_is_listed_by_subject_with_each_row_once():
    uids = ["cmmlu/virology/test/7", "cmmlu/anatomy/test/12", "cmmlu/virology/test/3", "cmmlu/virology/test/7"]
    rows = sample_by_subject(pa.table({"uid": uids}))
    assert rows == [
        {"benchmark": "cmmlu", "split": "test", "subject": "anatomy", "items": 1, "rows": [12]},
        {"benchmark": "cmmlu", "split": "test", "subject": "virology", "items": 2, "rows": [3, 7]},
    ]
    with pytest.raises(RecordsError, match="'cmmlu/virology/7' is not"):
        sample_by_subject(pa.table({"uid": ["cmmlu/virology/7"]}))


def test_logged_protocols_are_the_record_protocols_each_scorer_writes():
    from cube.records.provenance import logged_protocols

    line = {"model": "m", "scorers": ["M1-seq", "M2", "M6", "M6-cot", "TF"],
            "cells": ["L1_halfwidth|zh_cue|0shot|original", "L4_circled|zh_cue|5shot|shift1"]}
    got = logged_protocols([line])
    assert got == {
        ("m", "M1-seq", "L1_halfwidth", "zh_cue", 0, "original"), ("m", "M1-seq", "L4_circled", "zh_cue", 5, "shift1"),
        ("m", "M2", "-", "cloze", 0, "original"), ("m", "TF", "-", "judgement", 0, "original"),
        *{("m", e, ls, ctx, n, o) for e in ("M6-strict", "M6-lenient") for ls, n, o in
          (("L1_halfwidth", 0, "original"), ("L4_circled", 5, "shift1")) for ctx in ("zh_cue", "cot")},
    }


def test_archived_run_logs_vouch_for_every_shard_and_a_deleted_cell_is_reported(tmp_path):
    """Every line names its files (older ones migrated once, issue 25), so a gone cell shows (issue 11)."""
    import shutil

    from cube.config import REPO_ROOT
    from cube.records.provenance import incomplete_cells, logged_files
    from cube.records.store import MANIFEST_NAME, read_manifest, read_records

    archive = REPO_ROOT / "data" / "records"
    listed = read_manifest(archive)["files"]
    vouched = {name for entry in read_run_logs(archive) for name in logged_files(entry)}
    assert vouched and vouched <= set(listed) and not incomplete_cells(archive, listed)
    store = tmp_path / "records"
    shutil.copytree(archive, store)
    victim = sorted(n for n in vouched if "--L4_circled__" in n and n.startswith("smollm2"))[0]
    manifest = json.loads((store / MANIFEST_NAME).read_text())
    del manifest["files"][victim]  # the shard and its entry removed together: sha256s still agree
    (store / MANIFEST_NAME).write_text(json.dumps(manifest))
    (store / victim).unlink()
    with pytest.raises(RecordsError, match=rf"cells incomplete: {victim.rsplit('--', 1)[0]} \(1 of 12 shards gone"):
        read_records(store, verify=False)


def test_an_unmigrated_harness_line_is_refused_naming_the_migration():
    """Re-planning it would need the harness's planner, which records/ must not import (issue 25)."""
    from cube.records.provenance import logged_files

    with pytest.raises(RecordsError, match=r"run log of 'm1': a line lists no files .*scripts/migrate_run_logs.py"):
        logged_files(OLD_LINE)
    assert logged_files({"model": "m1", "wall_s": 1.0}) == []  # not a harness run's line: vouches for nothing
    assert logged_files({**OLD_LINE, "files": ["m1/a--00000.parquet"]}) == ["m1/a--00000.parquet"]


def test_reading_the_archive_imports_no_harness():
    """Circle 1: a store read once imported cube.harness.runner to re-plan old lines' shards."""
    import subprocess
    import sys

    from cube.config import REPO_ROOT

    code = ("import sys; from cube.records.store import read_records; "
            "read_records('data/sample', verify=False); read_records('data/records', verify=False); "
            "print(sorted(m for m in sys.modules if m.startswith('cube.harness')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_zero_shot_sample_counts_neither_judgement_only_items_nor_5_shot_records():
    """The book's "N-item sample": items with a 0-shot M1-seq record; the TF runs draw their own."""
    table = pa.table({
        "uid": ["cmmlu/a/test/1", "cmmlu/a/test/1", "cmmlu/a/test/2", "cmmlu/b/test/9", "cmmlu/b/test/3"],
        "scorer": ["M1-seq", "M1-strict", "M1-seq", "TF", "M1-seq"],
        "shots": [0, 0, 0, 0, 5],
    })
    assert zero_shot_sample_size(table) == 2
    assert sum(r["items"] for r in sample_by_subject(table)) == 4


# --- issue 32 §3 and §5 ---------------------------------------------------------------------------


def _store_with_log(tmp_path, line: str):
    from cube.records.store import write_records
    from tests.record_tables import record, table

    store = tmp_path / "store"
    write_records(store, table([record()]))
    (store / "m1" / "runlog.jsonl").write_text(line + "\n", encoding="utf-8")
    return store


@pytest.mark.parametrize("files", ["5", "null", '"m1/part-00000.parquet"', "[5]"])
def test_issue32_a_run_log_files_of_the_wrong_type_is_one_line(tmp_path, files):
    """`"files": 5` or null was a TypeError traceback in every reader; a string was read letter by letter."""
    from cube.records.store import read_records

    store = _store_with_log(tmp_path, f'{{"model": "m1", "files": {files}}}')
    with pytest.raises(RecordsError, match=r"run log of 'm1': a line's 'files' is .*, not a list of shard names") as caught:
        read_records(store)
    assert "\n" not in str(caught.value)


def test_issue32_shards_the_log_vouches_for_but_the_store_lost_say_what_to_do(tmp_path):
    """A merge killed before its manifest: the message named the cell but not the way out."""
    from cube.records.store import read_records

    store = _store_with_log(tmp_path, '{"model": "m1", "files": ["m1/label--c--00000.parquet"]}')
    with pytest.raises(RecordsError, match=r"no longer lists them; if a `cube merge` into it was killed, run the same "
                                           r"merge again .*else re-run the run's command"):
        read_records(store)
