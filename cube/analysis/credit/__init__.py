"""Non-additive exam scoring: what an exam would award, as opposed to what accuracy reports.

Benchmarks built from human exams keep the questions and drop the scoring rule. The 2025 THPT
exam (Vietnam, Decision 764/QĐ-BGDĐT) scores a Part II group of four true/false statements as a
whole, on a convex ladder: 3 of 4 right earns 0.50 where per-statement accuracy would pay 0.75.
This module holds the scoring rules as data and the few exact computations the paper needs:

* the gap between additive and scheme credit, per group and on average, from statement-level
  judgments, together with the distribution of correct counts (equal accuracy, unequal credit);
* the expected score of a uniform random guesser, in closed form over the binomial;
* the random-guess baseline of a whole exam, from an exam-structure file;
* the best constant answer string against an official key;
* the percentile rank of a score in a published cohort histogram.

All arithmetic is exact (``fractions.Fraction``): decimals in YAML and CSV files are read from
their written text, so ``0.10`` is exactly 1/10 and no total drifts by a float ulp.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
import unicodedata
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cube.config import config_dir
from cube.errors import ConfigError
from cube.files import read_text, read_yaml

HALF = Fraction(1, 2)

# ---------------------------------------------------------------------------------------------
# Exact numbers from files
# ---------------------------------------------------------------------------------------------


class _ExactLoader(yaml.SafeLoader):
    """A YAML loader that reads decimals as the Fraction of their written text (0.10 -> 1/10)."""


def _construct_exact_float(loader: yaml.SafeLoader, node: yaml.Node) -> Fraction:
    text = str(loader.construct_scalar(node)).replace("_", "")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a finite number", node.start_mark
        ) from None


_ExactLoader.add_constructor("tag:yaml.org,2002:float", _construct_exact_float)


def load_exact_yaml(path: str | Path) -> Any:
    """Read YAML with exact decimals; every failure becomes a one-line ConfigError."""
    return read_yaml(path, ConfigError, "YAML file", loader=_ExactLoader)


_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)\s*$")
MAX_EXPONENT = 400  # beyond any score, count or share; 1e309 (past a float's range) still reads


def to_fraction(value: Any, where: str) -> Fraction:
    """An exact number from an int, Fraction, decimal string or float (via its shortest text)."""
    if isinstance(value, bool) or value is None:
        raise ConfigError(f"{where}: {value!r} is not a number")
    if isinstance(value, (int, Fraction, Decimal)):
        return Fraction(value)
    text = repr(value) if isinstance(value, float) else str(value).strip()
    exponent = _EXPONENT.search(text)
    if len(text) > 100 or (exponent and abs(int(exponent.group(1))) > MAX_EXPONENT):
        # Fraction("1e999999999") would build a billion-digit integer; no score or share needs it
        raise ConfigError(f"{where}: {text[:40]!r} is out of range (at most 100 characters and an "
                          f"exponent of at most ±{MAX_EXPONENT})")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"{where}: {value!r} is not a number") from None


def _to_count(value: Any, where: str) -> int:
    """A non-negative integer (question counts, candidate counts)."""
    number = to_fraction(value, where)
    if number.denominator != 1:
        raise ConfigError(f"{where}: {value!r} is not a whole number")
    if number < 0:
        raise ConfigError(f"{where}: {value!r} is negative")
    return int(number)


def decimal_text(x: Fraction, places: int = 6) -> str:
    """A short decimal: exact when ``x`` terminates within ``places`` digits, else rounded."""
    with localcontext() as ctx:
        # Enough digits for the integer part as well: a fixed 60 made quantize raise
        # decimal.InvalidOperation for 1e309 (cube credit percentile HIST 1e309).
        ctx.prec = max(60, len(str(abs(x.numerator) // x.denominator)) + places + 2)
        value = Decimal(x.numerator) / Decimal(x.denominator)
        value = value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
    text = f"{value:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def exact_text(x: Fraction, places: int = 6) -> str:
    """``49/160 = 0.30625``; ``1/3 ≈ 0.333333``; integers alone."""
    if x.denominator == 1:
        return str(x.numerator)
    shown = decimal_text(x, places)
    sign = "=" if Fraction(shown) == x else "≈"
    return f"{x} {sign} {shown}"


def _read_csv(
    path: str | Path, required: Sequence[str]
) -> tuple[list[str], list[tuple[int, dict]]]:
    """Rows of a UTF-8 CSV (BOM allowed) with their line numbers; missing columns are an error."""
    path = Path(path)
    text = read_text(path, ConfigError, "CSV file", encoding="utf-8-sig")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [name.strip() for name in (reader.fieldnames or [])]
        reader.fieldnames = header
        missing = [name for name in required if name not in header]
        if missing:
            raise ConfigError(
                f"{path}: missing column(s) {', '.join(missing)}; expected {','.join(required)}"
            )
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as exc:
        raise ConfigError(f"{path}: malformed CSV: {exc}") from None
    for line, row in rows:
        if None in row:
            raise ConfigError(f"{path} line {line}: more fields than the header's {len(header)}")
        if None in row.values():  # DictReader pads a short row with None
            given = sum(value is not None for value in row.values())
            raise ConfigError(f"{path} line {line}: {given} fields, fewer than the header's {len(header)}")
    return header, rows


# ---------------------------------------------------------------------------------------------
# Scoring schemes as data
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreditScheme:
    """Credit for a group of k statements: ``points[j]`` is paid when j of them are right."""

    name: str
    points: tuple[Fraction, ...]

    def __post_init__(self) -> None:
        validate_points(self.name, self.points)

    @property
    def statements(self) -> int:
        return len(self.points) - 1

    @property
    def max_points(self) -> Fraction:
        return self.points[-1]

    def points_text(self) -> str:
        return ", ".join(decimal_text(p) for p in self.points)


def validate_points(name: str, points: Sequence[Fraction], statements: int | None = None) -> None:
    """Reject tables that cannot be a credit rule.

    A table must pay 0 for nothing right (otherwise a blank answer sheet earns credit), never pay
    less for more right answers, pay something for a perfect group, and have one entry per
    possible count 0..k.
    """
    if len(points) < 2:
        raise ConfigError(f"scheme {name!r} has {len(points)} entries; at least 2 (k >= 1) needed")
    if statements is not None and len(points) != statements + 1:
        raise ConfigError(
            f"scheme {name!r} has {len(points)} entries; {statements} statements need "
            f"{statements + 1} (one per count 0..{statements})"
        )
    if points[0] != 0:
        raise ConfigError(f"scheme {name!r} must start at 0, not {decimal_text(points[0])}")
    for j in range(1, len(points)):
        if points[j] < points[j - 1]:
            raise ConfigError(
                f"scheme {name!r} is not monotone: {decimal_text(points[j])} for {j} correct "
                f"is less than {decimal_text(points[j - 1])} for {j - 1}"
            )
    if points[-1] <= 0:
        raise ConfigError(f"scheme {name!r} pays nothing even for a perfect group")


def additive_scheme(statements: int, max_points: Fraction = Fraction(1)) -> CreditScheme:
    """What per-statement accuracy pays: ``max_points / k`` per right statement."""
    if statements < 1:
        raise ConfigError(f"an additive scheme needs at least 1 statement, not {statements}")
    return CreditScheme(
        f"additive{statements}",
        tuple(Fraction(max_points) * j / statements for j in range(statements + 1)),
    )


_SCHEME_KEYS = {"name", "description", "statements", "points"}


def scheme_from_data(data: Any, name: str, where: str) -> CreditScheme:
    """A scheme from its YAML form: a list of points, or a mapping with ``points`` (and optional
    ``name``, ``description``, ``statements`` as a check on the table's length)."""
    if isinstance(data, list):
        data = {"points": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a scheme must be a list of points or a mapping with 'points'")
    unknown = sorted(set(map(str, data)) - _SCHEME_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(_SCHEME_KEYS))}"
        )
    raw_points = data.get("points")
    if not isinstance(raw_points, list):
        raise ConfigError(f"{where}: 'points' must be a list, one entry per count 0..k")
    name = str(data.get("name") or name)
    points = tuple(to_fraction(p, f"{where} points[{i}]") for i, p in enumerate(raw_points))
    statements = data.get("statements")
    if statements is not None:
        statements = _to_count(statements, f"{where} statements")
    try:
        validate_points(name, points, statements)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return CreditScheme(name, points)


