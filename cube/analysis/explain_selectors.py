"""Slices for ``cube explain``: ``STORE[:SELECT]``, parsed before anything is read.

The grammar (``SELECT`` is optional; without it the store must hold one cell)::

    SELECT := TERM ("," TERM)*      TERM := FIELD "=" VALUE
    FIELD  := model | scorer | label_set | context | shots | order | agg

The record fields narrow the store to one protocol cell: a selection that matches several is
refused, naming the fields that still vary and their values, so that two protocols are never
pooled by accident. A VALUE ending in ``*`` is a prefix, whose cells make one slice where they
hold one record per item (OpenCompass's CMMLU prompts name the subject, so its import has one
context per subject). ``agg`` (``micro``, the default, or ``macro``) is how that side's headline
score averages its items: pooled, or the mean of its subjects' accuracies; ``harness`` is the one
the side's harness reports its own number by (``ScoringProtocol.headline``: OpenCompass's summary
is the mean of subjects, lm-eval's, EvalScope's, inspect's and cube's the records' mean), so that
the gap is the one between the two numbers the harnesses print.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.slices import CELL_COLUMNS, one_per_item, select
from cube.errors import ConfigError
from cube.records.store import group_ids

SELECT_FIELDS = ("model", "scorer", "label_set", "context", "shots", "order", "agg")
AGGREGATIONS = ("micro", "macro")
HARNESS_AGGREGATION = "harness"  # resolved per side once its protocol is read


@dataclass(frozen=True)
class SliceSpec:
    """A parsed ``STORE[:SELECT]``: checked before any record is read."""

    text: str
    store: Path
    filters: dict[str, Any]
    aggregation: str  # micro | macro | harness (the side's harness's own, read with its protocol)


def parse_slice(text: str) -> SliceSpec:
    """Parse ``STORE[:SELECT]``; a bad term is one line naming it. The text after the last colon
    is a selection where it holds ``=`` (a colon in a folder's name stays part of the store)."""
    store, sep, select_text = text.rpartition(":")
    if not sep or (select_text and "=" not in select_text):
        if sep and Path(store).is_dir() and not Path(text).exists():  # STORE:scorer, = forgotten
            raise ConfigError(f"slice {text!r}: {select_text!r} is not FIELD=VALUE")
        store, select_text = text, ""
    if not store:
        raise ConfigError(f"slice {text!r}: no store before ':'")
    filters: dict[str, Any] = {}
    aggregation = "micro"
    seen: set[str] = set()
    for term in filter(None, select_text.split(",")):
        name, eq, value = term.partition("=")
        name = name.strip().replace("-", "_")
        value = value.strip()
        if not eq or not value:
            raise ConfigError(f"slice {text!r}: {term!r} is not FIELD=VALUE")
        if name not in SELECT_FIELDS:
            raise ConfigError(f"slice {text!r}: unknown field {name!r}; fields: {', '.join(SELECT_FIELDS)}")
        if name in seen:
            raise ConfigError(f"slice {text!r}: field {name!r} given twice")
        seen.add(name)
        if name == "agg":
            if value not in (*AGGREGATIONS, HARNESS_AGGREGATION):
                raise ConfigError(f"slice {text!r}: agg={value!r}; one of {', '.join(AGGREGATIONS)}, "
                                  f"{HARNESS_AGGREGATION}")
            aggregation = value
        elif name == "shots":
            if not (value.isascii() and value.isdigit()):  # "²".isdigit(), but int("²") fails
                raise ConfigError(f"slice {text!r}: shots={value!r} is not a whole number")
            filters[name] = int(value)
        else:
            filters[name] = value
    return SliceSpec(text, Path(store), filters, aggregation)


def _glob(value: Any) -> str | None:
    return value[:-1] if isinstance(value, str) and value.endswith("*") else None


def one_cell(table: pa.Table, spec: SliceSpec) -> pa.Table:
    """The records of the one cell ``spec`` selects; one line where a value matches nothing or
    the selection spans several cells (naming the field and values that still vary). A value
    ending in ``*`` is a prefix, and the cells it spans are one slice if they hold one record
    per item (OpenCompass names one context per CMMLU subject: its prompt holds the subject)."""
    exact = {k: v for k, v in spec.filters.items() if _glob(v) is None}
    for name, value in spec.filters.items():
        present = sorted({str(v) for v in pc.unique(table.column(name)).to_pylist()})
        prefix = _glob(value)
        found = any(p.startswith(prefix) for p in present) if prefix is not None else str(value) in present
        if not found:
            raise ConfigError(f"slice {spec.text!r}: no records have {name}={value}; {name} here: "
                              f"{', '.join(present[:12])}{' ...' if len(present) > 12 else ''}")
        if prefix is not None:
            table = table.filter(pc.starts_with(table.column(name), prefix))
    sliced = select(table, **exact)
    if sliced.num_rows == 0:
        raise ConfigError(f"slice {spec.text!r}: no records match {spec.filters}")
    _, keys = group_ids(sliced, CELL_COLUMNS)
    varying = [(n, sorted({str(k[i]) for k in keys})) for i, n in enumerate(CELL_COLUMNS)
               if len({k[i] for k in keys}) > 1]
    fixed = [(n, v) for n, v in varying if _glob(spec.filters.get(n)) is None]
    if fixed:
        hint = "; ".join(f"{n}={'|'.join(v[:6])}{'|...' if len(v) > 6 else ''}" for n, v in fixed)
        raise ConfigError(f"slice {spec.text!r} matches {len(keys)} cells; narrow it with {hint}")
    if varying:
        one_per_item(sliced, repr(spec.text))
    return sliced


def cell_of(table: pa.Table) -> dict[str, Any]:
    """The protocol cell of a one-cell slice; a field a prefix spans reads ``first ... (N values)``."""
    out = {}
    for name in CELL_COLUMNS:
        values = sorted(pc.unique(table.column(name)).to_pylist())
        out[name] = values[0] if len(values) == 1 else f"{values[0]} ... ({len(values)} values)"
    return out


def first_cell(table: pa.Table) -> dict[str, Any]:
    """The cell of the slice's first record: where a prefix spans several, the one described."""
    row = table.slice(0, 1).select(list(CELL_COLUMNS)).to_pylist()[0]
    return {n: row[n] for n in CELL_COLUMNS}
