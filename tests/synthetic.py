"""Tiny character-level BPE tokenizers crafted to produce each audit case on purpose."""

from __future__ import annotations

from tokenizers import Tokenizer, models, processors


def char_bpe(pieces: list[str], merges: list[tuple[str, str]] = (), bos: bool = False) -> Tokenizer:
    """Characters of ``pieces`` are the alphabet; ``merges`` build the longer pieces, in order.

    No pre-tokenizer: the whole string is one word, so merges can cross any boundary — which is
    exactly what a boundary-merge case needs. Unknown characters become ``<unk>``.
    """
    alphabet = sorted({ch for p in pieces for ch in p} | {ch for a, b in merges for ch in a + b})
    vocab = {"<unk>": 0, "<s>": 1}
    for tok in alphabet + [a + b for a, b in merges] + list(pieces):
        vocab.setdefault(tok, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(merges), unk_token="<unk>"))
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok
