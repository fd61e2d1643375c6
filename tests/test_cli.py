"""``cube.cli``: the entry point's own one-line failures (issue 22, section 3)."""

from __future__ import annotations

import subprocess
import sys

from cube.config import REPO_ROOT
from cube.records.store import write_records
from tests.record_tables import record, table


def test_a_reader_that_closes_the_pipe_gets_one_line_and_exit_141(tmp_path):
    """``cube rescore --json | head`` raised BrokenPipeError with a traceback (and another from
    Python's flush at exit). 200 models give some 160 KB of JSON, far more than a pipe holds,
    so the write is still going when the reader closes."""
    write_records(tmp_path / "store", table([record(model=f"m{k:04d}") for k in range(200)]))
    proc = subprocess.Popen([sys.executable, "-m", "cube", "rescore", str(tmp_path / "store"), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT)
    assert proc.stdout.readline().strip() == b"{"  # what `head -1` reads
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines() == ["cube: output closed by the reader (broken pipe); output stopped"]


def test_output_to_a_full_disk_is_one_line_and_exit_2():
    """/dev/full fails every write with ENOSPC, as a full disk does: the entry point's net for it."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "cube", "credit", "expected", "--scheme", "ladder"],
                              stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "cube: error: No space left on device; free some space and run the command again"]


def test_help_speaks_to_a_user_without_rst_literals():
    """Issue 36 §6: `cube --help` opened with this module's developer docstring, five commands'
    descriptions leaked reStructuredText's double backticks, and import named lm-eval only."""
    import argparse

    from cube.cli import build_parser

    parser = build_parser()
    top = parser.format_help()
    assert "console command" not in top and top.split("\n\n")[1].startswith("cube: trustworthy multiple-choice")
    assert "CUBE_CONFIG_DIR" in top and "~/.cache/cube/data" in top
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    pages = {name: p.format_help() for name, p in sub.choices.items()}
    for name, command in sub.choices.items():
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                pages.update({f"{name} {n}": p.format_help() for n, p in action.choices.items()})
    assert [name for name, page in pages.items() if "``" in page] == []
    assert "opencompass" in top.lower() and "lm-eval" in top
