"""The one interface every backend implements: score continuations of a shared context; generate.

Scorers never see a model. They get, for each continuation, its tokens *in context* (the shared
rule in ``cube.tokenization``) and one log-probability per token, so that a new backend (vLLM, a
remote server) can be checked against the naive reference token by token.

Every backend plans its work from the same ``RequestPlan``: the token sequences it must score and
the minimum number of tokens any correct implementation has to run through the model. Counting
what a backend actually ran against that minimum is how the benchmark shows where time goes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from cube.errors import CubeError
from cube.tokenization import (
    Encoder,
    InContext,
    common_prefix_len,
    continuation_tokenizer,
    encode_ids,
)


@dataclass(frozen=True)
class ScoreRequest:
    context: str
    continuations: tuple[str, ...]
    tokenization: str = "in_context"  # or "separate" (cube.tokenization.TOKENIZATIONS)


@dataclass(frozen=True)
class ContinuationLogprobs:
    token_ids: tuple[int, ...]
    logprobs: np.ndarray  # float64, one per token in token_ids
    boundary_merge: bool  # appending the continuation re-tokenized the end of the context

    @property
    def total(self) -> float:
        return float(self.logprobs.sum())


@dataclass(frozen=True)
class GenerationResult:
    text: str
    token_ids: tuple[int, ...]


@dataclass
class ForwardCounter:
    """Work done so far. ``forward_tokens / minimum_tokens`` is the figure of merit.

    ``minimum_tokens``: each request's shared prefix once, plus every continuation token that
    precedes another scored token (the last token of a continuation is only ever a target, so it
    never needs a forward). ``naive_tokens`` is the one-forward-per-continuation count.
    """

    forward_tokens: int = 0  # real tokens run through the transformer body
    padded_tokens: int = 0  # the same, including padding
    head_rows: int = 0  # positions the output layer (lm_head) was applied at
    minimum_tokens: int = 0
    naive_tokens: int = 0
    scored_tokens: int = 0  # continuation tokens given a log-probability

    def reset(self) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, 0)


@dataclass(frozen=True)
class RequestPlan:
    """One request tokenized: the shared prefix and each continuation's full sequence."""

    shared_ids: tuple[int, ...]  # common prefix of the context's and every full sequence's tokens
    continuations: tuple[InContext, ...]

    @property
    def shared_len(self) -> int:
        return len(self.shared_ids)

    def suffix_ids(self, i: int) -> tuple[int, ...]:
        """Tokens continuation ``i`` must run past the shared prefix (its last token never is)."""
        full = self.continuations[i].full_ids
        return full[self.shared_len:len(full) - 1]

    @property
    def minimum_tokens(self) -> int:
        return self.shared_len + sum(len(self.suffix_ids(i)) for i in range(len(self.continuations)))

    @property
    def naive_tokens(self) -> int:
        return sum(len(c.full_ids) for c in self.continuations)

    @property
    def longest(self) -> int:
        return max([self.shared_len] + [len(c.full_ids) for c in self.continuations])


def plan_request(tokenizer: Encoder, request: ScoreRequest, add_special_tokens: bool = True) -> RequestPlan:
    """Tokenize a request by its tokenization rule (in context by default); reject what cannot
    be scored."""
    if not request.continuations:
        raise CubeError(f"score request with context {request.context[-40:]!r} has no continuations")
    tokenize = continuation_tokenizer(request.tokenization)
    ctx = encode_ids(tokenizer, request.context, add_special_tokens)
    conts = tuple(
        tokenize(tokenizer, request.context, c, add_special_tokens, context_ids=ctx)
        for c in request.continuations
    )
    shared = len(ctx)
    for cont, text in zip(conts, request.continuations):
        if cont.prefix_len == 0:
            raise CubeError(
                f"continuation {text!r} after context {request.context[-40:]!r} has no context token "
                "to condition on (empty context and no BOS token)"
            )
        shared = min(shared, common_prefix_len(ctx, cont.full_ids))
    return RequestPlan(ctx[:shared], conts)


def count_plans(counter: ForwardCounter, plans: list[RequestPlan]) -> None:
    counter.minimum_tokens += sum(p.minimum_tokens for p in plans)
    counter.naive_tokens += sum(p.naive_tokens for p in plans)
    counter.scored_tokens += sum(len(c.continuation_ids) for p in plans for c in p.continuations)


class Backend(ABC):
    """Scores continuations and generates greedily; deterministic for a fixed input and batch size."""

    tokenizer: Encoder
    counter: ForwardCounter

    @abstractmethod
    def score(self, requests: list[ScoreRequest], batch_size: int = 16) -> list[list[ContinuationLogprobs]]:
        """One list per request, one ``ContinuationLogprobs`` per continuation, in input order."""

    @abstractmethod
    def generate(self, prompts: list[str], max_new_tokens: int, batch_size: int = 8) -> list[GenerationResult]:
        """Greedy decoding; stops at an end-of-sequence token (not included) or ``max_new_tokens``."""


def batches(order: list[int], size: int) -> list[list[int]]:
    if size < 1:
        raise CubeError(f"batch size must be at least 1, got {size}")
    return [order[i:i + size] for i in range(0, len(order), size)]


def token_batches(
    order: list, lengths: list[int], max_rows: int, max_tokens: int, min_fill: float = 0.75
) -> list[list]:
    """Consecutive runs of ``order`` (sorted longest first) of at most ``max_rows`` rows and
    ``max_tokens`` padded tokens (a run's rows times its longest row), at least ``min_fill`` of
    them real tokens, but never empty.

    A fixed row count wastes most of a batch on padding when lengths vary widely (a long tail of
    long questions, one long option among short ones); a token budget shrinks the batches of long
    rows and grows those of short ones, and the fill bound starts a new batch rather than pad a
    short row out to a long one. On a CPU a smaller batch costs little per token; padding costs
    in full. A single row of any length still gets a batch of its own.
    """
    if max_rows < 1 or max_tokens < 1:
        raise CubeError(f"batch limits must be at least 1, got {max_rows} rows and {max_tokens} tokens")
    if not 0.0 <= min_fill <= 1.0:
        raise CubeError(f"min_fill must be in [0, 1], got {min_fill}")
    out: list[list] = []
    current: list = []
    longest = real = 0
    for key, n in zip(order, lengths):
        grown = max(longest, n)
        rows = len(current) + 1
        if current and (
            rows > max_rows or rows * grown > max_tokens or real + n < min_fill * rows * grown
        ):
            out.append(current)
            current, grown, real = [], n, 0
        current.append(key)
        longest, real = grown, real + n
    if current:
        out.append(current)
    return out


__all__ = [
    "Backend", "ContinuationLogprobs", "ForwardCounter", "GenerationResult", "RequestPlan",
    "ScoreRequest", "batches", "count_plans", "plan_request", "token_batches",
]
