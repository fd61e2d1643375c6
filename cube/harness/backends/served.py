"""The served-model backend: score through an OpenAI-compatible ``/v1/completions`` endpoint
(``vllm serve``, SGLang, llama.cpp's server, TGI), as most teams serve the models they evaluate.

Scoring through a server is where the worst silent failures live: a server that ignores ``echo``
with ``logprobs`` (llama.cpp#27174) returns no prompt log-probabilities, another returns them all
0 (facebookresearch/lingua#28), and a harness that reads a missing number as 0 scores every
option alike and reports chance level without a word. Here every answer is checked before it is
used (``check_echo``, ``check_options``), and each failure is one line naming what the server did:

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
(``ServerTokenizer``), and where cube also has the model's tokenizer (``--model`` is a demo model
or a folder, or ``--tokenizer`` names one) both audits must agree, or the run stops naming the
first difference (``compare_audits``).

Labels that are one token in context, where cube has the server's tokenizer (the audits agreed
id for id), take the fast path instead (``served_fast``): one next-token request per (item, cell)
with vLLM's ``logprob_token_ids``, which the prefix cache serves, checked by a probe before it is
trusted. What the server says about itself (its precision, its prefix-cache counters) is read by
``served_info``.

Requests go out ``--concurrency`` at a time, each with a timeout, retried with exponential
backoff on 429, 5xx and connection errors; one that keeps failing raises ``ServerError`` out of
``score``/``generate``, so the runner stops before the shard it was computing is written: a
resume loses nothing and half-records nothing.

Identity: the server's URL, the model id it reports and the revision the user declares; nothing
hashes the weights, and the run's ``model_source`` says so.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

import numpy as np

from cube.errors import ConfigError, CubeError
from cube.harness.backends.base import (
    Backend,
    ContinuationLogprobs,
    ForwardCounter,
    GenerationResult,
    ScoreRequest,
    finish_reason,
)
from cube.errors import text_digest
from cube.harness.backends.http_guard import Deadline, RedirectRefused, check_key_transport, opener
from cube.harness.backends.served_echo import check_reassembly
from cube.harness.backends.served_fast import FastPath
from cube.harness.backends.served_info import ServerError, prefix_cache_counters
from cube.protocol.tokenization import common_prefix_len

API_KEY_ENV = "OPENAI_API_KEY"  # read from the environment only: never an option, never logged
DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT_S = 120.0
RETRIES = 4  # after the first try: 5 tries, waits of 1, 2, 4, 8 s
BACKOFF_S = 1.0
PROMPTS_PER_REQUEST = 16  # prompts one /v1/completions request carries (the API takes a list)
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
TOKEN_ID = re.compile(r"token_id:(-?\d+)")


# ---- settings and the HTTP client ----------------------------------------------------------------

@dataclass(frozen=True)
class ServerSettings:
    """Where the model is served and how cube talks to it (``cube run --base-url ...``)."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1 (a URL without /v1 gets it)
    model: str  # the served model id, as /v1/models lists it
    revision: str | None = None  # what the user declares the weights are (recorded, not checked)
    api_key_env: str = API_KEY_ENV
    concurrency: int = DEFAULT_CONCURRENCY
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = RETRIES
    backoff_s: float = BACKOFF_S
    key_over_http: bool = False  # the user's word that the key may cross plain HTTP to another machine

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"--base-url {self.base_url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000/v1")
        url = self.base_url.rstrip("/")
        if not url.endswith("/v1"):
            url += "/v1"
        object.__setattr__(self, "base_url", url)
        if self.concurrency < 1:
            raise ConfigError(f"--concurrency {self.concurrency} must be at least 1")
        if self.timeout_s <= 0:
            raise ConfigError(f"--request-timeout {self.timeout_s} must be more than 0 seconds")

    def describe(self) -> str:
        """The run log's ``model_source``: the server, the id, the declared revision, and that
        nothing was hashed."""
        revision = f" revision {self.revision}" if self.revision else " (no revision declared)"
        return f"server {self.base_url} model {self.model}{revision}; weights not hashed"

    def digest(self) -> str:
        """The identity cells record (``model_sha256``): URL, model id and declared revision."""
        text = "\n".join(["served", self.base_url, self.model, self.revision or ""])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ServerClient:
    """JSON over HTTP with the standard library: a timeout per request, retries with backoff."""

    def __init__(self, settings: ServerSettings, environ: dict[str, str] | None = None, sleep=time.sleep):
        self.settings = settings
        environ = os.environ if environ is None else environ
        self._api_key = environ.get(settings.api_key_env) or None
        check_key_transport(settings.base_url, self._api_key is not None, settings.key_over_http)
        self._sleep = sleep
        self._lock = Lock()
        self.requests_sent = 0  # HTTP requests, retries included
        self.retried = 0

    def _once(self, method: str, path: str, body: dict | None) -> dict:
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.settings.base_url + path, data=data, method=method, headers=headers)
        with self._lock:
            self.requests_sent += 1
        deadline = Deadline(self.settings.timeout_s).start()  # the whole request, not each read
        try:
            with opener(deadline).open(request, timeout=self.settings.timeout_s) as response:
                payload = response.read()
        except RedirectRefused as exc:
            raise ServerError(str(exc)) from None
        except (OSError, http.client.HTTPException):
            if deadline.expired:
                raise TimeoutError(f"the whole request took more than {self.settings.timeout_s:g} s") from None
            raise
        finally:
            deadline.cancel()
        if deadline.expired:
            raise TimeoutError(f"the whole request took more than {self.settings.timeout_s:g} s")
        try:
            return json.loads(payload)
        except ValueError:
            raise ServerError(f"{self.settings.base_url}{path} answered with no JSON ("
                              f"{text_digest(payload.decode('utf-8', 'replace'))}; not shown: it may quote the "
                              "prompt)") from None

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        """The JSON answer of ``method path``; 429, 5xx, timeouts and dropped connections are
        tried again after 1, 2, 4 ... s; any other HTTP error, or the last failure, is a
        ``ServerError`` naming the URL and what it said."""
        url = self.settings.base_url + path
        for attempt in range(self.settings.retries + 1):
            try:
                return self._once(method, path, body)
            except urllib.error.HTTPError as exc:
                detail = _error_text(exc)
                if exc.code not in RETRY_STATUS:
                    raise ServerError(f"{url}: HTTP {exc.code} {detail}") from None
                failure = f"HTTP {exc.code} {detail}"
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout,
                    TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                failure = (f"no answer within {self.settings.timeout_s:g} s"
                           if isinstance(reason, (socket.timeout, TimeoutError)) else
                           f"connection failed ({type(reason).__name__}: {reason})")
            if attempt < self.settings.retries:
                with self._lock:
                    self.retried += 1
                self._sleep(self.settings.backoff_s * 2 ** attempt)
        raise ServerError(f"{url}: {failure} after {self.settings.retries + 1} tries; the shards written so far "
                          "are kept: run the same command again to resume")

    def get_text(self, path: str) -> str | None:
        """The body of ``GET`` ``path`` under the server's root (``/metrics``, ``/v1/models``), or
        None on any failure: asked once, for what a server may or may not say about itself."""
        root = self.settings.base_url[:-len("/v1")]
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        # the guarded opener, as every request: the key never follows a redirect to another origin
        deadline = Deadline(min(self.settings.timeout_s, 10.0)).start()
        try:
            request = urllib.request.Request(root + path, headers=headers)
            with opener(deadline).open(request, timeout=min(self.settings.timeout_s, 10.0)) as response:
                return response.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException, ValueError, RedirectRefused):
            return None
        finally:
            deadline.cancel()

    def models(self) -> list[str]:
        answer = self.call("GET", "/models")
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise ServerError(f"{self.settings.base_url}/models answered without a model list: {str(answer)[:120]}")
        return [str(m.get("id")) for m in data if isinstance(m, dict)]

    def completions(self, body: dict) -> dict:
        return self.call("POST", "/completions", {"model": self.settings.model, **body})


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a body that cannot be read says nothing more
        text = ""
    return " ".join(text.split())[:200]


