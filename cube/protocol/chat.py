"""The chat-template axis: a prompt shown as the checkpoint's own chat, or as plain text.

Instruct checkpoints are scored with or without their chat template, and that one choice moves
scores more than any other users report (lm-eval#3958: Qwen3.5-4B on C-Eval 73 -> 48), so cube
measures it as a protocol dimension (``--chat-template none,model``):

- ``none`` (the default): the prompt as plain text, byte for byte what cube always scored;
- ``model``: the prompt up to its answer cue (header, shots, question, options) is the user turn,
  rendered with the checkpoint's own template (``ChatTemplate``: its tokenizer config's
  ``chat_template`` or its GGUF header's ``tokenizer.chat_template``) with the generation prompt
  added, and the answer cue starts the assistant turn. The labels are scored right after the cue,
  so the audit tokenizes them there too.

A chat cell's records carry its answer context marked ``@chat`` (``zh_cue@chat``): the records'
columns stay as they are, every reader that selects a context (``cube rescore``, ``cube explain``,
``cube confirm``) tells the two apart, and a ``none`` cell keeps its old name, shard files and
configuration hash. ``split_context`` reads the mark back.

A reasoning checkpoint's template takes ``enable_thinking`` (Qwen3 and its successors): ``--thinking
off,on`` splits each ``model`` cell in two, rendered with ``enable_thinking=False`` (the template's
own empty ``<think></think>`` block closes the turn's thinking before the cue) and ``True`` (the
reply opens free to think). Their chat forms are ``model+nothink`` and ``model+think``, their
records' contexts ``zh_cue@chat+nothink`` and ``zh_cue@chat+think``; a ``model`` cell without the
option is rendered as the template's default, as before.

The template is a program the checkpoint ships; nothing fetched runs code here: it is rendered
in jinja2's ``ImmutableSandboxedEnvironment`` (as transformers does, with its ``tojson`` and
``raise_exception``), without ``strftime_now``, jinja's ``random`` filter or ``lipsum``: a template
that would print today's date falls back to its own fixed one, so a prompt stays a pure function
of (item, cell, template); each user turn is rendered twice and a difference refused, a template
that ignores the message is refused, and a render is bounded in size and time.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from functools import lru_cache

from cube.checksums import sha256_bytes
from cube.errors import ConfigError

NO_CHAT = "none"
MODEL_CHAT = "model"
CHAT_TEMPLATES = (NO_CHAT, MODEL_CHAT)  # the axis's values, the default first
CHAT_MARK = "@chat"  # what a chat cell's answer context carries in its records
THINKING_MODES = ("off", "on")  # --thinking: enable_thinking=False / True in the template
THINKING_MARKS = {"off": "+nothink", "on": "+think"}  # the chat form's and the record context's suffix
CHAT_FORMS = (NO_CHAT, MODEL_CHAT, *(MODEL_CHAT + m for m in THINKING_MARKS.values()))  # a cell's chat


@dataclass(frozen=True)
class ChatTemplate:
    """A checkpoint's own chat template and the special tokens it is rendered with.

    ``bos_added``: the BOS text the scoring tokenizer itself puts before every prompt (None: it
    adds none). A template that writes ``{{ bos_token }}`` would otherwise give two; the rendered
    text drops its own leading copy, so the ids are those of transformers'
    ``apply_chat_template(tokenize=True)``, which adds no special tokens of its own."""

    template: str
    source: str  # where it was read: "tokenizer_config.json of /path", "GGUF header of f.gguf", ...
    special_tokens: tuple[tuple[str, str], ...] = ()  # bos_token, eos_token, ... as the template sees them
    bos_added: str | None = None
    thinking: str | None = None  # THINKING_MODES: rendered with enable_thinking False/True; None: the default

    @property
    def takes_thinking(self) -> bool:
        """Whether the template reads ``enable_thinking`` (what ``--thinking`` needs)."""
        return "enable_thinking" in self.template

    def with_thinking(self, mode: str | None) -> ChatTemplate:
        """This template rendered with ``enable_thinking`` off or on (None: its default)."""
        from dataclasses import replace

        return replace(self, thinking=mode)

    @property
    def chat_form(self) -> str:
        """The chat form of a cell rendered with it: ``model``, ``model+nothink`` or ``model+think``."""
        return chat_form(MODEL_CHAT, self.thinking)

    @property
    def sha256(self) -> str:
        """The template text's digest: what a chat cell's configuration records."""
        return sha256_bytes(self.template.encode("utf-8"))

    def _render(self, user: str) -> str:
        """One render, bounded in output size and time (``_bounded``), with ``enable_thinking`` where
        the cell sets it (``--thinking``)."""
        thinking = {} if self.thinking is None else {"enable_thinking": self.thinking == "on"}
        try:
            return _bounded(_compiled(self.template), self.source,
                            messages=[{"role": "user", "content": user}], add_generation_prompt=True, tools=None,
                            documents=None, **dict(self.special_tokens), **thinking)
        except ConfigError:
            raise
        except Exception as exc:  # a template error, or the sandbox refusing an unsafe operation
            first = (str(exc).splitlines() or ["?"])[0][:160]
            raise ConfigError(f"the chat template from {self.source} cannot render a user turn "
                              f"({type(exc).__name__}: {first}); run with --chat-template none") from None

    def user_turn(self, user: str) -> str:
        """The chat up to where the assistant's reply starts: one user message, the generation
        prompt added (``add_generation_prompt=True``). Rendered twice: a template whose output is
        not a function of its input (one sha256, two prompts) is refused, as is one that ignores
        the message (``_check_reads_message``)."""
        _check_reads_message(self)
        text = self._render(user)
        if self._render(user) != text:
            raise ConfigError(f"the chat template from {self.source} renders one message as two different prompts "
                              "(randomness or a clock in the template): a prompt must be a function of its input; "
                              "run with --chat-template none")
        if self.bos_added and text.startswith(self.bos_added):
            text = text[len(self.bos_added):]
        return text

    def wrap(self, user: str, assistant_start: str) -> str:
        """The prompt in chat form: ``user`` (trailing whitespace dropped: the turn boundary now
        separates it from the cue) as the user turn, ``assistant_start`` opening the reply."""
        return self.user_turn(user.rstrip()) + assistant_start

    def to_log(self) -> dict:
        return {"source": self.source, "sha256": self.sha256, "bos_added": self.bos_added}


MAX_RENDER_CHARS = 1_000_000  # a user turn longer than this is a template looping, not a chat
MAX_RENDER_S = 10.0


_RENDER = threading.local()  # the render in progress on this thread: its deadline and source


class _RenderTooLong(Exception):
    """Raised inside a render by ``_DeadlineRange`` past its deadline (caught by ``_bounded``)."""


class _DeadlineRange:
    """The sandbox's ``range``: jinja's own (at most 100,000 per call), checking the render's
    deadline as it is iterated, so that nested loops that write nothing stop too. A range in every
    other respect (length, indexing, reversal) for the templates that use it so."""

    def __init__(self, *args: int) -> None:
        from jinja2.sandbox import safe_range

        self._range = safe_range(*args)

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, index):
        return self._range[index]

    def __reversed__(self):
        return self._checked(reversed(self._range))

    def __iter__(self):
        return self._checked(iter(self._range))

    @staticmethod
    def _checked(values):
        import time

        deadline = getattr(_RENDER, "deadline", None)
        for n, value in enumerate(values):
            if deadline is not None and n % 256 == 0 and time.monotonic() > deadline:
                raise _RenderTooLong()
            yield value


def _bounded(compiled, source: str, **context) -> str:
    """The render, streamed and stopped past ``MAX_RENDER_CHARS`` characters or ``MAX_RENDER_S``
    seconds (nested ``range`` loops rendered 300 MB and crashed the tokenizer library); a loop that
    writes nothing is stopped by the sandbox's ``range`` at the same deadline."""
    import time

    start, parts, size = time.monotonic(), [], 0
    _RENDER.deadline = start + MAX_RENDER_S
    try:
        for part in compiled.generate(**context):
            parts.append(part)
            size += len(part)
            if size > MAX_RENDER_CHARS or time.monotonic() - start > MAX_RENDER_S:
                raise _RenderTooLong()
    except _RenderTooLong:
        what = f"more than {MAX_RENDER_CHARS:,} characters" if size > MAX_RENDER_CHARS else \
            f"more than {MAX_RENDER_S:g} s"
        raise ConfigError(f"the chat template from {source} renders one user turn in {what}: a loop, not a chat; "
                          "run with --chat-template none") from None
    finally:
        _RENDER.deadline = None
    return "".join(parts)


