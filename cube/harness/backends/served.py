"""The served-model backend: score through an OpenAI-compatible ``/v1/completions`` endpoint
(``vllm serve``, SGLang, llama.cpp's server, TGI), as most teams serve the models they evaluate.

Scoring through a server is where the worst silent failures live: a server that ignores ``echo``
with ``logprobs`` (llama.cpp#27174) returns no prompt log-probabilities, another returns them all
0 (facebookresearch/lingua#28), and a harness that reads a missing number as 0 scores every
option alike and reports chance level without a word. Here every answer is checked before it is
used (``served_answers``: ``check_echo``, ``check_options``), and each failure is one line naming
what the server did:

- no prompt log-probabilities, a null where one was due, or fewer prompt tokens scored than the
  server says it read (``usage.prompt_tokens``);
- a log-probability above 0, every one of a prompt exactly 0, or every option of an item scored
  exactly alike;
- an echoed prompt that differs from the one sent (a server applying a template, normalising
  whitespace);
- a model id that differs from ``--model`` (``/v1/models`` and each answer's ``model``);
- echoed tokens that do not re-assemble the prompt sent (``served_echo.check_reassembly``), and
  a NaN log-probability;
- a redirect to another scheme, host or port, and an API key bound for plain HTTP to another
  machine (``http_guard``); ``--request-timeout`` bounds each whole request.

Which tokens are the continuation's is read from the server's own tokens, never by re-tokenizing
here: each request's context is echoed alone and with each continuation, and the continuation is
what the latter holds past the longest common prefix of the two token lists: cube's in-context
rule (``cube.protocol.tokenization``), computed on the tokens the server actually scored. The
tokens are read as ids where the server gives them (vLLM's ``return_tokens_as_token_ids``), else
as the server's token strings. The run's label audit is made on the same tokens
(``served_audit.ServerTokenizer``), and where cube also has the model's tokenizer (``--model`` is
a demo model or a folder, or ``--tokenizer`` names one) both audits must agree, or the run stops
naming the first difference (``served_audit.compare_audits``).

Labels that are one token in context, where cube has the server's tokenizer (the audits agreed
id for id), take the fast path instead (``served_fast``): one next-token request per (item, cell)
with vLLM's ``logprob_token_ids``, which the prefix cache serves, checked by a probe before it is
trusted. What the server says about itself (its precision, its prefix-cache counters) is read by
``served_info``.

Requests go out ``--concurrency`` at a time, each with a timeout, retried with exponential
backoff on 429, 5xx and connection errors (``served_client``); one that keeps failing raises
``ServerError`` out of ``score``/``generate``, so the runner stops before the shard it was
computing is written: a resume loses nothing and half-records nothing.

Identity: the server's URL, the model id it reports and the revision the user declares; nothing
hashes the weights, and the run's ``model_source`` says so.

This module is the backend itself (``ServedBackend``, registered as ``--backend openai``) and the
served model a run scores (``ServedModel``, which opens it): what each request asks of the server
and how the answers become a ``Backend``'s log-probabilities and generations. How a request goes
out, how an answer is checked and how the audit reads the server are its siblings' concerns.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from threading import Lock
from typing import Any

import numpy as np

from cube.errors import ConfigError, CubeError, text_digest
from cube.harness.backends.base import (
    Backend,
    ContinuationLogprobs,
    ForwardCounter,
    GenerationResult,
    ScoreRequest,
    finish_reason,
)
from cube.harness.backends.served_answers import TOKEN_ID, Echo, TokenTable, check_echo, check_options
from cube.harness.backends.served_audit import ServerTokenizer
from cube.harness.backends.served_client import ServerClient, ServerSettings, check_model
from cube.harness.backends.served_echo import check_reassembly
from cube.harness.backends.served_fast import FastPath
from cube.harness.backends.served_info import ServerError, prefix_cache_counters
from cube.protocol.tokenization import common_prefix_len

PROMPTS_PER_REQUEST = 16  # prompts one /v1/completions request carries (the API takes a list)


# ---- the backend -----------------------------------------------------------------------------------

@dataclass
class ServedCounter:
    """What the server was asked for: requests, prompts, and the prompt tokens it processed."""

    requests: int = 0
    prompts: int = 0
    prompt_tokens: int = 0  # usage.prompt_tokens summed: what the server read
    completion_tokens: int = 0
    fast_prompts: int = 0  # of the prompts, those the fast path sent (served_fast)


class ServedBackend(Backend):
    """Scores and generates through ``/v1/completions``; see the module docstring."""

    def __init__(self, client: ServerClient, check: bool = True):
        self.client = client
        self.settings = client.settings
        self.table = TokenTable()
        self.token_text: dict[int, str] = {}  # id -> the text it covers in an echoed prompt
        self.counter = ForwardCounter()
        self.served = ServedCounter()
        self._echoes: dict[str, Echo] = {}
        self._lock = Lock()
        self.tokenizer = ServerTokenizer(self)
        self.finish_reasons: list[str | None] = []
        self.fast = FastPath(self)
        self.local = None  # the ModelSpec of cube's copy of the served tokenizer, where there is one
        self._local_tokenizer = None
        if check:
            check_model(client)
        self._cache_before = prefix_cache_counters(client) if check else None

    @classmethod
    def from_config(cls, model, dtype: str | None = None, device: str | None = None) -> ServedBackend:
        """``model``: the run's ``ServedModel`` (``served_model``), whose backend already talked to
        the server for the audit; ``dtype`` and ``device`` are the server's business."""
        if isinstance(model, ServedModel):
            return model.backend
        raise ConfigError("--backend openai needs --base-url URL (the OpenAI-compatible server) and the served "
                          f"model's id as --model, not {model!r} alone")

    def local_tokenizer(self):
        """cube's copy of the served model's tokenizer (``--tokenizer``), loaded once; else None."""
        if self.local is not None and self._local_tokenizer is None:
            self._local_tokenizer = self.local.tokenizer()
        return self._local_tokenizer

    # -- talking to the server

    def _check_model_field(self, answer: dict, where: str) -> None:
        reported = answer.get("model") if isinstance(answer, dict) else None
        if reported is not None and reported != self.settings.model:
            raise ServerError(f"{where}: answered as model {reported!r}, not --model {self.settings.model!r}")

    def _echo_batch(self, prompts: list[str]) -> list[Echo]:
        where = f"{self.settings.base_url}/completions"
        answer = self.client.completions({
            "prompt": prompts, "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0.0,
            "return_tokens_as_token_ids": True,
        })
        self._check_model_field(answer, where)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != len(prompts):
            raise ServerError(f"{where}: {len(choices) if isinstance(choices, list) else 'no'} choices for "
                              f"{len(prompts)} prompts")
        ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        read = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        echoes = []
        for prompt, choice in zip(prompts, ordered):
            tokens, values, offsets = check_echo(prompt, choice, where)
            ids = self.table.ids(tokens)
            check_reassembly(prompt, tokens, ids, bool(self.table.server_ids), self.local_tokenizer(),
                             isinstance(read, int), where)
            echo = Echo(prompt, tuple(tokens), ids,
                        tuple(float("nan") if k == 0 or v is None else float(v) for k, v in enumerate(values)),
                        tuple(offsets))
            echoes.append(echo)
        sent = sum(len(e.ids) for e in echoes)
        if isinstance(read, int) and sent < read:
            raise ServerError(f"{where}: the server read {read} prompt tokens but scored {sent}: fewer prompt tokens "
                              "scored than sent (a truncated echo)")
        with self._lock:
            self.served.requests += 1
            self.served.prompts += len(prompts)
            self.served.prompt_tokens += read if isinstance(read, int) else sent
            self.counter.forward_tokens += read if isinstance(read, int) else sent
            for echo in echoes:
                self._note_token_text(echo)
        return echoes

    def _note_token_text(self, echo: Echo) -> None:
        """Each id's text where the answer shows it: the server's string, else the id's span of
        the echoed prompt (``text_offset``) where no other token shares that span (a byte of a
        character split over tokens has no text of its own, and is left unknown)."""
        starts = list(echo.offsets)
        if any(b < a for a, b in zip(starts, starts[1:])) or any(o > len(echo.text) for o in starts):
            starts = []  # offsets of the strings it returned (vLLM's token_id:N), not of the text
        for k, token_id in enumerate(echo.ids):
            if token_id in self.token_text:
                continue
            if not TOKEN_ID.fullmatch(echo.tokens[k]):
                self.token_text[token_id] = echo.tokens[k]
            elif len(starts) == len(echo.ids):
                end = starts[k + 1] if k + 1 < len(starts) else len(echo.text)
                shared = (k > 0 and starts[k - 1] == starts[k]) or end <= starts[k]
                if not shared:
                    self.token_text[token_id] = echo.text[starts[k]:end]

    def echo(self, prompts: list[str]) -> list[Echo]:
        """Each prompt as the server scored it; each distinct text is sent once per backend,
        ``PROMPTS_PER_REQUEST`` to a request, ``concurrency`` requests at a time."""
        todo = list(dict.fromkeys(p for p in prompts if p not in self._echoes))
        chunks = [todo[i:i + PROMPTS_PER_REQUEST] for i in range(0, len(todo), PROMPTS_PER_REQUEST)]
        if len(chunks) == 1:
            results = [self._echo_batch(chunks[0])]
        elif chunks:
            with ThreadPoolExecutor(max_workers=self.settings.concurrency) as pool:
                results = list(pool.map(self._echo_batch, chunks))
        else:
            results = []
        for chunk, echoes in zip(chunks, results):
            for prompt, echo in zip(chunk, echoes):
                self._echoes[prompt] = echo
        out = [self._echoes[p] for p in prompts]
        if len(self._echoes) > 50_000:  # a long run: keep memory bounded (the audit's prompts are re-sent)
            self._echoes.clear()
        return out

    # -- the Backend interface

    def score(self, requests: list[ScoreRequest], batch_size: int = 16) -> list[list[ContinuationLogprobs]]:
        """Labels one token in context through the fast path (``served_fast``), the rest (and all
        of them where the fast path is off) through the echo path (``score_echo``)."""
        for request in requests:
            if request.tokenization != "in_context":
                raise ConfigError(f"tokenization {request.tokenization!r} needs a label tokenized apart from its "
                                  "prompt, which a server does not do: use an in-context answer context")
        fast = self.fast.score(self.fast.plan(requests), requests)
        rest = [k for k in range(len(requests)) if k not in fast]
        if rest and self.fast.report.order is None:  # no fast request probed the order: the echo path's
            self.fast.probe_echo([requests[k] for k in rest])
        echoed = dict(zip(rest, self.score_echo([requests[k] for k in rest]))) if rest else {}
        results = [fast[k] if k in fast else echoed[k] for k in range(len(requests))]
        for request, per_item in zip(requests, results):
            check_options(request, [c.total for c in per_item])
        return results

    def run_log(self) -> dict[str, Any]:
        """The run log's server fields: what was asked, the prefix cache's hits (``/metrics``,
        where the server counts them) and what the probe found."""
        after = prefix_cache_counters(self.client) if self._cache_before is not None else None
        cache = None if after is None else {k: after[k] - self._cache_before[k] for k in after}
        return {"server_requests": self.served.requests, "server_prompts": self.served.prompts,
                "server_prompt_tokens": self.served.prompt_tokens, "server_fast_prompts": self.served.fast_prompts,
                "server_prefix_cache": cache, "server_probe": self.fast.report.to_log()}

    def score_echo(self, requests: list[ScoreRequest]) -> list[list[ContinuationLogprobs]]:
        """Each option's tokens and log-probabilities from echoed prompts (module docstring)."""
        texts = [t for r in requests for t in (r.context, *(r.context + c for c in r.continuations))]
        echoes = dict(zip(texts, self.echo(texts)))
        results = []
        for request in requests:
            ctx = echoes[request.context]
            per_item = []
            for text in request.continuations:
                full = echoes[request.context + text]
                prefix = common_prefix_len(ctx.ids, full.ids)
                if prefix == 0:
                    raise CubeError(f"continuation {text_digest(text)} after context {text_digest(request.context)} "
                                    "has no context token to condition on (the server's tokens share none)")
                ids = full.ids[prefix:]
                per_item.append(ContinuationLogprobs(ids, np.asarray(full.logprobs[prefix:], dtype=np.float64),
                                                     prefix < len(ctx.ids)))
                self.counter.scored_tokens += len(ids)
            results.append(per_item)
        return results

    def _generate_one(self, prompt: str, max_new_tokens: int) -> GenerationResult:
        where = f"{self.settings.base_url}/completions"
        answer = self.client.completions({"prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0.0,
                                          "logprobs": 1, "return_tokens_as_token_ids": True})
        self._check_model_field(answer, where)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ServerError(f"{where}: no choice in the answer to a generation")
        choice = choices[0]
        text = choice.get("text")
        if not isinstance(text, str):
            raise ServerError(f"{where}: a generation without text")
        logprobs = choice.get("logprobs")
        tokens = [str(t) for t in logprobs.get("tokens") or []] if isinstance(logprobs, dict) else []
        ids = self.table.ids(tokens) if tokens else ()
        usage = answer.get("usage") if isinstance(answer, dict) else None
        with self._lock:
            self.served.requests += 1
            self.served.prompts += 1
            if isinstance(usage, dict):
                self.served.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                self.served.completion_tokens += int(usage.get("completion_tokens") or 0)
            self.finish_reasons.append(choice.get("finish_reason"))
        reason = choice.get("finish_reason")
        if reason is None and ids:
            reason = finish_reason(tuple(ids), max_new_tokens)  # a server that does not say: from the count
        if reason not in ("stop", "length"):
            raise ServerError(f"{where}: a generation ended with finish_reason {reason!r}, neither 'stop' nor "
                              f"'length' (cube records whether an answer was truncated; check the server's log)")
        return GenerationResult(text, tuple(ids), reason)

    def generate(self, prompts: list[str], max_new_tokens: int, batch_size: int = 8) -> list[GenerationResult]:
        """Greedy (temperature 0), stopped by the server at the model's end of sequence or
        ``max_new_tokens``; the finish reasons are kept in ``finish_reasons``."""
        if max_new_tokens < 1 or not prompts:
            return [GenerationResult("", (), "length") for _ in prompts]
        with ThreadPoolExecutor(max_workers=self.settings.concurrency) as pool:
            return list(pool.map(lambda p: self._generate_one(p, max_new_tokens), prompts))


