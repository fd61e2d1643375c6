"""The sources beside their reproduction: each headline result, this repository's value, a verdict.

The sources' values are citations kept as data (``config/paper.yaml``: the paper and the three
other works the book follows, each result quoted from its source's text with that source's own
scale); this repository's values are computed from the records, the frozen prediction and the
configuration by the builders below, one per result, so the book page only calls them. A reader
must be able to tell, per result, whether it was *tested* here, and with what power, so the
verdict is a rule, not prose.

A row that tests the source's statement gets one of:

* **reproduced**: the test holds at the source's scale;
* **reproduced at smaller scale**: it holds, on fewer models, items, cells or tokenizer families;
* **no power at this scale**: the data here could not have shown the effect (models at chance
  level, too few models for a ranking, a test whose power against the source's effect size is
  low), whatever the sign of what was observed;
* **contradicted**: the test had the power to show the source's statement and did not (a
  deterministic check failed, or the effect is absent or significantly reversed);
* **not reproducible here**: what the test needs is missing here (a tokenizer, an official key,
  the source's own models or items).

A row that only states a setting this repository adopts from the source (5 shots from the dev
split, a 2 % parse-failure warning, C-Eval's subject map) is not a test of anything: it gets
**implemented as the source states** (or **implemented differently from the source**) and never
counts among the reproductions. Every count of tests with a multiplicity (several cells, models
or extractors judged at once) is Holm-corrected at :data:`ALPHA`, and says so.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from cube.analysis.footrule import (average_ranks, footrule, footrule_has_power, footrule_normalisation,
                                    footrule_verdict)
from cube.analysis.stats import above_chance_p, holm_adjust
from cube.config import config_dir, load_yaml
from cube.errors import ConfigError

REPRODUCED = "reproduced"
SMALLER = "reproduced at smaller scale"
NO_POWER = "no power at this scale"
CONTRADICTED = "contradicted"
NOT_HERE = "not reproducible here"
IMPLEMENTED = "implemented as the source states"
DIFFERS = "implemented differently from the source"
VERDICTS = (REPRODUCED, SMALLER, NO_POWER, CONTRADICTED, NOT_HERE, IMPLEMENTED, DIFFERS)
TESTED = (REPRODUCED, SMALLER, NO_POWER, CONTRADICTED, NOT_HERE)  # verdicts of rows that test a statement
ALPHA = 0.05  # significance level of every test a verdict reads
TIME_FACTOR = 3  # a wall time agrees within this factor of the source's (other hardware)


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


@dataclass(frozen=True)
class Reproduction:
    """This repository's value for one result.

    ``holds``: True or False once tested, None when it cannot be. ``no_power`` (with ``holds``
    None) says the data were there but could not have shown the effect. ``kind`` "setting" marks
    a row that states a setting adopted from the source rather than testing a statement.
    """

    value: str
    scale: Scale
    holds: bool | None
    why: str = ""  # the reason it cannot be tested here, or the detail behind the outcome
    substitute: str = ""  # what stands in for the source's object where it is not available
    no_power: bool = False
    kind: str = "test"
    verdict_note: str = ""  # what a reproduced verdict must say beside it (partial, how narrow the support)


@dataclass(frozen=True)
class Row:
    paper: PaperResult
    ours: Reproduction
    verdict: str


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


# ---- the verdict -------------------------------------------------------------------------------

def verdict(paper: PaperResult, ours: Reproduction) -> str:
    """The rule of the module docstring."""
    if ours.kind == "setting":
        if ours.holds is None:
            return f"{NOT_HERE} ({ours.why})" if ours.why else NOT_HERE
        return IMPLEMENTED if ours.holds else DIFFERS
    if ours.holds is None:
        head = NO_POWER if ours.no_power else NOT_HERE
        return f"{head} ({ours.why})" if ours.why else head
    if not ours.holds:
        return CONTRADICTED
    head = SMALLER if ours.scale.smaller_than(paper.scale) else REPRODUCED
    return f"{head} ({ours.verdict_note})" if ours.verdict_note else head


def compare(paper: Paper, reproductions: Mapping[str, Reproduction]) -> list[Row]:
    """One row per result of the paper, in the paper's order; every result must be answered."""
    unknown = sorted(set(reproductions) - {r.id for r in paper.results})
    if unknown:
        raise ConfigError(f"reproduction for unknown result(s) {', '.join(unknown)}")
    missing = [r.id for r in paper.results if r.id not in reproductions]
    if missing:
        raise ConfigError(f"no reproduction for result(s) {', '.join(missing)}")
    return [Row(r, reproductions[r.id], verdict(r, reproductions[r.id])) for r in paper.results]


VERDICT_CLASS = {REPRODUCED: "reproduced", SMALLER: "smaller", NO_POWER: "no-power", CONTRADICTED: "contradicted",
                 NOT_HERE: "not-here", IMPLEMENTED: "implemented", DIFFERS: "differs"}


def verdict_head(text: str) -> str:
    """The verdict without its reason (the longest known verdict the text starts with)."""
    return max((v for v in VERDICTS if text.startswith(v)), key=len)


def verdict_class(text: str) -> str:
    return VERDICT_CLASS[verdict_head(text)]


def source_label(paper: Paper, result: PaperResult) -> str:
    source = paper.sources[result.source]
    return "the paper" if result.source == "paper" else source.citation.split(",")[0].strip("“”")


_CODE_SPAN = re.compile(r"`([^`]+)`")


def cell_html(text: str) -> str:
    """A table cell's text, escaped, with Markdown code spans (`cube smoke`) as <code>: the
    table is HTML, where Markdown is not rendered and the backticks showed as they are."""
    return _CODE_SPAN.sub(r"<code>\1</code>", html.escape(text))