def load_named_schemes() -> dict[str, CreditScheme]:
    """The frozen schemes of ``config/credit_schemes.yaml`` (the THPT ladder, additive)."""
    path = config_dir() / "credit_schemes.yaml"
    raw = load_exact_yaml(path)
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{path} must map scheme names to point tables")
    return {str(k): scheme_from_data(v, str(k), f"{path} scheme {k!r}") for k, v in raw.items()}


def resolve_scheme(spec: Any, base_dir: str | Path | None = None) -> CreditScheme:
    """A scheme from a frozen name (``ladder``), a YAML file, or inline data (list or mapping).

    Relative file paths are tried against ``base_dir`` (the folder of the file naming the
    scheme) before the working directory.
    """
    if isinstance(spec, CreditScheme):
        return spec
    if not isinstance(spec, str):
        return scheme_from_data(spec, "inline", "inline scheme")
    named = load_named_schemes()
    if spec in named:
        return named[spec]
    candidates = [Path(spec)]
    if base_dir is not None and not Path(spec).is_absolute():
        candidates.insert(0, Path(base_dir) / spec)
    for path in candidates:
        if path.is_file():
            return scheme_from_data(load_exact_yaml(path), path.stem, str(path))
    if spec.endswith((".yaml", ".yml")):
        raise ConfigError(f"scheme file not found: {spec}")
    raise ConfigError(f"unknown scheme {spec!r}; known: {', '.join(named)}, or a YAML file")


