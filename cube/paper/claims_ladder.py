"""The builders of the ladder study's results: the closed forms of guessing, the true/false gap,
and what needs the study's own material.

The study benchmarks the partial-credit ladder of Vietnam's 2025 THPT exams on their items; what
can be checked here are its closed-form values (exact fractions), and its true/false ladder on
CMMLU items recast as statements
(:class:`LadderGap`, measured by :mod:`cube.paper.evidence`). Each builder returns a
:class:`cube.paper.claims.Reproduction` for one result (``source: ladder`` in
``config/paper.yaml``). It stands apart from the other sources' builders: the study's results are
tested on their own evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from cube.paper.citations import PaperResult, Scale
from cube.paper.claims import ALPHA, Reproduction


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
