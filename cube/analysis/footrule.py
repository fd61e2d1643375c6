"""Rankings of models: average ranks, the footrule between two rankings, and its noise floor.

One family of the paper's statistics (:mod:`cube.analysis.stats` holds the conventions they share):
how far a protocol reorders the leaderboard, as the normalised Spearman footrule, read against how
far the ranking moves when only the item sample changes (the bootstrap noise floor), with the one
verdict every page prints. It stands apart because its inputs are ``(models, items)`` outcome
matrices and its unit is rank positions, not accuracy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from tqdm import tqdm

from cube.analysis.stats import as_outcomes
from cube.errors import CubeError


def average_ranks(scores: ArrayLike) -> NDArray[np.float64]:
    """Rank models by score along the last axis: rank 1 = highest score; ties share their mean.

    Average ranks (scipy's ``rankdata(-scores, method='average')``) keep the footrule
    symmetric in tied models, so two models with equal accuracy never move the statistic just
    because of their order in the input. Works on a batch ``(..., n_models)`` so the noise
    floor can rank thousands of bootstrap replicates at once. Ties are exact equality: pass
    integer hit counts (not rounded accuracies) when ties matter.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 0 or s.shape[-1] == 0:
        raise CubeError(f"scores must have at least one model along the last axis, got {s.shape}")
    if np.isnan(s).any():
        raise CubeError("scores contain NaN; a model without a score cannot be ranked")
    n = s.shape[-1]
    order = np.argsort(-s, axis=-1, kind="stable")
    ranked = np.take_along_axis(s, order, axis=-1)
    pos = np.broadcast_to(np.arange(n), ranked.shape)
    starts_run = np.ones(ranked.shape, dtype=bool)
    starts_run[..., 1:] = ranked[..., 1:] != ranked[..., :-1]
    ends_run = np.ones(ranked.shape, dtype=bool)
    ends_run[..., :-1] = starts_run[..., 1:]
    run_start = np.maximum.accumulate(np.where(starts_run, pos, 0), axis=-1)
    run_end = np.flip(
        np.minimum.accumulate(np.flip(np.where(ends_run, pos, n - 1), axis=-1), axis=-1), axis=-1
    )
    ranks = np.empty_like(ranked)
    np.put_along_axis(ranks, order, (run_start + run_end) / 2.0 + 1.0, axis=-1)
    return ranks


def _footrule_max(n: int) -> int:
    """Largest ``sum |ra - rb|`` over two permutations of 1..n (reached by reversal)."""
    return (n * n) // 2


def footrule(rank_a: ArrayLike, rank_b: ArrayLike) -> float:
    """Normalised Spearman footrule: ``sum |rank_a - rank_b| / floor(n^2 / 2)``, in [0, 1].

    The paper's measure of how much a protocol change reorders the leaderboard: 0 when the
    ranking is unchanged, 1 when it is reversed. The footrule (not Kendall's tau) because its
    unit is "rank positions moved", which reads directly off a leaderboard. Average ranks for
    ties stay within [0, 1]: they are means of permutations' ranks and the sum is convex.
    """
    a = np.asarray(rank_a, dtype=np.float64)
    b = np.asarray(rank_b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise CubeError(
            f"rankings must be 1-D over the same models, got shapes {a.shape} and {b.shape}"
        )
    if a.size < 2:
        raise CubeError(f"a footrule needs at least 2 models, got {a.size}")
    return float(np.abs(a - b).sum() / _footrule_max(a.size))


@dataclass(frozen=True)
class NoiseFloor:
    """How much the ranking moves from item sampling alone: mean, 95th percentile, all samples."""

    mean: float
    p95: float
    samples: NDArray[np.float64]

    @property
    def replicates(self) -> int:
        return int(self.samples.size)

    @property
    def mean_se(self) -> float:
        """Monte Carlo standard error of ``mean``: a floor from B draws is itself an estimate, and
        a mean from B = 1000 moves by about its own 3 % between seeds."""
        return float(self.samples.std(ddof=1) / math.sqrt(self.samples.size)) if self.samples.size > 1 else math.nan


def _check_floor_args(B: int, chunk: int) -> None:
    if B < 1:
        raise CubeError(f"number of bootstrap replicates B must be >= 1, got {B!r}")
    if chunk < 1:
        raise CubeError(f"chunk must be >= 1, got {chunk!r}")


def _floor_samples(
    protocols: NDArray[np.bool_], B: int, seed: int, chunk: int, progress: bool
) -> NDArray[np.float64]:
    """Footrules between rankings on two resamples, ``(protocols, B)``, every protocol on the
    same two resamples of each replicate (the draws do not depend on how many protocols)."""
    n_protocols, n_models, n_items = protocols.shape
    if n_models < 2:
        raise CubeError(f"the noise floor needs at least 2 models, got {n_models}")
    _check_floor_args(B, chunk)
    rng = np.random.default_rng(seed)
    per_item = [p.T.astype(np.float64) for p in protocols]  # (items, models) each
    scale = _footrule_max(n_models)
    samples = np.empty((n_protocols, B), dtype=np.float64)
    with tqdm(total=B, desc="noise floor", unit="rep", disable=not progress) as bar:
        for start in range(0, B, chunk):
            reps = min(chunk, B - start)
            idx = rng.integers(0, n_items, size=(2 * reps, n_items))
            idx += (np.arange(2 * reps) * n_items)[:, None]
            counts = np.bincount(idx.ravel(), minlength=2 * reps * n_items)
            counts = counts.reshape(2 * reps, n_items).astype(np.float64)
            for p, outcomes in enumerate(per_item):
                ranks = average_ranks(counts @ outcomes)
                moved = np.abs(ranks[0::2] - ranks[1::2]).sum(axis=1)
                samples[p, start : start + reps] = moved / scale
            bar.update(reps)
    return samples


def _floor(samples: NDArray[np.float64]) -> NoiseFloor:
    return NoiseFloor(float(samples.mean()), float(np.quantile(samples, 0.95)), samples)


def footrule_noise_floor(
    correct: ArrayLike,
    B: int = 1000,
    seed: int = 0,
    chunk: int = 64,
    progress: bool = False,
) -> NoiseFloor:
    """Footrule between rankings on two independent bootstrap resamples of the items, B times.

    A between-protocol footrule only means something relative to how much the ranking moves
    when nothing but the item sample changes; this is that baseline, under one protocol.

    ``correct`` is ``(models, items)``. Replicate ``r`` draws its two resamples as two rows of
    ``rng.integers(0, N, size=(2 * chunk, N))`` (resample A first); numpy's stream makes this
    identical to drawing ``integers(0, N, N)`` twice per replicate in order, so ``chunk`` changes
    memory use (about ``2 * chunk * N * 8`` bytes), never the result. Per-model hits are
    ``counts @ correct.T`` in float64, exact integers, so tied models tie exactly.
    """
    c = as_outcomes("correct", correct, ndim=2)
    return _floor(_floor_samples(c[None], B, seed, chunk, progress)[0])


@dataclass(frozen=True)
class PairedNoiseFloor:
    """Each protocol's floor on the same resamples, and the floor of the comparison."""

    a: NoiseFloor
    b: NoiseFloor
    joint: NoiseFloor  # per replicate the larger of the two: what a verdict reads


def paired_noise_floor(
    correct_a: ArrayLike,
    correct_b: ArrayLike,
    B: int = 1000,
    seed: int = 0,
    chunk: int = 64,
    progress: bool = False,
) -> PairedNoiseFloor:
    """The noise floor of a comparison of two protocols on the same items: paired and symmetric.

    Each replicate draws its two item resamples once and ranks the models under *both*
    protocols on them, so ``a`` and ``b`` are each exactly :func:`footrule_noise_floor` of its
    protocol with this seed and differ only by the protocol, never by the draws. The floor a
    verdict reads is ``joint``: per replicate the larger of the two footrules, i.e. how far the
    ranking of whichever protocol is noisier moves when only the items change.

    Why this floor. The paper's floor is within one protocol: the footrule between rankings on
    two resamples of the items, the measure of "how much re-drawing the benchmark reorders the
    leaderboard" that a protocol effect is expressed in multiples of. Taken from protocol A
    alone it depends on which protocol is called A: a tie or near-tie under one protocol makes
    its floor wide while the other's is narrow, and a footrule between the two can be beyond
    one floor and within the other (on the archived records, full-width labels against
    half-width ones). Either protocol's item noise could have produced the observed disagreement,
    so the comparison is held to the noisier one, replicate by replicate on the same draws: the
    verdict is the same whichever protocol is called A, and it is never beyond a floor that one
    of the two protocols' own resampling reaches 5% of the time.

    Why not the null of exchangeability (swap the two protocols' outcomes on a random half of
    the items, then take the footrule between the swapped rankings). That tests whether the two
    protocols are interchangeable item by item, which McNemar tests already answer; a protocol
    that only moves one model's accuracy rejects it as soon as it breaks an exact tie, because
    the swapped rankings share the tie's resolution and agree on every replicate (on the
    archived records, generation's half-rank move, one exact tie resolved, gets the smallest
    p-value the permutations allow). It does not measure
    the item-sampling noise of a ranking, which is what the paper's multiples are in units of.

    ``correct_a`` and ``correct_b`` are ``(models, items)`` over the same models and items in the
    same order.
    """
    a = as_outcomes("correct_a", correct_a, ndim=2)
    b = as_outcomes("correct_b", correct_b, ndim=2)
    if a.shape != b.shape:
        raise CubeError(
            f"paired floors need the same models and items: correct_a is {a.shape}, "
            f"correct_b is {b.shape}"
        )
    samples = _floor_samples(np.stack([a, b]), B, seed, chunk, progress)
    return PairedNoiseFloor(_floor(samples[0]), _floor(samples[1]), _floor(samples.max(axis=0)))


def footrule_normalisation(n_models: int) -> str:
    """What a footrule of ``n_models`` is divided by, said beside every footrule shown: with few
    models its attainable values are a handful of multiples of ``1 / floor(n^2 / 2)``."""
    return f"n = {n_models} models, normalised by ⌊n²/2⌋ = {_footrule_max(n_models)}"


def footrule_has_power(floor: NoiseFloor) -> bool:
    """Whether any footrule could lie beyond the floor's 95th percentile.

    The largest normalised footrule is 1 (a reversal) for every n. Between two random rankings
    it is reached 1/2 of the time with 3 models, 1/6 with 4 or 5, 1/20 with 6 or 7, so when
    the models are close the floor's p95 is 1 and no protocol, however disruptive, can be
    beyond it: "not beyond the floor" then says nothing about the protocol.
    """
    return floor.p95 < 1.0


def footrule_verdict(observed: float, floor: NoiseFloor, n_models: int, effect: float | None = None) -> str:
    """The one-line reading of a footrule against its floor, with both no-power cases named.

    ``effect`` is the shift a source reports (the paper's footrule): a floor whose p95 is at
    least that large could not have shown it, so "within the floor" would read as evidence
    against the source when it is only a lack of power. Every page reads footrules through this
    one function, so the paper page, Results and claim 3's notebook say the same words.
    """
    if not footrule_has_power(floor):
        return (f"no power at n = {n_models}: the floor's 95th percentile is the largest "
                f"footrule {n_models} models can reach")
    if observed > floor.p95:
        return "beyond the floor's 95th percentile"
    if effect is not None and floor.p95 >= effect:
        return (f"no power at n = {n_models} for a shift of {effect:g}: within the floor, and only a "
                f"footrule above its 95th percentile {floor.p95:.3f} could exceed it")
    return "within the floor"


def footrule_multiple(observed: float, floor: NoiseFloor) -> tuple[float, float]:
    """The headline: the observed between-protocol footrule in units of the noise floor.

    Returned as multiples of the floor's mean and of its 95th percentile; a multiple above 1 of
    the p95 says the protocol moved the ranking more than 95% of resampling noise does. A zero
    floor gives ``inf`` for a positive observation and NaN for a zero one (no scale to measure
    by).
    """
    if not (0.0 <= observed <= 1.0):
        raise CubeError(f"observed footrule must lie in [0, 1], got {observed!r}")

    def ratio(base: float) -> float:
        if base > 0.0:
            return observed / base
        return math.inf if observed > 0.0 else math.nan

    return ratio(floor.mean), ratio(floor.p95)
