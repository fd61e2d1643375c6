"""``cube merge`` from the command line: exit codes and one-line errors."""

from __future__ import annotations

import argparse

from cube.commands import merge
from cube.errors import CubeError
from tests.records.test_merge import shard_bytes, write_run


def main(argv: list[str]) -> int:
    """The CLI's contract (cube.cli.main) for this one subcommand, until it is registered there."""
    parser = argparse.ArgumentParser(prog="cube")
    merge.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CubeError as exc:
        print(f"cube: error: {exc}")
        return 2


def test_merge_command_joins_shards(tmp_path, capsys):
    write_run(tmp_path / "a", (0, 2))
    write_run(tmp_path / "b", (1, 2))
    write_run(tmp_path / "whole", (0, 1))
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "whole")
    assert "copied" in capsys.readouterr().err


def test_conflict_exits_2_with_one_line(tmp_path, capsys):
    write_run(tmp_path / "a", (0, 1))
    write_run(tmp_path / "b", (0, 1), pred_shift=2)
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("cube: error: shard m1/") and "\n" not in out


def test_a_file_as_output_is_one_line_not_a_traceback(tmp_path, capsys):
    write_run(tmp_path / "a", (0, 1))
    target = tmp_path / "out.parquet"
    target.write_bytes(b"x")
    assert main(["merge", str(target), str(tmp_path / "a")]) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("cube: error: ") and "is not a folder" in out and "\n" not in out
    assert target.read_bytes() == b"x"


def test_issue45_a_missing_shard_is_refused_and_allow_incomplete_marks_the_merge(tmp_path, capsys):
    """``cube merge OUT A`` of one of two ``--shard K/2`` stores was rc 0 and said nothing."""
    from cube.records.store import read_manifest, unfinished_cells

    write_run(tmp_path / "a", (0, 2))
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "a")]) == 2
    out = capsys.readouterr().out.strip()
    assert out == ("cube: error: m1: shard 1/2 missing from the merge; add the missing shard's `cube run --out` "
                   "folder, or merge with --allow-incomplete for a store marked incomplete")
    assert not (tmp_path / "out").exists()
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "a"), "--allow-incomplete"]) == 0
    assert "WARNING: " in capsys.readouterr().err
    assert unfinished_cells(read_manifest(tmp_path / "out"))[0] == (
        "marked incomplete when written: m1: shard 1/2 missing from the merge (cube merge --allow-incomplete)")


def test_issue45_a_duplicate_shard_or_two_shard_counts_are_refused_by_name(tmp_path, capsys):
    write_run(tmp_path / "a", (0, 2))
    write_run(tmp_path / "b", (1, 2))
    write_run(tmp_path / "b2", (1, 2))
    (tmp_path / "b2" / "m1" / "runlog.jsonl").write_text('{"model": "m1", "shard": "1/2", "wall_s": 3}\n')  # a re-run
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "b2")]) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("cube: error: m1: shard 1/2 is in both ") and "\n" not in out
    assert str(tmp_path / "b2") in out
    write_run(tmp_path / "c", (1, 3))
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "a"), str(tmp_path / "c")]) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("cube: error: m1: shards of --shard K/N with different N (2, 3): ") and "\n" not in out
    assert not (tmp_path / "out").exists()


def test_a_shard_that_holds_no_chunk_logs_its_run_so_the_merge_is_whole(tmp_path, capsys):
    """--shard 2/3 of a run of two chunks has nothing to score; it wrote no run log, so merging the
    three stores reported shard 2/3 missing. It now logs a line (no records, no model loaded)."""
    import json

    from cube.cli import main as cube

    argv = ["run", "--model", "smollm2-135m-instruct", "--sample", "2", "--label-sets", "L1_halfwidth",
            "--scorers", "M1-seq", "--shard-size", "1", "--dtype", "float32"]
    for k in range(3):
        assert cube([*argv, "--shard", f"{k}/3", "--out", str(tmp_path / f"s{k}")]) == 0
    assert "shard 2/3 holds none of the run's 2 shards: nothing to score" in capsys.readouterr().err
    logged = [json.loads(line) for line in (tmp_path / "s2" / "smollm2-135m-instruct" / "runlog.jsonl").read_text(
        encoding="utf-8").splitlines()]
    assert [(e["shard"], e["jobs_run"], e["records_written"], e["files"]) for e in logged] == [("2/3", 0, 0, [])]
    assert main(["merge", str(tmp_path / "m"), *(str(tmp_path / f"s{k}") for k in range(3))]) == 0
    assert cube([*argv, "--out", str(tmp_path / "whole")]) == 0
    assert shard_bytes(tmp_path / "m") == shard_bytes(tmp_path / "whole")
