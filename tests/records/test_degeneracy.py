"""Degenerate scores in a cell's records (cube.records.degeneracy): counted per cell, from rows made
here with known answers."""

from __future__ import annotations

import math

from cube.records.degeneracy import TIE_WARNING, degeneracy_report, degenerate_cells


def _row(scores, pred, tied=False, failed=False, scorer="M1-seq", context="c"):
    return {"model": "m", "scorer": scorer, "label_set": "L", "context": context, "shots": 0, "order": "original",
            "scores": scores, "pred": pred, "tied": tied, "parse_failed": failed}


def test_a_cell_of_identical_scores_is_mostly_ties_constant_and_first_option():
    rows = [_row([-1.0] * 4, 0, tied=True) for _ in range(5)]
    (cell,) = degenerate_cells(rows)
    assert (cell.n, cell.n_all_equal, cell.n_tied, cell.n_first_option, cell.constant) == (5, 5, 5, 5, True)
    assert cell.mostly_ties and 5 > TIE_WARNING * 5
    text = "\n".join(degeneracy_report([cell]))
    assert "MOSTLY TIES: 5/5 (100%)" in text and "every option scores the same on 5/5" in text
    assert "the first option decided 5/5 (100%) items, 5/5 (100%) of them by the tie-break" in text


def test_all_zero_scores_and_a_healthy_cell_apart():
    rows = [_row([0.0] * 4, 0, tied=True, context="zero"), _row([-2.0, -1.0, -3.0, -4.0], 1),
            _row([-1.0, -2.0, -3.0, -4.0], 0), _row([-3.0, -2.0, -1.0, -4.0], 2)]
    zero, healthy = degenerate_cells(rows)
    assert zero.n_all_zero == 1 and zero.n == 1 and not zero.constant  # one item: nothing to be constant against
    assert healthy.findings() == [] and not healthy.constant and healthy.n_first_option == 1


def test_parse_failures_over_two_percent_are_reported_and_nan_scores_are_not_ties():
    nan = [math.nan] * 4
    rows = [_row(nan, -1, failed=True, scorer="M6-strict")] + [_row(nan, 1, scorer="M6-strict") for _ in range(39)]
    (cell,) = degenerate_cells(rows)
    assert cell.n_parse_failed == 1 and cell.n_all_equal == 0 and not cell.constant
    assert cell.findings() == ["no answer read on 1/40 (2%) items (over 2%)"]  # 2.5%
    at_the_line = [_row(nan, -1, failed=True, scorer="M6-strict")] + rows[1:] + rows[1:11]  # 1/50: 2%, not over
    assert degenerate_cells(at_the_line)[0].findings() == []
    assert degenerate_cells(rows[1:])[0].findings() == []
    assert degeneracy_report(degenerate_cells(rows[1:])) == ["degenerate scores:", "  none"]
