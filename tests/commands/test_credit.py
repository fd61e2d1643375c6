"""``cube credit``: the printed forms scripts and the book rely on, and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cube.cli import main
from cube.config import REPO_ROOT

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "credit"
EXAMS = REPO_ROOT / "config" / "exams"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["credit", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_expected_prints_fraction_and_decimal(capsys):
    code, out, _ = run(capsys, "expected", "--scheme", "ladder")
    assert code == 0
    assert "expected score per group: 49/160 = 0.30625" in out
    code, out, _ = run(capsys, "expected", "--scheme", "additive")
    assert code == 0 and "expected score per group: 1/2 = 0.5" in out
    code, out, _ = run(capsys, "expected", "--scheme", str(FIXTURES / "scheme_three.yaml"))
    assert code == 0 and "expected score per group: 5/16 = 0.3125" in out


@pytest.mark.parametrize(
    "exam, line",
    [
        ("thpt2025_standard.yaml", "random-guess baseline: 2.725 points out of 10 (27.25%)"),
        ("thpt2025_math.yaml", "random-guess baseline: 1.975 points out of 10 (19.75%)"),
    ],
)
def test_baseline_of_the_shipped_exams(capsys, exam, line):
    code, out, _ = run(capsys, "baseline", str(EXAMS / exam))
    assert code == 0
    assert line in out


def test_best_fixed_prints_string_and_score(capsys):
    code, out, _ = run(capsys, "best-fixed", str(FIXTURES / "key_small.csv"))
    assert code == 0
    assert "best fixed answer string: B + ĐSSĐ" in out
    assert "score: 3 of 4.5 points on this key (66.67%)" in out


def test_percentile_and_reach(capsys):
    hist = str(FIXTURES / "hist_small.csv")
    code, out, _ = run(capsys, "percentile", hist, "6.5", "--reach", "51")
    assert code == 0
    assert "score 6.5: percentile rank 30" in out
    assert "percentile 51: needs a score of 8 (rank 80)" in out


def test_gap_shows_equal_accuracy_unequal_credit(capsys):
    code, out, _ = run(capsys, "gap", str(FIXTURES / "judgments_two_models.csv"))
    assert code == 0
    spread, lumped = out.split("model lumped")
    assert "statement accuracy: 1/2 = 0.5" in spread and "statement accuracy: 1/2 = 0.5" in lumped
    assert "mean gap (additive - ladder): 1/4 = 0.25" in spread
    assert "mean gap (additive - ladder): 0" in lumped
    assert "groups by statements right: 0:1 1:0 2:0 3:0 4:1" in lumped
    assert "  g1     2/4        0.25       0.5  0.25" in spread


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["expected", "--scheme", "nope"], "unknown scheme 'nope'"),
        (["percentile", "HIST", "abc"], "SCORE: 'abc' is not a number"),
        (["percentile", "HIST"], "give a SCORE"),
        (["best-fixed", "BADKEY"], "line 3 column key: unknown statement value 'X'"),
        (["baseline", "missing.yaml"], "file not found: missing.yaml"),
    ],
)
def test_errors_are_one_line_exit_2(capsys, tmp_path, argv, fragment):
    bad_key = tmp_path / "key.csv"
    bad_key.write_text("part,question,statement,key\nII,1,a,Đ\nII,1,b,X\n", encoding="utf-8")
    subs = {"HIST": str(FIXTURES / "hist_small.csv"), "BADKEY": str(bad_key)}
    code, out, err = run(capsys, *[subs.get(a, a) for a in argv])
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("cube: error: ")
    assert fragment in err


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "cube", "credit", "expected", "--scheme", "ladder"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "49/160 = 0.30625" in proc.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "cube",
            "credit",
            "percentile",
            str(FIXTURES / "hist_small.csv"),
            "x",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0


def test_a_score_past_any_float_is_placed_and_an_absurd_one_refused(capsys):
    """Issue 22, section 3: ``percentile HIST 1e309`` raised decimal.InvalidOperation (quantize to
    60 digits); the rank of a score above every listed one is 100."""
    hist = str(FIXTURES / "hist_small.csv")
    code, out, err = run(capsys, "percentile", hist, "1e309")
    assert code == 0, err
    assert f"score 1{'0' * 309}: percentile rank 100" in out
    code, out, err = run(capsys, "percentile", hist, "1e999999999")  # would build a billion-digit integer
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "SCORE: '1e999999999' is out of range" in err
