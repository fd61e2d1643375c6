"""Benchmark data a user can get: ``cube data fetch cmmlu`` / ``cube data fetch ceval``.

A researcher who clones cube has no benchmark folder beside it. This module installs each
benchmark's official release into the data home (``$CUBE_DATA``, default ``<cache>/data``), in
the layout the loaders read (``<split>/<file>.csv`` plus the subject map), from the release URL
or from a local archive or folder in the official layout (``--from``).

Why it is careful:

- Nothing is trusted before it is checked. The archive's bytes are checked against the sha256
  pinned in ``config/data.yaml`` (or given with ``--sha256``); every data file inside it is
  checked against its own pinned sha256 where config pins them (CMMLU: all 134 CSVs), so a
  re-packed archive of the same release passes and a changed item never does. A download with
  neither pin refuses: there is nothing to check it against.
- Archive member names never become paths. The data files are located by their split folders
  and read member by member into paths cube computes itself, so an archive cannot write outside
  the data home (no ``..``, no absolute names, no links), and nothing in it is executed.
- Installation is atomic: the folder is filled and parsed by the real loaders under a temporary
  name, then renamed into place. Its ``MANIFEST.json`` records every file's sha256, and the
  loaders check each CSV against it on every load.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from cube import __version__
from cube.atomic import atomic_write_text
from cube.checksums import sha256_bytes, sha256_file
from cube.config import config_dir, load_config
from cube.errors import ChecksumError, ConfigError, ItemsError, SourceError, WriteError
from cube.protocol.installed import MANIFEST_NAME, file_sha256s, installed_manifest
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MAX_FILE_BYTES = 256 << 20  # no benchmark CSV comes near this; a bigger member is not data
# All of a release's files together (CMMLU's 134 CSVs are about 11 MiB): checked on the sizes an
# archive declares before a byte is read, since the files are held in memory until all are checked.
_MAX_TOTAL_BYTES = 256 << 20
# Seconds a connect or a read may stall: where the network drops packets silently, `make test`
# must still stop within a minute with the way out, not hang on the first connect.
_TIMEOUT_S = 30


@dataclass(frozen=True)
class BenchmarkRelease:
    """One benchmark's official release, as pinned in ``config/data.yaml``."""

    name: str
    title: str
    url: str
    archive_sha256: str | None
    splits: tuple[str, ...]
    file_pattern: str  # "{subject}.csv" or "{subject}_{split}.csv", inside "<split>/"
    subject_map: Path  # cube's shipped copy of the official subject map
    subject_map_name: str  # its name inside an installed folder
    files: dict[str, str] | None  # "<split>/<file>.csv" -> sha256, where pinned

    def file_suffix(self, split: str) -> str:
        return self.file_pattern.replace("{subject}", "").replace("{split}", split)