PROBES = ("cube probe message one", "cube probe message two")


@lru_cache(maxsize=8)
def _reads_message(template: ChatTemplate) -> bool:
    return template._render(PROBES[0]) != template._render(PROBES[1])


def _check_reads_message(template: ChatTemplate) -> None:
    """A template that renders two different messages as one text would make every item one
    identical prompt: refused in one line."""
    if not _reads_message(template):
        raise ConfigError(f"the chat template from {template.source} renders two different user messages as the same "
                          "text: it ignores the message, so every item would be one identical prompt; run with "
                          "--chat-template none")


@lru_cache(maxsize=8)
def _compiled(template: str):
    """The template compiled in a sandbox that forbids attribute access to Python internals and
    any mutation of what it is given (jinja2's ``ImmutableSandboxedEnvironment``)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    del env.filters["random"]  # randomness: one template sha256 would give two prompts
    del env.globals["lipsum"]  # random text
    env.globals["range"] = _DeadlineRange  # a loop that writes nothing stops at the render's deadline
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateError as exc:
        raise ConfigError(f"the checkpoint's chat template is not valid jinja ({exc}); run with "
                          "--chat-template none") from None


def check_chat_templates(values: tuple[str, ...]) -> None:
    """An unknown axis value is one line naming it and the known ones."""
    for value in values:
        if value not in CHAT_TEMPLATES:
            raise ConfigError(f"unknown chat template {value!r}; known: {', '.join(CHAT_TEMPLATES)} "
                              "(none: the plain prompt; model: the checkpoint's own chat template)")
    if not values:
        raise ConfigError(f"--chat-template needs at least one of {', '.join(CHAT_TEMPLATES)}")


def check_thinking(values: tuple[str, ...], chats: tuple[str, ...]) -> None:
    """``--thinking``: known modes, and a chat cell for them to apply to; one line each."""
    for value in values:
        if value not in THINKING_MODES:
            raise ConfigError(f"unknown thinking mode {value!r}; known: {', '.join(THINKING_MODES)} (the chat "
                              "template's enable_thinking off or on)")
    if not values:
        raise ConfigError(f"--thinking needs at least one of {', '.join(THINKING_MODES)}")
    if MODEL_CHAT not in chats:
        raise ConfigError("--thinking sets the chat template's enable_thinking: it needs --chat-template model")


def chat_form(chat: str, thinking: str | None = None) -> str:
    """A cell's chat form: ``none``, ``model``, or ``model`` with its thinking mode marked."""
    return chat if thinking is None or chat == NO_CHAT else chat + THINKING_MARKS[thinking]


