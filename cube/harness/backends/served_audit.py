"""The run's label audit on the served model's tokens, and its agreement with cube's own tokenizer.

A served run's audit (which cells degenerate) is made on the tokens the server reads each text
as (``ServerTokenizer``, an ``Encoder`` that asks the backend for an echo), and where cube also
has the model's tokenizer (``--model`` is a demo model or a folder, or ``--tokenizer`` names one)
both audits must agree, or the run stops naming the first difference (``compare_audits``).

Why a module of its own: the audit reads the server through the backend but scores nothing; it
decides, before any record, whether the labels the run will score are the tokens cube thinks.
"""

from __future__ import annotations

from dataclasses import dataclass

from cube.errors import ConfigError
from cube.harness.backends.served_info import ServerError


@dataclass(frozen=True)
class ServerEncoding:
    ids: list[int]


class ServerTokenizer:
    """The tokens the server reads a text as (an ``Encoder``): what the run's audit is made on.

    ``add_special_tokens=False`` cannot be asked of a server (it adds its own): a protocol that
    tokenizes a label apart from its prompt (``tokenization: separate``) is refused by name.
    """

    def __init__(self, backend, local=None):  # backend: the ServedBackend whose echo reads a text
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


__all__ = ["ServerEncoding", "ServerTokenizer", "compare_audits"]
