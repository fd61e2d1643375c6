"""The one interface every backend implements: score continuations of a shared context; generate.

Scorers never see a model. They get, for each continuation, its tokens *in context* (the shared
rule in ``cube.protocol.tokenization``) and one log-probability per token, so that a new backend (vLLM, a
remote server) can be checked against the naive reference token by token.

Every backend plans its work from the same ``RequestPlan``: the token sequences it must score and
the minimum number of tokens any correct implementation has to run through the model. Counting
what a backend actually ran against that minimum is how the benchmark shows where time goes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from cube.errors import CubeError
from cube.protocol.tokenization import (
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
    tokenization: str = "in_context"  # or "separate" (cube.protocol.tokenization.TOKENIZATIONS)


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
    """One greedy generation. ``token_ids`` are the generated tokens, the end token excluded;
    ``finish_reason`` says why it ended: "stop" (the model wrote an end token) or "length" (it
    reached max_new_tokens), so that a parse failure can be told a truncation or a format failure."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


def finish_reason(token_ids: tuple[int, ...], max_new_tokens: int) -> str:
    """Why a greedy loop that drops the end token ended: a generation as long as its budget never
    wrote an end token inside it ("length"); a shorter one stopped at one ("stop")."""
    return "length" if len(token_ids) >= max_new_tokens else "stop"


@dataclass
class ForwardCounter:
    """Work done so far. ``forward_tokens / minimum_tokens`` is the figure of merit.

    ``minimum_tokens``: each request's shared prefix once, plus every continuation token that
    precedes another scored token (the last token of a continuation is only ever a target, so it
    never needs a forward). ``tree_minimum_tokens``: the same with every prefix shared across the
    requests of one ``score`` call as well (``prefix_tree_minimum``): what the HF backend runs.
    ``naive_tokens`` is the one-forward-per-continuation count.
    """

    forward_tokens: int = 0  # real tokens run through the transformer body
    padded_tokens: int = 0  # the same, including padding
    head_rows: int = 0  # positions the output layer (lm_head) was applied at
    forwards: int = 0  # calls of the transformer body
    minimum_tokens: int = 0
    tree_minimum_tokens: int = 0  # each score call's prefix-tree minimum (sharing across requests)
    naive_tokens: int = 0
    scored_tokens: int = 0  # continuation tokens given a log-probability
    cached_tokens: int = 0  # prompt tokens vLLM read from its prefix cache instead of running them
    rescored_tokens: int = 0  # tokens vLLM ran again with the cache off (cached scored positions)

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


def count_plans(counter: ForwardCounter, plans: list[RequestPlan], tree_minimum: int | None = None) -> None:
    """Add the plans' minima; ``tree_minimum`` where the caller already built their prefix tree."""
    counter.minimum_tokens += sum(p.minimum_tokens for p in plans)
    counter.tree_minimum_tokens += prefix_tree_minimum(plans) if tree_minimum is None else tree_minimum
    counter.naive_tokens += sum(p.naive_tokens for p in plans)
    counter.scored_tokens += sum(len(c.continuation_ids) for p in plans for c in p.continuations)


# The one decoding every backend implements (HF: argmax per step; vLLM: temperature 0): an
# evaluation that samples is not reproducible, so there is no option to.
DECODING = "greedy"


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
    order: list, lengths: list[int], max_rows: int, max_tokens: int, batch_cost: int = 64
) -> list[list]:
    """Consecutive runs of ``order`` (sorted longest first) of at most ``max_rows`` rows and
    ``max_tokens`` padded tokens (a run's rows times its longest row), cut where the padded tokens
    plus ``batch_cost`` per batch are fewest; a single row of any length gets a batch of its own.

    A fixed row count wastes most of a batch on padding when lengths vary widely (a long tail of
    long questions, one long option among short ones); on a CPU padding costs in full while a
    forward's own cost beyond its tokens (weights streamed, per-layer overhead) is what a batch
    saves: about 15 tokens' worth on SmolLM2-135M on an idle core, several times more with two
    threads on a busy machine (each of a forward's parallel regions waits for its slowest thread),
    hence the default of 64. The cut is exact (dynamic programming over the sorted runs,
    O(rows x max_rows)): on 100 CMMLU items (Qwen2.5 tokenizer, 50-item jobs) it pads 6% of the
    label prompts' tokens and 23% of cloze's, where a greedy cut at 75% fill padded 20% and 28%,
    in 130 forwards instead of 109.
    """
    if max_rows < 1 or max_tokens < 1:
        raise CubeError(f"batch limits must be at least 1, got {max_rows} rows and {max_tokens} tokens")
    if batch_cost < 0:
        raise CubeError(f"batch_cost must be at least 0, got {batch_cost}")
    n = len(lengths)
    best = [0] + [-1] * n  # best[j]: least cost of cutting the first j rows; -1 is unreached
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = 0
        for i in range(j - 1, max(-1, j - 1 - max_rows), -1):  # the last batch is rows i..j-1
            longest = max(longest, lengths[i])
            rows = j - i
            if rows > 1 and rows * longest > max_tokens:
                break  # longer runs only grow
            cost = best[i] + rows * longest + batch_cost
            if best[j] < 0 or cost < best[j]:
                best[j], cut[j] = cost, i
    out: list[list] = []
    j = n
    while j > 0:
        out.append(list(order[cut[j]:j]))
        j = cut[j]
    return out[::-1]


def prefix_tree_tokens(sequences: Iterable[Sequence[int]]) -> int:
    """Distinct token prefixes among ``sequences``: the positions a prefix tree of them holds.

    A position is one forward of one token given everything before it, so this is the least any
    backend can run to compute every listed sequence, however it shares KV across them.
    """
    root: dict = {}
    nodes = 0
    for seq in sequences:
        node = root
        for token in seq:
            child = node.get(token)
            if child is None:
                child = node[token] = {}
                nodes += 1
            node = child
    return nodes


def forward_sequences(plan: RequestPlan) -> list[tuple[int, ...]]:
    """What a request must run: the shared prefix, then each continuation's tokens but its last."""
    return [plan.shared_ids] + [plan.shared_ids + plan.suffix_ids(i) for i in range(len(plan.continuations))]


def prefix_tree_minimum(plans: Iterable[RequestPlan]) -> int:
    """The forward tokens of ``plans`` when every shared prefix runs once, across requests too.

    ``RequestPlan.minimum_tokens`` shares within one request; the cells of one item share the
    header and question across requests (every label set, cloze), and items of one subject share
    the header: this is the whole-cube minimum of the prefix tree over all of them.
    """
    return prefix_tree_tokens(seq for plan in plans for seq in forward_sequences(plan))


__all__ = [
    "Backend", "ContinuationLogprobs", "ForwardCounter", "GenerationResult", "RequestPlan",
    "ScoreRequest", "batches", "count_plans", "forward_sequences", "plan_request", "prefix_tree_minimum",
    "prefix_tree_tokens", "token_batches",
]
