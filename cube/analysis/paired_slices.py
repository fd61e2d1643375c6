"""Two slices on the same items: aligned by uid under one precision, and the per-subject regression table.

A paired comparison (``cube rescore --versus``, the report's comparisons, ``cube explain``) is only
fair on the items both slices answered, scored in one precision: a paired test's discordant items
are the ones a precision's rounding can flip. ``pair`` aligns two one-cell slices and says which
precision it compares (or refuses two); ``regression_table`` reads the pair subject by subject with
exact McNemar tests and their intervals, Holm-adjusted over the subjects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.paired_tests import mcnemar_exact, mcnemar_interval
from cube.analysis.slices import one_per_item
from cube.analysis.stats import holm_adjust
from cube.errors import ConfigError, PrecisionMismatch


NOT_RECORDED = "not recorded"  # a precision of its own: records that do not say theirs


def slice_precision(table: pa.Table) -> str | None:
    """The one precision a slice's records were scored in; None where no record says (an import
    that did not record it). Several in one slice are named, joined by '+', records that say
    none among them as 'not recorded' (``bfloat16+not recorded``)."""
    if "dtype" not in table.column_names:
        return None
    values = pc.unique(table.column("dtype")).to_pylist()
    known = sorted(v for v in values if v is not None)
    if known and None in values:
        known.append(NOT_RECORDED)
    return "+".join(known) if known else None


MIXED_PRECISION = "mixed: "  # how check_one_precision opens a pair of two precisions compared anyway


def check_one_precision(table_a: pa.Table, table_b: pa.Table, allow_mixed_precision: bool = False) -> str:
    """What precision a paired comparison of the two slices compares, as a reader is told it:
    ``"bfloat16"``; ``"not recorded"``; ``"A bfloat16, B not recorded"`` where one side records
    none (it cannot be checked, and the pair says so); or, only with ``allow_mixed_precision``,
    ``"mixed: A bfloat16, B float32"``. Two slices whose recorded precisions differ are refused
    otherwise (:class:`PrecisionMismatch`), naming both and how to proceed: a paired test's
    discordant items are the ones a precision's rounding can flip."""
    a, b = slice_precision(table_a), slice_precision(table_b)
    if a is None and b is None:
        return NOT_RECORDED
    if a is None or b is None:  # one side cannot be checked: the pair says which, never one precision
        return f"A {a or NOT_RECORDED}, B {b or NOT_RECORDED}"
    if a == b and "+" not in a:
        return a
    if not allow_mixed_precision:
        raise PrecisionMismatch(
            f"slice A was scored in {a} and slice B in {b}: a paired comparison needs one precision; "
            "re-run one side with the other's --dtype, or pass allow_mixed_precision "
            "(--allow-mixed-precision) to compare them anyway, which the result then says")
    return f"{MIXED_PRECISION}A {a}, B {b}"


@dataclass(frozen=True)
class Paired:
    """Outcomes of two slices on their common items, aligned by uid."""

    uid: list[str]
    subject: np.ndarray  # object array of subject names
    correct_a: np.ndarray
    correct_b: np.ndarray
    only_a: int  # items slice A has and B lacks
    only_b: int
    precision: str = "not recorded"  # check_one_precision: what the pair compares


def pair(table_a: pa.Table, table_b: pa.Table, allow_mixed_precision: bool = False) -> Paired:
    """Align two one-cell slices by uid; items only one slice has are counted, then dropped.
    Slices of two recorded precisions are refused unless ``allow_mixed_precision``
    (``check_one_precision``); ``Paired.precision`` says what was compared."""
    one_per_item(table_a, "A")
    one_per_item(table_b, "B")
    precision = check_one_precision(table_a, table_b, allow_mixed_precision)
    uid_a = table_a.column("uid").combine_chunks()
    where_b = pc.index_in(uid_a, value_set=table_b.column("uid").combine_chunks())
    found = where_b.is_valid().to_numpy(zero_copy_only=False)
    if not found.any():
        raise ConfigError("slices A and B share no items (uid)")
    index_b = where_b.to_numpy(zero_copy_only=False)[found].astype(np.int64)
    correct_a = table_a.column("correct").to_numpy()[found]
    correct_b = table_b.column("correct").to_numpy()[index_b]
    subject = np.asarray(table_a.column("subject").to_pylist(), dtype=object)[found]
    uids = uid_a.filter(pa.array(found)).to_pylist()
    return Paired(uids, subject, correct_a, correct_b, int((~found).sum()),
                  table_b.num_rows - int(found.sum()), precision)