# ---------------------------------------------------------------------------------------------
# Closed forms for a guesser
# ---------------------------------------------------------------------------------------------


def correct_count_distribution(statements: int, p_correct: Fraction = HALF) -> tuple[Fraction, ...]:
    """P(j of k statements right) when each is right independently with ``p_correct``.

    A uniform guesser on true/false statements has ``p_correct = 1/2`` whatever the key, so its
    count is Binomial(k, 1/2): the closed form every random baseline here rests on.
    """
    p = Fraction(p_correct)
    if not 0 <= p <= 1:
        raise ConfigError(f"probability {p} is outside [0, 1]")
    return tuple(
        comb(statements, j) * p**j * (1 - p) ** (statements - j) for j in range(statements + 1)
    )


def expected_score(scheme: CreditScheme, p_correct: Fraction = HALF) -> Fraction:
    """Expected group credit of a guesser who gets each statement right with ``p_correct``."""
    dist = correct_count_distribution(scheme.statements, p_correct)
    return sum((w * x for w, x in zip(dist, scheme.points)), Fraction(0))


def gap_table(scheme: CreditScheme) -> tuple[Fraction, ...]:
    """Additive minus scheme credit for each count 0..k, with the same maximum per group."""
    additive = additive_scheme(scheme.statements, scheme.max_points)
    return tuple(a - s for a, s in zip(additive.points, scheme.points))


# ---------------------------------------------------------------------------------------------
# The gap from statement-level judgments
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Exam structures and the whole-exam random baseline
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExamStructure:
    """The counts and weights of an exam's three parts (THPT 2025 layout)."""

    name: str
    part_i_questions: int
    part_i_points: Fraction
    part_i_options: int
    part_ii_groups: int
    part_ii_scheme: CreditScheme
    part_iii_questions: int
    part_iii_points: Fraction
    total_points: Fraction

    @property
    def max_points(self) -> Fraction:
        return (
            self.part_i_questions * self.part_i_points
            + self.part_ii_groups * self.part_ii_scheme.max_points
            + self.part_iii_questions * self.part_iii_points
        )


_EXAM_KEYS = {"name", "total_points", "part_I", "part_II", "part_III"}
_PART_KEYS = {
    "part_I": {"questions", "points", "options"},
    "part_II": {"groups", "statements", "scheme"},
    "part_III": {"questions", "points"},
}


def _part(raw: dict, key: str, where: str) -> dict:
    part = raw.get(key) or {}
    if not isinstance(part, dict):
        raise ConfigError(f"{where}: {key} must be a mapping")
    unknown = sorted(set(map(str, part)) - _PART_KEYS[key])
    if unknown:
        raise ConfigError(
            f"{where}: {key} has unknown key(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(_PART_KEYS[key]))}"
        )
    return part


def resolve_exam_path(spec: str | Path) -> Path:
    """A structure file by path, or by bare name from ``config/exams/`` (``thpt2025_math``)."""
    path = Path(spec)
    if path.is_file() or path.suffix:
        return path
    return config_dir() / "exams" / f"{spec}.yaml"


