"""The builders of the benchmark-practice guide's results: C-Eval's structure and items, the
few-shot, decoding and parse-failure settings, and chain-of-thought against answer-only.

Most of the guide's results are settings this repository adopts (``kind="setting"``: implemented
as the source states, never counted as a reproduction); one, chain-of-thought against
answer-only (:class:`CotComparison`, measured by :mod:`cube.paper.evidence`), is a test. Each
builder returns a :class:`cube.paper.claims.Reproduction` for one result (``source: practice`` in
``config/paper.yaml``). It stands apart from the other sources' builders: the guide's results are
checked on their own evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cube.paper.citations import PaperResult, Scale
from cube.paper.claims import ALPHA, Reproduction, precision_note


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
                    + precision_note(c.precision) for c in mine)
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
