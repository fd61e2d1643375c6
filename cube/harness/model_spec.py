"""``--model SPEC``: which checkpoint a run scores, where its files are, and what its identity is.

One SPEC names a model everywhere (``cube run`` on every backend, ``cube audit --model``), read by
one registry of source kinds (``SOURCE_KINDS``), each with its form and what it guarantees:

- ``demo``: a name from config/models.yaml ``demo_models``: pinned GGUF slices from PyPI, converted
  once into cube's store (``cube.harness.models``); identity: the pinned GGUF sha256;
- ``gguf``: one ``.gguf`` file, converted once into cube's store keyed by its sha256 (a demo
  model's GGUF reuses the demo's entry); identity: the file's sha256;
- ``folder``: a local folder in the Hugging Face layout (``config.json``, ``*.safetensors`` with or
  without an index, tokenizer files, ``generation_config.json``); identity: a digest of the
  sha256 of every file the load reads;
- ``hub``: ``hf:ORG/NAME@REVISION`` (a 40-hex commit), downloaded through huggingface_hub into
  cube's cache, then read as a folder.

Why identity is a digest of the files and not a name: a name says nothing about the bytes, and a
resume after a weight or tokenizer file changed would otherwise mix two models' records in one
cell. The per-file digests are recorded with each cell, so a resume names the file that changed.
Weights come from safetensors or GGUF only: unpickling a ``.bin``/``.pt`` runs code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cube.checksums import sha256_bytes, sha256_file, sums_text
from cube.config import cache_dir
from cube.errors import ConfigError, SourceError
from cube.harness.safetensors_header import read_header, read_json_object, regular_file

HEX40 = re.compile(r"[0-9a-f]{40}")
SPLIT_GGUF = re.compile(r"-\d{5}-of-\d{5}\.gguf$")
PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# What a load reads from a Hugging Face folder besides the weights (transformers' config and
# generation config, every tokenizer file the fast or slow tokenizers read, the chat template).
FOLDER_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
                "chat_template.jinja", "chat_template.json")
SAFETENSORS_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class ModelIdentity:
    """What a model is, as the cell configurations, the run log and provenance record it.

    ``digest``: for a folder or hub model the sha256 of ``files`` in ``sha256sum``'s format (so
    ``sha256sum`` of the listed files reproduces it); for a demo model or GGUF file the file's own
    sha256. ``files``: relative path -> sha256 of each file the load reads (None for a demo model,
    whose GGUF sha256 is pinned in config and whose converted folder is verified on every load).
    """

    digest: str
    files: tuple[tuple[str, str], ...] | None = None
    hashed_bytes: int = 0

    def files_dict(self) -> dict[str, str] | None:
        return dict(self.files) if self.files is not None else None


@dataclass(frozen=True)
class ModelSpec:
    """A parsed ``--model``: its kind, the name records carry, and where its files are."""

    text: str  # as the user gave it
    kind: str  # a key of SOURCE_KINDS
    name: str  # the model name in records and store paths
    path: Path | None = None  # the folder or .gguf file (hub: the snapshot, once downloaded)
    repo: str = ""  # hub only
    revision: str = ""  # hub only
    trust_remote_code: bool = False
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def source(self) -> SourceKind:
        return SOURCE_KINDS[self.kind]

    def folder(self) -> Path:
        """The Hugging Face folder the weights load from (a demo or GGUF model: converted first)."""
        if "folder" not in self._cache:
            self._cache["folder"] = self.source.folder(self)
        return self._cache["folder"]

    def tokenizer(self):
        """The ``tokenizers.Tokenizer`` every backend scores with, and the audit reads."""
        if "tokenizer" not in self._cache:
            self._cache["tokenizer"] = self.source.tokenizer(self)
        return self._cache["tokenizer"]

    def identity(self) -> ModelIdentity:
        if "identity" not in self._cache:
            self._cache["identity"] = self.source.identity(self)
        return self._cache["identity"]

    def chat_template(self):
        """The checkpoint's own chat template (``cube.protocol.chat.ChatTemplate``), read from its
        files (no weights, no conversion); a checkpoint without one is one line."""
        if "chat_template" not in self._cache:
            self._cache["chat_template"] = read_chat_template(self)
        return self._cache["chat_template"]

    @property
    def described(self) -> str:
        """``folder /path/to/model`` etc.: the run log's ``model_source``."""
        return f"{self.kind} {self.text}"