def load_exam(spec: str | Path) -> ExamStructure:
    """Read and check an exam-structure file: its parts must add up to its ``total_points``."""
    path = resolve_exam_path(spec)
    raw = load_exact_yaml(path)
    where = str(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: an exam structure must be a mapping")
    unknown = sorted(set(map(str, raw)) - _EXAM_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_EXAM_KEYS))}"
        )
    p1, p2, p3 = (_part(raw, key, where) for key in ("part_I", "part_II", "part_III"))
    n1 = _to_count(p1.get("questions", 0), f"{where} part_I.questions")
    w1 = to_fraction(p1.get("points", 0), f"{where} part_I.points")
    options = _to_count(p1.get("options", 4), f"{where} part_I.options")
    if options < 2:
        raise ConfigError(f"{where} part_I.options: {options}; a question needs at least 2")
    groups = _to_count(p2.get("groups", 0), f"{where} part_II.groups")
    scheme = resolve_scheme(p2.get("scheme", "ladder"), base_dir=path.parent)
    if "statements" in p2:
        k = _to_count(p2["statements"], f"{where} part_II.statements")
        if k != scheme.statements:
            raise ConfigError(
                f"{where} part_II: statements {k} but scheme {scheme.name!r} scores groups of "
                f"{scheme.statements}"
            )
    n3 = _to_count(p3.get("questions", 0), f"{where} part_III.questions")
    w3 = to_fraction(p3.get("points", 0), f"{where} part_III.points")
    for value, label in ((w1, "part_I.points"), (w3, "part_III.points")):
        if value < 0:
            raise ConfigError(f"{where} {label}: {decimal_text(value)} is negative")
    if "total_points" not in raw:
        raise ConfigError(f"{where}: missing total_points")
    total = to_fraction(raw["total_points"], f"{where} total_points")
    exam = ExamStructure(
        str(raw.get("name") or path.stem), n1, w1, options, groups, scheme, n3, w3, total
    )
    if exam.max_points != total:
        raise ConfigError(
            f"{where}: the parts add up to {decimal_text(exam.max_points)} points, "
            f"not total_points {decimal_text(total)}"
        )
    return exam


@dataclass(frozen=True)
class PartScores:
    part_i: Fraction
    part_ii: Fraction
    part_iii: Fraction

    @property
    def total(self) -> Fraction:
        return self.part_i + self.part_ii + self.part_iii


def random_guess_baseline(exam: ExamStructure) -> PartScores:
    """Expected points of a uniform random guesser: 1/options per Part I question, the
    binomial closed form per Part II group, and nothing for Part III (no options to guess)."""
    return PartScores(
        part_i=exam.part_i_questions * exam.part_i_points / exam.part_i_options,
        part_ii=exam.part_ii_groups * expected_score(exam.part_ii_scheme),
        part_iii=Fraction(0),
    )


# ---------------------------------------------------------------------------------------------
# The best fixed answer string against an official key
# ---------------------------------------------------------------------------------------------

KEY_COLUMNS = ("part", "question", "statement", "key")


@dataclass(frozen=True)
class AnswerKey:
    """An official key: one letter per Part I question, k truth values per Part II group."""

    part_i_questions: tuple[str, ...]
    part_i: tuple[str, ...]
    part_ii_questions: tuple[str, ...]
    part_ii: np.ndarray  # bool, shape (groups, k), statements in a, b, c, ... order
    options: tuple[str, ...]


