"""SHA256SUMS has one writer and one parser (cube.checksums), for cube's own folders and bundles alike."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from cube.checksums import parse_sums, read_sums, record_folder, sums_text, verify_folder
from cube.errors import ChecksumError


def test_written_sums_are_what_sha256sum_checks_and_parse_back(tmp_path):
    (tmp_path / "sub").mkdir()
    files = {"b.txt": b"second\n", "a.bin": bytes(range(256)), "sub/c.json": b"{}"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    record_folder(tmp_path)
    text = (tmp_path / "SHA256SUMS").read_text()
    expected = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    assert text == sums_text(expected) and text.splitlines()[0].endswith("  a.bin")  # sorted by path
    assert parse_sums(text) == (expected, [])
    assert read_sums(tmp_path / "SHA256SUMS") == expected
    verify_folder(tmp_path)
    done = subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_parser_reports_every_bad_line_and_reads_binary_mode_lines():
    digest = "0" * 64
    text = "\n".join([f"{digest} *bin.dat", "not a sum", f"{digest}  ../outside", f"{digest}  /abs",
                      f"{digest}  a//b", f"{digest}  bin.dat", f"{'A' * 64}  upper"])
    listed, problems = parse_sums(text, "X/SHA256SUMS")
    assert listed == {"bin.dat": digest}
    assert problems == [
        "X/SHA256SUMS line 2: not '<sha256>  <path>'",
        "X/SHA256SUMS line 3: path '../outside' is not inside the folder",
        "X/SHA256SUMS line 4: path '/abs' is not inside the folder",
        "X/SHA256SUMS line 5: path 'a//b' is not inside the folder",
        "X/SHA256SUMS line 6: bin.dat listed twice",
        "X/SHA256SUMS line 7: not '<sha256>  <path>'",
    ]


def test_a_loader_refuses_on_the_first_bad_line_naming_the_file(tmp_path):
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  ok\n{'0' * 64}  ../escape\n")
    with pytest.raises(ChecksumError, match=r"SHA256SUMS line 2: path '\.\./escape' is not inside the folder"):
        read_sums(sums)