def check_model(client: ServerClient) -> None:
    """``--model`` must be a model the server lists (``/v1/models``)."""
    served = client.models()
    if client.settings.model not in served:
        raise ServerError(f"{client.settings.base_url} serves {', '.join(repr(m) for m in served) or 'no model'}, "
                          f"not --model {client.settings.model!r}: give the id it lists")


# ---- one prompt as the server tokenized and scored it --------------------------------------------

@dataclass(frozen=True)
class Echo:
    """A prompt's tokens as the server read them, with log p(token k | tokens before k)."""

    text: str
    tokens: tuple[str, ...]  # the server's strings ("token_id:N" where it gives ids)
    ids: tuple[int, ...]  # the server's ids, or ids interned from its strings (``TokenTable``)
    logprobs: tuple[float, ...]  # position 0 is nan: nothing precedes it
    offsets: tuple[int, ...] = ()


@dataclass
class TokenTable:
    """Token ids: the server's own (``token_id:N``), else one id per distinct token string seen."""

    server_ids: bool | None = None  # None until the first answer says which
    strings: dict[str, int] = field(default_factory=dict)
    by_id: dict[int, str] = field(default_factory=dict)
    lock: Lock = field(default_factory=Lock)

    def ids(self, tokens: list[str]) -> tuple[int, ...]:
        with self.lock:
            parsed = [TOKEN_ID.fullmatch(t) for t in tokens]
            if self.server_ids is None and tokens:
                self.server_ids = all(parsed)
            if self.server_ids:
                if not all(parsed):
                    raise ServerError("the server returned token ids for some prompts and strings for others")
                return tuple(int(m[1]) for m in parsed)
            out = []
            for token in tokens:
                if token not in self.strings:
                    self.strings[token] = len(self.strings)
                    self.by_id[self.strings[token]] = token
                out.append(self.strings[token])
            return tuple(out)


