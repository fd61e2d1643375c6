"""The sources as quoted data: the paper and the works the book follows, each result with its quote.

``config/paper.yaml`` holds, per source, its citation, the file of its text under
``shared/references`` and its own scale, and per result the value the source states, quoted
verbatim. This module reads and checks that file (:func:`load_paper`) and checks the quotes
against the source texts (:func:`quote_found`, :func:`number_in_quote`). It stands alone because
what a source says is data, fixed by its text: the verdict rule (:mod:`cube.paper.claims`) and
the builders of this repository's values (``cube.paper.claims_*``) read it and never change it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cube.config import config_dir, load_yaml
from cube.errors import ConfigError


@dataclass(frozen=True)
class Scale:
    """What a value was measured on; ``None`` is "not stated"."""

    models: int | None = None
    items: int | None = None
    families: int | None = None
    cells: int | None = None
    note: str = ""

    def text(self) -> str:
        parts = []
        if self.models is not None:
            parts.append(f"{self.models} model{'s' if self.models != 1 else ''}")
        if self.items is not None:
            parts.append(f"{self.items:,} items")
        if self.families is not None:
            parts.append(f"{self.families} tokenizer famil{'ies' if self.families != 1 else 'y'}")
        if self.cells is not None:
            parts.append(f"{self.cells} cell{'s' if self.cells != 1 else ''}")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts) or "not stated"

    def smaller_than(self, other: Scale) -> bool:
        """Fewer models, items, families or cells than ``other``, on any count both state."""
        pairs = [(self.models, other.models), (self.items, other.items), (self.families, other.families),
                 (self.cells, other.cells)]
        return any(mine is not None and theirs is not None and mine < theirs for mine, theirs in pairs)


@dataclass(frozen=True)
class Source:
    """One cited work: the file of its text under ``shared/references``, and its own scale."""

    key: str
    file: str
    citation: str
    quote: str
    scale: Scale
    scale_quote: str


@dataclass(frozen=True)
class PaperResult:
    id: str
    claim: str
    source: str  # a key of Paper.sources
    section: str
    result: str
    value: str
    quote: str  # verbatim from the source's text (whitespace aside)
    scale: Scale
    numbers: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Paper:
    title: str
    authors: tuple[str, ...]
    venue: str
    benchmark: str
    families: Mapping[str, tuple[str, ...]]  # the paper's family -> config/models.yaml tokenizer names
    context: str  # the answer context of Table 2 and of the 64 label-scoring cells
    label_scoring_models: int
    sources: Mapping[str, Source]
    results: tuple[PaperResult, ...]

    def result(self, result_id: str) -> PaperResult:
        for r in self.results:
            if r.id == result_id:
                return r
        raise ConfigError(f"the paper has no result {result_id!r}; known: {', '.join(r.id for r in self.results)}")

    @property
    def scale(self) -> Scale:
        return self.sources["paper"].scale

    @property
    def citation(self) -> str:
        return self.sources["paper"].citation

    @property
    def tokenizers(self) -> tuple[str, ...]:
        """The Table 2 rows: every tokenizer name of the paper's families, in the paper's order."""
        return tuple(name for names in self.families.values() for name in names)

    def family_of(self, tokenizer: str) -> str | None:
        return next((f for f, names in self.families.items() if tokenizer in names), None)


_SCALE_KEYS = {"models", "items", "families", "cells", "note"}


def _scale(raw: Any, where: str, default: Scale | None = None) -> Scale:
    if raw is None:
        return default or Scale()
    if not isinstance(raw, dict) or set(raw) - _SCALE_KEYS:
        raise ConfigError(f"{where}: scale must map {'/'.join(sorted(_SCALE_KEYS))}, got {raw!r}")
    return Scale(raw.get("models"), raw.get("items"), raw.get("families"), raw.get("cells"), str(raw.get("note", "")))


def _required(entry: Any, keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if not isinstance(entry, dict) or entry.get(k) in (None, "")]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}")


def load_paper(path: str | Path | None = None) -> Paper:
    """``config/paper.yaml``, checked: every source needs its file, citation, quote and scale;
    every result an id, a claim, a known source, a section, a value and a quote."""
    path = Path(path) if path else config_dir() / "paper.yaml"
    raw = load_yaml(path)
    meta = raw.get("paper") if isinstance(raw, dict) else None
    raw_sources = raw.get("sources") if isinstance(raw, dict) else None
    entries = raw.get("results") if isinstance(raw, dict) else None
    if not isinstance(meta, dict) or not isinstance(raw_sources, dict) or not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a 'paper' mapping, a 'sources' mapping and a non-empty 'results' list")
    if "paper" not in raw_sources:
        raise ConfigError(f"{path}: sources must include 'paper'")
    sources = {}
    for key, s in raw_sources.items():
        where = f"{path} sources.{key}"
        _required(s, ("file", "citation", "quote", "scale", "scale_quote"), where)
        sources[str(key)] = Source(str(key), str(s["file"]), str(s["citation"]), str(s["quote"]),
                                   _scale(s["scale"], where), str(s["scale_quote"]))
    families = meta.get("families")
    if not isinstance(families, dict) or not all(isinstance(v, list) and v for v in families.values()):
        raise ConfigError(f"{path} paper.families: expected family -> list of tokenizer names")
    results = []
    for i, e in enumerate(entries):
        where = f"{path} results[{i}]"
        _required(e, ("id", "claim", "source", "section", "result", "value", "quote"), where)
        if e["source"] not in sources:
            raise ConfigError(f"{where}: unknown source {e['source']!r}; known: {', '.join(sources)}")
        if any(r.id == e["id"] for r in results):
            raise ConfigError(f"{where}: id {e['id']!r} is used twice")
        results.append(PaperResult(str(e["id"]), str(e["claim"]), str(e["source"]), str(e["section"]),
                                   str(e["result"]), str(e["value"]), str(e["quote"]),
                                   _scale(e.get("scale"), where, sources[e["source"]].scale),
                                   dict(e.get("numbers") or {})))
    return Paper(str(meta["title"]), tuple(meta["authors"]), str(meta["venue"]), str(meta.get("benchmark", "")),
                 {str(k): tuple(map(str, v)) for k, v in families.items()}, str(meta.get("context", "")),
                 int(meta.get("label_scoring_models", 0)), sources, tuple(results))


# ---- quotes against the source texts ------------------------------------------------------------

_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                 "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def quote_found(quote: str, source_text: str) -> bool:
    """Whether ``quote`` is in the source's text, whitespace aside (the texts are extracted from
    web pages whose spacing is not the author's)."""
    return _squash(quote) in _squash(source_text)


def scalars(value: Any) -> list[Any]:
    """The numbers of a ``numbers`` entry, nested mappings and lists flattened."""
    if isinstance(value, Mapping):
        return [x for v in value.values() for x in scalars(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in scalars(v)]
    return [value]


def number_in_quote(value: Any, quote: str) -> bool:
    """Whether a number is stated in the quote: as digits (thousands separators ignored), as a
    percentage for a share below 1 (0.02 as "2%"), or spelled out ("Eleven")."""
    text = _squash(quote).replace(",", "")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return True
    raw = str(value)
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?[MK]?", raw):
        return True  # a name, not a number
    if re.search(rf"(?<![0-9.]){re.escape(raw)}(?![0-9])", text) or raw in text:
        return True
    if isinstance(value, float) and value < 1 and f"{value * 100:g}%" in text:
        return True
    words = {n: w for w, n in _NUMBER_WORDS.items()}
    return isinstance(value, int) and value in words and words[value] in text.lower()
