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
          "answer_model", "http500", "flaky", "hang", "drop")


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
    # Written generations (a reasoning checkpoint's, with thinking blocks): a prompt gets the one its
    # sha256 picks, cut at max_tokens ("length") or whole ("stop"); empty: the fake model's greedy ids
    scripts: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)


def _echo_choice(state: FakeState, prompt: str, index: int) -> tuple[dict, int]:
    enc = state.tokenizer.encode(prompt)
    ids = list(enc.ids)
    offsets = [start for start, _ in enc.offsets]
    values: list = [None] + [round(fake_logprob(ids, k), 6) for k in range(1, len(ids))]
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
    elif state.fault == "truncated":
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

    def do_GET(self):  # noqa: N802
        if self.path.rstrip("/") == "/v1/models":
            listed = "other-model" if self.state.fault == "wrong_model" else self.state.model
            self._send(200, {"object": "list", "data": [{"id": listed, "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        state = self.state
        with state.lock:
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
        if body.get("model") != state.model:
            self._send(404, {"error": {"message": f"model {body.get('model')} does not exist"}})
            return
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices, read, made = [], 0, 0
        for index, prompt in enumerate(prompts):
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
        self._send(200, {"object": "text_completion", "model": model, "choices": choices,
                         "usage": {"prompt_tokens": read, "completion_tokens": made,
                                   "total_tokens": read + made}})


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
