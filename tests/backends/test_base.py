"""Request planning and batching: what every backend relies on before it runs a model."""

from __future__ import annotations

import pytest

from cube.backends.base import ScoreRequest, plan_request, token_batches
from cube.errors import CubeError
from tests.synthetic import char_bpe


def test_plan_shares_the_prefix_every_continuation_keeps():
    # ":" + "A" merges into one token, so continuation "A" re-tokenizes the context's last token.
    tok = char_bpe(["Q", ":", "A", "B"], merges=[(":", "A")])
    plan = plan_request(tok, ScoreRequest("QQ:", ("A", "B", "BB")))
    assert plan.shared_ids == tuple(tok.encode("QQ").ids)  # ':' is not shared with "QQ:A"
    merged, single, _ = plan.continuations
    assert merged.boundary_merge and not single.boundary_merge
    assert merged.continuation_ids == tuple(tok.encode(":A").ids)
    # What must run past the shared prefix: the re-tokenized ":A" needs nothing (its only token is
    # the target); "B" needs ":" fed; "BB" needs ":" and the first "B".
    assert [len(plan.suffix_ids(i)) for i in range(3)] == [0, 1, 2]
    assert plan.minimum_tokens == 2 + 0 + 1 + 2
    assert plan.naive_tokens == 3 + 4 + 5


def test_continuation_with_nothing_to_condition_on_is_an_error():
    tok = char_bpe(["Q", "A"])
    with pytest.raises(CubeError, match="continuation 'A' after context '' has no context token"):
        plan_request(tok, ScoreRequest("", ("A",)))


def test_request_without_continuations_is_an_error():
    with pytest.raises(CubeError, match="has no continuations"):
        plan_request(char_bpe(["Q"]), ScoreRequest("Q", ()))


@pytest.mark.parametrize("max_rows,max_tokens", [(1, 1000), (3, 1000), (8, 20), (8, 5), (100, 100000)])
def test_token_batches_respect_both_limits_and_keep_order(max_rows, max_tokens):
    lengths = [12, 9, 9, 7, 5, 5, 4, 2, 1, 1]
    keys = [f"r{i}" for i in range(len(lengths))]
    out = token_batches(keys, lengths, max_rows, max_tokens)
    assert [k for b in out for k in b] == keys
    length_of = dict(zip(keys, lengths))
    for batch in out:
        assert 1 <= len(batch) <= max_rows
        # A single over-long row still gets a batch of its own.
        assert len(batch) == 1 or len(batch) * max(length_of[k] for k in batch) <= max_tokens


@pytest.mark.parametrize("min_fill", [0.0, 0.5, 0.75, 0.9, 1.0])
def test_token_batches_pad_short_rows_to_a_long_one_only_within_the_fill_bound(min_fill):
    lengths = [80, 9, 9, 8, 7, 5, 5, 4, 2, 1, 1, 1]
    keys = list(range(len(lengths)))
    out = token_batches(keys, lengths, 16, 10_000, min_fill=min_fill)
    assert [k for b in out for k in b] == keys
    for batch in out:
        real, padded = sum(lengths[k] for k in batch), len(batch) * max(lengths[k] for k in batch)
        assert len(batch) == 1 or real >= min_fill * padded
    if min_fill == 0.0:  # no bound: the row and token limits alone, one batch here
        assert out == [keys]
    elif min_fill >= 0.75:  # the long option does not drag the short ones out to 80 tokens
        assert out[0] == [0]


def test_token_batches_reject_a_fill_bound_outside_0_1():
    with pytest.raises(CubeError, match="min_fill must be in"):
        token_batches([1], [1], 4, 100, min_fill=1.5)
