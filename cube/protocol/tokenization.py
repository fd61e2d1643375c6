"""How a continuation is tokenized after its context — shared by the audit and the harness.

*In context* (cube's default): a label's tokens are the tokens of ``context + label`` past their
longest common prefix with the tokens of ``context`` alone. Taking ``len(tokenize(context))`` as
the cut is wrong whenever the label merges with the end of the context (e.g. ``"答案："`` + ``"A"``
becoming one pre-token); then the context's own last tokens change and we flag the cell instead
of hiding it. The model scores the text as it would read it.

*Separately*: ``tokenize(context) + tokenize(label)``, as a harness does that encodes context and
continuation apart. A prompt ending in a space then keeps that space as a token of its own and the
label comes without one, a sequence the model rarely saw in training: the MMLU whitespace effect.
It is a protocol a study may need to reproduce, so it is a named answer context
(``tokenization: separate``). lm-evaluation-harness 0.4 does *not* do this: it moves the prompt's
trailing whitespace into the continuation and tokenizes the whole text, which for ``"Answer: "`` +
``"A"`` scores `` A`` as in-context tokenization does (``cube.importers.lm_eval.audit`` audits it, and a test
runs the real lm-eval to show it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from cube.errors import ConfigError


class Encoder(Protocol):
    """What we need of a tokenizer: ``tokenizers.Tokenizer`` satisfies it."""

    def encode(self, sequence: str, add_special_tokens: bool = True): ...  # noqa: E704


@dataclass(frozen=True)
class InContext:
    context_ids: tuple[int, ...]
    full_ids: tuple[int, ...]
    prefix_len: int  # length of the common prefix of context_ids and full_ids

    @property
    def continuation_ids(self) -> tuple[int, ...]:
        return self.full_ids[self.prefix_len:]

    @property
    def boundary_merge(self) -> bool:
        """True when appending the continuation changed the context's own tokens."""
        return self.prefix_len < len(self.context_ids)


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def encode_ids(tokenizer: Encoder, text: str, add_special_tokens: bool = True) -> tuple[int, ...]:
    return tuple(tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)


def tokens_in_context(
    tokenizer: Encoder, context: str, continuation: str, add_special_tokens: bool = True,
    context_ids: tuple[int, ...] | None = None,
) -> InContext:
    """Tokenize ``continuation`` as it appears after ``context`` (see module docstring)."""
    ctx = context_ids if context_ids is not None else encode_ids(tokenizer, context, add_special_tokens)
    full = encode_ids(tokenizer, context + continuation, add_special_tokens)
    return InContext(ctx, full, common_prefix_len(ctx, full))


def tokens_separately(
    tokenizer: Encoder, context: str, continuation: str, add_special_tokens: bool = True,
    context_ids: tuple[int, ...] | None = None,
) -> InContext:
    """``tokenize(context) + tokenize(continuation)``: never a boundary merge (module docstring)."""
    ctx = context_ids if context_ids is not None else encode_ids(tokenizer, context, add_special_tokens)
    return InContext(ctx, ctx + encode_ids(tokenizer, continuation, add_special_tokens=False), len(ctx))


TOKENIZATIONS = {"in_context": tokens_in_context, "separate": tokens_separately}


def continuation_tokenizer(name: str):
    """The tokenization function of a protocol's ``tokenization`` name."""
    if name not in TOKENIZATIONS:
        raise ConfigError(f"unknown tokenization {name!r}; known: {', '.join(TOKENIZATIONS)}")
    return TOKENIZATIONS[name]
