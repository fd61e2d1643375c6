"""The flagged cells: what first-token scoring loses where the audit predicted a collision.

The frozen audit flags (model family, label set, context) cells as DEGEN: there first-token
scoring (M1-strict) compares equal numbers and the tie-break answers. The full-sequence scorer
(M1-seq) scores the same prompts, so on the same items the two differ only in how they score
the labels. Pooling the flagged cells item by item gives the paper's headline comparison: one
McNemar test and one paired interval for the accuracy M1-seq recovers, rather than a cell-by-cell
list of small samples (``cube.analysis.confirm.tiebreak_effects`` gives that list).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.confirm import CELL, SEQUENCE, STRICT, ConfirmationReport
from cube.analysis.paired_tests import (ClusteredDifference, ClusteredMcNemarResult, McNemarResult,
                                        clustered_bootstrap_ci, clustered_mcnemar, mcnemar_exact,
                                        paired_bootstrap_ci)
from cube.errors import ConfigError
from cube.records.store import group_ids, list_matrix

Cell = tuple[str, str, str]  # (model, label set, context)


def flagged_cells(report: ConfirmationReport) -> list[Cell]:
    """Observed cells that the frozen prediction calls DEGEN (all labels or some of them tie)."""
    return sorted(
        c.observed.key for c in report.cells if c.predicted is not None and c.predicted.degenerate
    )


def select_cells(table: pa.Table, cells: Iterable[Cell]) -> pa.Table:
    """Records whose (model, label set, context) is one of ``cells`` (any scorer, shots, order)."""
    wanted = ["\x1f".join(cell) for cell in cells]
    key = pc.binary_join_element_wise(*(table.column(name) for name in CELL), "\x1f")
    return table.filter(pc.is_in(key, value_set=pa.array(wanted, type=pa.string())))


@dataclass(frozen=True)
class ScorerGap:
    """Scorer B against scorer A on the same items of a set of cells."""

    scorer_a: str
    scorer_b: str
    n_cells: int  # cells with at least one paired item
    n: int  # paired items: records of A with a record of B for the same cell and item
    acc_a: float
    acc_b: float
    gain: float  # acc_b - acc_a
    gain_lo: float  # 95% paired-bootstrap interval of the gain
    gain_hi: float
    mcnemar: McNemarResult  # b: items only A gets right; c: items only B gets right
    # the pairs repeat items (one item in several cells and models): the same comparison with
    # items as clusters, an item-stratified McNemar and an item-clustered bootstrap of the gain
    n_items: int
    clustered_mcnemar: ClusteredMcNemarResult
    clustered_gain: ClusteredDifference  # acc_b - acc_a, items resampled with all their pairs


def scorer_gap(
    table: pa.Table,
    cells: Sequence[Cell],
    scorer_a: str = STRICT,
    scorer_b: str = SEQUENCE,
    B: int = 2000,
    seed: int = 0,
) -> ScorerGap:
    """Pool ``cells`` item by item and compare scorer B with scorer A (default M1-seq vs M1-strict).

    A record of A is paired with B's record of the same (model, label set, context, shots,
    order, uid); records without a partner are left out, so both accuracies are on the same
    items. Raises ConfigError when no item is paired. The pooled McNemar test and interval
    count every pair as independent, but the cells share items; the clustered ones (by uid)
    are the inference that holds when they do, reported beside them.
    """
    sub = select_cells(table, cells)
    sub = sub.filter(pc.is_in(sub.column("scorer"), value_set=pa.array([scorer_a, scorer_b])))
    if sub.num_rows == 0:
        raise ConfigError(f"no {scorer_a} or {scorer_b} records in the {len(cells)} cell(s) given")
    ids, _ = group_ids(sub, (*CELL, "shots", "order", "uid"), with_keys=False)
    is_a = pc.equal(sub.column("scorer"), scorer_a).to_numpy(zero_copy_only=False)
    correct = sub.column("correct").to_numpy()
    b_row = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    b_row[ids[~is_a]] = np.flatnonzero(~is_a)
    a_rows = np.flatnonzero(is_a)
    partner = b_row[ids[a_rows]]
    found = partner >= 0
    if not found.any():
        raise ConfigError(f"no item has both a {scorer_a} and a {scorer_b} record in these cells")
    a, b = correct[a_rows[found]], correct[partner[found]]
    cell_ids, _ = group_ids(sub, CELL, with_keys=False)
    gain, lo, hi = paired_bootstrap_ci(b, a, B=B, seed=seed)
    items = sub.column("uid").to_numpy(zero_copy_only=False)[a_rows[found]]
    return ScorerGap(
        scorer_a, scorer_b, int(np.unique(cell_ids[a_rows[found]]).size), int(a.size),
        float(a.mean()), float(b.mean()), gain, lo, hi, mcnemar_exact(a, b),
        int(np.unique(items).size), clustered_mcnemar(a, b, items),
        clustered_bootstrap_ci(b, a, items, B=B, seed=seed),
    )


@dataclass(frozen=True)
class TieBreak:
    """What the tie-break did in one cell's M1-strict records."""

    n: int
    n_top_shared: int  # the top score is shared: the tie-break picks the answer
    n_decided: int  # ... and gold is among the tied options: the tie-break decides right/wrong
    n_decided_right: int  # ... and it picked gold
    n_first_of_top: int  # records whose prediction is the first option with the top score


def tiebreak_outcomes(table: pa.Table, cell: Cell, scorer: str = STRICT) -> TieBreak:
    """Count, from the stored scores, where the tie-break answered and whether it was right.

    The harness breaks ties by the first option (numpy's argmax); ``n_first_of_top == n``
    checks that the records were scored that way. Of the items it decides, it is right only
    when gold is the first of the tied options, so in a two-label tie it wins about half.
    """
    rows = select_cells(table, [cell])
    rows = rows.filter(pc.equal(rows.column("scorer"), scorer))
    if rows.num_rows == 0:
        raise ConfigError(f"no {scorer} records in cell {' / '.join(cell)}")
    scores = list_matrix(rows, "scores")
    at_top = scores == scores.max(axis=1, keepdims=True)
    top_shared = at_top.sum(axis=1) > 1
    gold = rows.column("gold").to_numpy().astype(np.int64)
    pred = rows.column("pred").to_numpy().astype(np.int64)
    decided = top_shared & at_top[np.arange(rows.num_rows), gold]
    return TieBreak(
        rows.num_rows, int(top_shared.sum()), int(decided.sum()),
        int((decided & (pred == gold)).sum()), int((pred == at_top.argmax(axis=1)).sum()),
    )
