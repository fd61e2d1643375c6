"""Degenerate scores in a cell's records, whoever wrote them: the checks every import reports.

The degeneracy cube predicts from tokenizers (labels sharing a first token) shows up in other
harnesses' outputs too, and nobody flags it there: options that all score the same, constant or
all-zero log-likelihoods, decisions that are the first option as often as the scores tie (the
tie-break decided them), generations whose answers mostly cannot be read. Each is counted per
protocol cell of the records; the thresholds are the ones ``cube rescore`` warns at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PARSE_FAILURE_WARNING = 0.02  # a generation protocol above this rate gets a visible warning
# A cell whose decisions are mostly tie-breaks (a degenerate first-token cell: every label one token
# id) measures the tie-break rule, not the model: its accuracy gets a warning as loud as the above.
TIE_WARNING = 0.5


@dataclass(frozen=True)
class CellDegeneracy:
    """The degenerate-score counts of one protocol cell of one model's records."""

    model: str
    scorer: str
    label_set: str
    context: str
    shots: int
    n: int
    n_all_equal: int  # items whose options all score the same
    n_all_zero: int  # items whose every score is exactly 0
    n_tied: int  # decisions made by the tie-break
    n_first_option: int  # decisions of the first option
    n_parse_failed: int
    constant: bool  # every item of the cell has the very same scores (two items or more)

    @property
    def name(self) -> str:
        return f"{self.model} {self.scorer} {self.label_set} {self.context} {self.shots}-shot"

    @property
    def mostly_ties(self) -> bool:
        return self.n_tied > TIE_WARNING * self.n

    def findings(self) -> list[str]:
        """One line per degeneracy found; [] for a cell that shows none."""
        out = []
        share = lambda k: f"{k}/{self.n} ({k / self.n:.0%})"  # noqa: E731
        if self.mostly_ties:
            out.append(f"MOSTLY TIES: {share(self.n_tied)} decisions tied; its accuracy measures the tie-break "
                       "rule (the first tied option), not the model")
        if self.n_all_equal:
            out.append(f"every option scores the same on {share(self.n_all_equal)} items")
        if self.n_all_zero:
            out.append(f"all-zero scores on {share(self.n_all_zero)} items")
        if self.constant:
            out.append(f"one score vector for all {self.n} items (constant log-likelihoods)")
        if self.n_tied and self.n_first_option >= self.n_tied:
            out.append(f"the first option decided {share(self.n_first_option)} items, {share(self.n_tied)} of "
                       "them by the tie-break")
        if self.n_parse_failed > PARSE_FAILURE_WARNING * self.n:
            out.append(f"no answer read on {share(self.n_parse_failed)} items (over "
                       f"{PARSE_FAILURE_WARNING:.0%})")
        return out


def degenerate_cells(rows: Sequence[Mapping[str, Any]]) -> list[CellDegeneracy]:
    """The counts of every cell of ``rows`` (records as dicts of the schema's columns), in order of
    first appearance."""
    cells: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        key = (row["model"], row["scorer"], row["label_set"], row["context"], int(row["shots"]), row["order"])
        cells.setdefault(key, []).append(row)
    out = []
    for (model, scorer, label_set, context, shots, _), members in cells.items():
        scores = [np.asarray(r["scores"], dtype=np.float64) for r in members]
        scored = [s for s in scores if s.size and not np.isnan(s).any()]
        out.append(CellDegeneracy(
            model, scorer, label_set, context, shots, len(members),
            n_all_equal=sum(bool(np.all(s == s[0])) for s in scored if s.size > 1),
            n_all_zero=sum(bool(np.all(s == 0.0)) for s in scored),
            n_tied=sum(bool(r["tied"]) for r in members),
            n_first_option=sum(int(r["pred"]) == 0 for r in members),
            n_parse_failed=sum(bool(r["parse_failed"]) for r in members),
            constant=len(scored) == len(members) > 1 and len({s.tobytes() for s in scored}) == 1,
        ))
    return out


def degeneracy_report(cells: Sequence[CellDegeneracy]) -> list[str]:
    """The report's lines: one per finding, under its cell; "none" where no cell shows any."""
    lines = []
    for cell in cells:
        lines += [f"  {cell.name}: {finding}" for finding in cell.findings()]
    return ["degenerate scores:"] + (lines or ["  none"])