def check_echo(prompt: str, choice: Any, where: str) -> tuple[list[str], list[float | None], list[int]]:
    """The tokens, log-probabilities and offsets of one echoed prompt, or one line saying why
    they cannot be scored (section 2 of the module docstring)."""
    if not isinstance(choice, dict):
        raise ServerError(f"{where}: answer without a choice for the prompt")
    text = choice.get("text")
    if not isinstance(text, str) or not text.startswith(prompt):
        got = text if isinstance(text, str) else None
        at = common_prefix_len(prompt, got) if got is not None else 0
        raise ServerError(f"{where}: the echoed prompt differs from the one sent at character {at} of "
                          f"{len(prompt)} (prompt {text_digest(prompt)}; a chat template or whitespace normalisation "
                          "on the server?): cube scores only the text it sent")
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("token_logprobs"), list) \
            or not isinstance(logprobs.get("tokens"), list) or not logprobs["tokens"]:
        raise ServerError(f"{where}: the server returned no prompt log-probabilities for echo=true, logprobs=1 "
                          "(llama.cpp's server is known to; lm-eval then scores chance level): it cannot be scored")
    tokens = [str(t) for t in logprobs["tokens"]]
    values = list(logprobs["token_logprobs"])
    offsets = logprobs.get("text_offset") or []
    if len(values) != len(tokens):
        raise ServerError(f"{where}: {len(tokens)} tokens but {len(values)} log-probabilities echoed")
    if len(text) > len(prompt):  # a server that generated a token anyway (max_tokens 0 taken as 1)
        if len(offsets) != len(tokens):
            raise ServerError(f"{where}: the server generated past the prompt and gave no text offsets to cut it")
        keep = sum(1 for o in offsets if o < len(prompt))
        tokens, values, offsets = tokens[:keep], values[:keep], offsets[:keep]
    nulls = [k for k, v in enumerate(values) if k > 0 and not isinstance(v, (int, float))]
    if nulls:
        raise ServerError(f"{where}: {len(nulls)} of {len(values) - 1} prompt tokens have no log-probability "
                          f"(null at position {nulls[0]}): it cannot be scored")
    scored = [float(v) for v in values[1:]]
    if any(math.isnan(v) for v in scored):
        raise ServerError(f"{where}: log-probability NaN from the server at position "
                          f"{next(k for k, v in enumerate(scored, 1) if math.isnan(v))}: not a number, it cannot be scored")
    positive = [v for v in scored if v > 0]
    if positive:
        raise ServerError(f"{where}: log-probability {positive[0]!r} > 0 from the server; a log-probability is at "
                          "most 0: these are not log-probabilities")
    if len(scored) >= 2 and all(v == 0.0 for v in scored):
        raise ServerError(f"{where}: every prompt log-probability is 0 ({len(scored)} tokens): the server does not "
                          "score prompts (lingua#28); scoring would be chance level")
    return tokens, values, [int(o) for o in offsets]


