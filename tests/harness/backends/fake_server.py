"""A small OpenAI-compatible server of the tests' own, to play each way a server can fail.

A real server (``vllm serve``, in test_served_vllm.py) produces none of section 2's failures on
purpose, so this one plays them: it tokenizes with a real tokenizer (the demo SmolLM2's) and
scores each token with a deterministic function of the tokens before it (so that every request
for one prefix gets the same numbers, as a real model's would), then breaks its answer the way
``fault`` says. It runs in a thread on a free loopback port (``serve``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

FAULTS = ("none", "no_logprobs", "nulls", "truncated", "zeros", "positive", "constant", "template", "wrong_model",
          "answer_model", "http500", "flaky", "hang", "drop",
          # the fast path's (issue 46): logprob_token_ids answered with other ids, with none, with its own
          # top-k (the field ignored); next-token numbers that differ from the echoed ones; every number
          # moved by its prompt's place in the request (scores that depend on the batch and its order)
          "ids_other", "ids_none", "ids_topk", "fast_differs", "batch_dependent", "ids_later",
          # issue 48: echoes short of the prompt, token strings, NaN, a redirect, a dripping answer
          "truncated_no_usage", "strings", "strings_truncated", "nan", "redirect", "drip")
NO_USAGE = ("truncated_no_usage", "strings", "strings_truncated")


def fake_logprob(ids: list[int], k: int) -> float:
    """log p(ids[k] | ids[:k]) of the fake model: a fixed function of the prefix, in [-8, -0.01]."""
    digest = hashlib.sha256(json.dumps(ids[:k + 1]).encode()).digest()
    return -0.01 - int.from_bytes(digest[:4], "big") / 2**32 * 8


@dataclass
class FakeState:
    tokenizer: object
    model: str = "fake-model"
    fault: str = "none"
    fail_after: int = 0  # fault-free completions before a network fault starts (http500, hang, drop)
    fail_times: int = 10**9  # how many requests a network fault hits before it clears (flaky: 2)
    hang_s: float = 5.0
    completions: int = 0  # completions requests seen
    failed: int = 0
    prompt_tokens: int = 0
    authorizations: set = field(default_factory=set)  # the Authorization headers seen
    # where the server says its precision, and what it says: ("models", "float32") in its /v1/models
    # card, ("server_info", "torch.bfloat16") as vLLM's dev-mode /server_info, ("metrics", ...) as a
    # /metrics label; None: it does not say (vLLM 0.32.0's own /v1/models and /metrics do not)
    says_dtype: tuple[str, str] | None = None
    metrics: bool = True  # /metrics with vLLM's prefix-cache counters
    cache_queries: int = 0  # prompt tokens looked up in the (simulated) prefix cache
    cache_hits: int = 0  # of those, the ones an earlier prompt's tokens had already computed
    seen_prompts: list = field(default_factory=list)  # token id tuples of every prompt read
    fast_seen: int = 0  # prompts answered with logprob_token_ids
    bodies: list = field(default_factory=list)  # every /v1/completions request body, as sent
    redirect_to: str = ""  # fault redirect: where GET /v1/models is sent (302)
    drip_s: float = 0.5  # fault drip: the model list's answer, one byte every drip_s
    # Written generations (a reasoning checkpoint's, with thinking blocks): a prompt gets the one its
    # sha256 picks, cut at max_tokens ("length") or whole ("stop"); empty: the fake model's greedy ids
    scripts: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)


def _batch_shift(state: FakeState, index: int) -> float:
    """batch_dependent: a prompt's numbers moved by its place in the request's list."""
    return -0.05 * index if state.fault == "batch_dependent" else 0.0


def _label_choice(state: FakeState, ids: list[int], asked: list[int], index: int) -> dict:
    """max_tokens 1 with logprob_token_ids: the sampled token's and the asked ids' next-token
    log-probabilities (vLLM's answer), or the field ignored the way ``fault`` says."""
    sampled = min(range(30, 40), key=lambda t: -fake_logprob(ids + [t], len(ids)))
    shift = _batch_shift(state, index) + (-0.3 if state.fault == "fast_differs" else 0.0)
    with state.lock:
        state.fast_seen += 1
        later = state.fault == "ids_later" and state.fast_seen > state.fail_after
    if state.fault == "ids_other" or later:
        asked = [t + 1 for t in asked]
    elif state.fault == "ids_topk":
        asked = [sampled]
    tops = {f"token_id:{t}": round(fake_logprob(ids + [t], len(ids)) + shift, 6) for t in [sampled, *asked]}
    logprobs = {"tokens": [f"token_id:{sampled}"], "token_logprobs": [tops[f"token_id:{sampled}"]],
                "text_offset": [0], "top_logprobs": None if state.fault == "ids_none" else [tops]}
    return {"index": index, "text": state.tokenizer.decode([sampled]), "logprobs": logprobs, "finish_reason": "length"}


def _count_cache(state: FakeState, ids: list[int]) -> None:
    """The simulated prefix cache: a prompt's tokens an earlier prompt already held are hits."""
    with state.lock:
        best = max((_common(ids, seen) for seen in state.seen_prompts), default=0)
        state.cache_queries += len(ids)
        state.cache_hits += best
        state.seen_prompts.append(tuple(ids))


def _common(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _echo_choice(state: FakeState, prompt: str, index: int) -> tuple[dict, int]:
    enc = state.tokenizer.encode(prompt)
    ids = list(enc.ids)
    offsets = [start for start, _ in enc.offsets]
    values: list = [None] + [round(fake_logprob(ids, k) + _batch_shift(state, index), 6) for k in range(1, len(ids))]
    tokens = [f"token_id:{i}" for i in ids]
    text = prompt
    if state.fault == "nulls":
        values[len(values) // 2] = None
    elif state.fault == "zeros":
        values = [None] + [0.0] * (len(ids) - 1)
    elif state.fault == "positive":
        values[-1] = 0.5
    elif state.fault == "constant":
        values = [None] + [-1.0] * (len(ids) - 1)
    elif state.fault == "nan":
        values[-1] = float("nan")
    elif state.fault in ("truncated", "truncated_no_usage"):
        tokens, values, offsets = tokens[:-1], values[:-1], offsets[:-1]
    if state.fault in ("strings", "strings_truncated"):  # a server that echoes token strings, not ids
        tokens = [state.tokenizer.decode([i]) for i in ids]
        if state.fault == "strings_truncated":
            tokens, values, offsets = tokens[:-1], values[:-1], offsets[:-1]
    elif state.fault == "template":
        text = "<|im_start|>user\n" + prompt  # a chat template applied on the server
    logprobs = None if state.fault == "no_logprobs" else {
        "tokens": tokens, "token_logprobs": values, "text_offset": offsets, "top_logprobs": None}
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": "length"}, len(ids)


def script_of(prompt: str, scripts: tuple[str, ...]) -> str:
    """The written generation a prompt gets: a fixed function of the prompt, as a model's would be."""
    return scripts[int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "big") % len(scripts)]


def _scripted_choice(state: FakeState, prompt: str, max_tokens: int) -> tuple[dict, int, int]:
    ids = list(state.tokenizer.encode(prompt).ids)
    out = list(state.tokenizer.encode(script_of(prompt, state.scripts), add_special_tokens=False).ids)
    reason = "length" if len(out) > max_tokens else "stop"
    out = out[:max_tokens]
    return ({"index": 0, "text": state.tokenizer.decode(out, skip_special_tokens=False), "finish_reason": reason,
             "logprobs": {"tokens": [f"token_id:{i}" for i in out], "token_logprobs": [-0.1] * len(out)}},
            len(ids), len(out))


def _generate_choice(state: FakeState, prompt: str, max_tokens: int) -> tuple[dict, int, int]:
    if state.scripts:
        return _scripted_choice(state, prompt, max_tokens)
    ids = list(state.tokenizer.encode(prompt).ids)
    out = []
    for _ in range(max_tokens):  # greedy on the fake model: the smallest id of the few tried
        out.append(min(range(30, 40), key=lambda t: -fake_logprob(ids + out + [t], len(ids) + len(out))))
    text = state.tokenizer.decode(out)
    reason = {"finish_abort": "abort", "finish_missing": None}.get(state.fault, "length")
    return ({"index": 0, "text": text, "finish_reason": reason,
             "logprobs": {"tokens": [f"token_id:{i}" for i in out], "token_logprobs": [-0.1] * len(out)}},
            len(ids), len(out))


class Handler(BaseHTTPRequestHandler):
    state: FakeState  # set on the subclass ``serve`` makes

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        with self.state.lock:
            self.state.authorizations.add(self.headers.get("Authorization"))
        if self.state.fault == "redirect":
            self.send_response(302)
            self.send_header("Location", self.state.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.state.fault == "drip":
            data = json.dumps({"object": "list", "data": [{"id": self.state.model}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                for byte in data:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(self.state.drip_s)
            except OSError:  # the client gave up: what a timeout is for
                pass
            return
        state, path = self.state, self.path.rstrip("/")
        where, said = state.says_dtype or (None, None)
        if path == "/v1/models":
            listed = "other-model" if state.fault == "wrong_model" else state.model
            card = {"id": listed, "object": "model", **({"dtype": said} if where == "models" else {})}
            self._send(200, {"object": "list", "data": [card]})
        elif path == "/server_info?config_format=json" and where == "server_info":
            self._send(200, {"vllm_config": {"model_config": {"dtype": said}}})
        elif path == "/metrics" and state.metrics:
            lines = ['vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0"} 1.0',
                     f'vllm:prefix_cache_queries_total{{engine="0"}} {float(state.cache_queries)}',
                     f'vllm:prefix_cache_hits_total{{engine="0"}} {float(state.cache_hits)}']
            if where == "metrics":
                lines.append(f'vllm:model_config_info{{dtype="{said}",engine="0"}} 1.0')
            self._send_text("\n".join(lines) + "\n")
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        state = self.state
        with state.lock:
            state.bodies.append(body)
            state.authorizations.add(self.headers.get("Authorization"))
            state.completions += 1
            seen = state.completions
            network = state.fault in ("http500", "flaky", "hang", "drop") and seen > state.fail_after \
                and state.failed < state.fail_times
            if network:
                state.failed += 1
        if network and state.fault in ("http500", "flaky"):
            self._send(500, {"error": {"message": "internal error"}})
            return
        if network and state.fault == "hang":
            time.sleep(state.hang_s)
            return
        if network and state.fault == "drop":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"choi')
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        if state.fault == "not_json":  # an HTML error page quoting the prompt, as some proxies send
            data = f"<html><body>bad request: {body.get('prompt')}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if body.get("model") != state.model:
            self._send(404, {"error": {"message": f"model {body.get('model')} does not exist"}})
            return
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        if prompts and isinstance(prompts[0], int):  # one prompt as token ids
            prompts = [prompts]
        choices, read, made = [], 0, 0
        for index, prompt in enumerate(prompts):
            if body.get("logprob_token_ids"):
                ids = prompt if isinstance(prompt, list) else list(state.tokenizer.encode(prompt).ids)
                _count_cache(state, ids)
                choices.append(_label_choice(state, ids, list(body["logprob_token_ids"]), index))
                read += len(ids)
                continue
            if body.get("echo"):
                choice, n = _echo_choice(state, prompt, index)
                m = 0
            else:
                choice, n, m = _generate_choice(state, prompt, int(body.get("max_tokens") or 16))
            choices.append(choice)
            read += n
            made += m
        with state.lock:
            state.prompt_tokens += read
        model = "someone-else" if state.fault == "answer_model" else state.model
        answer = {"object": "text_completion", "model": model, "choices": choices,
                  "usage": {"prompt_tokens": read, "completion_tokens": made, "total_tokens": read + made}}
        if state.fault in NO_USAGE:
            del answer["usage"]
        self._send(200, answer)


@contextmanager
def serve(state: FakeState, port: int = 0) -> Iterator[str]:
    """The server on a free loopback port (or ``port``) for the block; yields its base URL."""
    handler = type("FakeHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
