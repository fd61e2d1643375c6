"""Label sets: the symbols that mark options and are scored as answers."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from cube.config import load_config
from cube.errors import ConfigError

# The most options an item may have (a user's file: cube.protocol.user_file), and so the most labels
# a prompt shows: the ten-label sets of config/label_sets_ten.yaml (A-J, Ａ-Ｊ, 甲-癸, ①-⑩).
MAX_OPTIONS = 10


@dataclass(frozen=True)
class LabelSet:
    name: str
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        validate_labels(self.name, self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def shown(self, n_options: int) -> tuple[str, ...]:
        """The labels an item of ``n_options`` options shows: the set's first ``n_options``.

        A ten-label set on a four-option item shows what the four-label set of its symbols shows,
        so one set serves a benchmark whose items have 2 to 10 options."""
        if n_options > len(self.labels):
            raise ConfigError(f"label set {self.name!r} has {len(self.labels)} labels but an item has "
                              f"{n_options} options")
        return self.labels[:n_options]


def short_label_sets(label_sets: "list[LabelSet]", option_counts: "list[int]") -> str | None:
    """One line naming each label set too short for some items, and how many items need more; None
    where every set has a label for every option (checked before any prompt is built)."""
    problems = []
    for label_set in label_sets:
        short = [n for n in option_counts if n > len(label_set.labels)]
        if short:
            problems.append(f"label set {label_set.name!r} has {len(label_set.labels)} labels but {len(short)} of "
                            f"{len(option_counts)} items have more options (up to {max(short)})")
    if not problems:
        return None
    return ("; ".join(problems) + "; choose a set with enough labels (the ten-label sets: A10_halfwidth, "
            "A10_fullwidth, A10_ganzhi, A10_circled)")


DEFAULT_LABEL_SETS = ("L1_halfwidth",)  # a run's label sets where none is named and no item has more than 4 options
TEN_LABEL_DEFAULTS = ("A10_halfwidth",)  # the same symbols, ten of them: each item shows its first N


def default_label_sets(option_counts: "list[int]") -> tuple[tuple[str, ...], str | None]:
    """The label sets a run takes where none is named, and the line saying why where it is not the
    study's: items with more than 4 options get the ten-label set of the same symbols (an item of N
    options shows its first N labels, so a 4-option item reads as under L1_halfwidth). A first run
    on a file with a 5-option item was refused, naming a set the user never chose (issue 44)."""
    study = len(load_label_sets()[DEFAULT_LABEL_SETS[0]].labels)
    more = [n for n in option_counts if n > study]
    if not more:
        return DEFAULT_LABEL_SETS, None
    return TEN_LABEL_DEFAULTS, (f"label sets: {', '.join(TEN_LABEL_DEFAULTS)}, chosen because {len(more)} of "
                                f"{len(option_counts)} items have more than {study} options (up to {max(more)}); each "
                                f"item shows its first N labels; --label-sets to choose others")


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


def _read_sets(config_name: str) -> dict[str, LabelSet]:
    raw = load_config(config_name)
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"config/{config_name}.yaml must map names to lists of labels")
    out = {}
    for name, labels in raw.items():
        if not isinstance(labels, list):
            raise ConfigError(f"label set {name!r} in config/{config_name}.yaml is not a list")
        out[str(name)] = LabelSet(str(name), tuple(str(x) if x is not None else "" for x in labels))
    return out


def study_label_sets() -> dict[str, LabelSet]:
    """The study's four sets (config/label_sets.yaml): what runs and audits use when none is named."""
    return _read_sets("label_sets")


def load_label_sets() -> dict[str, LabelSet]:
    """Every frozen set by name: the study's, then the ten-label sets (config/label_sets_ten.yaml)."""
    out = study_label_sets()
    for name, label_set in _read_sets("label_sets_ten").items():
        if name in out:
            raise ConfigError(f"label set {name!r} is in both config/label_sets.yaml and config/label_sets_ten.yaml")
        out[name] = label_set
    return out


def select_label_sets(names: list[str] | None, extra: list[str] | None = None) -> list[LabelSet]:
    """The frozen sets by name (the study's four when ``names`` is empty) plus user-given ``NAME=...`` sets."""
    frozen = load_label_sets()
    chosen = []
    for name in names or list(study_label_sets()):
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
