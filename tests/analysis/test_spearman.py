"""cube.analysis.spearman: the exact permutation p of Spearman's ρ, against hand-counted orderings."""

import pytest
from scipy.stats import spearmanr

from cube.analysis.spearman import spearman_exact
from cube.errors import CubeError


def test_rho_080_at_four_models_has_exact_p_one_third():
    """Issue 47: ρ +0.80 was printed without its p. Of the 24 orderings of 4 ranks, ρ = ±1 has 1
    each and ρ = ±0.8 has 3 each (one adjacent swap), so |ρ| ≥ 0.8 has 8: p = 8/24."""
    accuracy, gap = [0.25, 0.29, 0.37, 0.38], [0.15, 0.157, 0.175, 0.173]
    result = spearman_exact(accuracy, gap)
    assert result.rho == pytest.approx(spearmanr(accuracy, gap).statistic) == pytest.approx(0.8)
    assert result.p_value == pytest.approx(8 / 24) and result.orderings == 24
    assert spearman_exact([1, 2, 3], [3, 2, 1]).p_value == pytest.approx(2 / 6)


def test_bad_input_names_the_sizes():
    with pytest.raises(CubeError, match="got 1"):
        spearman_exact([1], [2])
    with pytest.raises(CubeError, match="shapes"):
        spearman_exact([1, 2], [1, 2, 3])
