"""Cohort placement: the percentile rank of a score in a published histogram, and back."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from cube.errors import ConfigError
from cube.analysis.credit.numbers import _read_csv, _to_count, decimal_text, to_fraction


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
