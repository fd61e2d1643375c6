"""Scorers: turn the log-probabilities a backend returns into one score per option.

Each scorer is a short pure function so that one forward pass feeds all of them and any of them
can be re-run later from stored log-probabilities. Sums are taken in float64 so that a scorer
agrees with a naive reference to float error whatever dtype the backend used.

Ties are never hidden: options whose scored token ids are identical (e.g. two labels that share
a first token under M1-strict) get identical scores by construction, are listed in
``tie_groups``, and a prediction decided by the tie-break (the first option in order) is
flagged ``tied``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

TIE_BREAK = "first_in_order"  # the rule applied when several options share the top score


@dataclass(frozen=True)
class ContinuationScores:
    """What a backend returns for one option's continuation."""

    token_ids: np.ndarray  # the continuation's token ids (int)
    logprobs: np.ndarray  # log p(token_i | context, tokens_<i), one per token
    text: str  # the continuation text (M4 divides by its UTF-8 bytes)
    unconditional_logprobs: np.ndarray | None = (
        None  # same tokens after the unconditional context (M5)
    )

    def __post_init__(self) -> None:
        ids = np.asarray(self.token_ids, dtype=np.int64).reshape(-1)
        lps = np.asarray(self.logprobs, dtype=np.float64).reshape(-1)
        if ids.size == 0 or ids.size != lps.size:
            raise ValueError(
                f"continuation {self.text!r}: {ids.size} token ids, {lps.size} logprobs"
            )
        object.__setattr__(self, "token_ids", ids)
        object.__setattr__(self, "logprobs", lps)
        if self.unconditional_logprobs is not None:
            unc = np.asarray(self.unconditional_logprobs, dtype=np.float64).reshape(-1)
            if unc.size != ids.size:
                raise ValueError(
                    f"continuation {self.text!r}: {unc.size} unconditional logprobs, "
                    f"{ids.size} tokens"
                )
            object.__setattr__(self, "unconditional_logprobs", unc)


@dataclass(frozen=True)
class ScoreResult:
    """A scorer's decision for one item."""

    pred: int  # the predicted option (after the tie-break)
    tied: bool  # True when more than one option shares the top score
    tie_groups: tuple[tuple[int, ...], ...]  # options tied by construction (identical token ids)
    scores: np.ndarray  # one score per option (higher is better)
    tie_break: str = TIE_BREAK


StrictResult = ScoreResult  # the name M1-strict's callers use


