"""A checkpoint's own chat template, read from where the checkpoint keeps it, never fetched.

- a Hugging Face folder: ``chat_template.jinja`` (what transformers 4.43+ saves), else
  ``chat_template.json``'s ``chat_template``, else ``tokenizer_config.json``'s ``chat_template``
  (a string, or a list of named templates: the one named ``default``), the order transformers
  itself reads them in;
- a GGUF file: its header's ``tokenizer.chat_template``, the special tokens from the header's ids.

Every one of those files is part of the model's identity (``cube.harness.model_spec.FOLDER_FILES``,
or the GGUF's sha256), so a template that changes between a run and its resume is refused with
the file that changed. None: the checkpoint has no template (``--chat-template model`` then is one
line, before any model loads).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cube.errors import ConfigError
from cube.protocol.chat import ChatTemplate

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")


def added_bos(tokenizer) -> str | None:
    """The BOS text ``tokenizer`` puts before every text itself (its post-processor), or None."""
    plain = tokenizer.encode("a", add_special_tokens=False).ids
    full = tokenizer.encode("a").ids
    extra = full[: len(full) - len(plain)] if full[len(full) - len(plain):] == plain else []
    return "".join(tokenizer.id_to_token(i) for i in extra) or None


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):  # an AddedToken as JSON
        return value["content"]
    return None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


def _named(template: Any, path: Path) -> str | None:
    if isinstance(template, str) or template is None:
        return template
    if isinstance(template, list):  # [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        return named.get("default")
    raise ConfigError(f"{path}: chat_template is neither a string nor a list of named templates")


def folder_chat_template(folder: Path, tokenizer=None) -> ChatTemplate | None:
    """The chat template of a Hugging Face folder, with its special tokens; None if it has none."""
    config_path = folder / "tokenizer_config.json"
    config = _read_json(config_path) if config_path.is_file() else {}
    template, source = None, None
    for name in ("chat_template.jinja", "chat_template.json", "tokenizer_config.json"):
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".jinja"):
            template = path.read_text(encoding="utf-8")
        else:
            template = _named((config if name == "tokenizer_config.json" else _read_json(path)).get("chat_template"),
                              path)
        if template:
            source = f"{name} of {folder}"
            break
    if not template:
        return None
    special = {}
    special_map = folder / "special_tokens_map.json"
    for values in (_read_json(special_map) if special_map.is_file() else {}, config):
        for role in SPECIAL_TOKENS:
            text = _token_text(values.get(role))
            if text is not None:
                special[role] = text
    return ChatTemplate(template, source, tuple(sorted(special.items())),
                        added_bos(tokenizer) if tokenizer is not None else None)


def gguf_chat_template(meta: Mapping[str, Any], where: str, tokenizer) -> ChatTemplate | None:
    """The chat template of a GGUF header (``tokenizer.chat_template``), its special tokens named
    by the header's ids in ``tokenizer`` (cube's own, from that header); None if it has none."""
    template = meta.get("tokenizer.chat_template")
    if not isinstance(template, str) or not template:
        return None
    special = {}
    for role, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        token_id = meta.get(f"tokenizer.ggml.{key}")
        if token_id is not None and tokenizer.id_to_token(token_id) is not None:
            special[role] = tokenizer.id_to_token(token_id)
    return ChatTemplate(template, f"GGUF header of {where}", tuple(sorted(special.items())), added_bos(tokenizer))


__all__ = ["added_bos", "folder_chat_template", "gguf_chat_template"]
