"""Building HF fast tokenizers from the raw forms tokenizers ship in.

Two forms need conversion: a GGUF header (vocabulary, merges and token types stored as metadata)
and a Llama-3-style tiktoken rank file. Both become BPE ``tokenizers.Tokenizer`` objects (byte-level,
or SentencePiece-style for Gemma's GGUFs) whose token ids are exactly the file's ids — special
tokens included — so that token ids reported by the audit are the ids the model sees. A GGUF's
own BOS/EOS rules (``tokenizer.ggml.add_bos_token`` / ``add_eos_token``) become the tokenizer's
post-processor: a model scored without the BOS it was trained with is not the model its authors
released.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from cube.errors import SourceError, UnsupportedTokenizer

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
_MERGEABLE_TYPES = {1, 4}  # what SentencePiece BPE merges are made of (not control or byte tokens)

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


def _with_specials(tok: Tokenizer, bos: tuple[str, int] | None, eos: tuple[str, int] | None = None) -> None:
    """Add ``bos`` before and ``eos`` after every encoded text (``add_special_tokens=True``)."""
    marks = [m for m in (bos, eos) if m is not None]
    if not marks:
        tok.post_processor = None
        return
    head, tail = (f"{bos[0]} " if bos else ""), (f" {eos[0]}" if eos else "")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{head}$A{tail}", pair=f"{head}$A{tail} {head}$B{tail}", special_tokens=marks,
    )


def _with_bos(tok: Tokenizer, bos: str, bos_id: int) -> None:
    _with_specials(tok, (bos, bos_id))


def _header_special(meta: dict[str, Any], tokens: list[str], which: str, where: str) -> tuple[str, int] | None:
    """The ``(token, id)`` the header says to add as ``which`` ('bos' or 'eos'), or None.

    A missing ``add_bos_token`` is an error rather than a guess: llama.cpp's default depends on
    the vocabulary type and pre-tokenizer, and a wrong guess silently changes every prompt.
    ``add_eos_token`` defaults to false, as it does everywhere.
    """
    flag_key, id_key = f"tokenizer.ggml.add_{which}_token", f"tokenizer.ggml.{which}_token_id"
    if which == "bos" and flag_key not in meta:
        raise SourceError(f"{where}: GGUF header lacks {flag_key}; cube will not guess whether the model wants a BOS")
    if not meta.get(flag_key, False):
        return None
    token_id = meta.get(id_key)
    if not isinstance(token_id, int) or not 0 <= token_id < len(tokens):
        raise SourceError(f"{where}: {flag_key} is set but {id_key}={token_id!r} is not a token id")
    return tokens[token_id], token_id


def _sentencepiece_bpe(tokens: list[str], types: list[int], where: str) -> tuple[Tokenizer, list[str]]:
    """Gemma's SentencePiece BPE from a GGUF vocabulary (which stores no merges).

    Spaces are written as ``▁`` (no prefix space: Gemma's headers set add_space_prefix false), and
    unknown characters fall back to the ``<0xNN>`` byte tokens. llama.cpp stores whitespace-run
    tokens with real spaces; the vocabulary spells them with ``▁`` as the text will be. Gemma's
    merge order follows the order of its vocabulary, so the merges are those of ``merges_from_ranks``
    with each token's id as its rank: checked equal to the published Gemma 3 tokenizer.json.
    """
    spelled = ["\u2581" * len(t) if t and not t.strip(" ") else t for t in tokens]
    vocab: dict[str, int] = {}
    for i, t in enumerate(spelled):
        vocab.setdefault(t, i)
    if "<unk>" not in vocab:
        raise SourceError(f"{where}: SentencePiece GGUF vocabulary has no '<unk>' token")
    merges = merges_from_ranks({t: i for t, i in vocab.items() if types[i] in _MERGEABLE_TYPES})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    return tok, spelled


def tokenizer_from_gguf(meta: dict[str, Any], where: str = "GGUF") -> Tokenizer:
    """A tokenizer from GGUF metadata, keeping the file's own token ids and BOS/EOS rules.

    Byte-level BPE (``gpt2``) for any architecture; SentencePiece (``llama``) for Gemma only, the
    one whose conversion is checked against a published tokenizer (other SentencePiece GGUFs
    differ in prefix spaces and merge order, and a guess would silently change their tokens).
    """
    kind = meta.get("tokenizer.ggml.model")
    arch = str(meta.get("general.architecture", ""))
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if kind == "gpt2":
        pre = meta.get("tokenizer.ggml.pre", "default")
        if pre not in PRE_PATTERNS:
            raise SourceError(f"{where}: unknown pre-tokenizer tokenizer.ggml.pre={pre!r}")
        spelled = tokens
        vocab: dict[str, int] = {}
        for i, t in enumerate(tokens):
            vocab.setdefault(t, i)  # a duplicated string keeps its first id
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
        tok = _byte_level_bpe(vocab, merges, PRE_PATTERNS[pre], nfc=pre in NFC_PRES)
        kept = {tokens[i]: i for i, t in enumerate(types) if t in _SPECIAL_TYPES and vocab.get(tokens[i]) == i}
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in kept])
    elif kind == "llama" and arch.startswith("gemma") and not meta.get("tokenizer.ggml.add_space_prefix", False):
        tok, spelled = _sentencepiece_bpe(tokens, types, where)
        # Control tokens are special (skipped when decoding); user-defined ones (newline runs,
        # HTML tags, ...) are matched whole, as llama.cpp does, but decode as ordinary text.
        tok.add_special_tokens([AddedToken(spelled[i], special=True, normalized=False)
                                for i, t in enumerate(types) if t == 3])
        tok.add_tokens([AddedToken(spelled[i], special=False, normalized=False) for i, t in enumerate(types) if t == 4])
        kept = {spelled[i]: i for i, t in enumerate(types) if t in _SPECIAL_TYPES}
    else:
        raise UnsupportedTokenizer(
            f"{where}: tokenizer.ggml.model={kind!r} (architecture {arch!r}) is not supported "
            "(byte-level BPE 'gpt2', or Gemma's SentencePiece 'llama' without a prefix space)"
        )
    _with_specials(tok, _header_special(meta, spelled, "bos", where), _header_special(meta, spelled, "eos", where))
    _check_ids_kept(tok, kept, where)
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
