"""The verdict rule: what a row of "the sources beside their reproduction" may say, and why.

Each headline result of a source (:mod:`cube.paper.citations`) is set beside this repository's
value for it (a :class:`Reproduction`, computed from the records, the frozen prediction and the
configuration by the builders, one module per source: ``cube.paper.claims_paper``,
``claims_whitespace``, ``claims_ladder``, ``claims_practice``), and the pair gets a verdict by
the rule below; :mod:`cube.paper.claims_render` writes the rows for the book page. The rule
stands alone so that every builder answers to one rule and the page only renders its outcome. A
reader must be able to tell, per result, whether it was *tested* here, and with what power, so the
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cube.errors import ConfigError
from cube.paper.citations import Paper, PaperResult, Scale

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


def verdict_head(text: str) -> str:
    """The verdict without its reason (the longest known verdict the text starts with)."""
    return max((v for v in VERDICTS if text.startswith(v)), key=len)


def verdict_counts(rows: Sequence[Row]) -> dict[str, int]:
    counts = dict.fromkeys(VERDICTS, 0)
    for row in rows:
        counts[verdict_head(row.verdict)] += 1
    return counts


def precision_note(precision: str) -> str:
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
