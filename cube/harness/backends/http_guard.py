"""What cube's HTTP client refuses of a server before trusting it with a key or a run's time.

urllib follows a redirect to wherever it points and sends the request's headers there, the
``Authorization: Bearer <key>`` among them: a server answering ``302`` to another host would be
handed the user's API key, and the run would go on scoring whatever answered there. Its timeout
is per socket read, so a server dripping one byte every half second never times out. Here:

- a redirect is followed only to the same scheme, host and port (``SameOriginRedirects``); any
  other is refused in one line naming both;
- the key is never sent over plain HTTP to a host other than this machine's loopback unless the
  user says so (``check_key_transport``: ``cube run --key-over-http``);
- ``--request-timeout`` bounds the whole request, connection to last byte (``Deadline``): when it
  passes, the socket is shut and the request fails as a timeout.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import threading
import urllib.parse
import urllib.request

from cube.errors import ConfigError, CubeError


class RedirectRefused(CubeError):
    """A server redirected a request to another scheme, host or port."""


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, the port spelt out (80/443 where the URL gives none)."""
    parsed = urllib.parse.urlsplit(url)
    port = parsed.port or {"http": 80, "https": 443}.get(parsed.scheme, 0)
    return f"{parsed.scheme}://{parsed.hostname}:{port}"


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (localhost, 127.0.0.0/8, ::1)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_key_transport(url: str, has_key: bool, key_over_http: bool) -> None:
    """An API key goes over plain HTTP only to loopback, or where the user said so."""
    if has_key and urllib.parse.urlsplit(url).scheme == "http" and not is_loopback(url) and not key_over_http:
        raise ConfigError(f"--base-url {url} is plain HTTP to another machine: the API key would cross the network "
                          "unencrypted; use https, or pass --key-over-http if that network is yours")


class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect within one scheme, host and port; refuses any other (module docstring)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        target = urllib.parse.urljoin(req.full_url, newurl)
        if origin(target) != origin(req.full_url):
            raise RedirectRefused(f"{req.full_url} redirected (HTTP {code}) to {target}: another scheme, host or port "
                                  f"({origin(req.full_url)} -> {origin(target)}); cube sends its requests and API key "
                                  "only to --base-url's own: give the server's final URL as --base-url")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class Deadline:
    """One request's wall-clock limit: after ``seconds`` every socket it opened is shut down."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def start(self) -> Deadline:
        self._timer.start()
        return self

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed: nothing left to stop
        pass


def _watched(base: type, deadline: Deadline):
    class Connection(base):
        def connect(self):
            super().connect()
            deadline.watch(self.sock)

    return Connection


class _DeadlineHTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self.deadline), req)


class _DeadlineHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline):
        super().__init__()
        self.deadline = deadline

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self.deadline), req,
                            context=self._context)


def opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    """An opener whose connections ``deadline`` watches and whose redirects stay on one origin."""
    return urllib.request.build_opener(_DeadlineHTTP(deadline), _DeadlineHTTPS(deadline), SameOriginRedirects())


__all__ = ["Deadline", "RedirectRefused", "SameOriginRedirects", "check_key_transport", "is_loopback", "opener",
           "origin"]