def read_answer_key(
    path: str | Path, statements: int = 4, options: Sequence[str] = ("A", "B", "C", "D")
) -> AnswerKey:
    """Read ``part,question,statement,key``.

    Each Part II group must list statements a.. exactly once: a group with a missing statement
    would be scored on the wrong rung of the ladder without anyone noticing.
    """
    path = Path(path)
    _, rows = _read_csv(path, KEY_COLUMNS)
    letters = [chr(ord("a") + i) for i in range(statements)]
    options = tuple(options)
    part_i: dict[str, tuple[int, str]] = {}
    part_ii: dict[str, dict[str, tuple[int, bool]]] = {}
    for line, row in rows:
        where = f"{path} line {line}"
        part = row["part"].strip().upper()
        question = row["question"].strip()
        statement = row["statement"].strip().lower()
        value = row["key"].strip()
        if not question:
            raise ConfigError(f"{where}: empty question")
        if part == "I":
            if statement:
                raise ConfigError(
                    f"{where}: Part I question {question!r} has statement {statement!r}"
                )
            if value.upper() not in options:
                raise ConfigError(
                    f"{where}: Part I key {value!r} is not one of {'/'.join(options)}"
                )
            if question in part_i:
                raise ConfigError(
                    f"{where}: Part I question {question!r} repeats line {part_i[question][0]}"
                )
            part_i[question] = (line, value.upper())
        elif part == "II":
            if statement not in letters:
                raise ConfigError(
                    f"{where}: Part II statement {row['statement'].strip()!r} is not one of "
                    f"{'/'.join(letters)}"
                )
            group = part_ii.setdefault(question, {})
            if statement in group:
                raise ConfigError(
                    f"{where}: Part II question {question!r} statement {statement!r} repeats "
                    f"line {group[statement][0]}"
                )
            group[statement] = (line, parse_truth(value, f"{where} column key"))
        else:
            raise ConfigError(f"{where}: unknown part {row['part'].strip()!r}; expected I or II")
    for question, group in part_ii.items():
        if len(group) != statements:
            first = min(entry[0] for entry in group.values())
            missing = ", ".join(s for s in letters if s not in group)
            raise ConfigError(
                f"{path} line {first}: Part II question {question!r} has {len(group)} "
                f"statement(s), needs exactly {statements} (missing {missing})"
            )
    if not part_i and not part_ii:
        raise ConfigError(f"{path}: the key has no rows")
    truth = np.array([[part_ii[q][s][1] for s in letters] for q in part_ii], dtype=bool).reshape(
        len(part_ii), statements
    )
    return AnswerKey(
        tuple(part_i), tuple(v for _, v in part_i.values()), tuple(part_ii), truth, options
    )


def truth_pattern_text(pattern: Sequence[bool]) -> str:
    """A true/false pattern in the exam's own letters: Đ (đúng, true), S (sai, false)."""
    return "".join("Đ" if t else "S" for t in pattern)


@dataclass(frozen=True)
class FixedAnswer:
    """The best constant response and what it earns on one key."""

    letter: str | None
    part_i_correct: int
    part_i_score: Fraction
    pattern: tuple[bool, ...] | None
    part_ii_distribution: np.ndarray
    part_ii_score: Fraction
    max_points: Fraction

    @property
    def total(self) -> Fraction:
        return self.part_i_score + self.part_ii_score

    @property
    def pattern_text(self) -> str:
        return truth_pattern_text(self.pattern) if self.pattern is not None else ""


def pattern_scores(
    truth: np.ndarray, scheme: CreditScheme
) -> tuple[np.ndarray, np.ndarray, list[Fraction]]:
    """Every constant true/false pattern (2^k, Đ-first order) with its count distribution over
    the key's groups, shape (2^k, k+1), and its exact total credit."""
    k = scheme.statements
    patterns = np.array(list(itertools.product((True, False), repeat=k)), dtype=bool)
    matches = (patterns[:, None, :] == truth[None, :, :]).sum(axis=2)  # (2^k, groups)
    dist = np.stack([np.bincount(m, minlength=k + 1) for m in matches])
    scores = [sum((int(c) * p for c, p in zip(row, scheme.points)), Fraction(0)) for row in dist]
    return patterns, dist, scores


def best_fixed_answers(
    key: AnswerKey, scheme: CreditScheme, part_i_points: Fraction = Fraction(1, 4)
) -> FixedAnswer:
    """The constant answer string that earns most without reading a question.

    One letter for every Part I question and one true/false pattern for every Part II group:
    whatever it earns above the random baseline is paid for by the key's imbalance alone. Ties
    go to the first letter and to the first pattern in Đ-before-S order.
    """
    if key.part_ii.shape[0] and key.part_ii.shape[1] != scheme.statements:
        raise ConfigError(
            f"scheme {scheme.name!r} scores groups of {scheme.statements} statements, "
            f"the key's groups have {key.part_ii.shape[1]}"
        )
    letter, n_right = None, 0
    if key.part_i:
        answers = np.array(key.part_i)
        per_letter = [int((answers == option).sum()) for option in key.options]
        best = int(np.argmax(per_letter))
        letter, n_right = key.options[best], per_letter[best]
    pattern, dist, part_ii = None, np.zeros(scheme.statements + 1, dtype=np.int64), Fraction(0)
    if key.part_ii.shape[0]:
        patterns, dists, scores = pattern_scores(key.part_ii, scheme)
        best = max(range(len(scores)), key=scores.__getitem__)
        pattern, dist, part_ii = tuple(bool(t) for t in patterns[best]), dists[best], scores[best]
    part_i_points = Fraction(part_i_points)
    return FixedAnswer(
        letter=letter,
        part_i_correct=n_right,
        part_i_score=n_right * part_i_points,
        pattern=pattern,
        part_ii_distribution=dist,
        part_ii_score=part_ii,
        max_points=len(key.part_i) * part_i_points + key.part_ii.shape[0] * scheme.max_points,
    )


