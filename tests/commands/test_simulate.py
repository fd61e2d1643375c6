"""``cube simulate``: writes a marked-synthetic store and says so."""

from __future__ import annotations

import pytest

from cube import cli
from cube.records.store import read_manifest


@pytest.fixture
def run(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.simulate"])

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["simulate", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_simulate_small_fraction(run, tmp_path):
    code, out, _ = run(str(tmp_path / "cube"), "--fraction", "0.01", "--seed", "3")
    assert code == 0
    assert "wrote SYNTHETIC records" in out and "25,542 records = 18 models x 129 items x 11" in out
    manifest = read_manifest(tmp_path / "cube")
    assert manifest["synthetic"] is True and manifest["metadata"]["generator"]["seed"] == 3


def test_bad_fraction_and_occupied_folder_are_exit_2(run, tmp_path):
    code, _, err = run(str(tmp_path / "a"), "--fraction", "1.5")
    assert code == 2 and "fraction must lie in (0, 1]" in err
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep").write_text("x")
    code, _, err = run(str(tmp_path / "b"), "--fraction", "0.01")
    assert code == 2 and "not empty" in err


def test_a_file_as_out_and_a_negative_seed_are_one_line_exit_2(run, tmp_path):
    """Issue 22, section 3: a file raised NotADirectoryError, --seed -1 numpy's ValueError."""
    (tmp_path / "file").write_text("x")
    code, _, err = run(str(tmp_path / "file"), "--fraction", "0.01")
    assert code == 2 and err.strip() == f"cube: error: {tmp_path / 'file'} is a file; the simulation writes a new records folder"
    code, _, err = run(str(tmp_path / "c"), "--fraction", "0.01", "--seed", "-1")
    assert code == 2 and err.strip() == "cube: error: --seed -1 must be at least 0"
    assert not (tmp_path / "c").exists()