def check_options(request: ScoreRequest, totals: list[float]) -> None:
    """Every option of an item scored exactly alike is a server scoring nothing, not a tie."""
    distinct = len(set(request.continuations)) > 1
    if distinct and len(totals) > 1 and len(set(totals)) == 1:
        raise ServerError(f"every option after context {text_digest(request.context)} got log-likelihood "
                          f"{totals[0]!r} from the server: constant scores, not a model's (scoring would be chance level)")


# ---- the server's tokenizer, for the audit ---------------------------------------------------------

@dataclass(frozen=True)
class ServerEncoding:
    ids: list[int]


class ServerTokenizer:
    """The tokens the server reads a text as (an ``Encoder``): what the run's audit is made on.

    ``add_special_tokens=False`` cannot be asked of a server (it adds its own): a protocol that
    tokenizes a label apart from its prompt (``tokenization: separate``) is refused by name.
    """

    def __init__(self, backend: ServedBackend, local=None):
        self.backend = backend
        self.local = local  # cube's copy of the tokenizer, once the audits agree: it names the tokens

    @property
    def decoder(self):
        """The local tokenizer's decoder, so the audit shows each token's bytes (``token_bytes``)."""
        return getattr(self.local, "decoder", None) if self.local is not None else None

    def encode(self, sequence: str, add_special_tokens: bool = True) -> ServerEncoding:
        if not add_special_tokens:
            raise ConfigError("an answer context with `tokenization: separate` needs a label tokenized apart from "
                              "its prompt, which a server does not do: use an in-context answer context with "
                              "--backend openai")
        return ServerEncoding(list(self.backend.echo([sequence])[0].ids))

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary's string (the local tokenizer's), else the text the server showed for
        it, else ``token_id:N``: a token is never missing from the audit's table."""
        if self.local is not None:
            return self.local.id_to_token(token_id)
        return self.backend.token_text.get(token_id) or f"token_id:{token_id}"


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


def compare_audits(served: list, local: list, model: str, ids_comparable: bool = True) -> None:
    """The label audit on the server's tokens must be the one on cube's copy of the tokenizer:
    same ids for every label of every cell (where the server gives ids; else the same number of
    tokens), same verdict. The first difference stops the run."""
    for s, lo in zip(served, local):
        for s_label, l_label in zip(s.cell.labels, lo.cell.labels):
            differs = s_label.ids != l_label.ids if ids_comparable else len(s_label.ids) != len(l_label.ids)
            if differs:
                raise ServerError(
                    f"{model}: cell {s.key}, label {s_label.label!r}: the server scores tokens {list(s_label.ids)} "
                    f"but the model's tokenizer gives {list(l_label.ids)} (a server-side template, whitespace "
                    "normalisation or another tokenizer): the run stops rather than score other tokens")
        if s.cell.verdict != lo.cell.verdict:
            raise ServerError(f"{model}: cell {s.key}: verdict {s.cell.verdict} on the server's tokens, "
                              f"{lo.cell.verdict} on the model's tokenizer")


__all__ = [
    "API_KEY_ENV", "Echo", "ServedBackend", "ServedCounter", "ServedModel", "ServerClient", "ServerError",
    "ServerSettings", "ServerTokenizer", "check_echo", "check_model", "check_options", "compare_audits",
    "served_model",
]
