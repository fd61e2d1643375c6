"""The served backend's answer checks: one prompt as the server tokenized and scored it.

Scoring through a server is where the worst silent failures live: a server that ignores ``echo``
with ``logprobs`` returns no prompt log-probabilities, another returns them all 0, and a harness
that reads a missing number as 0 scores every option alike and reports chance level. Every
echoed prompt is checked here before it is used (``check_echo``; the list of refusals is
``cube.harness.backends.served``'s docstring), every item's options are held against scoring
exactly alike (``check_options``), and the server's tokens are read as ids, its own where it
gives them (``token_id:N``), else one per distinct string (``TokenTable``).

Why a module of its own: what makes an answer scorable is a pure function of the answer and the
prompt sent, apart from how the request went out (``served_client``) and what the backend asked
(``served``), and so it is tested on answers alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

from cube.harness.backends.base import ScoreRequest
from cube.errors import text_digest
from cube.harness.backends.served_info import ServerError
from cube.protocol.tokenization import common_prefix_len

TOKEN_ID = re.compile(r"token_id:(-?\d+)")


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
    they cannot be scored (the refusals listed in ``cube.harness.backends.served``'s docstring)."""
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


__all__ = ["TOKEN_ID", "Echo", "TokenTable", "check_echo", "check_options"]
