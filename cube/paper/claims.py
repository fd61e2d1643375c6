"""The paper beside its reproduction: each headline result, this repository's value, a verdict.

The paper's values are citations kept as data (``config/paper.yaml``); this repository's values
are computed from the records, the frozen prediction and the configuration by the builders
below, one per result, so the book page only calls them. A reader must be able to tell, per
result, whether it was checked here and at what scale, so the verdict is a rule, not prose:

* **contradicted**: the check could have succeeded here and did not (a deterministic check
  failed, or an effect the data had the power to show is absent or significantly reversed);
* **not reproducible here (why)**: what the check needs is missing here (a tokenizer, an
  official key, benchmark items), or the test has no power at this scale;
* **reproduced at smaller scale**: the check holds, on fewer models, items or tokenizer
  families than the paper;
* **reproduced**: the check holds at the paper's scale.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from cube.analysis.stats import footrule_has_power, footrule_normalisation
from cube.config import config_dir, load_yaml
from cube.errors import ConfigError

REPRODUCED = "reproduced"
SMALLER = "reproduced at smaller scale"
CONTRADICTED = "contradicted"
NOT_HERE = "not reproducible here"
ALPHA = 0.05  # significance level of every test a verdict reads
TIME_FACTOR = 3  # a wall time reproduces within this factor of the paper's (other hardware)


@dataclass(frozen=True)
class Scale:
    """What a value was measured on; ``None`` is "not stated"."""

    models: int | None = None
    items: int | None = None
    families: int | None = None
    note: str = ""

    def text(self) -> str:
        parts = []
        if self.models is not None:
            parts.append(f"{self.models} model{'s' if self.models != 1 else ''}")
        if self.items is not None:
            parts.append(f"{self.items:,} items")
        if self.families is not None:
            parts.append(f"{self.families} tokenizer famil{'ies' if self.families != 1 else 'y'}")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts) or "not stated"

    def smaller_than(self, other: Scale) -> bool:
        """Fewer models, items or families than ``other``, on any count both state."""
        pairs = [(self.models, other.models), (self.items, other.items), (self.families, other.families)]
        return any(mine is not None and theirs is not None and mine < theirs for mine, theirs in pairs)


@dataclass(frozen=True)
class PaperResult:
    id: str
    claim: str
    section: str
    result: str
    value: str
    scale: Scale
    numbers: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Paper:
    title: str
    authors: tuple[str, ...]
    venue: str
    benchmark: str
    scale: Scale
    families: tuple[str, ...]
    results: tuple[PaperResult, ...]

    def result(self, result_id: str) -> PaperResult:
        for r in self.results:
            if r.id == result_id:
                return r
        raise ConfigError(f"the paper has no result {result_id!r}; known: {', '.join(r.id for r in self.results)}")

    @property
    def citation(self) -> str:
        return f"{' and '.join(self.authors)}, “{self.title}”, {self.venue}"


@dataclass(frozen=True)
class Reproduction:
    """This repository's value for one result: ``holds`` None means it cannot be checked here."""

    value: str
    scale: Scale
    holds: bool | None
    why: str = ""  # the reason it cannot be checked here, or the detail behind the outcome
    substitute: str = ""  # what stands in for the paper's object where it is not available


@dataclass(frozen=True)
class Row:
    paper: PaperResult
    ours: Reproduction
    verdict: str


def _scale(raw: Any, where: str, default: Scale | None = None) -> Scale:
    if raw is None:
        return default or Scale()
    if not isinstance(raw, dict) or set(raw) - {"models", "items", "families", "note"}:
        raise ConfigError(f"{where}: scale must map models/items/families/note, got {raw!r}")
    return Scale(raw.get("models"), raw.get("items"), raw.get("families"), str(raw.get("note", "")))