def rows_html(rows: Sequence[Row], paper: Paper | None = None) -> str:
    """The table of the book page: one row per result, the verdict first, each cell escaped."""
    head = ["verdict", "result (source, section)", "source's value", "source's scale", "here", "scale here"]
    body = []
    for row in rows:
        here = row.ours.value
        if row.ours.substitute:
            here += f"; substitute: {row.ours.substitute}"
        if row.ours.why and row.ours.holds is not None:
            here += f" ({row.ours.why})"
        who = source_label(paper, row.paper) if paper is not None else row.paper.source
        cells = [f'<span class="verdict verdict-{verdict_class(row.verdict)}">{html.escape(row.verdict)}</span>',
                 cell_html(row.paper.result) + f"<br><small>{cell_html(who)}, {cell_html(row.paper.section)}</small>",
                 cell_html(row.paper.value), cell_html(row.paper.scale.text()), cell_html(here),
                 cell_html(row.ours.scale.text())]
        # data-label: each cell names its column, for the book's stacked layout (book/static/cube.css)
        body.append(f'<tr data-result="{html.escape(row.paper.id)}">'
                    + "".join(f'<td data-label="{html.escape(h)}">{c}</td>' for h, c in zip(head, cells)) + "</tr>")
    thead = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (f'<table class="table cube-paper-table"><thead><tr>{thead}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def verdict_counts(rows: Sequence[Row]) -> dict[str, int]:
    counts = dict.fromkeys(VERDICTS, 0)
    for row in rows:
        counts[verdict_head(row.verdict)] += 1
    return counts


def verdict_summary(rows: Sequence[Row]) -> str:
    """The counts as one sentence (the abstract's line): the rows that test a source's statement,
    of them those tested here and those that could not be, then the settings. "Tested" counts only
    rows whose test ran (issue 47: "of 22 results tested" counted 9 not reproducible here)."""
    counts = verdict_counts(rows)
    ran = [v for v in TESTED if v != NOT_HERE]
    statements = sum(counts[v] for v in TESTED)
    tested = sum(counts[v] for v in ran)
    parts = [f"{counts[v]} {v}" for v in ran if counts[v]]
    text = (f"Of {statements} results that state something testable, {tested} were tested here "
            f"({', '.join(parts) or 'none'})")
    if counts[NOT_HERE]:
        text += f" and {counts[NOT_HERE]} {'is' if counts[NOT_HERE] == 1 else 'are'} {NOT_HERE}"
    settings = counts[IMPLEMENTED] + counts[DIFFERS]
    if settings:
        text += (f"; {settings} more state{'s' if settings == 1 else ''} a setting adopted from a source "
                 f"({counts[IMPLEMENTED]} {IMPLEMENTED}"
                 + (f", {counts[DIFFERS]} {DIFFERS}" if counts[DIFFERS] else "") + "), not a test")
    return text


def not_reproduced_text(rows: Sequence[Row]) -> str:
    """The tested rows that did not reproduce, grouped by verdict, for the abstract."""
    parts = []
    for head in (CONTRADICTED, NO_POWER, NOT_HERE):
        names = [r.paper.result for r in rows if verdict_head(r.verdict) == head]
        if names:
            parts.append(f"{head} ({len(names)}): " + "; ".join(names))
    return ". ".join(parts) or "none"


# ---- the builders: one per result ---------------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _cells_at(prediction: Mapping[str, Any], context: str) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(c["family"], c["label_set"]): c for c in prediction["cells"] if c["context"] == context}


def audit_matrix(paper: Paper, result: PaperResult, prediction: Mapping[str, Any],
                 recomputed_identical: bool) -> Reproduction:
    """Table 2, cell by cell: each row of the paper's matrix whose tokenizer is here, under the
    paper's answer context, against the frozen prediction's verdict (max1tok, max2tok, DEGEN)."""
    matrix = result.numbers["matrix"]
    cells = _cells_at(prediction, paper.context)
    audited = [t for t in matrix if t in prediction["sources"]]
    absent = [t for t in matrix if t not in prediction["sources"]]
    compared = [(t, ls, want, cells[(t, ls)]["verdict"]) for t in audited for ls, want in matrix[t].items()
                if (t, ls) in cells]
    disagree = [f"{t} / {ls}: paper {want}, here {got}" for t, ls, want, got in compared if want != got]
    families = sorted({paper.family_of(t) for t in audited} - {None})
    value = (f"{len(audited)} of Table 2's {len(matrix)} rows audited ({', '.join(audited)}) under "
             f"{paper.context}: {len(compared) - len(disagree)} of {len(compared)} cells agree with the paper; "
             + ("recomputed identical to the frozen prediction" if recomputed_identical
                else "recomputed and DIFFERENT from the frozen prediction"))
    if absent:
        value += f"; no offline tokenizer: {', '.join(absent)}"
    extra = sorted(set(prediction["sources"]) - set(matrix))
    if extra:
        value += f"; audited besides (not in the paper): {', '.join(extra)}"
    scale = Scale(families=len(families), cells=len(compared))
    if not compared:
        return Reproduction(value, scale, None, "no tokenizer of the paper's families is available here")
    return Reproduction(value, scale, recomputed_identical and not disagree, "; ".join(disagree))


def _label_scoring_cells(paper: Paper, checkpoints: Mapping[str, Any],
                         prediction: Mapping[str, Any]) -> tuple[list, list]:
    """(model, label set, cell or None) of the paper's label-scoring models × the audit's label
    sets under the paper's context; the cell is None where the model's tokenizer is not here."""
    cells = _cells_at(prediction, paper.context)
    models = [c for c in checkpoints.values() if c.role == "label"]
    if len(models) != paper.label_scoring_models:
        raise ConfigError(f"config/models.yaml lists {len(models)} label-scoring checkpoints; the paper has "
                          f"{paper.label_scoring_models}")
    here, missing = [], []
    for model in models:
        for label_set in prediction["label_sets"]:
            cell = cells.get((model.family, label_set))
            (here if cell is not None else missing).append((model.name, label_set, cell))
    return here, missing


def _table2_rows(paper: Paper, prediction: Mapping[str, Any]) -> list[tuple[str, str, str, Mapping[str, Any]]]:
    """(tokenizer row, label set, the paper's verdict, the frozen audit's cell) of every Table 2
    cell whose tokenizer is audited here, under the paper's answer context: the evidence the
    claim-1/2 rows rest on (issue 47), independent of any roster of checkpoints."""
    matrix = paper.result("table2").numbers["matrix"]
    cells = _cells_at(prediction, paper.context)
    return [(t, ls, want, cells[(t, ls)]) for t in matrix if t in prediction["sources"]
            for ls, want in matrix[t].items() if (t, ls) in cells]


def _roster_check(paper: Paper, result: PaperResult, prediction: Mapping[str, Any],
                  checkpoints: Mapping[str, Any]) -> str:
    """The paper's 12 of 64 recomputed from our 16-model roster (config/models.yaml) × Table 2:
    it reproduces the paper's count by construction, so it checks our settings, not the paper."""
    here, missing = _label_scoring_cells(paper, checkpoints, prediction)
    family = {c.name: c.family for c in checkpoints.values()}
    matrix = paper.result("table2").numbers["matrix"]
    theirs_all = sum(matrix[family[m]][ls] == "DEGEN" for m, ls, _ in here + missing)
    n_cells = len(here) + len(missing)
    if (theirs_all, n_cells) != (int(result.numbers["degenerate"]), int(result.numbers["cells"])):
        raise ConfigError(f"the paper's Table 2 over its {n_cells} label-scoring cells gives {theirs_all} DEGEN, "
                          f"not the {result.numbers['degenerate']} of {result.numbers['cells']} it states")
    ours = sum(cell["verdict"] == "DEGEN" for _, _, cell in here)
    missing_models = sorted({m for m, _, _ in missing})
    return (f"A check of our settings, not evidence: our {len({m for m, _, _ in here + missing})}-model roster "
            f"(config/models.yaml) times Table 2 gives the paper's {theirs_all} of {n_cells} by construction; "
            f"{len(here)} of those cells can be audited here ({ours} DEGEN), {len(missing)} cannot "
            f"({', '.join(missing_models)}: no offline tokenizer)")


def degenerate_cells(paper: Paper, result: PaperResult, prediction: Mapping[str, Any],
                     checkpoints: Mapping[str, Any]) -> Reproduction:
    """The paper's 12 of 64 label-scoring cells. The evidence is Table 2 row by row: in each row
    whose tokenizer is here, the frozen audit marks DEGEN exactly the label sets the paper does.
    The paper's count itself follows from Table 2 times its roster of checkpoints, which ours
    copies, so recounting it here is reported as a check of our settings, never as the test
    (issue 47: "9 of its 12" reproduced the paper's count by construction)."""
    rows = _table2_rows(paper, prediction)
    theirs = {(t, ls) for t, ls, want, _ in rows if want == "DEGEN"}
    ours = {(t, ls) for t, ls, _, cell in rows if cell["verdict"] == "DEGEN"}
    audited = sorted({t for t, _, _, _ in rows}, key=list(paper.tokenizers).index)
    families = sorted({paper.family_of(t) for t in audited} - {None})
    wrong = sorted(ours ^ theirs)
    value = (f"Table 2 row by row under {paper.context}: in its {len(audited)} rows whose tokenizer is here "
             f"({', '.join(audited)}), the frozen audit marks {len(ours)} of {len(rows)} cells DEGEN, "
             + ("exactly Table 2's" if not wrong else "not Table 2's") + f" {len(theirs)}. "
             + _roster_check(paper, result, prediction, checkpoints))
    scale = Scale(families=len(families), cells=len(rows))
    if not rows:
        return Reproduction(value, scale, None, "no tokenizer of Table 2's rows is available here")
    return Reproduction(value, scale, not wrong,
                        "" if not wrong else "differs in " + ", ".join(f"{t} / {ls}" for t, ls in wrong))


def collisions_all_way(paper: Paper, result: PaperResult, prediction: Mapping[str, Any],
                       checkpoints: Mapping[str, Any]) -> Reproduction:
    """Of Table 2's degenerate cells whose tokenizer row is audited here, how many are all-way
    (one group holding every label); the paper's one partial collision is InternLM3's, whose
    tokenizer is not here. The roster's count is a check of our settings (``_roster_check``)."""
    rows = _table2_rows(paper, prediction)
    degen = [(t, ls, cell) for t, ls, want, cell in rows if want == "DEGEN" and cell["verdict"] == "DEGEN"]
    all_way = [(t, ls) for t, ls, cell in degen
               if len(cell["collision_groups"]) == 1 and len(cell["collision_groups"][0]) == len(cell["labels"])]
    matrix = paper.result("table2").numbers["matrix"]
    missing_rows = sorted(t for t in matrix if t not in prediction["sources"]
                          and any(v == "DEGEN" for v in matrix[t].values()))
    value = (f"Table 2 row by row: {len(all_way)} of its {len(degen)} degenerate cells in rows audited here are "
             f"all-way; its other degenerate rows ({', '.join(missing_rows)}) cannot be audited here, its one "
             "partial collision among them. " + _roster_check(paper, paper.result("degenerate_cells"), prediction,
                                                               checkpoints))
    families = sorted({paper.family_of(t) for t, _, _ in degen} - {None})
    scale = Scale(families=len(families), cells=len(degen))
    if not degen:
        return Reproduction(value, scale, None, "no degenerate cell of Table 2 can be audited here")
    holds = len(all_way) == len(degen)
    return Reproduction(value, scale, holds)


def predictions_confirmed(report: Any, paper: Paper, n_items: int) -> Reproduction:
    """The frozen predictions against the records, on the cells of the paper's tokenizer families
    (checkpoints other than the paper's: the prediction is a property of the tokenizer); the
    demo models of other families are reported beside, not counted."""
    cells = [c for c in report.cells if c.status != "unpredicted"]
    in_paper = [c for c in cells if c.family in paper.tokenizers]
    besides = [c for c in cells if c.family not in paper.tokenizers]
    ok = sum(c.status == "confirmed" for c in in_paper)
    models = sorted({c.observed.model for c in in_paper})
    value = f"{ok}/{len(in_paper)} cells of the paper's tokenizer families confirmed"
    if besides:
        value += (f"; besides, {sum(c.status == 'confirmed' for c in besides)}/{len(besides)} cells of "
                  f"{', '.join(sorted({c.observed.model for c in besides}))} (not in the paper)")
    scale = Scale(models=len(models), items=n_items, cells=len(in_paper))
    substitute = (f"{', '.join(models)} stand in for the paper's checkpoints of the same tokenizer families"
                  if models else "")
    if not in_paper:
        return Reproduction(value, scale, None, "no record falls in a predicted cell of the paper's families")
    return Reproduction(value, scale, ok == len(in_paper), substitute=substitute)


@dataclass(frozen=True)
class RecoveryCell:
    """One flagged cell: does M1-seq reach accuracy a guesser would not, and could it have?"""

    model: str
    label_set: str
    n: int
    acc_strict: float
    acc_seq: float
    p_seq: float  # M1-seq above chance, one-sided exact binomial, Holm-adjusted
    reference_acc: float  # the model's M1-seq accuracy in a defined cell (ABCD): its genuine accuracy
    p_reference: float  # that accuracy above chance, Holm-adjusted
    verdict: str  # "reproduced", "no power" or "contradicted"
    # the same model's ABCD accuracy on the flagged cell's own items, and the exact McNemar p of
    # M1-seq there against it (cube.paper.evidence.same_item_reference); None: not computed
    same_items_reference: float | None = None
    same_items_p: float | None = None
    same_items_n: int | None = None


def recovery_cells(effects: Sequence[Any], reference: Mapping[str, tuple[int, int]], chance: float = 0.25,
                   alpha: float = ALPHA) -> list[RecoveryCell]:
    """Judge each flagged cell against chance, not against the tie-break.

    "Recovers genuine accuracy" means M1-seq scores above what a guesser would (exact binomial
    against ``chance``), where M1-strict only reports the tie-break. A model with no accuracy to
    recover, i.e. not above chance in a cell whose labels do not collide (``reference``: its
    (correct, n) there), gives the test no power; one that is above chance there but not in the
    flagged cell contradicts the claim. Both families of p-values are Holm-adjusted over the cells.
    """
    paired = [e for e in effects if e.acc_seq is not None]
    if not paired:
        return []
    missing = sorted({e.model for e in paired} - set(reference))
    if missing:
        raise ConfigError(f"no reference (defined-cell) accuracy for {', '.join(missing)}")
    p_seq = holm_adjust([above_chance_p(round(e.acc_seq * e.n_paired), e.n_paired, chance) for e in paired])
    p_ref = holm_adjust([above_chance_p(*reference[e.model], chance) for e in paired])
    out = []
    for e, ps, pr in zip(paired, p_seq, p_ref):
        k, n = reference[e.model]
        if ps < alpha:
            outcome = "reproduced"
        elif pr < alpha:
            outcome = "contradicted"
        else:
            outcome = "no power"
        out.append(RecoveryCell(e.model, e.label_set, e.n_paired, e.acc_strict, e.acc_seq, float(ps), k / n,
                                float(pr), outcome))
    return out


def sequence_recovers(cells: Sequence[RecoveryCell], paper: Paper, families: Mapping[str, str],
                      n_items: int, alpha: float = ALPHA) -> Reproduction:
    """The claim on the flagged cells of the paper's families; cells of other models beside."""
    mine = [c for c in cells if families.get(c.model) in paper.tokenizers]
    besides = [c for c in cells if families.get(c.model) not in paper.tokenizers]

    def text(cs: Sequence[RecoveryCell]) -> str:
        return "; ".join(f"{c.model} / {c.label_set}: M1-seq {c.acc_seq:.3f} (Holm p = {c.p_seq:.2g} against chance), "
                         f"M1-strict {c.acc_strict:.3f}, {c.verdict}"
                         + (f"; its own ABCD accuracy on the same {c.same_items_n} items {c.same_items_reference:.3f} "
                            f"(exact McNemar p = {c.same_items_p:.2g})" if c.same_items_p is not None else "")
                         for c in cs)

    def partial(cs: Sequence[RecoveryCell]) -> list[RecoveryCell]:
        """Cells that recover accuracy but significantly less than the model's own ABCD on the same items."""
        return [c for c in cs if c.same_items_p is not None and c.same_items_p < alpha
                and c.acc_seq < (c.same_items_reference or 0.0)]

    def partial_text(cs: Sequence[RecoveryCell], chance: float = 0.25) -> str:
        return "; ".join(f"{c.model} / {c.label_set} recovers most of its accuracy, not all: M1-seq {c.acc_seq:.3f} "
                         f"against its own ABCD {c.same_items_reference:.3f} on the same items (exact McNemar p = "
                         f"{c.same_items_p:.2g}; {(c.acc_seq - chance) / ((c.same_items_reference or chance) - chance):.0%} "
                         "of its accuracy above chance)" for c in cs)

    if not mine:
        return Reproduction("no flagged cell of the paper's families with paired records", Scale(), None,
                            "no flagged cell of the paper's families has both M1-strict and M1-seq records")
    up = [c for c in mine if c.verdict == "reproduced"]
    down = [c for c in mine if c.verdict == "contradicted"]
    weak = [c for c in mine if c.verdict == "no power"]
    value = (f"M1-seq above chance (Holm-corrected over {len(cells)} flagged cells, α = {alpha:g}) in "
             f"{len(up)} of {len(mine)} flagged cells of the paper's families: {text(mine)}")
    if besides:
        value += f"; besides (not in the paper): {text(besides)}"
    scale = Scale(models=len({c.model for c in mine}), items=n_items, cells=len(mine))
    if down:
        return Reproduction(value, scale, False, "above chance in a defined cell, not in the flagged one: "
                            + ", ".join(f"{c.model} / {c.label_set}" for c in down))
    if not up:
        return Reproduction(value, scale, None, "every flagged cell's model is at chance level where its labels do "
                            "not collide, so there is no accuracy to recover", no_power=True)
    short = partial(up)
    models_up = sorted({c.model for c in up})
    resting = (f"rests on {_plural(len(up), 'cell')} of {_plural(len(models_up), 'model')} "
               f"({', '.join(f'{c.model} / {c.label_set}' for c in up)})")
    notes = [("partial: " if short else "") + resting] + ([partial_text(short)] if short else []) + (
        [f"{_plural(len(weak), 'cell')} without power (a model at chance: "
         + ", ".join(f"{c.model} / {c.label_set}" for c in weak) + ") not counted"] if weak else [])
    # the notes are the row's reason: the page prints them once, after the value (issue 47: the
    # partial-recovery sentence was in both and printed twice)
    return Reproduction(value, scale, True, "; ".join(notes), verdict_note=notes[0])


def _groups_text(groups: Sequence[Sequence[str]]) -> str:
    return "; ".join(" = ".join(g) for g in groups) or "none"


def partial_collision(result: PaperResult, prediction: Mapping[str, Any], report: Any,
                      substitute: tuple[str, str, str] = ("smollm2", "L3_ganzhi", "zh_cue")) -> Reproduction:
    """The paper's partial collision where its tokenizer is here; else the substitute's, confirmed."""
    family, label_set, context = (result.numbers[k] for k in ("family", "label_set", "context"))
    want = [list(g) for g in result.numbers["groups"]]
    cells = {(c["family"], c["label_set"], c["context"]): c for c in prediction["cells"]}
    if (family, label_set, context) in cells:
        got = cells[(family, label_set, context)]["collision_groups"]
        return Reproduction(f"{family} / {label_set}: {_groups_text(got)}", Scale(families=1), got == want)
    why = prediction.get("skipped", {}).get(family, "its tokenizer is not audited here")
    sub = cells.get(substitute)
    sub_text = "none available"
    if sub is not None:
        confirmed = [c for c in report.cells if c.family == substitute[0] and c.observed.label_set == substitute[1]
                     and c.observed.context == substitute[2]]
        status = ", ".join(f"{c.observed.model}: {c.status} on {c.observed.n} items" for c in confirmed) or "no records"
        sub_text = (f"{substitute[0]}'s {' '.join(prediction['label_sets'][substitute[1]])} partial collision "
                    f"({_groups_text(sub['collision_groups'])}; {status})")
    return Reproduction(f"{family} not audited", Scale(families=0), None, f"{family}: {why}", sub_text)


def footrule_row(result: PaperResult, shift: Any | None, name: str) -> Reproduction:
    """A ranking shift against its paired noise floor (``cube.analysis.ranking_shift.ranking_shift``),
    read by the same :func:`cube.analysis.footrule.footrule_verdict` as claim 3's page.

    Beyond the floor's 95th percentile: reproduced. A floor whose p95 is the largest footrule the
    models can reach, or at least the paper's footrule, could not have shown the paper's shift:
    no power. Within a floor that would have shown it: contradicted.
    """
    if shift is None:
        return Reproduction("no ranking", Scale(), None, f"fewer than 2 models under both protocols ({name})")
    n = len(shift.models)
    floor = shift.floor
    value = (f"footrule {shift.observed:.3f} ({footrule_normalisation(n)}), "
             f"{shift.multiple_of_mean:.2f}× the paired floor's mean {floor.mean:.3f} "
             f"(± {floor.mean_se:.3f} Monte Carlo s.e., B = {floor.replicates:,}), "
             f"{shift.multiple_of_p95:.2f}× its p95 {floor.p95:.3f}")
    scale = Scale(n, shift.n_items)
    paper_value = float(result.numbers["footrule"])
    reading = footrule_verdict(shift.observed, floor, n, paper_value)
    if shift.observed > floor.p95:
        return Reproduction(value, scale, True)
    if not footrule_has_power(floor) or floor.p95 >= paper_value:
        return Reproduction(value, scale, None, reading, no_power=True)
    return Reproduction(value, scale, False, "within the noise floor, which the paper's shift would exceed")


def leakage_row(glued: Mapping[str, str] | None, n_models: int) -> Reproduction:
    """Claim 5's executed values (its notebook scans the records against the benchmark items)."""
    if glued is None:
        return Reproduction("claim 5 not executed", Scale(n_models), None, "claim 5's notebook has not been executed")
    records, hits = glued.get("leak_n_records", ""), glued.get("leak_hits", "")
    if not hits.strip().isdigit():
        return Reproduction("claim 5 not run", Scale(n_models), None,
                            "the leakage scan needs the benchmark items, not found here")
    return Reproduction(f"{records} records, {hits} leakage hits", Scale(n_models, note=f"{records} records"),
                        int(hits) == 0)


def timing_row(result: PaperResult, seconds: float, what: str, factor: float = TIME_FACTOR) -> Reproduction:
    """The smoke test's wall time: cube's own smoke test on cube's own sample, so it says how the
    artifact here behaves, and tests nothing the paper states about models."""
    paper_s = float(result.numbers["seconds"])
    within = seconds <= factor * paper_s
    return Reproduction(f"{seconds:.1f} s ({what})", Scale(note="this repository's own smoke test"), within,
                        f"within {factor:g}× of the paper's {paper_s:g} s" if within
                        else f"more than {factor:g}× the paper's {paper_s:g} s", kind="setting")


@dataclass(frozen=True)
class WhitespaceEffect:
    """One model's accuracy under the separate-space and the merged form, the McNemar-consistent
    interval of the gain, its Holm-adjusted p, and the power against the source's effect."""

    model: str
    n: int
    acc_separate: float
    acc_merged: float
    delta: float  # merged − separate
    lo: float
    hi: float
    p_value: float
    p_holm: float
    power: float  # of the exact McNemar test at this n against the source's effect
    precision: str = "not recorded"  # what the pair compares (cube.analysis.paired_slices.check_one_precision)
    discordant: int | None = None  # items the two forms get differently (the power's discordance, unless floored)


def whitespace_accuracy(result: PaperResult, effects: Sequence[WhitespaceEffect], n_items: int,
                        alpha: float = ALPHA, power_needed: float = 0.8) -> Reproduction:
    """The source: the merged form gains accuracy for most models ("大多数模型"), up to about 2.5
    points. Per model an exact McNemar test, Holm-adjusted over the models, with its power at
    this n against a gain of the source's size: reproduced when most models gain significantly;
    contradicted when one loses significantly, or most models had the power and showed no gain;
    otherwise no power, with the sign of each model's change said."""
    if not effects:
        return Reproduction("no model under both forms", Scale(), None, "no model has records under both forms")
    points = float(result.numbers["points"])
    per_model = "; ".join(f"{e.model} {100 * e.delta:+.1f} [{100 * e.lo:+.1f}, {100 * e.hi:+.1f}] "
                          f"(Holm p = {e.p_holm:.2g}, power {e.power:.2f}{_floor_note(e, points)})"
                          + _precision_note(e.precision) for e in effects)
    same_sign = sum(e.delta > 0 for e in effects)
    value = (f"merged − separate in points, with the exact McNemar interval (it excludes 0 exactly when the "
             f"unadjusted p < 0.05), Holm over {len(effects)} models, power against +{points:g} points (exact "
             f"McNemar power at each model's n and observed discordance, floored at {points:g} points): "
             f"{per_model}; {same_sign} of {len(effects)} models change in the source's direction")
    scale = Scale(len(effects), n_items)
    up = [e for e in effects if e.p_holm < alpha and e.delta > 0]
    down = [e for e in effects if e.p_holm < alpha and e.delta < 0]
    powered_flat = [e for e in effects if e.power >= power_needed and e not in up]
    majority = len(effects) / 2
    if down:
        return Reproduction(value, scale, False, "significantly lower under the merged form: "
                            + ", ".join(e.model for e in down))
    if len(up) > majority:
        return Reproduction(value, scale, True)
    if len(powered_flat) > majority:
        return Reproduction(value, scale, False, f"no significant gain for most models although the test had power "
                            f"≥ {power_needed:g} against {points:g} points")
    return Reproduction(value, scale, None, f"{len(effects) - len(powered_flat) - len(up)} of {len(effects)} models have "
                        f"power below {power_needed:g} to detect {points:g} points on {n_items} items; "
                        f"{len(up)} gain significantly", no_power=True)


def _floor_note(e: WhitespaceEffect, points: float) -> str:
    """Where the observed discordance is below the effect's size, the power is computed at the floor
    (a gain of ``points`` needs at least that many discordant items), which a reader must be told:
    at the floor every discordant item must favour one form, so the power is high by construction."""
    if e.discordant is None or e.discordant / e.n >= points / 100:
        return ""
    return (f", at a discordance floored at {points:g} % (observed {e.discordant} pair"
            f"{'' if e.discordant == 1 else 's'}, {100 * e.discordant / e.n:.1f} %)")


def whitespace_up_to(result: PaperResult, effects: Sequence[WhitespaceEffect], n_items: int) -> Reproduction:
    """"Up to 11 %": a bound over the source's own 15 models and benchmarks, not a statement any
    other model set can test; the largest change here is shown beside it."""
    if not effects:
        return Reproduction("no model under both forms", Scale(), None, "no model has records under both forms")
    top = max(effects, key=lambda e: abs(e.delta))
    value = (f"the largest change here: {100 * top.delta:+.1f} points ({top.model}, "
             f"[{100 * top.lo:+.1f}, {100 * top.hi:+.1f}])")
    return Reproduction(value, Scale(len(effects), n_items), None,
                        "a maximum over the source's own models and benchmarks (MMLU, ARC, …), which are not here")


@dataclass(frozen=True)
class CalibrationRatio:
    """ECE under the separate-space form over ECE under the merged form, with a bootstrap interval."""

    model: str
    ece_separate: float
    ece_merged: float
    ratio: float
    lo: float
    hi: float
    n_bins: int
    replicates: int
    precision: str = "not recorded"
    accuracy_merged: float | None = None  # the model's accuracy under the merged form
    confidence_merged: float | None = None  # its mean top probability there (what ECE compares it with)


def whitespace_ece(result: PaperResult, ratios: Sequence[CalibrationRatio], n_items: int) -> Reproduction:
    """The source: the merged form lowers ECE for most models, up to 4×. One rule for every
    model, whatever its accuracy: its ECE is lower (or higher) under the merged form when its
    ratio's interval lies above (below) 1; reproduced when most models are lower, contradicted
    when most are higher, no power otherwise. ECE compares confidence with accuracy at any
    accuracy, so a model at chance counts as any other, its fall and its rise alike (issue 47: two
    chance-level models' falls counted as support while a chance-level rise was excused as
    "confident guessing"); each model's accuracy and mean confidence are shown, not interpreted."""
    if not ratios:
        return Reproduction("no model under both forms", Scale(), None, "no model has records under both forms")
    factor = float(result.numbers["factor"])
    lower = [r for r in ratios if r.lo > 1]
    higher = [r for r in ratios if r.hi < 1]

    def accuracy(r: CalibrationRatio) -> str:
        if r.accuracy_merged is None or r.confidence_merged is None:
            return ""
        return f", merged accuracy {r.accuracy_merged:.3f}, mean confidence {r.confidence_merged:.2f}"

    per = "; ".join(f"{r.model} {r.ece_separate:.3f} → {r.ece_merged:.3f} ({r.ratio:.2f}× [{r.lo:.2f}, {r.hi:.2f}]"
                    f"{accuracy(r)})" + _precision_note(r.precision) for r in ratios)
    b = ratios[0]
    value = (f"ECE separate → merged, {b.n_bins} equal-width bins, ratio separate/merged with its 95 % "
             f"bootstrap interval (B = {b.replicates:,}; a bootstrap, not an exact test): {per}. Rule, the same for "
             "every model whatever its accuracy: lower (higher) under the merged form when the interval lies above "
             f"(below) 1; lower for {len(lower)} of {len(ratios)}"
             + (f" ({', '.join(r.model for r in lower)})" if lower else "")
             + f", higher for {len(higher)}" + (f" ({', '.join(r.model for r in higher)})" if higher else ""))
    reversal = result.numbers.get("reversal")
    if reversal:
        value += (f"; the source's one rise ({reversal['model']} {reversal['before']:g} → {reversal['after']:g}) "
                  "carries no significance star where its significant rows do")
    scale = Scale(len(ratios), n_items)
    majority = len(ratios) / 2
    if len(lower) > majority:
        best = max(lower, key=lambda r: r.ratio)
        return Reproduction(value, scale, True, f"largest {best.ratio:.1f}× against the source's {factor:g}×",
                            verdict_note=f"lower for {len(lower)} of {len(ratios)} models, higher for {len(higher)}")
    if len(higher) > majority:
        return Reproduction(value, scale, False, "most models calibrate worse under the merged form")
    return Reproduction(value, scale, None, "no direction holds for most models beyond its interval", no_power=True)


def _precision_note(precision: str) -> str:
    """What a paired figure's text adds about its precision: nothing for one recorded precision,
    the re-run side otherwise (``cube.analysis.paired_slices.check_one_precision``). A pair of two
    precisions is refused, not marked: no page prints one (issue 47)."""
    if precision.startswith("mixed"):
        from cube.errors import PrecisionMismatch

        raise PrecisionMismatch(f"a verdict pairs two precisions ({precision}): pair the one-precision rerun of "
                                "one side (cube.paper.evidence.one_precision_pair) instead")
    if "re-run" in precision:
        return f" [{precision}]"
    return ""


def whitespace_rank(models: Sequence[str], accuracy_a: Sequence[float], accuracy_b: Sequence[float],
                    n_items: int, compared: str = "") -> Reproduction:
    """Whether the top two models swap, with ranks that share ties (the footrule's ranks).

    Which models are on top is a fact about the model set, so a ranking that keeps its top two
    here does not contradict the source's: only a swap here is evidence, and it reproduces the
    phenomenon, not the source's models.
    """
    if len(models) < 2:
        return Reproduction("no ranking", Scale(len(models), n_items), None, "fewer than 2 models under both forms")
    ra = average_ranks(np.asarray(accuracy_a, dtype=float))  # rank 1 = most accurate, ties share
    rb = average_ranks(np.asarray(accuracy_b, dtype=float))
    top_a = sorted(range(len(models)), key=lambda i: (ra[i], models[i]))
    top_b = sorted(range(len(models)), key=lambda i: (rb[i], models[i]))
    swapped = rb[top_a[0]] > rb[top_a[1]] and ra[top_a[0]] < ra[top_a[1]]
    moved = [models[i] for i in range(len(models)) if ra[i] != rb[i]]
    first = (f"{models[top_a[0]]} first under both forms" if top_a[0] == top_b[0] else
             f"{models[top_a[0]]} first under the separate space, {models[top_b[0]]} under the merged form")
    value = (f"top two {'swap' if swapped else 'keep their order'} ({first}); ranks with ties shared: "
             f"{len(moved)} of {len(models)} models change rank"
             + (f" ({', '.join(moved)})" if moved else "")
             + f", footrule {footrule(ra, rb):.3f}" + (f" ({compared})" if compared else ""))
    return Reproduction(value, Scale(len(models), n_items), True if swapped else None,
                        "" if swapped else f"the source's top two models are not among these {len(models)}")


def exact_value(result: PaperResult, key: str, ours: Fraction, text: str) -> Reproduction:
    """A closed-form value: reproduced exactly or contradicted."""
    return Reproduction(text, result.scale, ours == Fraction(str(result.numbers[key])))


def baseline_range(result: PaperResult, percents: Mapping[str, Fraction], text: str) -> Reproduction:
    lo, hi = min(percents.values()), max(percents.values())
    holds = (lo, hi) == (Fraction(str(result.numbers["low"])), Fraction(str(result.numbers["high"])))
    return Reproduction(text, result.scale, holds)


@dataclass(frozen=True)
class LadderGap:
    """One model's true/false groups under the ladder: statement accuracy and the mean gap."""

    model: str
    groups: int
    statement_accuracy: float
    gap: float
    judged_true: float | None = None  # share of statements the model judged true (None: not computed)


def ladder_gap(result: PaperResult, gaps: Sequence[LadderGap]) -> Reproduction:
    """The study's range is of its 8 models on THPT Part II items; CMMLU items recast as four
    true/false statements stand in, on other models, so the range is shown, not tested."""
    if not gaps:
        return Reproduction("no TF records", Scale(), None, "no true/false (TF) records are archived")
    value = "; ".join(f"{g.model} {g.gap:.3f} (statement accuracy {g.statement_accuracy:.3f})" for g in gaps)
    return Reproduction(f"gap per group here: {value}", Scale(len(gaps), gaps[0].groups), None,
                        "the study's 8 models and THPT items are not here",
                        substitute="CMMLU items as four 对/错 statements (one per option) stand in for Part II items")


def ladder_accuracy_not_predict(gaps: Sequence[LadderGap]) -> Reproduction:
    """"Accuracy does not predict the gap". The true/false recast of CMMLU items cannot test it
    where the models do not judge statements: a model that calls (nearly) every statement true
    has a gap fixed by the scheme, not by its knowledge, and statement accuracies below a coin
    flip (0.5; one statement of four is true) measure that bias, not accuracy; then it is not
    reproducible here, with the numbers. Otherwise: with k models the smallest two-sided p an
    exact rank-correlation test can give is 2 / k!, so with 4 models (0.083) no test can reject."""
    if len(gaps) < 2:
        return Reproduction("fewer than 2 models with TF records", Scale(len(gaps)), None,
                            "a relation needs at least 2 models")
    from cube.analysis.spearman import spearman_exact

    spearman = spearman_exact([g.statement_accuracy for g in gaps], [g.gap for g in gaps])
    smallest = 2 / math.factorial(len(gaps))
    value = (f"Spearman ρ between statement accuracy and gap over {len(gaps)} models: {spearman.rho:+.2f} "
             f"(exact two-sided p = {spearman.p_value:.2g}, all {spearman.orderings:,} orderings)")
    scale = Scale(len(gaps), gaps[0].groups)
    judged = [g.judged_true for g in gaps if g.judged_true is not None]
    accuracies = [g.statement_accuracy for g in gaps]
    if len(judged) == len(gaps) and max(accuracies) < 0.5:
        always = [g.model for g in gaps if g.judged_true == 1.0]
        return Reproduction(
            value, scale, None,
            f"the true/false recast cannot test it: the models judge {100 * min(judged):.0f}–{100 * max(judged):.0f} % "
            "of statements true" + (f" ({', '.join(always)} every one, so its gap is a constant)" if always else "")
            + f", and statement accuracies of {min(accuracies):.2f}–{max(accuracies):.2f} are below a coin flip")
    if smallest >= ALPHA:
        return Reproduction(value, scale, None,
                            f"with {len(gaps)} models the smallest attainable p is {smallest:.3f} ≥ {ALPHA:g}",
                            no_power=True)
    return Reproduction(value, scale, None, "a correlation test cannot show an absence of prediction", no_power=True)


def needs_material(result: PaperResult, what: str, computed: str | None) -> Reproduction:
    """A result that needs published material (an official key, a cohort histogram, the study's model)."""
    if computed is None:
        return Reproduction(f"not computed: the {what} is not archived here", Scale(note=f"no {what}"), None,
                            f"needs the {what}, not archived here")
    return Reproduction(computed, result.scale, True)


def ceval_structure(result: PaperResult, taxonomy: Any) -> Reproduction:
    """C-Eval's subject map (shipped from the official release) against the guide's counts per
    category: two descriptions of one benchmark, so agreement is a check of the map this
    repository uses, not a reproduction of anything measured."""
    want = {str(k): int(v) for k, v in result.numbers["categories"].items()}
    have: dict[str, int] = {}
    for cats in taxonomy.categories.values():
        for c in cats:
            have[c] = have.get(c, 0) + 1
    value = (f"{len(taxonomy.categories)} subjects: "
             + ", ".join(f"{c} {have.get(c, 0)}" for c in sorted(set(want) | set(have))))
    return Reproduction(value, Scale(note="C-Eval subject map"), have == want, kind="setting")


def ceval_items(result: PaperResult, counts: Mapping[str, int] | None) -> Reproduction:
    """The guide's split counts against C-Eval's items, where they are installed."""
    if counts is None:
        return Reproduction("no C-Eval items here", Scale(), None, "C-Eval's items are not installed here",
                            substitute="CMMLU's items are scored instead")
    value = ", ".join(f"{k} {v:,}" for k, v in counts.items()) + f"; {sum(counts.values()):,} in all"
    want = {k: int(v) for k, v in result.numbers.items()}
    close = all(abs(counts.get(k, 0) - v) <= 0.01 * v for k, v in want.items())  # the guide says "about"
    return Reproduction(value, Scale(items=sum(counts.values()), note="C-Eval"), close)


def few_shot_dev(result: PaperResult, shots_models: int, shots_items: int, benchmark: str, shots: int) -> Reproduction:
    if not shots_items:
        return Reproduction(f"no {shots}-shot records", Scale(), None, f"no {shots}-shot run is archived", kind="setting")
    return Reproduction(f"{shots}-shot, the first {shots} dev items of each subject (cube.protocol.prompts.select_shots); "
                        f"{shots_items} items of {shots_models} models archived",
                        Scale(shots_models, shots_items), shots == int(result.numbers["shots"]), kind="setting",
                        substitute=f"{benchmark.upper()}'s dev split stands in for C-Eval's" if benchmark != "ceval" else "")


def decoding_settings(result: PaperResult, max_new_tokens: int, greedy: bool, last_match: bool) -> Reproduction:
    value = (f"{'greedy' if greedy else 'sampled'} decoding, {max_new_tokens} new tokens for chain-of-thought, "
             f"M6-strict reads the {'last' if last_match else 'first'} 答案：X")
    holds = greedy and last_match and max_new_tokens >= int(result.numbers["max_new_tokens"])
    return Reproduction(value, Scale(), holds, kind="setting")


def parse_failure_row(result: PaperResult, threshold: float, warnings: Sequence[str], n_cells: int) -> Reproduction:
    value = f"warning above {threshold:.0%}; it fires on {len(warnings)} of {n_cells} generation cells here"
    return Reproduction(value, Scale(), abs(threshold - float(result.numbers["threshold"])) < 1e-12, kind="setting")


@dataclass(frozen=True)
class CotComparison:
    """Chain-of-thought against answer-only generation for one model and extractor."""

    model: str
    extractor: str
    n: int
    acc_answer_only: float
    acc_cot: float
    p_value: float
    p_holm: float  # over every comparison of the page
    cot_parse_failure_rate: float
    precision: str = "not recorded"
    discordant: int | None = None  # items the two get differently (what the test's power rests on)
    truncation_recorded: bool = False  # whether the CoT records say which generations hit the length limit


def cot_vs_answer_only(comparisons: Sequence[CotComparison], threshold: float, extractor: str = "M6-strict",
                       alpha: float = ALPHA, effects: Sequence[float] = (0.05, 0.10)) -> Reproduction:
    """The guide: with enough new tokens (512) CoT usually scores higher, and a CoT score below
    answer-only means the reasoning was cut off before its answer line (a parse failure).

    Read with the guide's own extraction (the last 答案：X, ``extractor``), among the models whose
    CoT score the guide's own parse-failure rule (``threshold``) trusts: CoT significantly above
    answer-only (Holm-adjusted over every comparison) reproduces it; significantly below
    contradicts it; otherwise no power, with the exact McNemar test's power at this n (each
    model's own discordance, floored at the effect; the range over the models) against each of
    ``effects``. Where no model passes that rule, the guide's statement is not testable here, and
    the row says so with the reason (the failure rates; whether truncation was recorded) and what
    was found instead: the significant changes, each with its parse-failure rate (issue 47: the
    rule fell through to "no power … no significant difference" beside two significant drops).
    """
    from cube.analysis.paired_tests import mcnemar_power

    mine = [c for c in comparisons if c.extractor == extractor]
    if not mine:
        return Reproduction("answer-only and chain-of-thought are not both archived", Scale(), None,
                            "no model has both answer-only and chain-of-thought records")
    per = "; ".join(f"{c.model} {c.acc_answer_only:.3f} → {c.acc_cot:.3f} ({100 * (c.acc_cot - c.acc_answer_only):+.1f} "
                    f"points, Holm p = {c.p_holm:.2g}, CoT parse failures {c.cot_parse_failure_rate:.1%}"
                    f"{' above the guide’s ' + format(threshold, '.0%') if c.cot_parse_failure_rate > threshold else ''})"
                    + _precision_note(c.precision) for c in mine)
    value = (f"{extractor}, answer-only → CoT on the same items, Holm over {len(comparisons)} comparisons: {per}")
    scale = Scale(len(mine), max(c.n for c in mine))
    trusted = [c for c in mine if c.cot_parse_failure_rate <= threshold]  # a score the guide says to trust
    if not trusted:
        rates = sorted(c.cot_parse_failure_rate for c in mine)
        unrecorded = [c.model for c in mine if not c.truncation_recorded]
        reason = (f"the guide's statement is not testable here: no model's CoT passes the guide's own "
                  f"{threshold:.0%} parse-failure rule ({extractor} parse failures {100 * rates[0]:.0f}–"
                  f"{100 * rates[-1]:.0f} %)")
        if unrecorded:
            reason += (", and whether a failure was a truncation is not recorded for "
                       + ("the archived generations" if len(unrecorded) == len(mine) else ", ".join(unrecorded)))
        significant = [c for c in mine if c.p_holm < alpha]
        drops = [c for c in significant if c.acc_cot < c.acc_answer_only]
        found = "; found: " + (", ".join(
            f"{c.model} {100 * (c.acc_cot - c.acc_answer_only):+.1f} points (Holm p = {c.p_holm:.2g}, "
            f"{c.cot_parse_failure_rate:.0%} parse failures)" for c in significant) if significant
            else "no significant change")
        if drops and len(drops) == len(significant):
            found += ": drops where the model cannot follow the answer format"
        return Reproduction(value, scale, None, reason + found)
    up = [c for c in trusted if c.p_holm < alpha and c.acc_cot > c.acc_answer_only]
    down = [c for c in trusted if c.p_holm < alpha and c.acc_cot < c.acc_answer_only]
    if down:
        return Reproduction(value, scale, False, "CoT significantly below answer-only: " + ", ".join(c.model for c in down))
    if up:
        return Reproduction(value, scale, True)
    n = min(c.n for c in trusted)

    def power(delta: float) -> str:
        """The range over the models of the power at each one's own discordance (floored at delta)."""
        values = sorted(mcnemar_power(c.n, min(1.0, max((c.discordant or 0) / c.n, delta)), delta, alpha)
                        for c in trusted)
        return f"{values[0]:.2f}" if f"{values[0]:.2f}" == f"{values[-1]:.2f}" else f"{values[0]:.2f}–{values[-1]:.2f}"

    against = ", ".join(f"{power(d)} to detect {100 * d:+.0f} points" for d in effects)
    lower = [c.model for c in trusted if c.acc_cot < c.acc_answer_only]
    return Reproduction(value, scale, None, f"no significant difference among the models the guide's rule trusts; "
                        f"the exact McNemar test's power at n = {n} is {against} (per model, at its own discordance)"
                        + (f"; {', '.join(lower)} point{'s' if len(lower) == 1 else ''} the other way" if lower else ""),
                        no_power=True)