def _pinned_sha(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ConfigError(f"{where}: sha256 {value!r} is not 64 lowercase hex digits")
    return value


def releases() -> dict[str, BenchmarkRelease]:
    """Every benchmark ``cube data fetch`` knows, parsed once from config."""
    raw = load_config("data")
    where = config_dir() / "data.yaml"
    if not isinstance(raw, dict) or not isinstance(raw.get("benchmarks"), dict):
        raise ConfigError(f"{where}: expected a 'benchmarks' mapping")
    out = {}
    for name, entry in raw["benchmarks"].items():
        try:
            archive = entry["archive"]
            files = entry.get("files")
            out[name] = BenchmarkRelease(
                name=name, title=str(entry["title"]), url=str(archive["url"]),
                archive_sha256=_pinned_sha(archive.get("sha256"), f"{where} {name}.archive"),
                splits=tuple(entry["splits"]), file_pattern=str(entry["file_pattern"]),
                subject_map=config_dir() / entry["subject_map"],
                subject_map_name=str(entry["subject_map_name"]),
                files=None if files is None else {
                    str(k): _pinned_sha(v, f"{where} {name}.files.{k}") for k, v in files.items()},
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{where}: benchmark {name!r} is malformed ({exc!r})") from None
    return out


def release(name: str) -> BenchmarkRelease:
    known = releases()
    if name not in known:
        raise ConfigError(f"unknown benchmark {name!r}; cube data fetch knows: {', '.join(known)}")
    return known[name]


# ---- reading an archive or folder without trusting its names ---------------------------------

@dataclass(frozen=True)
class Opener:
    """One file of an archive or folder: the size it declares, and a reader of its bytes.

    The size is the archive's word (a zip's or tar's header, a file's stat), known before a
    byte is decompressed: a 1 MB zip declaring 4 x 255 MiB members reached 1.35 GB of memory
    before the per-file bound refused it. A zip's reader stops at the declared size (and fails
    its CRC there), so a member that lies about its size cannot read more than it declared.
    """

    size: int
    read: Callable[[], bytes]

    def __call__(self) -> bytes:
        return self.read()


def _zip_members(path: Path) -> dict[str, Opener]:
    zf = zipfile.ZipFile(path)
    members = {}
    for info in zf.infolist():
        is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
        if not info.is_dir() and not is_link:
            members[info.filename] = Opener(info.file_size, lambda i=info: _bounded(zf.open(i), i.filename))
    return members


def _tar_members(path: Path) -> dict[str, Opener]:
    tf = tarfile.open(path)
    return {m.name: Opener(m.size, lambda m=m: _bounded(tf.extractfile(m), m.name))
            for m in tf.getmembers() if m.isfile()}


def _folder_members(path: Path) -> dict[str, Opener]:
    return {p.relative_to(path).as_posix(): Opener(p.stat().st_size, lambda p=p: _bounded(p.open("rb"), str(p)))
            for p in path.rglob("*") if p.is_file() and not p.is_symlink()}


def check_sizes(members: dict[str, Opener], where: str) -> None:
    """Refuse, before reading any, members whose declared sizes no benchmark file comes near."""
    for name, member in members.items():
        if member.size > _MAX_FILE_BYTES:
            raise SourceError(f"{where}: {name} declares {member.size:,} bytes, more than "
                              f"{_MAX_FILE_BYTES >> 20} MiB; not a benchmark file")
    total = sum(member.size for member in members.values())
    if total > _MAX_TOTAL_BYTES:
        raise SourceError(f"{where}: its {len(members)} data files declare {total:,} bytes together, more "
                          f"than {_MAX_TOTAL_BYTES >> 20} MiB; not a benchmark release")


def _bounded(fh, name: str) -> bytes:
    with fh:
        data = fh.read(_MAX_FILE_BYTES + 1)
    if len(data) > _MAX_FILE_BYTES:
        raise SourceError(f"{name}: larger than {_MAX_FILE_BYTES >> 20} MiB, not a benchmark file")
    return data


def open_members(source: Path) -> dict[str, Opener]:
    """Member name -> reader, for a zip, a tar(.gz) or a folder."""
    try:
        if source.is_dir():
            return _folder_members(source)
        if zipfile.is_zipfile(source):
            return _zip_members(source)
        if tarfile.is_tarfile(source):
            return _tar_members(source)
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise SourceError(f"{source}: cannot read the archive ({exc})") from None
    if not source.exists():
        raise SourceError(f"{source}: no such file or folder")
    raise SourceError(f"{source}: not a zip, a tar archive or a folder")


def locate_files(rel: BenchmarkRelease, names: list[str], where: str) -> dict[str, str]:
    """``<split>/<file>.csv`` (the installed path) -> member name, for the one data root found.

    The data root is the folder whose split subfolders hold the release's CSVs: the archive's
    top level (C-Eval's zip), or ``CMMLU-<commit>/data/`` in the repository archive.
    """
    by_root: dict[str, dict[str, str]] = {}
    for name in names:
        parts = PurePosixPath(name).parts
        if len(parts) < 2 or ".." in parts or name.startswith("/"):
            continue
        split, file = parts[-2], parts[-1]
        if split in rel.splits and file.endswith(rel.file_suffix(split)) and len(file) > len(rel.file_suffix(split)):
            root = "/".join(parts[:-2])
            by_root.setdefault(root, {})[f"{split}/{file}"] = name
    complete = {root: files for root, files in by_root.items()
                if {k.split("/")[0] for k in files} == set(rel.splits)}
    if not complete:
        raise ItemsError(f"{where}: no {rel.name} data in the official layout "
                         f"({', '.join(s + '/' + rel.file_pattern.replace('{split}', s) for s in rel.splits)})")
    if len(complete) > 1:
        raise ItemsError(f"{where}: {len(complete)} {rel.name} data folders ({', '.join(sorted(complete))}); "
                         f"point --from at one of them")
    return next(iter(complete.values()))


def _check_files(rel: BenchmarkRelease, contents: dict[str, bytes], where: str) -> dict[str, str]:
    """Each file's sha256; against config's pins where there are any (same set, same bytes)."""
    got = {path: sha256_bytes(data) for path, data in sorted(contents.items())}
    if rel.files is not None:
        missing = sorted(set(rel.files) - set(got))
        extra = sorted(set(got) - set(rel.files))
        if missing or extra:
            what = f"missing {missing[0]}" if missing else f"unexpected {extra[0]}"
            n = len(missing) + len(extra)
            raise ChecksumError(f"{where}: not the pinned {rel.name} release ({what}"
                                f"{f' and {n - 1} more' if n > 1 else ''})")
        for path, digest in got.items():
            if digest != rel.files[path]:
                raise ChecksumError(f"{where}: {path} has sha256 {digest}, config/data.yaml pins {rel.files[path]}")
    return got


# ---- download -----------------------------------------------------------------------------------

def download(url: str, dest: Path, sha256: str | None, benchmark: str = "BENCHMARK") -> str:
    """Stream ``url`` to ``dest`` (tqdm progress) and return its sha256, checked if pinned."""
    import hashlib

    from tqdm import tqdm

    if not url.startswith("https://"):
        raise SourceError(f"{url}: only https downloads are allowed")
    digest = hashlib.sha256()
    request = urllib.request.Request(url, headers={"User-Agent": f"cube/{__version__}"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as resp, dest.open("wb") as out:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"download {Path(url).name}") as bar:
                for block in iter(lambda: resp.read(1 << 20), b""):
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):  # our disk, not the network
            raise WriteError(f"cannot write {dest}: {exc.strerror}; nothing was installed") from None
        reason = getattr(exc, "reason", None) or exc
        raise SourceError(f"cannot download {url} ({reason}); get it another way and run `cube data fetch "
                          f"{benchmark} --from FILE` (the archive, or a folder in its layout), or set "
                          f"CUBE_BENCHMARKS=DIR to a folder that holds {benchmark}/") from None
    got = digest.hexdigest()
    if sha256 is not None and got != sha256:
        raise ChecksumError(f"{url}: sha256 mismatch: got {got}, pinned {sha256}")
    return got


# ---- install ------------------------------------------------------------------------------------

def verify_installed(root: Path) -> int:
    """Re-hash every file an installed folder's manifest lists; the count checked."""
    manifest = installed_manifest(root)
    if manifest is None:
        raise ItemsError(f"{root}: no {MANIFEST_NAME} (not installed by `cube data fetch`)")
    for rel_path, want in manifest["files"].items():
        path = Path(root) / rel_path
        if not path.is_file():
            raise ChecksumError(f"{path}: listed in {MANIFEST_NAME} but missing")
        got = sha256_file(path)
        if got != want:
            raise ChecksumError(f"{path}: sha256 {got}, {MANIFEST_NAME} records {want}")
    return len(manifest["files"])


def fetch(name: str, home: Path, source: Path | None = None, sha256: str | None = None,
          force: bool = False) -> Path:
    """Install benchmark ``name`` into ``home/<name>``; the installed folder."""
    rel = release(name)
    sha256 = _pinned_sha(sha256, "--sha256") if sha256 is not None else rel.archive_sha256
    target = Path(home) / name
    if target.is_dir() and not force:
        verify_installed(target)
        return target
    if source is None and sha256 is None and rel.files is None:
        raise ChecksumError(
            f"{name}: no sha256 is pinned for {rel.url} (config/data.yaml), so a download could not be "
            f"checked; pin the one its publisher gives with --sha256, or use --from FILE")
    Path(home).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home, prefix=f".fetch-{name}-") as tmp:
        tmp = Path(tmp)
        if source is None:
            archive = tmp / Path(rel.url).name
            archive_sha = download(rel.url, archive, sha256, name)
            where = rel.url
        else:
            archive, where = Path(source), str(source)
            archive_sha = None
            if archive.is_file():
                archive_sha = sha256_file(archive)
                if sha256 is not None and archive_sha != sha256:
                    raise ChecksumError(f"{archive}: sha256 mismatch: got {archive_sha}, pinned {sha256}")
            elif sha256 is not None:
                raise ConfigError(f"--sha256 pins an archive's bytes, but {archive} is not a file")
        members = open_members(archive)
        located = locate_files(rel, list(members), where)
        check_sizes({member: members[member] for member in located.values()}, where)
        contents = {path: members[member]() for path, member in located.items()}
        hashes = _check_files(rel, contents, where)
        staged = tmp / name
        try:  # a full disk: one line; the temp folder goes with the with-block
            for path, data in contents.items():
                (staged / path).parent.mkdir(parents=True, exist_ok=True)
                (staged / path).write_bytes(data)
            shutil.copyfile(rel.subject_map, staged / rel.subject_map_name)
        except OSError as exc:
            raise WriteError(f"cannot install {name} into {home}: {exc.strerror or exc}; nothing was "
                             "installed") from None
        hashes[rel.subject_map_name] = sha256_file(staged / rel.subject_map_name)
        _parse_all(name, staged, rel.splits)  # a malformed row fails here, before installation
        atomic_write_text(staged / MANIFEST_NAME, json.dumps({
            "benchmark": name, "title": rel.title, "source": where, "archive_sha256": archive_sha,
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cube": __version__,
            "files": hashes}, indent=1, ensure_ascii=False) + "\n")
        if target.exists():
            old = tmp / "previous"
            target.rename(old)
        staged.rename(target)
    return target


def _parse_all(name: str, root: Path, splits: tuple[str, ...]) -> int:
    from cube.protocol.benchmarks import load_items

    return len(load_items(name, root, splits=splits))


__all__ = ["BenchmarkRelease", "fetch", "release", "releases", "verify_installed",
           "installed_manifest", "file_sha256s", "locate_files", "open_members", "download"]
