"""Exact numbers from files: YAML and CSV decimals read from their written text, and shown back."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from cube.errors import ConfigError
from cube.files import read_text, read_yaml

HALF = Fraction(1, 2)


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


def refuse_unknown_keys(mapping: dict, known: set[str] | frozenset[str], prefix: str) -> None:
    """A misspelt key in a scheme or exam file is an error, not a silently ignored setting.

    ``prefix`` starts the message: the file, and the part of it where that is not the top level.
    """
    unknown = sorted(set(map(str, mapping)) - set(known))
    if unknown:
        raise ConfigError(f"{prefix}unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