def thinking_of(chat: str) -> str | None:
    """The thinking mode of a chat form (None: plain, or the template's default)."""
    return next((mode for mode, mark in THINKING_MARKS.items() if chat == MODEL_CHAT + mark), None)


def record_context(context: str, chat: str) -> str:
    """The answer context a record of this cell carries: ``zh_cue``, ``zh_cue@chat``, or with a
    thinking mode ``zh_cue@chat+nothink`` / ``zh_cue@chat+think``."""
    return context if chat == NO_CHAT else context + CHAT_MARK + chat[len(MODEL_CHAT):]


def split_context(context: str) -> tuple[str, str]:
    """(answer context, chat form) of a record's context column: the inverse of ``record_context``."""
    for mark in ("", *THINKING_MARKS.values()):
        if context.endswith(CHAT_MARK + mark):
            return context[: len(context) - len(CHAT_MARK + mark)], MODEL_CHAT + mark
    return context, NO_CHAT


__all__ = ["CHAT_FORMS", "CHAT_MARK", "CHAT_TEMPLATES", "MODEL_CHAT", "NO_CHAT", "THINKING_MARKS", "THINKING_MODES",
           "ChatTemplate", "chat_form", "check_chat_templates", "check_thinking", "record_context", "split_context",
           "thinking_of"]
