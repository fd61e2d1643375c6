"""The sensitivity section: each protocol dimension against the reference cell, and the summary.

Every dimension's levels are compared with the reference level on one model, paired on the
items, with ``regression_table`` (exact McNemar and its exact interval, one precision per pair
or refused), Holm's correction over every comparison of the report, the power of each test and
its minimum detectable effect (``compare``). The summary sentence quotes the reference scorer's
range over its cells and the change that moves the score most (``summary_sentence``).

Why a module of its own: these comparisons are the report's family of tests; the index page's
sentence and the flips page read them, the other sections do not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from cube.analysis.paired_slices import regression_table
from cube.analysis.stats import holm_adjust
from cube.analysis.paired_tests import mcnemar_power
from cube.errors import CubeError, PrecisionMismatch
from cube.records.schema import JUDGEMENT_SCORERS, record_names
from cube.report.cells import matches
from cube.report.model import (
    DIMENSION_NAMES,
    DIMENSIONS,
    CellScore,
    Comparison,
    RefusedComparison,
    ScorerRange,
)

JUDGED = set(record_names(JUDGEMENT_SCORERS))
POWER_TARGET = 0.80
ALPHA = 0.05
EXACT_POWER_MAX_N = 2000  # above this, the MDE's normal approximation alone (the exact sum is O(n^2))


def minimum_detectable_effect(n: int, discordant_rate: float, alpha: float = ALPHA,
                              power: float = POWER_TARGET) -> float | None:
    """The smallest |accuracy difference| McNemar's test detects with ``power`` at this n and
    discordant rate, from the normal approximation (Connor 1987:
    ``n = (z_a sqrt(psi) + z_b sqrt(psi - d^2))^2 / d^2``) solved for d by bisection; None where
    no difference up to the discordant rate itself is detectable."""
    from scipy.stats import norm

    if n < 1 or not 0 < discordant_rate <= 1:
        return None
    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(power)

    def needed(d: float) -> float:
        return (za * math.sqrt(discordant_rate) + zb * math.sqrt(max(discordant_rate - d * d, 0.0))) ** 2 / (d * d)

    lo, hi = 1e-9, discordant_rate
    if needed(hi) > n:
        return None
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if needed(mid) > n else (lo, mid)
    return hi


def _power(n: int, a_only: int, b_only: int, delta: float) -> float | None:
    rate = (a_only + b_only) / n if n else 0.0
    if rate == 0 or delta == 0 or n > EXACT_POWER_MAX_N:
        return None
    return mcnemar_power(n, rate, min(abs(delta), rate), ALPHA)


def _level_cell(cells: Sequence[CellScore], reference: Mapping[str, str], dim: str, level: str
                ) -> tuple[CellScore | None, tuple[str, ...]]:
    """The model's cell at ``level`` of ``dim`` with every other field at the reference; for the
    scorer dimension a scorer whose records fix other fields (cloze: label set ``cloze``) is
    matched on the fields it has, and the fields it differs in are named."""
    candidates = [c for c in cells if str(c.value(dim)) == level]
    exact = [c for c in candidates if matches(c, reference, skip=dim)]
    if exact:
        return exact[0], ()
    if dim != "scorer" or not candidates:
        return None, ()
    relaxed = []
    for other in DIMENSIONS:
        if other == dim:
            continue
        keep = [c for c in candidates if str(c.value(other)) == reference[other]]
        if keep:
            candidates = keep
        else:
            relaxed.append(other)
    return (candidates[0], tuple(relaxed)) if len(candidates) == 1 else (None, ())


def compare(cells_of: Mapping[str, list[CellScore]], slices: Callable[[CellScore], pa.Table],
            reference: Mapping[str, str]
            ) -> tuple[list[Comparison], list[RefusedComparison]]:
    """Every dimension's levels against the reference level, per model, paired on the items; p
    Holm-adjusted over all of them (the report's whole family of tests)."""
    raw, refused = [], []
    for model, cells in cells_of.items():
        ref = next((c for c in cells if matches(c, reference)), None)
        if ref is None:
            continue
        for dim in DIMENSIONS:
            # a judgement scorer (TF) answers another question of the item: not a scoring of the same choice
            levels = sorted({str(c.value(dim)) for c in cells} - {reference[dim]} - (JUDGED if dim == "scorer" else set()),
                            key=str)
            for level in levels:
                other, relaxed = _level_cell(cells, reference, dim, level)
                if other is None:
                    continue
                try:
                    reg = regression_table(slices(ref), slices(other))
                except PrecisionMismatch as exc:
                    refused.append(RefusedComparison(model, dim, level, f"refused: {exc}".split(";")[0]))
                    continue
                except CubeError as exc:
                    refused.append(RefusedComparison(model, dim, level, str(exc)))
                    continue
                o = reg.overall
                raw.append((model, dim, level, ref, other, o, reg.precision, relaxed))
    p_holm = holm_adjust([o["p_value"] for *_, o, _, _ in raw]) if raw else []
    out = []
    for (model, dim, level, ref, other, o, precision, relaxed), adjusted in zip(raw, p_holm):
        n, b, c = int(o["n"]), int(o["a_only_right"]), int(o["b_only_right"])
        out.append(Comparison(
            model, dim, reference[dim], level, ref.name, other.name, n, o["acc_a"], o["acc_b"], o["delta"],
            o["delta_lo"], o["delta_hi"], b, c, float(o["p_value"]), float(adjusted),
            _power(n, b, c, o["delta"]), minimum_detectable_effect(n, (b + c) / n if n else 0.0), precision, relaxed))
    return out, refused


def scorer_ranges(cells_of: Mapping[str, list[CellScore]], reference: Mapping[str, str]) -> list[ScorerRange]:
    out = []
    for model, cells in cells_of.items():
        for scorer in sorted({c.scorer for c in cells}):
            mine = [c for c in cells if c.scorer == scorer]
            ref = next((c for c in mine if matches(c, reference, skip="scorer")), None)
            low = min(mine, key=lambda c: (c.accuracy, c.name))
            high = max(mine, key=lambda c: (c.accuracy, c.name))
            out.append(ScorerRange(model, scorer, len(mine), ref, low, high,
                                   float(np.mean([c.chance for c in mine]))))
    return out


def summary_sentence(cells_of: Mapping[str, list[CellScore]], ranges: Sequence[ScorerRange],
                     comparisons: Sequence[Comparison], reference: Mapping[str, str]) -> list[str]:
    """One sentence a reader can quote, per model: the reference scorer's range over its cells,
    and the change that moves the score most among those significant after Holm (over every
    comparison of the report), or that none is, with the largest difference seen."""
    parts = []
    for model, cells in cells_of.items():
        mine = [r for r in ranges if r.model == model]
        rng = next((r for r in mine if r.scorer == reference["scorer"]), None) or max(mine, key=lambda r: r.n_cells)
        text = (f"{model}: across {rng.n_cells} cells, {rng.scorer} ranges "
                f"{rng.low.accuracy:.2f}–{rng.high.accuracy:.2f} (chance {rng.chance:.2f})")
        moved = [c for c in comparisons if c.model == model]
        significant = [c for c in moved if c.p_holm < ALPHA]
        if significant:
            top = max(significant, key=lambda c: (abs(c.delta), -c.p_holm))
            text += (f"; the {DIMENSION_NAMES[top.dimension]} moves it most: {top.level} against {top.reference_level}, "
                     f"{top.delta * 100:+.1f} pp (Holm p = {top.p_holm:.2g}, {len(comparisons)} comparisons)")
        elif moved:
            top = max(moved, key=lambda c: (abs(c.delta), -c.p_holm))
            text += (f"; no protocol change is significant after Holm over {len(comparisons)} comparisons (largest: "
                     f"{DIMENSION_NAMES[top.dimension]} {top.level}, {top.delta * 100:+.1f} pp on {top.n} items)")
        else:
            text += "; no protocol dimension varies on the same items, so none can be compared"
        parts.append(text + ".")
    return parts


__all__ = ["ALPHA", "compare", "minimum_detectable_effect", "scorer_ranges", "summary_sentence"]