# ---- the served model, as a run's --model ----------------------------------------------------------

@dataclass
class ServedModel:
    """What ``cube.harness.build.build_spec`` reads of a model (its name, identity, tokenizer and
    source), for a model behind a server: the tokenizer is the server's own (``ServerTokenizer``),
    the identity the URL, model id and declared revision."""

    settings: ServerSettings
    backend: ServedBackend
    local: Any = None  # the ModelSpec of the same model where cube has its tokenizer, else None
    kind: str = "server"

    @property
    def name(self) -> str:
        """The name records carry: the id's last path part (``vllm serve /models/X`` lists /models/X)."""
        return self.settings.model.rstrip("/").rsplit("/", 1)[-1]

    @property
    def described(self) -> str:
        return self.settings.describe()

    def identity(self):
        from cube.harness.model_spec import ModelIdentity

        return ModelIdentity(self.settings.digest())

    def tokenizer(self) -> ServerTokenizer:
        return self.backend.tokenizer

    def chat_template(self):
        """The chat template cube renders chat cells with (then sent as plain text): the local
        model's (``--tokenizer`` or ``--model`` as a demo model or folder); a server's own is not
        seen through ``/v1/completions``."""
        if self.local is None:
            raise ConfigError(f"--chat-template model needs the chat template of served model {self.settings.model!r}: "
                              "give --tokenizer SPEC (a folder or demo model with it); the server's own is not "
                              "visible through /v1/completions")
        return self.local.chat_template()


def served_model(settings: ServerSettings, tokenizer_spec: str | None = None,
                 environ: dict[str, str] | None = None) -> ServedModel:
    """The served model of a run: the server's model list checked now (before the audit).

    ``tokenizer_spec``: a model SPEC whose tokenizer cube has (``--tokenizer``); by default
    ``--model`` itself where it names a demo model or a local folder, else none."""
    from cube.harness.model_spec import parse_model

    local = None
    if tokenizer_spec is not None:
        local = parse_model(tokenizer_spec)
    else:
        try:
            candidate = parse_model(settings.model)
        except ConfigError:
            candidate = None
        if candidate is not None and candidate.kind in ("demo", "folder"):
            local = candidate
    backend = ServedBackend(ServerClient(settings, environ))
    backend.local = local
    return ServedModel(settings, backend, local)


__all__ = ["ServedBackend", "ServedCounter", "ServedModel", "served_model"]