def load_paper(path: str | Path | None = None) -> Paper:
    """``config/paper.yaml``, checked: every result needs an id, a claim, a section and a value."""
    path = Path(path) if path else config_dir() / "paper.yaml"
    raw = load_yaml(path)
    meta = raw.get("paper") if isinstance(raw, dict) else None
    entries = raw.get("results") if isinstance(raw, dict) else None
    if not isinstance(meta, dict) or not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a 'paper' mapping and a non-empty 'results' list")
    scale = _scale(meta.get("scale"), f"{path} paper")
    results = []
    for i, e in enumerate(entries):
        where = f"{path} results[{i}]"
        missing = [k for k in ("id", "claim", "section", "result", "value") if not isinstance(e, dict) or e.get(k) in (None, "")]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        if any(r.id == e["id"] for r in results):
            raise ConfigError(f"{where}: id {e['id']!r} is used twice")
        results.append(PaperResult(str(e["id"]), str(e["claim"]), str(e["section"]), str(e["result"]),
                                   str(e["value"]), _scale(e.get("scale"), where, scale), dict(e.get("numbers") or {})))
    return Paper(str(meta["title"]), tuple(meta["authors"]), str(meta["venue"]), str(meta.get("benchmark", "")),
                 scale, tuple(meta.get("families") or ()), tuple(results))


def verdict(paper: PaperResult, ours: Reproduction) -> str:
    """The rule of the module docstring."""
    if ours.holds is None:
        return f"{NOT_HERE} ({ours.why})" if ours.why else NOT_HERE
    if not ours.holds:
        return CONTRADICTED
    return SMALLER if ours.scale.smaller_than(paper.scale) else REPRODUCED


def compare(paper: Paper, reproductions: Mapping[str, Reproduction]) -> list[Row]:
    """One row per result of the paper, in the paper's order; every result must be answered."""
    unknown = sorted(set(reproductions) - {r.id for r in paper.results})
    if unknown:
        raise ConfigError(f"reproduction for unknown result(s) {', '.join(unknown)}")
    missing = [r.id for r in paper.results if r.id not in reproductions]
    if missing:
        raise ConfigError(f"no reproduction for result(s) {', '.join(missing)}")
    return [Row(r, reproductions[r.id], verdict(r, reproductions[r.id])) for r in paper.results]


VERDICT_CLASS = {REPRODUCED: "reproduced", SMALLER: "smaller", CONTRADICTED: "contradicted", NOT_HERE: "not-here"}


def verdict_class(text: str) -> str:
    return next(c for v, c in VERDICT_CLASS.items() if text.startswith(v))