@dataclass(frozen=True)
class SourceKind:
    """One way to name a model: its form, how it is found, and what it guarantees (README)."""

    name: str
    form: str
    guarantee: str
    folder: Callable[[ModelSpec], Path]
    tokenizer: Callable[[ModelSpec], object]
    identity: Callable[[ModelSpec], ModelIdentity]


# ---- demo models ---------------------------------------------------------------------------------

def _demo_folder(spec: ModelSpec) -> Path:
    from cube.harness.models import ensure_model

    return ensure_model(spec.name)


def _demo_tokenizer(spec: ModelSpec):
    from cube.harness.models import model_source, model_tokenizer

    return model_tokenizer(model_source(spec.name))


def _demo_identity(spec: ModelSpec) -> ModelIdentity:
    from cube.harness.models import model_source

    return ModelIdentity(model_source(spec.name).gguf_sha256)


# ---- a single GGUF file --------------------------------------------------------------------------

def _gguf_folder(spec: ModelSpec) -> Path:
    from cube.harness.models import ensure_gguf_model

    return ensure_gguf_model(spec.path, spec.identity().digest)


def _gguf_tokenizer(spec: ModelSpec):
    from cube.harness.models import gguf_tokenizer

    return gguf_tokenizer(spec.path, spec.identity().digest)


def _gguf_identity(spec: ModelSpec) -> ModelIdentity:
    """The GGUF file's sha256, hashed in full each run: the file is all the conversion reads."""
    digest = sha256_file(spec.path)
    return ModelIdentity(digest, ((spec.path.name, digest),), spec.path.stat().st_size)


# ---- a Hugging Face folder (local, or a hub snapshot) --------------------------------------------

def weight_files(folder: Path) -> list[str]:
    """The safetensors files a load reads (the index's shards, else every ``*.safetensors``).

    A folder with pickled weights only is refused: ``torch.load`` of a ``.bin`` runs code."""
    index = folder / SAFETENSORS_INDEX
    if index.exists() or index.is_symlink():
        weight_map = read_json_object(index, "safetensors index").get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ConfigError(f"{index}: not a safetensors index (no weight_map of tensor -> file name)")
        shards = sorted(set(weight_map.values()))
        outside = [s for s in shards if "/" in s or "\\" in s or s in ("", ".", "..")]
        if outside:  # the index would have cube hash (and transformers read) a file outside the folder
            raise ConfigError(f"{index}: names {outside[0][:80]!r}, not a file of this folder; an index names "
                              "shard files beside it")
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise ConfigError(f"{folder / missing[0]}: listed in {SAFETENSORS_INDEX} but missing")
        return shards
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    if shards:
        return shards
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLED_WEIGHTS)
    if pickled:
        raise ConfigError(f"{folder}: weights only as pickled {pickled[0]}; cube loads safetensors or GGUF only "
                          "(unpickling runs code): save them with save_pretrained(safe_serialization=True)")
    raise ConfigError(f"{folder}: no *.safetensors weights (a Hugging Face model folder holds config.json, "
                      "*.safetensors and the tokenizer files)")


