"""The builders of the whitespace study's results: accuracy, calibration (ECE) and the ranking
under the separate-space and the merged form of the label.

Each builder takes the per-model effects :mod:`cube.paper.evidence` measures
(:class:`WhitespaceEffect`, :class:`CalibrationRatio`) and returns a
:class:`cube.paper.claims.Reproduction` for one result of the study (``source: whitespace`` in
``config/paper.yaml``), with the test, its multiplicity correction and its power said in the
value. It stands apart from the other sources' builders: the study's results are tested on their
own evidence, the records under both forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cube.analysis.footrule import average_ranks, footrule
from cube.paper.citations import PaperResult, Scale
from cube.paper.claims import ALPHA, Reproduction, precision_note


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
                          + precision_note(e.precision) for e in effects)
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
                    f"{accuracy(r)})" + precision_note(r.precision) for r in ratios)
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
