"""config/models.yaml, typed: the real file parses whole, and each misspelt value is one line naming it."""

from __future__ import annotations

import pytest
import yaml

from cube.config import REPO_ROOT
from cube.errors import ConfigError
from cube.models_config import TokenizerSource, models_config, study_checkpoints, tokenizer_families

RAW = yaml.safe_load((REPO_ROOT / "config" / "models.yaml").read_text(encoding="utf-8"))


def test_the_real_config_reads_as_its_yaml_says():
    config = models_config(REPO_ROOT / "config")
    assert list(config.families) == list(RAW["families"])
    assert len(config.checkpoints) == 18 == len(study_checkpoints())
    for name, entry in RAW["families"].items():  # independently of the parser: the YAML itself
        family = config.families[name]
        if entry["offline"]:
            assert family.offline.as_dict() == {"spec": entry["offline"]["spec"], "sha256": entry["offline"]["sha256"]}
        else:
            assert family.offline is None and family.skip_reason == entry["skip_reason"]
    expected = {m: e["family"] for section in ("checkpoints", "demo_models") for m, e in RAW[section].items()}
    assert config.model_families() == expected
    assert {m.name: m.family for m in config.demo_models.values()} == {
        m: e["family"] for m, e in RAW["demo_models"].items()}
    assert [c.name for c in config.checkpoints.values() if c.role == "generation"] == [
        "r1-distill-qwen-1.5b", "r1-distill-qwen-7b"]


def test_a_prediction_records_the_remote_code_opt_in_only_where_it_is_set():
    assert TokenizerSource("hf:a/b@" + "0" * 40).as_dict() == {"spec": "hf:a/b@" + "0" * 40, "sha256": None}
    assert TokenizerSource("hf:a/b@" + "0" * 40, None, True).as_dict()["trust_remote_code"] is True


def _write(tmp_path, doc) -> None:
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["checkpoints"]["qwen3-8b"].update(family="qwen-3"),
     r"checkpoint 'qwen3-8b' names unknown family 'qwen-3'; known: qwen2\.5, qwen3, "),
    (lambda d: d["demo_models"]["gemma-3-270m"].update(family="gemma"),
     r"model 'gemma-3-270m' names unknown family 'gemma'; known: "),
    (lambda d: d["demo_models"]["gemma-3-270m"].pop("family"), r"model 'gemma-3-270m' lacks `family`$"),
    (lambda d: d["checkpoints"]["qwen3-8b"].update(role="labels"),
     r"checkpoint 'qwen3-8b' has role 'labels'; known: label, generation$"),
    (lambda d: d["families"]["qwen3"].update(offline={"sha256": "0" * 64}),
     r"family 'qwen3': `offline` must be a mapping with a `spec`$"),
    (lambda d: d["families"]["qwen3"]["offline"].update(sha256=12),
     r"family 'qwen3': sha256 12 is not 64 lowercase hex characters \(quote it\)$"),
    (lambda d: d["families"]["qwen3"]["offline"].update(trust_remote_code="yes"),
     r"family 'qwen3': npm:.*: trust_remote_code must be true or false, got 'yes'$"),
])
def test_a_misspelt_value_is_one_line_naming_it(tmp_path, monkeypatch, edit, message):
    doc = yaml.safe_load(yaml.safe_dump(RAW, sort_keys=False))
    edit(doc)
    _write(tmp_path, doc)
    with pytest.raises(ConfigError, match=message) as caught:
        models_config(tmp_path)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(str(tmp_path / "models.yaml"))
    monkeypatch.setenv("CUBE_CONFIG_DIR", str(tmp_path))  # every reader parses the whole file
    with pytest.raises(ConfigError, match=message):
        tokenizer_families()


def test_unknown_names_list_the_known_ones():
    config = models_config()
    with pytest.raises(ConfigError, match=r"^unknown family 'qwen9'; known: qwen2\.5, qwen3, r1-distill-qwen"):
        config.family("qwen9")
    with pytest.raises(ConfigError, match=r"^unknown model 'smollm3'; known: gemma-3-270m, "):
        config.demo_model("smollm3")


def test_a_missing_section_is_named_by_the_reader_that_needs_it(tmp_path, monkeypatch):
    _write(tmp_path, {"families": RAW["families"]})
    monkeypatch.setenv("CUBE_CONFIG_DIR", str(tmp_path))
    assert tokenizer_families()["qwen3"].offline is not None
    with pytest.raises(ConfigError, match=r"^no `checkpoints` section in .*models\.yaml$"):
        study_checkpoints()
