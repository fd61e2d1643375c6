"""Label sets: the symbols that mark options and are scored as answers."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from cube.config import load_config
from cube.errors import ConfigError


@dataclass(frozen=True)
class LabelSet:
    name: str
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        validate_labels(self.name, self.labels)

    def __len__(self) -> int:
        return len(self.labels)


def validate_labels(name: str, labels: tuple[str, ...] | list[str]) -> None:
    """Reject sets a scorer cannot tell apart.

    Labels equal under NFKC (e.g. ``A`` and ``Ａ``) are rejected because a normalising tokenizer
    or answer extractor would merge them silently.
    """
    if not name or not str(name).strip():
        raise ConfigError("label set has an empty name")
    if len(labels) < 2:
        raise ConfigError(f"label set {name!r} has {len(labels)} label(s); at least 2 are needed")
    seen: dict[str, str] = {}
    for label in labels:
        if not isinstance(label, str) or label.strip() == "":
            raise ConfigError(f"label set {name!r} has an empty label: {label!r}")
        if label != label.strip():
            raise ConfigError(f"label set {name!r}: label {label!r} has surrounding whitespace")
        key = unicodedata.normalize("NFKC", label)
        if key in seen:
            if seen[key] == label:
                raise ConfigError(f"label set {name!r} has a duplicate label {label!r}")
            raise ConfigError(
                f"label set {name!r}: labels {seen[key]!r} and {label!r} differ only under "
                "Unicode normalisation (NFKC)"
            )
        seen[key] = label


def parse_label_set(spec: str) -> LabelSet:
    """Parse a user's ``NAME=L1,L2,...`` (comma or whitespace separated) from the command line."""
    if "=" not in spec:
        raise ConfigError(f"label set {spec!r} must look like NAME=A,B,C,D")
    name, _, body = spec.partition("=")
    sep = "," if "," in body else None
    labels = tuple(part.strip() for part in body.split(sep)) if body.strip() else ()
    return LabelSet(name.strip(), labels)


def load_label_sets() -> dict[str, LabelSet]:
    raw = load_config("label_sets")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("config/label_sets.yaml must map names to lists of labels")
    out = {}
    for name, labels in raw.items():
        if not isinstance(labels, list):
            raise ConfigError(f"label set {name!r} in config/label_sets.yaml is not a list")
        out[str(name)] = LabelSet(str(name), tuple(str(x) if x is not None else "" for x in labels))
    return out


def select_label_sets(names: list[str] | None, extra: list[str] | None = None) -> list[LabelSet]:
    """The frozen sets by name (all when ``names`` is empty) plus user-given ``NAME=...`` sets."""
    frozen = load_label_sets()
    chosen = []
    for name in names or list(frozen):
        if name not in frozen:
            raise ConfigError(f"unknown label set {name!r}; known: {', '.join(frozen)}; a set of your own: "
                              "`cube audit --label-set NAME=L1,L2,L3,L4`, or add it to label_sets.yaml in a copy "
                              "of the config folder (cube/_config) and point CUBE_CONFIG_DIR at it")
        chosen.append(frozen[name])
    for spec in extra or []:
        custom = parse_label_set(spec)
        if any(ls.name == custom.name for ls in chosen):
            raise ConfigError(f"label set name {custom.name!r} is already in use")
        chosen.append(custom)
    return chosen
