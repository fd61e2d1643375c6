"""Whether a server's echo is the whole prompt cube sent (``check_reassembly``).

A server that echoes a prompt one token short, and says nothing in ``usage``, shifts every
continuation's tokens by one: cloze options were scored up to 4.24 nats off with rc 0. The
echoed tokens must re-assemble the prompt exactly, whatever else the answer holds.
"""

from __future__ import annotations

import codecs

from cube.errors import text_digest
from cube.harness.backends.served_info import ServerError
from cube.protocol.tokenization import common_prefix_len


def token_bytes(token: str) -> bytes:
    """The bytes a server's token string stands for (vLLM spells a partial character
    ``bytes:\\xe7\\xad``)."""
    if token.startswith("bytes:"):
        return codecs.escape_decode(token[len("bytes:"):].encode("ascii", "backslashreplace"))[0]
    return token.encode("utf-8")


def check_reassembly(prompt: str, tokens: list[str], ids: tuple[int, ...], server_ids: bool, local,
                     counted: bool, where: str) -> None:
    """The echoed tokens must be the whole prompt sent: a server that echoes one token short
    (and says nothing in ``usage``) shifts every continuation's tokens. Token strings must spell
    the prompt; token ids must decode to it with cube's copy of the tokenizer, or be counted by
    ``usage.prompt_tokens`` (``counted``); ids that nothing can check are refused."""
    if not server_ids:
        spelt = b"".join(token_bytes(t) for t in tokens)
        if spelt != prompt.encode("utf-8"):
            at = common_prefix_len(spelt, prompt.encode("utf-8"))
            raise ServerError(f"{where}: the echoed tokens spell {len(spelt)} bytes, not the {len(prompt.encode())} of "
                              f"the prompt sent (they differ at byte {at}; prompt {text_digest(prompt)}): a truncated "
                              "or lossy echo, whose tokens cannot be scored")
    elif counted:
        return  # the batch's count is checked against usage.prompt_tokens (``ServedBackend._echo_batch``)
    elif local is not None:
        decoded = local.decode(list(ids), skip_special_tokens=True)
        if decoded != prompt:
            raise ServerError(f"{where}: the echoed token ids decode to {len(decoded)} characters, not the "
                              f"{len(prompt)} of the prompt sent (prompt {text_digest(prompt)}): a truncated echo "
                              "or another tokenizer, whose tokens cannot be scored")
    else:
        raise ServerError(f"{where}: the server echoed token ids without usage.prompt_tokens, and cube has no copy "
                          "of its tokenizer to check them against the prompt (a truncated echo would go unseen): "
                          "give --tokenizer SPEC")


__all__ = ["ServerError", "check_reassembly", "token_bytes"]
