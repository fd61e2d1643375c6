"""The served backend's HTTP client: where the server is, and JSON over HTTP with retries.

``ServerSettings`` is what ``cube run --base-url ... --model ... --revision ...`` says about the
server, with the identity a served run records (the URL, the model id and the declared revision;
nothing hashes the weights). ``ServerClient`` sends each request through the guarded opener
(``http_guard``: no redirect to another origin, no key over plain HTTP to another machine,
``--request-timeout`` bounding the whole request), tries 429, 5xx, timeouts and dropped
connections again with exponential backoff, and raises ``ServerError`` naming the URL on any
other failure; ``check_model`` holds ``--model`` to the server's model list.

Why a module of its own: how cube talks to a server is apart from what it asks (the backend,
``served``) and from how it checks the answers (``served_answers``): nothing here reads a
log-probability.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from threading import Lock

from cube.errors import ConfigError, text_digest
from cube.harness.backends.http_guard import Deadline, RedirectRefused, check_key_transport, opener
from cube.harness.backends.served_info import ServerError

API_KEY_ENV = "OPENAI_API_KEY"  # read from the environment only: never an option, never logged
DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT_S = 120.0
RETRIES = 4  # after the first try: 5 tries, waits of 1, 2, 4, 8 s
BACKOFF_S = 1.0
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


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


__all__ = ["API_KEY_ENV", "DEFAULT_CONCURRENCY", "DEFAULT_TIMEOUT_S", "ServerClient", "ServerSettings", "check_model"]