def check_folder(folder: Path, trust_remote_code: bool = False) -> None:
    """A folder cube can load without running its code: config.json, safetensors weights, a
    model type transformers knows (or the remote-code opt-in)."""
    config = folder / "config.json"
    if not config.is_file():
        raise ConfigError(f"{folder}: no config.json; a Hugging Face model folder holds config.json, "
                          "*.safetensors and the tokenizer files")
    data = read_json_object(config, "config.json")
    if (folder / "tokenizer_config.json").exists() or (folder / "tokenizer_config.json").is_symlink():
        read_json_object(folder / "tokenizer_config.json", "tokenizer_config.json")
    for name in weight_files(folder):  # every header checked before anything hashes or loads a file
        read_header(folder / name)
    for name in FOLDER_FILES:  # a FIFO or /dev/zero in a config's place would hang the identity hash
        if (folder / name).exists() or (folder / name).is_symlink():
            regular_file(folder / name, name)
    if trust_remote_code:
        return
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = data.get("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        needs = " (config.json auto_map names its own code)" if data.get("auto_map") else ""
        raise ConfigError(f"{folder}: model type {model_type!r} is not one transformers knows{needs}; cube runs "
                          "no repository code unless you opt in with --trust-remote-code on an hf:ORG/NAME@<commit> spec")


def read_files(folder: Path, trust_remote_code: bool = False) -> list[str]:
    """Every file of ``folder`` a load reads: the weights, configs, tokenizer files (and the
    repository's Python files, where remote code is opted into)."""
    names = weight_files(folder) + [n for n in FOLDER_FILES if (folder / n).is_file()]
    if (folder / SAFETENSORS_INDEX).is_file():
        names.append(SAFETENSORS_INDEX)
    if trust_remote_code:
        names += sorted(p.name for p in folder.glob("*.py"))
    return sorted(set(names))


def folder_identity(folder: Path, trust_remote_code: bool = False) -> ModelIdentity:
    """sha256 of every file the load reads, and their digest (``ModelIdentity``). Hashed in full
    each run, never trusted from a size/mtime stamp (README: its cost on a 3 GB model)."""
    files = {name: sha256_file(folder / name) for name in read_files(folder, trust_remote_code)}
    size = sum((folder / name).stat().st_size for name in files)
    return ModelIdentity(sha256_bytes(sums_text(files).encode()), tuple(sorted(files.items())), size)


def folder_tokenizer(folder: Path, trust_remote_code: bool = False):
    """The folder's own tokenizer as transformers reads it (BOS rules of tokenizer_config.json
    included), the ``tokenizers`` backend that every cube backend scores with."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise SourceError(f"{folder}: no tokenizer transformers can read ({(str(exc).splitlines() or ['?'])[0][:160]})") from None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise SourceError(f"{folder}: its tokenizer has no fast (tokenizers) form, which cube scores with")
    return backend


def _folder_folder(spec: ModelSpec) -> Path:
    check_folder(spec.path, spec.trust_remote_code)
    return spec.path


def _folder_tokenizer(spec: ModelSpec):
    return folder_tokenizer(spec.folder(), spec.trust_remote_code)


def _folder_identity(spec: ModelSpec) -> ModelIdentity:
    return folder_identity(spec.folder(), spec.trust_remote_code)


# ---- the Hugging Face Hub, pinned ------------------------------------------------------------------

HUB_PATTERNS = ["*.safetensors", SAFETENSORS_INDEX, *FOLDER_FILES]


def hub_cache() -> Path:
    """huggingface_hub's cache layout (``models--ORG--NAME/snapshots/REV``) under cube's cache."""
    return cache_dir() / "hub"


def _hub_folder(spec: ModelSpec) -> Path:
    """The snapshot of ``spec.revision``, downloaded once (only safetensors, configs, tokenizer
    files: never pickled weights), then read as a folder. Offline (``HF_HUB_OFFLINE=1``) it is
    the cached snapshot or one line saying it is not there."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise SourceError(f"{spec.text}: hf: models need huggingface_hub (pip install -e '.[harness]')") from None
    patterns = HUB_PATTERNS + (["*.py"] if spec.trust_remote_code else [])
    cached = hub_cache() / f"models--{spec.repo.replace('/', '--')}" / "snapshots" / str(spec.revision)
    if not cached.is_dir():  # a snapshot in the cache needs no network
        from cube.tokenizers.sources import check_hub_reachable, hub_offline

        if hub_offline():  # huggingface_hub's own words were a paragraph, cut mid-sentence here
            raise SourceError(f"{spec.text}: HF_HUB_OFFLINE is set and the Hub cache ({hub_cache()}) holds no snapshot "
                              f"of {spec.repo} at {spec.revision}; unset HF_HUB_OFFLINE to download it once, or give "
                              "--model DIR, a folder with its files")
        check_hub_reachable(spec.text)
    try:
        path = snapshot_download(spec.repo, revision=spec.revision, cache_dir=hub_cache(), allow_patterns=patterns)
    except Exception as exc:  # network, auth, missing repo or revision
        first = " ".join(str(exc).split()) or "?"  # whole, on one line: a cut sentence says nothing
        raise SourceError(f"{spec.text}: cannot get it from the Hugging Face Hub ({type(exc).__name__}: {first})") from None
    folder = Path(path)
    check_folder(folder, spec.trust_remote_code)
    return folder


# ---- the chat template -----------------------------------------------------------------------------

def read_chat_template(spec: ModelSpec):
    """``spec``'s chat template: a folder's (or hub snapshot's) tokenizer files, a GGUF's header,
    a demo model's pinned GGUF header; a checkpoint without one is refused in one line, before
    anything loads (``--chat-template model`` asks for it)."""
    from cube.tokenizers.chat_template import folder_chat_template, gguf_chat_template

    if spec.kind == "demo":
        from cube.harness.models import _first_part_metadata, model_source

        found = gguf_chat_template(_first_part_metadata(model_source(spec.name)), f"demo model {spec.name}",
                                   spec.tokenizer())
        where = f"demo model {spec.name} (its GGUF header has no tokenizer.chat_template)"
    elif spec.kind == "gguf":
        from cube.tokenizers.gguf import read_gguf_metadata

        found = gguf_chat_template(read_gguf_metadata(spec.path), spec.path.name, spec.tokenizer())
        where = f"{spec.path} (its GGUF header has no tokenizer.chat_template)"
    else:
        folder = spec.folder()
        found = folder_chat_template(folder, spec.tokenizer())
        where = f"{folder} (no chat_template.jinja, and no chat_template in tokenizer_config.json)"
    if found is None:
        raise ConfigError(f"--chat-template model: model {spec.name} has no chat template: {where}; "
                          "run it with --chat-template none")
    return found


# ---- the registry -----------------------------------------------------------------------------------

SOURCE_KINDS: dict[str, SourceKind] = {
    "demo": SourceKind(
        "demo", "a name from config/models.yaml demo_models",
        "pinned GGUF slices (sha256 each and whole), converted once; the converted folder re-verified on every load",
        _demo_folder, _demo_tokenizer, _demo_identity),
    "gguf": SourceKind(
        "gguf", "PATH.gguf (one file; split GGUFs are merged first)",
        "the file's sha256 is the identity; converted once into cube's store (SHA256SUMS), re-verified on every load",
        _gguf_folder, _gguf_tokenizer, _gguf_identity),
    "folder": SourceKind(
        "folder", "PATH/ in the Hugging Face layout (config.json, *.safetensors, tokenizer files)",
        "every file the load reads hashed each run; safetensors only; no repository code",
        _folder_folder, _folder_tokenizer, _folder_identity),
    "hub": SourceKind(
        "hub", "hf:ORG/NAME@<40-hex commit>",
        "downloaded at that commit through huggingface_hub into cube's cache, then as a folder",
        _hub_folder, _folder_tokenizer, _folder_identity),
}


def _paper_checkpoint_hint(text: str) -> str | None:
    """One line telling how to run one of the paper's checkpoints, or None if ``text`` is not one."""
    from cube.models_config import models_config

    checkpoints = models_config().checkpoints
    checkpoint = checkpoints.get(text) or next((c for c in checkpoints.values() if c.hf == text), None)
    if checkpoint is None:
        return None
    if HEX40.fullmatch(checkpoint.revision):
        how = f"--model hf:{checkpoint.hf}@{checkpoint.revision}"
    else:
        how = (f"--model hf:{checkpoint.hf}@<40-hex commit> (config/models.yaml pins no commit: revision "
               f"{checkpoint.revision or 'none'!r}), or --model PATH/ to a local copy")
    return (f"{text!r} is the paper's checkpoint {checkpoint.name} ({checkpoint.hf}); its weights are not "
            f"shipped with cube: run it with {how}")


def parse_model(text: str, trust_remote_code: bool = False) -> ModelSpec:
    """The ``ModelSpec`` of ``--model TEXT``; an unusable SPEC is one line saying what to give.

    Nothing is hashed, downloaded or converted here. A demo name wins over a folder of that name
    in the working directory only when written bare: ``./NAME`` is the folder.
    """
    from cube.models_config import models_config

    config = models_config()
    if trust_remote_code and not text.startswith("hf:"):
        raise ConfigError(f"--trust-remote-code applies only to an hf:ORG/NAME@<40-hex commit> spec, not {text!r}: "
                          "remote code is run only from a pinned revision")
    if text in config.demo_models:
        return ModelSpec(text, "demo", text)
    if text.startswith("hf:"):
        repo, _, revision = text[len("hf:"):].partition("@")
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise ConfigError(f"--model {text!r}: expected hf:ORG/NAME@<40-hex commit>")
        if not HEX40.fullmatch(revision):
            raise ConfigError(f"--model {text!r}: the revision must be a 40-hex commit (a branch or tag moves; "
                              "the model's identity must not): hf:ORG/NAME@<commit>")
        checkpoint = next((c for c in config.checkpoints.values() if c.hf == repo), None)
        name = checkpoint.name if checkpoint is not None else repo.split("/")[1]
        return ModelSpec(text, "hub", name, repo=repo, revision=revision, trust_remote_code=trust_remote_code)
    path = Path(text).expanduser()
    if path.is_dir():
        return ModelSpec(text, "folder", path.resolve().name, path.resolve())
    if path.suffix == ".gguf" and path.is_file():
        if SPLIT_GGUF.search(path.name):
            raise ConfigError(f"{path}: one part of a split GGUF; cube loads a single-file GGUF: merge the parts "
                              "with llama.cpp's `llama-gguf-split --merge FIRST-PART OUT.gguf`, or give the Hugging "
                              "Face folder (`cube audit --model` reads the tokenizer from the first part as it is)")
        return ModelSpec(text, "gguf", path.stem, path.resolve())
    hint = _paper_checkpoint_hint(text)
    if hint is not None:
        raise ConfigError(hint)
    if path.exists():
        raise ConfigError(f"--model {text!r} is a file but not a .gguf; give a .gguf file, a Hugging Face folder, "
                          "hf:ORG/NAME@<commit> or a demo model")
    raise ConfigError(f"unknown model {text!r}: not a demo model ({', '.join(sorted(config.demo_models))}), "
                      "a folder, a .gguf file or hf:ORG/NAME@<40-hex commit>; give one of these demo names, the "
                      "path of your model's folder or .gguf file, or a pinned hub id (README: Your own model)")


def model_tokenizer_spec(text: str, trust_remote_code: bool = False) -> tuple[str, object]:
    """(model name, tokenizer) of ``--model TEXT`` for ``cube audit --model``: the tokenizer
    ``cube run --model TEXT`` scores with. The first part of a split GGUF is read as it is (its
    header holds the whole tokenizer), though a run needs the parts merged."""
    path = Path(text).expanduser()
    if path.suffix == ".gguf" and path.is_file() and SPLIT_GGUF.search(path.name):
        from cube.harness.models import gguf_tokenizer

        return path.stem, gguf_tokenizer(path, sha256_file(path))
    spec = parse_model(text, trust_remote_code)
    return spec.name, spec.tokenizer()


# ---- before the weights load ----------------------------------------------------------------------

_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}


