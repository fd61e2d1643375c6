"""What the verdict builders (``cube.paper.claims_*``) read, computed from the records.

The builders judge; this module measures: per model the whitespace effect with the interval of
the exact test, the ECE ratio with a bootstrap interval, the ladder gap of the true/false groups,
chain-of-thought against answer-only with Holm-adjusted p-values. The notebooks call these, so
the paper page and each claim's page show the same numbers computed once, by one function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.credit import credit_gap, judgments_from_records
from cube.analysis.paired_slices import check_one_precision, slice_precision
from cube.analysis.slices import one_per_item, select
from cube.analysis.calibration import expected_calibration_error
from cube.analysis.stats import holm_adjust
from cube.analysis.paired_tests import mcnemar_exact, mcnemar_interval, mcnemar_power
from cube.paper.claims_ladder import LadderGap
from cube.paper.claims_practice import CotComparison
from cube.paper.claims_whitespace import CalibrationRatio, WhitespaceEffect
from cube.records.store import list_matrix


def _models(table: pa.Table) -> list[str]:
    return sorted(pc.unique(table.column("model")).to_pylist()) if table.num_rows else []


CELL = ("model", "scorer", "label_set", "context", "shots", "order")


def _rerun_of(side: pa.Table, other: pa.Table, reruns: pa.Table | None) -> pa.Table | None:
    """``side``'s cell re-scored in ``other``'s precision, from ``reruns`` (a store of one-precision
    reruns, ``data/reruns``), covering every item of ``other``; None where there is none."""
    if reruns is None or not reruns.num_rows or not side.num_rows:
        return None
    want = slice_precision(other)
    if want is None or "+" in want:
        return None
    first = side.slice(0, 1).to_pylist()[0]
    rows = select(reruns, **{k: first[k] for k in CELL})
    rows = rows.filter(pc.equal(rows.column("dtype"), want)) if rows.num_rows else rows
    if not rows.num_rows or not set(other.column("uid").to_pylist()) <= set(rows.column("uid").to_pylist()):
        return None
    return rows


def _aligned(a: pa.Table, b: pa.Table, allow_mixed_precision: bool = False,
             reruns: pa.Table | None = None) -> tuple[pa.Table, pa.Table, str]:
    """The rows of two one-cell slices on their common items, in one uid order: ``pair``'s
    alignment, for the columns beyond ``correct`` (probs, gold, parse failures) it does not carry,
    and the precision they compare. Each slice must hold one record per item, and both one
    precision unless ``allow_mixed_precision``, as ``pair`` checks. Where the two differ and
    ``reruns`` holds one side's cell re-scored in the other's precision on the other's items, that
    rerun takes its side's place (the issue-33 reruns: the cheaper side of each mixed pair), and
    the precision says so."""
    one_per_item(a, "A")
    one_per_item(b, "B")
    if slice_precision(a) != slice_precision(b):
        rerun_a, rerun_b = _rerun_of(a, b, reruns), _rerun_of(b, a, reruns)
        if rerun_a is not None:
            a = rerun_a
        elif rerun_b is not None:
            b = rerun_b
        if rerun_a is not None or rerun_b is not None:
            one_per_item(a, "A")
            one_per_item(b, "B")
            precision = f"{check_one_precision(a, b)} (side {'A' if rerun_a is not None else 'B'} re-run)"
            common = sorted(set(a.column("uid").to_pylist()) & set(b.column("uid").to_pylist()))
            value_set = pa.array(common)
            take = lambda t: t.filter(pc.is_in(t.column("uid"), value_set=value_set)).sort_by("uid")  # noqa: E731
            return take(a), take(b), precision
    precision = check_one_precision(a, b, allow_mixed_precision)
    common = sorted(set(a.column("uid").to_pylist()) & set(b.column("uid").to_pylist()))
    value_set = pa.array(common)

    def take(t: pa.Table) -> pa.Table:
        t = t.filter(pc.is_in(t.column("uid"), value_set=value_set))
        return t.take(pc.sort_indices(t, sort_keys=[("uid", "ascending")]))

    return take(a), take(b), precision


def one_precision_pair(a: pa.Table, b: pa.Table, reruns: pa.Table | None = None) -> tuple[pa.Table, pa.Table, str]:
    """Two one-cell slices on their common items in one precision, for a page that shows their
    pair: where the two were scored in two precisions and ``reruns`` holds one side re-scored in
    the other's precision, that rerun takes its side's place; where none does, the pair is
    refused (:class:`cube.errors.PrecisionMismatch`), never compared anyway. Issue 47: a page
    printed the 1.5B's bf16 side against its fp32 side while the paper page paired the rerun."""
    return _aligned(a, b, allow_mixed_precision=False, reruns=reruns)