def rows_html(rows: Sequence[Row]) -> str:
    """The table of the book page: one row per result, each cell escaped, the verdict tagged."""
    head = ["result", "paper", "paper's scale", "here", "scale here", "verdict"]
    body = []
    for row in rows:
        here = row.ours.value
        if row.ours.substitute:
            here += f"; substitute: {row.ours.substitute}"
        if row.ours.why and row.ours.holds is not None:
            here += f" ({row.ours.why})"
        cells = [html.escape(row.paper.result) + f"<br><small>{html.escape(row.paper.section)}</small>",
                 html.escape(row.paper.value), html.escape(row.paper.scale.text()), html.escape(here),
                 html.escape(row.ours.scale.text()),
                 f'<span class="verdict verdict-{verdict_class(row.verdict)}">{html.escape(row.verdict)}</span>']
        body.append(f'<tr data-result="{html.escape(row.paper.id)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    thead = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (f'<table class="table cube-paper-table"><thead><tr>{thead}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def verdict_counts(rows: Sequence[Row]) -> dict[str, int]:
    counts = {REPRODUCED: 0, SMALLER: 0, CONTRADICTED: 0, NOT_HERE: 0}
    for row in rows:
        counts[next(v for v in counts if row.verdict.startswith(v))] += 1
    return counts


# ---- the builders: one per result ---------------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def audit_matrix(paper: Paper, prediction: Mapping[str, Any], recomputed_identical: bool) -> Reproduction:
    """Table 2: the families of the paper audited here, the others with the reason they are not."""
    audited = [f for f in paper.families if f in prediction["sources"]]
    absent = [f for f in paper.families if f not in prediction["sources"]]
    extra = sorted(set(prediction["sources"]) - set(paper.families))
    cells = [c for c in prediction["cells"] if c["family"] in audited]
    n_sets = len(prediction["label_sets"])
    degen = sum(c["verdict"] == "DEGEN" for c in cells)
    value = (f"{len(audited)} of the paper's {len(paper.families)} families × {n_sets} label sets × "
             f"{len(prediction['contexts'])} answer contexts: {degen} of {len(cells)} cells DEGEN, "
             + ("recomputed identical to the frozen prediction" if recomputed_identical
                else "recomputed and DIFFERENT from the frozen prediction"))
    if absent:
        value += f"; not available offline: {', '.join(absent)}"
    if extra:
        value += f"; audited besides: {', '.join(extra)}"
    return Reproduction(value, Scale(families=len(audited)), recomputed_identical if audited else None,
                        "" if audited else "no tokenizer of the paper's families is available here")


def degenerate_cells(report: Any, n_models: int, n_items: int) -> Reproduction:
    """How many label-scoring cells the records reach are DEGEN (the count depends on scale)."""
    predicted = [c for c in report.cells if c.predicted is not None]
    degen = [c for c in predicted if c.predicted.groups]
    value = f"{len(degen)} of {len(predicted)} label-scoring cells (model × label set × context) in the records"
    return Reproduction(value, Scale(n_models, n_items), bool(degen) if predicted else None,
                        "" if predicted else "no label-scoring record falls in a predicted cell")


def predictions_confirmed(report: Any, n_models: int, n_items: int) -> Reproduction:
    if not report.predicted:
        return Reproduction("no predicted cell in the records", Scale(n_models, n_items), None,
                            "no record falls in a cell the frozen prediction covers")
    return Reproduction(f"{report.confirmed}/{report.predicted}", Scale(n_models, n_items),
                        report.confirmed == report.predicted)


def sequence_recovers(effects: Sequence[Any], n_models: int, n_items: int, alpha: float = ALPHA) -> Reproduction:
    """M1-seq against M1-strict on the same items of every flagged cell (exact McNemar per cell).

    Recovered: M1-seq significantly above. Reversed: significantly below (a contradiction).
    Otherwise the cell cannot tell (a model at chance has no accuracy to recover).
    """
    paired = [e for e in effects if e.acc_seq is not None]
    if not paired:
        return Reproduction("no flagged cell with paired records", Scale(n_models, n_items), None,
                            "no flagged cell has both M1-strict and M1-seq records")
    up = [e for e in paired if e.acc_seq > e.acc_strict and e.p_value < alpha]
    down = [e for e in paired if e.acc_seq < e.acc_strict and e.p_value < alpha]
    open_ = [e for e in paired if e not in up and e not in down]
    value = f"M1-seq significantly above M1-strict in {len(up)} of {len(paired)} flagged cells"
    if down:
        value += f", significantly below in {len(down)}"
    scale = Scale(len({e.model for e in paired}), n_items)
    if down:
        return Reproduction(value, scale, False, "; ".join(f"{e.model} / {e.label_set}" for e in down))
    if open_:
        which = ", ".join(f"{e.model} / {e.label_set} ({e.acc_strict:.3f} vs {e.acc_seq:.3f}, p = {e.p_value:.2g})"
                          for e in open_)
        return Reproduction(value, scale, None, f"no significant difference at {alpha:g} in {which}")
    return Reproduction(value, scale, True)


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
    """A ranking shift against its paired noise floor (``cube.analysis.rescore.ranking_shift``).

    Beyond the floor's 95th percentile: reproduced. A floor whose p95 is the largest footrule
    the models can reach leaves no footrule beyond it: no power at this number of models (not
    reproducible here). Within it, and the floor's p95 is at least the paper's footrule: no
    power to show the paper's shift either. Within it although the floor would have shown the
    paper's shift: contradicted.
    """
    if shift is None:
        return Reproduction("no ranking", Scale(), None, f"fewer than 2 models under both protocols ({name})")
    n = len(shift.models)
    value = (f"footrule {shift.observed:.3f} ({footrule_normalisation(n)}), "
             f"{shift.multiple_of_mean:.2f}× the paired floor's mean {shift.floor.mean:.3f}, "
             f"{shift.multiple_of_p95:.2f}× its p95 {shift.floor.p95:.3f} "
             f"(each protocol's own p95: {shift.floor_a.p95:.3f} and {shift.floor_b.p95:.3f})")
    scale = Scale(n, shift.n_items)
    paper_value = float(result.numbers["footrule"])
    if not footrule_has_power(shift.floor):
        return Reproduction(value, scale, None,
                            f"no power with {n} models: the floor's p95 {shift.floor.p95:.3f} is the largest "
                            f"footrule {n} models can reach")
    if shift.observed > shift.floor.p95:
        return Reproduction(value, scale, True)
    if shift.floor.p95 >= paper_value:
        return Reproduction(value, scale, None,
                            f"no power with {n} models: the floor's p95 {shift.floor.p95:.3f} is at least the "
                            f"paper's footrule {paper_value:g}")
    return Reproduction(value, scale, False, "within the noise floor, which the paper's shift would exceed")


def leakage_row(glued: Mapping[str, str] | None, n_models: int) -> Reproduction:
    """Claim 5's executed values (its notebook scans the records against the benchmark items)."""
    if glued is None:
        return Reproduction("claim 5 not executed", Scale(n_models), None, "claim 5's notebook has not been executed")
    records, hits = glued.get("leak_n_records", ""), glued.get("leak_hits", "")
    if not hits.strip().isdigit():
        return Reproduction(f"claim 5: {hits or 'no value'}", Scale(n_models), None,
                            "the leakage scan needs the benchmark items, not found here")
    return Reproduction(f"{records} records, {hits} leakage hits", Scale(n_models, note=f"{records} records"),
                        int(hits) == 0)


def timing_row(result: PaperResult, seconds: float, what: str, factor: float = TIME_FACTOR) -> Reproduction:
    paper_s = float(result.numbers["seconds"])
    return Reproduction(f"{seconds:.1f} s ({what})", result.scale, seconds <= factor * paper_s,
                        f"within {factor:g}× of the paper's {paper_s:g} s" if seconds <= factor * paper_s
                        else f"more than {factor:g}× the paper's {paper_s:g} s")


def whitespace_accuracy(results: Mapping[str, Mapping[str, Any]], n_items: int, alpha: float = ALPHA) -> Reproduction:
    """The largest per-model accuracy change between the two cue forms, with its McNemar p."""
    if not results:
        return Reproduction("no model under both forms", Scale(), None, "no model has records under both forms")
    model = max(results, key=lambda m: abs(results[m]["delta"]))
    o = results[model]
    value = f"up to {100 * o['delta']:+.1f} points ({model}, McNemar p = {o['p_value']:.2g})"
    scale = Scale(len(results), n_items)
    if o["p_value"] < alpha:
        return Reproduction(value, scale, True)
    return Reproduction(value, scale, None, f"the largest change is not significant at {alpha:g} on {n_items} items")


def whitespace_ece(result: PaperResult, ece: Mapping[tuple[str, str], float], context_a: str, context_b: str,
                   n_items: int) -> Reproduction:
    """The largest ECE ratio between the two forms; reproduced when at least half the paper's."""
    models = sorted({m for m, _ in ece if (m, context_a) in ece and (m, context_b) in ece})
    if not models:
        return Reproduction("no model under both forms", Scale(), None, "no model has records under both forms")
    ratio = {m: max(ece[(m, context_a)], ece[(m, context_b)]) / min(ece[(m, context_a)], ece[(m, context_b)])
             for m in models}
    model = max(ratio, key=ratio.get)
    paper_factor = float(result.numbers["factor"])
    value = (f"up to {ratio[model]:.1f}× ({model}: ECE {ece[(model, context_a)]:.3f} → "
             f"{ece[(model, context_b)]:.3f})")
    holds = ratio[model] >= paper_factor / 2
    return Reproduction(value, Scale(len(models), n_items), holds,
                        f"{'at least' if holds else 'below'} half the paper's {paper_factor:g}×")


def whitespace_rank(models: Sequence[str], accuracy_a: Sequence[float], accuracy_b: Sequence[float],
                    n_items: int) -> Reproduction:
    """Whether the top two models swap. Which models are on top is a fact about the model set,
    so a ranking that keeps its top two here does not contradict the paper's."""
    if len(models) < 2:
        return Reproduction("no ranking", Scale(len(models), n_items), None, "fewer than 2 models under both forms")
    top = lambda acc: sorted(range(len(models)), key=lambda i: (-acc[i], models[i]))  # noqa: E731
    a, b = top(accuracy_a), top(accuracy_b)
    swapped = a[0] == b[1] and a[1] == b[0]
    moved = sum(x != y for x, y in zip(a, b))
    value = (f"top two {'swap' if swapped else 'keep their places'} ({models[a[0]]} first); "
             f"{moved} of {len(models)} rank positions change")
    scale = Scale(len(models), n_items)
    return Reproduction(value, scale, True if swapped else None,
                        "" if swapped else f"the paper's top two models are not among these {len(models)}")


def exact_value(result: PaperResult, key: str, ours: Fraction, text: str) -> Reproduction:
    """A closed-form value: reproduced exactly or contradicted."""
    return Reproduction(text, result.scale, ours == Fraction(str(result.numbers[key])))


def baseline_range(result: PaperResult, percents: Mapping[str, Fraction], text: str) -> Reproduction:
    lo, hi = min(percents.values()), max(percents.values())
    holds = (lo, hi) == (Fraction(str(result.numbers["low"])), Fraction(str(result.numbers["high"])))
    return Reproduction(text, result.scale, holds)


def needs_material(result: PaperResult, what: str, computed: str | None) -> Reproduction:
    """A result that needs published material (an official key, a cohort histogram)."""
    if computed is None:
        return Reproduction(f"not computed: no {what} is archived", Scale(note=f"no {what}"), None,
                            f"needs the {what}, which is not archived here")
    return Reproduction(computed, result.scale, True)


def ceval_structure(result: PaperResult, taxonomy: Any, hard_group: str, has_items: bool) -> Reproduction:
    """C-Eval's structure as the shipped subject map (from the official release) states it."""
    subjects = len(taxonomy.categories)
    categories = sorted({c for cats in taxonomy.categories.values() for c in cats})
    hard = len(taxonomy.subjects_in(hard_group))
    value = f"{subjects} subjects in {len(categories)} categories ({', '.join(categories)}), Hard subset of {hard}"
    holds = subjects == int(result.numbers["subjects"]) and len(categories) == int(result.numbers["categories"]) and hard > 0
    return Reproduction(value, Scale(note="C-Eval subject map" + ("" if has_items else "; no C-Eval items scored here")),
                        holds, substitute="" if has_items else "CMMLU items stand in for C-Eval's")


def few_shot_dev(result: PaperResult, shots_models: int, shots_items: int, benchmark: str, shots: int) -> Reproduction:
    if not shots_items:
        return Reproduction(f"no {shots}-shot records", Scale(), None, f"no {shots}-shot run is archived")
    return Reproduction(f"{shots}-shot, the first {shots} dev items of each subject (cube.protocol.prompts.select_shots)",
                        Scale(shots_models, shots_items), shots == int(result.numbers["shots"]),
                        substitute=f"{benchmark.upper()}'s dev split stands in for C-Eval's" if benchmark != "ceval" else "")


def parse_failure_row(result: PaperResult, threshold: float, warnings: Sequence[str], n_cells: int) -> Reproduction:
    value = f"warning above {threshold:.0%}; it fires on {len(warnings)} of {n_cells} generation cells here"
    return Reproduction(value, Scale(), abs(threshold - float(result.numbers["threshold"])) < 1e-12)
