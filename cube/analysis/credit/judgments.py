"""The gap between additive and scheme credit, from statement-level judgments (files or records)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from cube.errors import ConfigError
from cube.analysis.credit.numbers import _read_csv
from cube.analysis.credit.schemes import CreditScheme, additive_scheme


@dataclass(frozen=True)
class GroupCounts:
    """Correct statements per group, groups in order of first appearance."""

    group_ids: np.ndarray
    correct: np.ndarray
    statements: int


def _bool_array(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == bool:
        return arr
    if np.issubdtype(arr.dtype, np.integer) and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    raise ConfigError(f"{name} must be booleans (True/False or 1/0), got dtype {arr.dtype}")


def count_correct(
    group_ids: Any,
    gold: Any,
    predicted: Any,
    statements: int,
    statement_ids: Any = None,
    lines: Any = None,
    source: str = "judgments",
) -> GroupCounts:
    """Count right statements per group from one row per (group, statement).

    Every group must hold exactly ``statements`` rows (and distinct statement ids when given):
    a missing or doubled statement would silently move a group along the ladder. ``lines``
    (row numbers in ``source``) only serve to name the offending row in errors.
    """
    ids = np.asarray(group_ids)
    if ids.dtype == object:
        ids = ids.astype(str)  # np.unique cannot order mixed ids
    gold_arr = _bool_array(gold, "gold")
    pred_arr = _bool_array(predicted, "predicted")
    if not (ids.ndim == gold_arr.ndim == pred_arr.ndim == 1) or not (
        len(ids) == len(gold_arr) == len(pred_arr)
    ):
        raise ConfigError(
            f"{source}: group_ids, gold and predicted must be 1-d and equally long "
            f"({ids.shape}, {gold_arr.shape}, {pred_arr.shape})"
        )
    if len(ids) == 0:
        raise ConfigError(f"{source}: no judgments")

    def line_of(row: int) -> str:
        return f" line {int(np.asarray(lines)[row])}" if lines is not None else ""

    uniq, first, inverse, sizes = np.unique(
        ids, return_index=True, return_inverse=True, return_counts=True
    )
    bad = np.flatnonzero(sizes != statements)
    if len(bad):
        g = bad[np.argmin(first[bad])]
        raise ConfigError(
            f"{source}{line_of(first[g])}: group {str(uniq[g])!r} has {sizes[g]} statement(s); "
            f"every group needs exactly {statements}"
        )
    if statement_ids is not None:
        stmts = np.asarray(statement_ids).astype(str)
        names, codes = np.unique(stmts, return_inverse=True)
        pairs = inverse.ravel().astype(np.int64) * len(names) + codes.ravel()
        _, first_of_pair = np.unique(pairs, return_index=True)
        if len(first_of_pair) < len(pairs):
            repeated = np.ones(len(pairs), dtype=bool)
            repeated[first_of_pair] = False
            row = int(np.flatnonzero(repeated)[0])
            raise ConfigError(
                f"{source}{line_of(row)}: group {str(ids[row])!r} lists statement "
                f"{str(stmts[row])!r} twice"
            )
    correct = np.bincount(inverse.ravel(), weights=(gold_arr == pred_arr), minlength=len(uniq))
    appearance = np.argsort(first, kind="stable")
    return GroupCounts(uniq[appearance], correct[appearance].astype(np.int64), statements)


def count_correct_rows(
    rows: Iterable[tuple[Any, Any, bool, bool]], statements: int, source: str = "judgments"
) -> GroupCounts:
    """``count_correct`` over (group_id, statement, gold, predicted) rows, e.g. harness records."""
    table = list(rows)
    if not table:
        raise ConfigError(f"{source}: no judgments")
    groups, stmts, gold, predicted = zip(*table)
    return count_correct(
        np.array(groups, dtype=object).astype(str),
        np.array(gold),
        np.array(predicted),
        statements,
        statement_ids=np.array(stmts, dtype=object).astype(str),
        source=source,
    )


def judgments_from_records(table: Any, model: str | None = None) -> dict[str, GroupCounts]:
    """Groups of four statement judgements per model from harness ``TF`` records.

    Each TF record is one item recast as four statements, exactly one true (the gold option);
    ``scores[i] > 0`` means the model judged statement ``i`` true (log p(对) > log p(错)).
    """
    rows = [r for r in table.to_pylist() if r["scorer"] == "TF" and (model is None or r["model"] == model)]
    if not rows:
        raise ConfigError("records hold no TF (true/false judgement) rows; run `cube run --scorers TF`")
    by_model: dict[str, list] = {}
    for r in rows:
        for i, margin in enumerate(r["scores"]):
            by_model.setdefault(r["model"], []).append((r["uid"], i, i == r["gold"], margin > 0))
    return {m: count_correct_rows(js, len(rows[0]["scores"]), source=f"TF records of {m}")
            for m, js in by_model.items()}


@dataclass(frozen=True)
class CreditGap:
    """Scheme vs additive credit for a set of groups; per-group arrays hold Fractions."""

    scheme: CreditScheme
    group_ids: np.ndarray
    correct: np.ndarray
    scheme_points: np.ndarray
    additive_points: np.ndarray
    gap: np.ndarray
    count_distribution: np.ndarray
    statement_accuracy: Fraction
    mean_scheme: Fraction
    mean_additive: Fraction
    mean_gap: Fraction


def credit_gap(counts: GroupCounts, scheme: CreditScheme) -> CreditGap:
    """The gap (additive − scheme) per group and on average, with the count distribution.

    The mean alone hides the point: two models with the same statement accuracy earn different
    official scores when their right answers are spread differently over groups, and the count
    distribution is what shows it. Means are computed exactly from that distribution.
    """
    if counts.statements != scheme.statements:
        raise ConfigError(
            f"scheme {scheme.name!r} scores groups of {scheme.statements} statements, "
            f"the judgments have {counts.statements}"
        )
    k = scheme.statements
    scheme_table = np.array(scheme.points, dtype=object)
    additive_table = np.array(additive_scheme(k, scheme.max_points).points, dtype=object)
    dist = np.bincount(counts.correct, minlength=k + 1)
    n = int(dist.sum())

    def mean_of(table: np.ndarray) -> Fraction:
        return Fraction(sum(int(c) * x for c, x in zip(dist, table)), 1) / n

    return CreditGap(
        scheme=scheme,
        group_ids=counts.group_ids,
        correct=counts.correct,
        scheme_points=scheme_table[counts.correct],
        additive_points=additive_table[counts.correct],
        gap=(additive_table - scheme_table)[counts.correct],
        count_distribution=dist,
        statement_accuracy=Fraction(int(counts.correct.sum()), n * k),
        mean_scheme=mean_of(scheme_table),
        mean_additive=mean_of(additive_table),
        mean_gap=mean_of(additive_table - scheme_table),
    )


_TRUE = {"đ", "t", "true", "1"}
_FALSE = {"s", "f", "false", "0"}


def parse_truth(value: str, where: str) -> bool:
    """Đ (đúng) / S (sai), T / F, true / false, 1 / 0, in any case."""
    text = unicodedata.normalize("NFC", str(value).strip()).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{where}: unknown statement value {value!r}; expected Đ/S or T/F")


JUDGMENT_COLUMNS = ("group_id", "statement", "gold", "predicted")


@dataclass(frozen=True)
class Judgments:
    """Statement-level judgments of one model, as read from a CSV or harness records."""

    group_ids: np.ndarray
    statement_ids: np.ndarray
    gold: np.ndarray
    predicted: np.ndarray
    lines: np.ndarray

    def counts(self, statements: int, source: str = "judgments") -> GroupCounts:
        return count_correct(
            self.group_ids,
            self.gold,
            self.predicted,
            statements,
            statement_ids=self.statement_ids,
            lines=self.lines,
            source=source,
        )


def read_judgments(path: str | Path) -> dict[str, Judgments]:
    """Judgments per model from a CSV ``group_id,statement,gold,predicted[,model]``.

    Without a ``model`` column the whole file is one model, named after the file.
    """
    path = Path(path)
    header, rows = _read_csv(path, JUDGMENT_COLUMNS)
    has_model = "model" in header
    columns: dict[str, list[list]] = {}
    for line, row in rows:
        model = row["model"].strip() if has_model else path.stem
        if has_model and not model:
            raise ConfigError(f"{path} line {line}: empty model")
        group = row["group_id"].strip()
        if not group:
            raise ConfigError(f"{path} line {line}: empty group_id")
        entry = columns.setdefault(model, [[], [], [], [], []])
        entry[0].append(group)
        entry[1].append(row["statement"].strip())
        entry[2].append(parse_truth(row["gold"], f"{path} line {line} column gold"))
        entry[3].append(parse_truth(row["predicted"], f"{path} line {line} column predicted"))
        entry[4].append(line)
    if not columns:
        raise ConfigError(f"{path}: no judgment rows")
    return {
        model: Judgments(
            np.array(g, dtype=str),
            np.array(s, dtype=str),
            np.array(t, dtype=bool),
            np.array(p, dtype=bool),
            np.array(ln, dtype=np.int64),
        )
        for model, (g, s, t, p, ln) in columns.items()
    }