# ---------------------------------------------------------------------------------------------
# Cohort placement
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreHistogram:
    """A published score distribution: distinct scores ascending, candidates at each."""

    scores: tuple[Fraction, ...]
    counts: np.ndarray

    @property
    def total(self) -> int:
        return int(self.counts.sum())


MAX_CANDIDATES = np.iinfo(np.int64).max  # counts are summed in int64


def histogram_from_pairs(
    scores: Sequence[Any],
    counts: Sequence[Any],
    source: str = "histogram",
    lines: Sequence[int] | None = None,
) -> ScoreHistogram:
    """Validate (score, count) pairs: numeric scores, each once; whole non-negative counts."""
    if len(scores) != len(counts):
        raise ConfigError(f"{source}: {len(scores)} scores but {len(counts)} counts")
    seen: dict[Fraction, int] = {}
    pairs = []
    for i, (s, c) in enumerate(zip(scores, counts)):
        where = f"{source} line {lines[i]}" if lines is not None else f"{source} row {i + 1}"
        score = to_fraction(s, f"{where} column score")
        count = _to_count(c, f"{where} column count")
        if count > MAX_CANDIDATES:
            raise ConfigError(f"{where} column count: {c!r} is more candidates than a histogram can hold "
                              f"(at most {MAX_CANDIDATES})")
        if score in seen:
            raise ConfigError(f"{where}: score {s!r} already listed ({seen[score]})")
        seen[score] = lines[i] if lines is not None else i + 1
        pairs.append((score, count))
    pairs.sort()
    if sum(c for _, c in pairs) > MAX_CANDIDATES:
        raise ConfigError(f"{source}: the counts total more candidates than a histogram can hold "
                          f"(at most {MAX_CANDIDATES})")
    hist = ScoreHistogram(
        tuple(s for s, _ in pairs), np.array([c for _, c in pairs], dtype=np.int64)
    )
    if hist.total == 0:
        raise ConfigError(f"{source}: the histogram counts no candidates")
    return hist


def read_histogram(path: str | Path) -> ScoreHistogram:
    """A ``score,count`` CSV; errors name the file and line."""
    _, rows = _read_csv(path, ("score", "count"))
    return histogram_from_pairs(
        [row["score"] for _, row in rows],
        [row["count"] for _, row in rows],
        source=str(path),
        lines=[line for line, _ in rows],
    )


def percentile_rank(hist: ScoreHistogram, score: Fraction) -> Fraction:
    """Percentile rank by the mid-point convention.

    ``PR(s) = 100 * (count below s + 0.5 * count at s) / total``. Candidates tied at ``s`` are
    counted half below and half above, so a score's rank does not depend on whether ties are
    broken up or down, and the mean rank over the cohort is exactly 50. A score between listed
    scores has nobody at it; a score above every listed one ranks 100, below every one 0.
    """
    score = Fraction(score)
    i = bisect_left(hist.scores, score)
    below = int(hist.counts[:i].sum())
    at = int(hist.counts[i]) if i < len(hist.scores) and hist.scores[i] == score else 0
    return 100 * (below + Fraction(at, 2)) / hist.total


def score_for_percentile(hist: ScoreHistogram, percentile: Fraction) -> Fraction | None:
    """The lowest listed score whose mid-point percentile rank is at least ``percentile``.

    None when no listed score gets there (the top score's rank is below 100 whenever anyone
    holds it): then only a score above every listed one, ranked 100, would.
    """
    percentile = Fraction(percentile)
    if not 0 <= percentile <= 100:
        raise ConfigError(f"percentile {decimal_text(percentile)} is outside [0, 100]")
    below = np.concatenate(([0], np.cumsum(hist.counts)[:-1]))
    for score, b, at in zip(hist.scores, below, hist.counts):
        if 100 * (int(b) + Fraction(int(at), 2)) / hist.total >= percentile:
            return score
    return None
