"""The chance level of mixed option counts is the mean of 1/N over the items, not 1/4."""

from fractions import Fraction

import pyarrow as pa
import pytest

from cube.analysis.chance import chance_level, options_per_record


def _table(option_counts):
    return pa.table({"scores": pa.array([[0.0] * n for n in option_counts], pa.list_(pa.float64()))})


def test_mixed_option_counts_give_the_mean_of_one_over_n():
    counts = [3, 4, 5, 3, 4, 5]
    expected = sum(Fraction(1, n) for n in counts) / len(counts)  # exact, by hand: 47/180
    assert chance_level(_table(counts)) == pytest.approx(float(expected), abs=1e-12)
    assert round(chance_level(_table(counts)), 3) == 0.261
    assert options_per_record(_table(counts)).tolist() == counts


def test_four_options_everywhere_is_a_quarter():
    assert chance_level(_table([4] * 7)) == 0.25
