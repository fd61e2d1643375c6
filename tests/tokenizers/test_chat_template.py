"""Reading a checkpoint's own chat template (``cube.tokenizers.chat_template``) from real files:
the SmolLM2 demo's assembled GGUF, its converted folder (which transformers wrote as
``chat_template.jinja``), the same template in ``tokenizer_config.json`` as transformers' named
list, and a folder without one."""

from __future__ import annotations

import json
import shutil

import pytest

from cube.tokenizers.chat_template import folder_chat_template, gguf_chat_template
from cube.tokenizers.gguf import read_gguf_metadata

DEMO = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def demo_gguf(tmp_path_factory):
    from cube.harness.models import assemble_gguf, model_source

    return assemble_gguf(model_source(DEMO), tmp_path_factory.mktemp("gguf") / f"{DEMO}.gguf")


@pytest.mark.registry
def test_the_gguf_header_and_the_converted_folder_give_one_template(demo_gguf, tmp_path):
    from cube.harness.model_spec import parse_model
    from cube.harness.models import ensure_model

    spec = parse_model(str(demo_gguf))
    meta = read_gguf_metadata(demo_gguf)
    from_gguf = gguf_chat_template(meta, demo_gguf.name, spec.tokenizer())
    assert from_gguf.template == meta["tokenizer.chat_template"] and "<|im_start|>" in from_gguf.template
    assert from_gguf.source == f"GGUF header of {demo_gguf.name}"
    assert dict(from_gguf.special_tokens)["eos_token"] == "<|im_end|>"
    assert spec.chat_template() == from_gguf  # the SPEC reads the same, by the .gguf path
    assert parse_model(DEMO).chat_template().sha256 == from_gguf.sha256  # and by the demo's name

    folder = tmp_path / DEMO
    shutil.copytree(ensure_model(DEMO), folder)
    from_folder = folder_chat_template(folder)
    assert (from_folder.template, from_folder.source) == (from_gguf.template, f"chat_template.jinja of {folder}")
    assert from_folder.special_tokens == from_gguf.special_tokens

    # the same template as tokenizer_config.json's list of named templates: the default one is read
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = [{"name": "tool_use", "template": "{{ 'tools' }}"},
                               {"name": "default", "template": from_gguf.template}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    listed = folder_chat_template(folder)
    assert (listed.template, listed.source) == (from_gguf.template, f"tokenizer_config.json of {folder}")


@pytest.mark.registry
def test_a_folder_without_a_template_has_none(qwen3_tokenizer, tmp_path):
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=qwen3_tokenizer, eos_token="<|im_end|>").save_pretrained(tmp_path)
    assert folder_chat_template(tmp_path) is None