@dataclass(frozen=True)
class Regression:
    """Per-subject change from slice A to slice B, worst first, and the pooled line."""

    rows: pa.Table  # subject, n, acc_a, acc_b, delta, delta_lo, delta_hi, a/b_only_right, p_value, p_holm
    overall: dict[str, Any]
    only_a: int
    only_b: int
    precision: str = "not recorded"  # what the pair compares (``check_one_precision``)


def regression_table(table_a: pa.Table, table_b: pa.Table, mid_p: bool = False,
                     allow_mixed_precision: bool = False) -> Regression:
    """Per-subject accuracy deltas ``B - A`` with exact McNemar p-values, worst first.

    Sorted by delta ascending (largest drop on top), then by p-value, then by subject, so the
    subjects that got worse, and most surely so, are what a reader sees first. Each delta gets
    the exact interval of the same McNemar test (``cube.analysis.paired_tests.mcnemar_interval``: it
    excludes 0 exactly when p < 0.05), which stays valid with the 5-21 items a sampled subject
    has, where a bootstrap of a handful of pairs does not; and ``p_holm``, the p-value
    Holm-adjusted over the subjects: with 67 subjects about 3 unadjusted p-values fall below
    0.05 by chance alone, so only ``p_holm`` supports saying that a given subject changed.
    Slices of two precisions are refused unless ``allow_mixed_precision`` (``pair``).
    """
    paired = pair(table_a, table_b, allow_mixed_precision)
    subjects, inverse = np.unique(paired.subject.astype(str), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(subjects) + 1))
    rows: dict[str, list] = {k: [] for k in (
        "subject", "n", "acc_a", "acc_b", "delta", "delta_lo", "delta_hi", "a_only_right",
        "b_only_right", "p_value")}
    for s, name in enumerate(subjects):  # one McNemar per subject
        members = order[bounds[s]:bounds[s + 1]]
        a, b = paired.correct_a[members], paired.correct_b[members]
        test = mcnemar_exact(a, b, mid_p=mid_p)
        interval = mcnemar_interval(b, a)
        rows["subject"].append(str(name))
        rows["n"].append(int(members.size))
        rows["acc_a"].append(float(a.mean()))
        rows["acc_b"].append(float(b.mean()))
        rows["delta"].append(interval.delta)
        rows["delta_lo"].append(interval.lo)
        rows["delta_hi"].append(interval.hi)
        rows["a_only_right"].append(test.b)
        rows["b_only_right"].append(test.c)
        rows["p_value"].append(test.p_value)
    rows["p_holm"] = [float(x) for x in holm_adjust(rows["p_value"])]
    ranking = sorted(
        range(len(subjects)),
        key=lambda i: (rows["delta"][i], rows["p_value"][i], rows["subject"][i]),
    )
    table = pa.table({k: [v[i] for i in ranking] for k, v in rows.items()})
    test = mcnemar_exact(paired.correct_a, paired.correct_b, mid_p=mid_p)
    interval = mcnemar_interval(paired.correct_b, paired.correct_a)
    overall = {
        "n": len(paired.uid),
        "acc_a": float(paired.correct_a.mean()),
        "acc_b": float(paired.correct_b.mean()),
        "delta": interval.delta,
        "delta_lo": interval.lo,
        "delta_hi": interval.hi,
        "a_only_right": test.b,
        "b_only_right": test.c,
        "p_value": test.p_value,
    }
    return Regression(table, overall, paired.only_a, paired.only_b, paired.precision)