def parameter_count(folder: Path) -> int:
    """Parameters in the folder's safetensors, from their headers alone (8 bytes + JSON each)."""
    return sum(tensor.count for name in weight_files(folder) for tensor in read_header(folder / name))


def check_config_size(path, trust_remote_code: bool = False) -> None:
    """The parameters the model config.json describes, counted on the meta device (nothing
    allocated), must not outnumber those the safetensors headers hold: a config claiming 3,000
    layers died allocating about 42 GB before any check could name it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            meta = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
        described = meta.num_parameters()
    except (ValueError, KeyError, TypeError, OSError, RuntimeError):
        return  # a config transformers cannot build says so itself when it loads
    held = parameter_count(Path(path))
    if described > held:
        names = {t.name for f in weight_files(Path(path)) for t in read_header(Path(path) / f)}
        missing = sorted(n for n, _ in meta.named_parameters() if n not in names)
        named = f"; it expects weights the files do not hold {', '.join(missing[:3])}" if missing else ""
        raise ConfigError(f"{path}: its config.json describes a model of {described:,} parameters, its safetensors "
                          f"hold {held:,}{named}: config.json and the weights are not one checkpoint")


def available_memory(device: str) -> int:
    """Bytes the weights may take: free GPU memory on CUDA, else MemAvailable (capped by a cgroup limit)."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    available = None
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    limit, current = Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")
    if limit.is_file() and current.is_file():
        text = limit.read_text().strip()
        if text.isdigit():
            room = int(text) - int(current.read_text().strip())
            available = room if available is None else min(available, room)
    if available is None:
        import os

        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return available


def check_fits(name: str, parameters: int, dtype: str, device: str, available: int | None = None) -> None:
    """Refuse, in one line, weights that cannot fit in the memory there is (not an OOM kill later)."""
    per = _DTYPE_BYTES.get(dtype, 4)
    need = parameters * per
    room = available_memory(device) if available is None else available
    if need > room:
        raise ConfigError(f"model {name}: {parameters / 1e9:.2f} B parameters need {need / 2**30:.1f} GiB in {dtype} "
                          f"but {room / 2**30:.1f} GiB is available on {device}; use a smaller model, a lower "
                          "precision (--dtype bfloat16) or a machine with more memory")


__all__ = ["HEX40", "ModelIdentity", "ModelSpec", "SOURCE_KINDS", "SourceKind", "available_memory", "check_fits",
           "check_config_size", "check_folder", "folder_identity", "folder_tokenizer", "hub_cache", "model_tokenizer_spec", "parameter_count",
           "parse_model",
           "read_files", "weight_files"]
