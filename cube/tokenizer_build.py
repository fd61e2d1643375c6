"""Building HF fast tokenizers from the raw forms tokenizers ship in.

Two forms need conversion: a GGUF header (vocabulary, merges and token types stored as metadata)
and a Llama-3-style tiktoken rank file. Both become byte-level BPE ``tokenizers.Tokenizer``
objects whose token ids are exactly the file's ids — special tokens included — so that token ids
reported by the audit are the ids the model sees.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from cube.errors import SourceError

# Pre-tokenizer split patterns, keyed by GGUF `tokenizer.ggml.pre`.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

DIGIT_PATTERN = r"\p{N}"

# Each pre type is a sequence of split patterns applied in turn (llama.cpp's regex lists).
PRE_PATTERNS: dict[str, tuple[str, ...]] = {
    "qwen2": (QWEN2_PATTERN,),
    "deepseek-r1-qwen": (QWEN2_PATTERN,),
    "llama-bpe": (LLAMA3_PATTERN,),
    "llama3": (LLAMA3_PATTERN,),
    "smaug-bpe": (LLAMA3_PATTERN,),
    "default": (GPT2_PATTERN,),
    "gpt-2": (GPT2_PATTERN,),
    # StarCoder-style: every digit on its own, then GPT-2 splitting (SmolLM, StarCoder, Refact).
    "smollm": (DIGIT_PATTERN, GPT2_PATTERN),
    "starcoder": (DIGIT_PATTERN, GPT2_PATTERN),
    "refact": (DIGIT_PATTERN, GPT2_PATTERN),
}
# Qwen's published tokenizers apply NFC before splitting; llama.cpp's pre types say nothing of it.
NFC_PRES = {"qwen2", "deepseek-r1-qwen"}

# GGUF token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
_SPECIAL_TYPES = {3, 4}

# Llama 3 special tokens follow the base ranks in this order, then reserved ones up to 256.
LLAMA3_SPECIAL = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
    "<|image|>",
]
LLAMA3_NUM_SPECIAL = 256


@lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-character table used by byte-level BPE vocabularies.

    Printable Latin-1 bytes map to themselves; the rest are shifted to code points from 256 up.
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _bytes_to_token(raw: bytes) -> str:
    table = byte_to_unicode()
    return "".join(table[b] for b in raw)


def _byte_level_bpe(vocab: dict[str, int], merges: list[tuple[str, str]], patterns: tuple[str, ...],
                    nfc: bool, ignore_merges: bool = False) -> Tokenizer:
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in patterns]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def _with_bos(tok: Tokenizer, bos: str, bos_id: int) -> None:
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
    )


def tokenizer_from_gguf(meta: dict[str, Any], where: str = "GGUF") -> Tokenizer:
    """A byte-level BPE tokenizer from GGUF metadata, keeping the file's own special-token ids."""
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise SourceError(f"{where}: tokenizer.ggml.model={kind!r} is not supported (only byte-level BPE 'gpt2')")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_PATTERNS:
        raise SourceError(f"{where}: unknown pre-tokenizer tokenizer.ggml.pre={pre!r}")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)  # a duplicated string keeps its first id
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    tok = _byte_level_bpe(vocab, merges, PRE_PATTERNS[pre], nfc=pre in NFC_PRES)
    specials = [AddedToken(tokens[i], special=True, normalized=False)
                for i, t in enumerate(types) if t in _SPECIAL_TYPES and vocab.get(tokens[i]) == i]
    tok.add_special_tokens(specials)
    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token") and bos_id is not None:
        _with_bos(tok, tokens[bos_id], bos_id)
    _check_ids_kept(tok, {tokens[i]: i for i, t in enumerate(types) if t in _SPECIAL_TYPES and vocab.get(tokens[i]) == i}, where)
    return tok


def read_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                token_b64, rank = line.split()
                ranks[base64.b64decode(token_b64, validate=True)] = int(rank)
            except ValueError:
                raise SourceError(f"{path}: line {lineno} is not '<base64 token> <rank>'") from None
    return ranks


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Recover BPE merges from tiktoken ranks.

    tiktoken merges the adjacent pair whose concatenation has the lowest rank. For every multi-byte
    token, each split into two tokens that both exist is a merge that produces it; ordering merges
    by the rank of their result (then by the ranks of the parts) reproduces tiktoken's choices.
    """
    found = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                found.append((rank, ranks[left], ranks[right], left, right))
    found.sort()
    return [(left, right) for _, _, _, left, right in found]


def tokenizer_from_tiktoken(path: Path) -> Tokenizer:
    """A Llama-3 tokenizer from its tiktoken rank file (Llama-3 split pattern and special tokens)."""
    ranks = read_tiktoken_ranks(path)
    if not ranks:
        raise SourceError(f"{path}: empty tiktoken rank file")
    vocab = {_bytes_to_token(t): r for t, r in ranks.items()}
    merges = [(_bytes_to_token(a), _bytes_to_token(b)) for a, b in merges_from_ranks(ranks)]
    tok = _byte_level_bpe(vocab, merges, (LLAMA3_PATTERN,), nfc=False, ignore_merges=True)
    n = len(ranks)
    names = LLAMA3_SPECIAL + [f"<|reserved_special_token_{2 + i}|>" for i in range(LLAMA3_NUM_SPECIAL - len(LLAMA3_SPECIAL))]
    special_ids = {name: n + i for i, name in enumerate(names)}
    tok.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in names])
    _with_bos(tok, "<|begin_of_text|>", special_ids["<|begin_of_text|>"])
    _check_ids_kept(tok, special_ids, str(path))
    return tok


def _check_ids_kept(tok: Tokenizer, expected: dict[str, int], where: str) -> None:
    for content, want in expected.items():
        got = tok.token_to_id(content)
        if got != want:
            raise SourceError(f"{where}: special token {content!r} got id {got}, the file says {want}")
