"""Scoring schemes as data, and what they pay a uniform random guesser, in closed form."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import Any

from cube.config import config_dir
from cube.errors import ConfigError
from cube.analysis.credit.numbers import (
    HALF,
    _to_count,
    decimal_text,
    load_exact_yaml,
    refuse_unknown_keys,
    to_fraction,
)


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
    refuse_unknown_keys(data, _SCHEME_KEYS, f"{where}: ")
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