def _sums(arrays: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([np.sum(a, dtype=np.float64) for a in arrays], dtype=np.float64)


def _lengths(arrays: Sequence[np.ndarray]) -> np.ndarray:
    lengths = np.array([np.size(a) for a in arrays], dtype=np.float64)
    if np.any(lengths == 0):
        raise ValueError(f"empty continuation at option {int(np.argmin(lengths))}")
    return lengths


def tie_groups(keys: Sequence[Hashable]) -> tuple[tuple[int, ...], ...]:
    """Groups (size >= 2) of option indices whose keys are equal, in order of first appearance."""
    groups: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return tuple(tuple(g) for g in groups.values() if len(g) > 1)


def decide(scores: np.ndarray, groups: tuple[tuple[int, ...], ...] = ()) -> ScoreResult:
    """Argmax with the tie-break made explicit.

    Members of a tie group scored the same tokens in the same context, so they get the group's
    first member's score: a numerical wobble between batches cannot hide a tie.
    """
    scores = np.array(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"expected one score per option, got shape {scores.shape}")
    if np.isnan(scores).any():
        raise ValueError(f"NaN score at option {int(np.argmax(np.isnan(scores)))}")
    for group in groups:
        scores[list(group)] = scores[group[0]]
    pred = int(np.argmax(scores))  # numpy returns the first maximum: the tie-break rule
    tied = int(np.count_nonzero(scores == scores[pred])) > 1
    return ScoreResult(pred=pred, tied=tied, tie_groups=groups, scores=scores)


# --- the scorers over arrays --------------------------------------------------------------------


def m1_seq(label_token_logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """M1-seq: log p(full label token sequence | prompt) per label."""
    _lengths(label_token_logprobs)
    return _sums(label_token_logprobs)


def m1_strict(first_token_logprobs: Sequence[float], first_token_ids: Sequence[int]) -> ScoreResult:
    """M1-strict: argmax of each label's first-token log-probability.

    Labels sharing a first token id are indistinguishable here; they tie by construction.
    """
    if len(first_token_logprobs) != len(first_token_ids):
        raise ValueError(
            f"{len(first_token_logprobs)} first-token logprobs but {len(first_token_ids)} token ids"
        )
    ids = [int(i) for i in first_token_ids]
    return decide(np.asarray(first_token_logprobs, dtype=np.float64), tie_groups(ids))


def m2_sum(option_token_logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """M2: raw sum of the option text's log-probabilities (favours short options)."""
    _lengths(option_token_logprobs)
    return _sums(option_token_logprobs)


def m3_mean(option_token_logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """M3: mean log-probability per token (length normalisation by the tokenizer's count)."""
    return _sums(option_token_logprobs) / _lengths(option_token_logprobs)


def m4_per_byte(
    option_token_logprobs: Sequence[np.ndarray], option_texts: Sequence[str]
) -> np.ndarray:
    """M4: log-probability per UTF-8 byte, a length normalisation that is tokenizer-independent."""
    if len(option_token_logprobs) != len(option_texts):
        raise ValueError(f"{len(option_token_logprobs)} options but {len(option_texts)} texts")
    _lengths(option_token_logprobs)
    n_bytes = np.array([len(t.encode("utf-8")) for t in option_texts], dtype=np.float64)
    if np.any(n_bytes == 0):
        raise ValueError(f"empty option text at option {int(np.argmin(n_bytes))}")
    return _sums(option_token_logprobs) / n_bytes


def m5_pmi(conditional: Sequence[np.ndarray], unconditional: Sequence[np.ndarray]) -> np.ndarray:
    """M5: log p(option | question, cue) - log p(option | cue alone), which removes the option's
    prior plausibility (pointwise mutual information)."""
    if len(conditional) != len(unconditional):
        raise ValueError(
            f"{len(conditional)} conditional but {len(unconditional)} unconditional options"
        )
    for i, (c, u) in enumerate(zip(conditional, unconditional)):
        if np.size(c) != np.size(u):
            raise ValueError(
                f"option {i}: {np.size(c)} conditional but {np.size(u)} unconditional tokens"
            )
    _lengths(conditional)
    return _sums(conditional) - _sums(unconditional)


def option_distribution(scores: np.ndarray) -> np.ndarray:
    """Softmax over the options (last axis): the probabilities ECE is computed from.

    Shifted by the row maximum so that log-probability sums of -1e4 do not underflow to 0/0.
    """
    scores = np.asarray(scores, dtype=np.float64)
    top = np.max(scores, axis=-1, keepdims=True)
    if not np.all(np.isfinite(top)):
        raise ValueError("every row of scores needs at least one finite score")
    weights = np.exp(scores - top)
    return weights / np.sum(weights, axis=-1, keepdims=True)


# --- the registry: one uniform signature over ContinuationScores --------------------------------


def _token_keys(options: Sequence[ContinuationScores]) -> list[tuple[int, ...]]:
    return [tuple(o.token_ids.tolist()) for o in options]


def score_m1_seq(options: Sequence[ContinuationScores]) -> ScoreResult:
    return decide(m1_seq([o.logprobs for o in options]), tie_groups(_token_keys(options)))


def score_m1_strict(options: Sequence[ContinuationScores]) -> ScoreResult:
    return m1_strict([o.logprobs[0] for o in options], [o.token_ids[0] for o in options])


def score_m2(options: Sequence[ContinuationScores]) -> ScoreResult:
    return decide(m2_sum([o.logprobs for o in options]), tie_groups(_token_keys(options)))


def score_m3(options: Sequence[ContinuationScores]) -> ScoreResult:
    return decide(m3_mean([o.logprobs for o in options]), tie_groups(_token_keys(options)))


def score_m4(options: Sequence[ContinuationScores]) -> ScoreResult:
    scores = m4_per_byte([o.logprobs for o in options], [o.text for o in options])
    return decide(scores, tie_groups(_token_keys(options)))


def score_m5(options: Sequence[ContinuationScores]) -> ScoreResult:
    missing = [i for i, o in enumerate(options) if o.unconditional_logprobs is None]
    if missing:
        raise ValueError(f"M5 needs unconditional logprobs; option(s) {missing} have none")
    scores = m5_pmi([o.logprobs for o in options], [o.unconditional_logprobs for o in options])
    return decide(scores, tie_groups(_token_keys(options)))


SCORERS: dict[str, Callable[[Sequence[ContinuationScores]], ScoreResult]] = {
    "M1-seq": score_m1_seq,
    "M1-strict": score_m1_strict,
    "M2": score_m2,
    "M3": score_m3,
    "M4": score_m4,
    "M5": score_m5,
}

# Which continuations each scorer reads: the labels after the MC prompt, or the option texts
# after the cloze prompt (see cube.protocol.prompts.render_prompt / cloze_prompt).
SCORER_CONTINUATIONS: dict[str, str] = {
    "M1-seq": "label",
    "M1-strict": "label",
    "M2": "cloze",
    "M3": "cloze",
    "M4": "cloze",
    "M5": "cloze",
}
