"""Exam structures: the whole-exam random baseline, and the best fixed answer string against an official key."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from cube.config import config_dir
from cube.errors import ConfigError
from cube.analysis.credit.numbers import (
    _read_csv,
    _to_count,
    decimal_text,
    load_exact_yaml,
    refuse_unknown_keys,
    to_fraction,
)
from cube.analysis.credit.schemes import CreditScheme, expected_score, resolve_scheme
from cube.analysis.credit.judgments import parse_truth


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
    refuse_unknown_keys(part, _PART_KEYS[key], f"{where}: {key} has ")
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
    refuse_unknown_keys(raw, _EXAM_KEYS, f"{where}: ")
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
