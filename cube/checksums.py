"""File checksums: every verified download, cache hit, record shard and bundle file uses this one.

What cube makes itself (a converted model folder, a converted tokenizer) has no pin in config, so
its digests are recorded when cube makes it, in ``sha256sum``'s format (``sha256sum -c`` reads
them too), and checked in full on every load: a size/mtime/inode stamp is defeated by an in-place
edit followed by ``touch -r``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Mapping

from cube.atomic import atomic_write_text
from cube.errors import ChecksumError

SUMS_FILE = "SHA256SUMS"


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks so large GGUF files never sit in memory."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sums_text(digests: Mapping[str, str]) -> str:
    """``sha256sum``'s text format (hex, two spaces, path), sorted by path: the one SHA256SUMS writer."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items()))


# ``sha256sum`` writes a space (text mode) or ``*`` (binary mode) between the two spaces' places
_SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def parse_sums(text: str, where: str = SUMS_FILE) -> tuple[dict[str, str], list[str]]:
    """(path -> sha256, problems): the one SHA256SUMS parser.

    A malformed line, a path that leaves the folder (absolute, ``..``, empty parts) or a path listed
    twice is a problem, each one line naming ``where`` and the line number, not an exception: a
    bundle's verify reports them all, a loader refuses on the first (:func:`read_sums`).
    """
    listed: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _SUM_LINE.match(line)
        if not match:
            problems.append(f"{where} line {number}: not '<sha256>  <path>'")
            continue
        digest, name = match.groups()
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or "" in parts:
            problems.append(f"{where} line {number}: path {name!r} is not inside the folder")
        elif name in listed:
            problems.append(f"{where} line {number}: {name} listed twice")
        else:
            listed[name] = digest
    return listed, problems


def write_sums(sums: Path, digests: Mapping[str, str]) -> None:
    atomic_write_text(sums, sums_text(digests))


def read_sums(sums: Path) -> dict[str, str]:
    listed, problems = parse_sums(sums.read_text(encoding="utf-8"), str(sums))
    if problems:
        raise ChecksumError(problems[0])
    return listed


def _mismatch(path: Path, got: str, want: str) -> ChecksumError:
    return ChecksumError(f"{path}: sha256 {got} differs from {want} recorded when cube made it "
                         f"(edited or corrupted; delete it to rebuild)")


def read_verified(path: Path, sums: Path) -> bytes:
    """``path``'s bytes, checked against its digest in ``sums``: hashed and parsed from one read."""
    data = path.read_bytes()
    want = read_sums(sums).get(path.name)
    if want is None:
        raise ChecksumError(f"{sums}: no sha256 recorded for {path.name}")
    got = sha256_bytes(data)
    if got != want:
        raise _mismatch(path, got, want)
    return data


def _folder_files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
            if not p.is_dir() and p.name != SUMS_FILE}


def record_folder(folder: Path) -> None:
    """Record the digest of every file in a folder cube just made (call before it becomes visible)."""
    write_sums(folder / SUMS_FILE, {name: sha256_file(p) for name, p in _folder_files(folder).items()})


def verify_folder(folder: Path) -> None:
    """The folder holds exactly the files recorded in its SHA256SUMS, each with its recorded digest.

    A file cube never made is refused too: loaders pick up extra files (weights shards, tokenizer
    files, code) by name.
    """
    recorded = read_sums(folder / SUMS_FILE)
    present = _folder_files(folder)
    extra, missing = sorted(set(present) - set(recorded)), sorted(set(recorded) - set(present))
    if extra:
        raise ChecksumError(f"{folder / extra[0]}: not recorded in {folder / SUMS_FILE}; cube did not make it")
    if missing:
        raise ChecksumError(f"{folder / missing[0]}: recorded in {folder / SUMS_FILE} but missing")
    for name, want in recorded.items():
        got = sha256_file(present[name])
        if got != want:
            raise _mismatch(present[name], got, want)
