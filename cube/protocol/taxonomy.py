"""Subject taxonomies: which category (STEM / Humanities / Social Science / Other) a subject is in.

Category accuracies are how C-Eval and CMMLU report results, so rescoring must group subjects
exactly as the benchmarks' own metadata does: C-Eval's ``subject_mapping.json`` and CMMLU's
``subjects.json``. cube ships both maps in ``config/benchmarks/`` (subject names and categories,
no item text), so that rescoring archived records needs no benchmark data.

Two named subsets ride along as extra groups, reported beside the categories:

* ``Hard`` (C-Eval): the eight subjects C-Eval singles out as its Hard benchmark.
* ``China-specific`` (CMMLU): subjects whose ``china_specific`` flag is true.

A CMMLU subject whose ``category`` is a list of two belongs to both: it is counted in each of
its categories (so category item counts can sum to more than the benchmark's total). This keeps
each category's accuracy equal to what a reader computes from that category's subject list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cube.config import config_dir
from cube.errors import ConfigError, ItemsError
from cube.files import read_json

CATEGORIES = ("STEM", "Humanities", "Social Science", "Other")
CEVAL_HARD = frozenset({
    "advanced_mathematics",
    "discrete_mathematics",
    "probability_and_statistics",
    "college_chemistry",
    "college_physics",
    "high_school_mathematics",
    "high_school_chemistry",
    "high_school_physics",
})
CEVAL_HARD_GROUP = "Hard"
CHINA_SPECIFIC_GROUP = "China-specific"


@dataclass(frozen=True)
class Taxonomy:
    """Subject -> categories, plus named subsets of subjects (e.g. C-Eval Hard)."""

    name: str
    categories: dict[str, tuple[str, ...]]
    groups: dict[str, frozenset[str]]
    source: Path

    def categories_of(self, subject: str) -> tuple[str, ...]:
        if subject not in self.categories:
            raise ConfigError(
                f"subject {subject!r} is not in the {self.name} taxonomy ({self.source})"
            )
        return self.categories[subject]

    def subjects_in(self, group: str) -> frozenset[str]:
        """Subjects of a category or of a named subset."""
        if group in self.groups:
            return self.groups[group]
        members = frozenset(s for s, cats in self.categories.items() if group in cats)
        if not members:
            raise ConfigError(f"{self.name} taxonomy has no category or group {group!r}")
        return members


def _read_json(path: Path) -> dict:
    data = read_json(path, ItemsError, "subject map")
    if not isinstance(data, dict) or not data:
        raise ItemsError(f"{path}: expected a non-empty object mapping subjects to metadata")
    return data


def _category_tuple(value: object, subject: str, path: Path) -> tuple[str, ...]:
    cats = (value,) if isinstance(value, str) else value
    if not isinstance(cats, (list, tuple)) or not cats or not all(isinstance(c, str) for c in cats):
        raise ItemsError(f"{path}: subject {subject!r} has category {value!r}, not a name or list")
    unknown = [c for c in cats if c not in CATEGORIES]
    if unknown:
        raise ItemsError(
            f"{path}: subject {subject!r} has category {unknown[0]!r}, not one of "
            f"{', '.join(CATEGORIES)}"
        )
    return tuple(dict.fromkeys(cats))


SHIPPED_SUBJECT_MAPS = {"cmmlu": "cmmlu_subjects.json", "ceval": "ceval_subject_mapping.json"}


def shipped_subject_map(benchmark: str) -> Path:
    """cube's copy of a benchmark's official subject map (``config/benchmarks/``)."""
    return config_dir() / "benchmarks" / SHIPPED_SUBJECT_MAPS[benchmark]


def load_cmmlu_taxonomy(path: str | Path | None = None) -> Taxonomy:
    """CMMLU's categories and China-specific flag from ``subjects.json``."""
    path = Path(path) if path is not None else shipped_subject_map("cmmlu")
    raw = _read_json(path)
    categories, china = {}, set()
    for subject, meta in raw.items():
        if not isinstance(meta, dict) or "category" not in meta:
            raise ItemsError(f"{path}: subject {subject!r} has no 'category'")
        categories[subject] = _category_tuple(meta["category"], subject, path)
        flag = meta.get("china_specific", False)
        if not isinstance(flag, bool):
            raise ItemsError(f"{path}: subject {subject!r} has china_specific {flag!r}, not a bool")
        if flag:
            china.add(subject)
    return Taxonomy("cmmlu", categories, {CHINA_SPECIFIC_GROUP: frozenset(china)}, path)


def load_ceval_taxonomy(path: str | Path | None = None) -> Taxonomy:
    """C-Eval's categories from the official ``subject_mapping.json``, and its Hard subset."""
    path = (
        Path(path) if path is not None else shipped_subject_map("ceval")
    )
    raw = _read_json(path)
    categories = {}
    for subject, entry in raw.items():
        if not (isinstance(entry, list) and len(entry) >= 3):
            raise ItemsError(f"{path}: subject {subject!r} is not [English, Chinese, category]")
        categories[subject] = _category_tuple(entry[2], subject, path)
    # A fixture map may hold only a few subjects: Hard is the part of the subset it has.
    hard = frozenset(s for s in CEVAL_HARD if s in categories)
    return Taxonomy("ceval", categories, {CEVAL_HARD_GROUP: hard}, path)


TAXONOMY_LOADERS = {"cmmlu": load_cmmlu_taxonomy, "ceval": load_ceval_taxonomy}
# Records of these benchmarks are grouped with this taxonomy when none is named. Simulated
# records (benchmark "sim") use CMMLU's subjects, hence its taxonomy.
BENCHMARK_TAXONOMY = {"cmmlu": "cmmlu", "ceval": "ceval", "sim": "cmmlu"}


def load_taxonomy(name: str, path: str | Path | None = None) -> Taxonomy:
    if name not in TAXONOMY_LOADERS:
        raise ConfigError(f"unknown taxonomy {name!r}; known: {', '.join(TAXONOMY_LOADERS)}")
    return TAXONOMY_LOADERS[name](path)


def taxonomy_for_benchmark(benchmark: str) -> str:
    if benchmark not in BENCHMARK_TAXONOMY:
        raise ConfigError(
            f"no default taxonomy for benchmark {benchmark!r}; pass one of "
            f"{', '.join(TAXONOMY_LOADERS)}"
        )
    return BENCHMARK_TAXONOMY[benchmark]