def reference_accuracy(table: pa.Table, protocol: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Model -> (correct, n) under one protocol: the accuracy a flagged cell is judged against."""
    rows = select(table, **protocol)
    out = {}
    for model in _models(rows):
        correct = select(rows, model=model).column("correct").to_numpy()
        out[model] = (int(correct.sum()), int(correct.size))
    return out


def whitespace_effects(separate: pa.Table, merged: pa.Table, points: float, alpha: float = 0.05,
                       allow_mixed_precision: bool = False, reruns: pa.Table | None = None) -> list[WhitespaceEffect]:
    """Per model, merged − separate on the same items: exact McNemar, its consistent interval,
    Holm over the models, and the test's power against a gain of ``points`` accuracy points at
    the discordance observed (at least ``points``, the least a gain that size needs). A model
    whose two forms were scored in two precisions is refused unless ``allow_mixed_precision``;
    each effect says what precision it compares."""
    models = sorted(set(_models(separate)) & set(_models(merged)))
    raw = []
    for model in models:
        a, b, precision = _aligned(select(merged, model=model), select(separate, model=model), allow_mixed_precision,
                                   reruns)
        ca, cb = a.column("correct").to_numpy(), b.column("correct").to_numpy()
        interval = mcnemar_interval(ca, cb)
        discordant = max((interval.b + interval.c) / interval.n, points / 100)
        power = mcnemar_power(interval.n, min(1.0, discordant), points / 100, alpha)
        raw.append((model, interval, float(cb.mean()), float(ca.mean()), power, precision))
    holm = holm_adjust([r[1].p_value for r in raw])
    return [WhitespaceEffect(model, i.n, acc_sep, acc_merged, i.delta, i.lo, i.hi, i.p_value, float(ph), power,
                             precision, int(i.b + i.c))
            for (model, i, acc_sep, acc_merged, power, precision), ph in zip(raw, holm)]


def _option_distribution(table: pa.Table) -> np.ndarray:
    """``probs`` renormalised in float64 (float32 storage rounding), once per slice."""
    probs = list_matrix(table, "probs").astype(np.float64)
    return probs / probs.sum(axis=1, keepdims=True)


def calibration_ratios(separate: pa.Table, merged: pa.Table, n_bins: int = 10, B: int = 2000,
                       seed: int = 0, allow_mixed_precision: bool = False,
                       reruns: pa.Table | None = None) -> list[CalibrationRatio]:
    """Per model ECE(separate) / ECE(merged) on the same items, with a 95 % percentile interval
    from resampling the items (both forms on the same draw); above 1: the merged form calibrates
    better, the source's direction."""
    out = []
    rng = np.random.default_rng(seed)
    for model in sorted(set(_models(separate)) & set(_models(merged))):
        a, b, precision = _aligned(select(separate, model=model), select(merged, model=model), allow_mixed_precision,
                                   reruns)
        pa_, pb = _option_distribution(a), _option_distribution(b)
        ga, gb = a.column("gold").to_numpy().astype(np.int64), b.column("gold").to_numpy().astype(np.int64)
        ece_a, ece_b = expected_calibration_error(pa_, ga, n_bins), expected_calibration_error(pb, gb, n_bins)
        n = ga.size
        ratios = np.empty(B)
        for r in range(B):
            idx = rng.integers(0, n, n)
            eb = expected_calibration_error(pb[idx], gb[idx], n_bins)
            ratios[r] = expected_calibration_error(pa_[idx], ga[idx], n_bins) / eb if eb > 0 else np.inf
        lo, hi = np.quantile(ratios, [0.025, 0.975])
        out.append(CalibrationRatio(model, ece_a, ece_b, ece_a / ece_b if ece_b > 0 else float("inf"),
                                    float(lo), float(hi), n_bins, B, precision,
                                    float(b.column("correct").to_numpy().mean()), float(pb.max(axis=1).mean())))
    return out


def ladder_gaps(table: pa.Table, scheme: Any) -> list[LadderGap]:
    """Per model the mean additive-minus-ladder gap of its true/false (TF) groups."""
    tf = select(table, scorer="TF")
    if not tf.num_rows:
        return []
    out = []
    for model, counts in sorted(judgments_from_records(tf).items()):
        gap = credit_gap(counts, scheme)
        scores = list_matrix(select(tf, model=model), "scores")
        out.append(LadderGap(model, int(len(counts.correct)), float(gap.statement_accuracy), float(gap.mean_gap),
                             float((scores > 0).mean())))
    return out


def cot_comparisons(table: pa.Table, extractors: Sequence[str] = ("M6-strict", "M6-lenient"),
                    answer_only_context: str = "zh_cue", cot_context: str = "cot",
                    label_set: str = "L1_halfwidth", allow_mixed_precision: bool = False,
                    reruns: pa.Table | None = None) -> list[CotComparison]:
    """Chain-of-thought against answer-only generation, per model and extractor, on the same
    items, with the exact McNemar p Holm-adjusted over every comparison returned; two
    precisions refused unless ``allow_mixed_precision`` (each comparison says which it compares)."""
    raw = []
    for extractor in extractors:
        ao = select(table, scorer=extractor, label_set=label_set, context=answer_only_context, shots=0, order="original")
        cot = select(table, scorer=extractor, label_set=label_set, context=cot_context, shots=0, order="original")
        for model in sorted(set(_models(ao)) & set(_models(cot))):
            a, b, precision = _aligned(select(ao, model=model), select(cot, model=model), allow_mixed_precision, reruns)
            ca, cb = a.column("correct").to_numpy(), b.column("correct").to_numpy()
            test = mcnemar_exact(cb, ca)
            fail = float(b.column("parse_failed").to_numpy().mean())
            # schema-2 records say which generations hit the length limit; older ones do not
            truncation = "finish_reason" in b.column_names and b.column("finish_reason").null_count < b.num_rows
            raw.append((model, extractor, int(ca.size), float(ca.mean()), float(cb.mean()), test.p_value, fail, precision,
                        int(test.b + test.c), truncation))
    holm = holm_adjust([r[5] for r in raw])
    return [CotComparison(m, e, n, acc_a, acc_c, p, float(ph), fail, precision, d, truncation)
            for (m, e, n, acc_a, acc_c, p, fail, precision, d, truncation), ph in zip(raw, holm)]


@dataclass(frozen=True)
class ShotsComparison:
    """One model's 5-shot against its own 0-shot accuracy on the 5-shot run's items."""

    model: str
    n: int
    acc_zero: float
    acc_few: float
    zero_only_right: int  # McNemar's discordant counts
    few_only_right: int
    p_value: float  # exact McNemar
    precision: str


def shots_comparisons(table: pa.Table, shots: int = 5, protocol: Mapping[str, Any] | None = None,
                      allow_mixed_precision: bool = False, reruns: pa.Table | None = None) -> list[ShotsComparison]:
    """Per model, ``shots``-shot against 0-shot under one label protocol (default M1-seq, ABCD,
    the Chinese cue) on the items of the few-shot run (a subset drawn with ``--within``): what
    the practice guide's recommendation of 5 shots is judged beside. Two precisions are refused
    unless a one-precision rerun stands in or ``allow_mixed_precision`` (``_aligned``)."""
    base = dict(protocol or {"scorer": "M1-seq", "label_set": "L1_halfwidth", "context": "zh_cue", "order": "original"})
    zero, few = select(table, shots=0, **base), select(table, shots=shots, **base)
    out = []
    for model in sorted(set(_models(zero)) & set(_models(few))):
        f = select(few, model=model)
        z = select(zero, model=model)
        z = z.filter(pc.is_in(z.column("uid"), value_set=f.column("uid").combine_chunks()))
        a, b, precision = _aligned(z, f, allow_mixed_precision, reruns)
        ca, cb = a.column("correct").to_numpy(), b.column("correct").to_numpy()
        test = mcnemar_exact(ca, cb)
        out.append(ShotsComparison(model, int(ca.size), float(ca.mean()), float(cb.mean()), int(test.b), int(test.c),
                                   float(test.p_value), precision))
    return out


def same_item_reference(table: pa.Table, cells: Sequence[Any], protocol: Mapping[str, Any]) -> list[Any]:
    """Each recovery cell (``claims_paper.RecoveryCell``) with the model's own accuracy under
    ``protocol`` (M1-seq on ABCD: labels that do not collide) on the flagged cell's own items,
    and the exact McNemar p of M1-seq there against it: whether sequence scoring recovers all of
    the model's accuracy or only part (issue 33), which the accuracy over the whole sample cannot say."""
    from dataclasses import replace

    out = []
    for cell in cells:
        flagged = select(table, **{**protocol, "model": cell.model, "label_set": cell.label_set})
        reference = select(table, **{**protocol, "model": cell.model})
        if not flagged.num_rows or not reference.num_rows:
            out.append(cell)
            continue
        a, b, _ = _aligned(flagged, reference)
        ca, cb = a.column("correct").to_numpy(), b.column("correct").to_numpy()
        out.append(replace(cell, same_items_reference=float(cb.mean()), same_items_n=int(cb.size),
                           same_items_p=float(mcnemar_exact(ca, cb).p_value)))
    return out
