"""Exact matches: question windows and whole phrases (options, short questions), in either form."""

from __future__ import annotations

import numpy as np

from cube.records.leakage.normal import _decode, _raw_code_points
from cube.records.leakage.index import LeakageIndex, RawForm, _PrefixHash, _bitmap_candidates


def _raw_spans(cps: np.ndarray, owner: np.ndarray, at: np.ndarray | None, raw: RawForm,
               min_phrase_chars: int) -> list:
    """The raw form's exact matches, as (begin, end) in the original characters, kind, item;
    ``cps`` are the original characters ``at`` (None: all of them), ``owner`` their texts.

    Why both forms: the normal form drops punctuation, ``$`` and markup, so a quote of a LaTeX
    option (``$\\frac{..}{..}$``, 14 characters as written, 3 normalised) or of 20 characters of a
    question with commas in them falls below the normal form's thresholds, while the paper's
    rules count the text as written. Raw matches are exact only; the normal form finds the
    disguised and near copies.
    """
    codes, source = _raw_code_points(cps)
    if codes.size < min(raw.prefix_chars, raw.window):
        return []
    text_of = owner[source]
    if at is not None:
        source = at[source]
    hashes = _PrefixHash(codes)
    prefix = hashes.every_window(raw.prefix_chars)
    candidates = _bitmap_candidates(raw.prefix_filter, prefix)
    spans = _window_spans(codes, text_of, hashes, raw, candidates[_in_sorted(raw.gram_hash, prefix[candidates])])
    spans += [s for s in _phrase_spans(codes, text_of, hashes, raw, candidates, prefix)
              if s[1] - s[0] >= min_phrase_chars]
    return [(int(source[begin]), int(source[end - 1]) + 1, "raw-" + kind, item) for begin, end, kind, item in spans]


def _in_sorted(sorted_hashes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per wanted hash: is it in ``sorted_hashes``?"""
    if sorted_hashes.size == 0:
        return np.zeros(wanted.size, dtype=bool)
    found = np.minimum(np.searchsorted(sorted_hashes, wanted), sorted_hashes.size - 1)
    return sorted_hashes[found] == wanted


def _gram_starts(hashes: _PrefixHash, text_of, n: int, length: int, bitmap, sorted_hashes) -> tuple[np.ndarray, np.ndarray]:
    """(positions, hashes) of the ``length``-grams inside one text whose hash is in ``sorted_hashes``."""
    if n < length or sorted_hashes.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
    gram_hash = hashes.every_window(length)
    at = _bitmap_candidates(bitmap, gram_hash)
    at = at[text_of[at] == text_of[at + length - 1]]
    wanted = gram_hash[at]
    present = _in_sorted(sorted_hashes, wanted)  # most are not
    return at[present], wanted[present]


def _window_spans(codes, text_of, hashes: _PrefixHash, index: "LeakageIndex | RawForm",
                  starts: np.ndarray) -> list:
    """The exact question windows at ``starts``: the positions where a window's first gram is
    (every window begins with a gram of its question, so no window is missed)."""
    w, n = index.window, codes.size
    starts = starts[starts + w <= n]
    starts = starts[text_of[starts] == text_of[starts + w - 1]]
    if starts.size == 0 or index.window_hash.size == 0:
        return []
    window_hash = hashes.windows(starts, w)
    found = np.minimum(np.searchsorted(index.window_hash, window_hash), index.window_hash.size - 1)
    exact = index.window_hash[found] == window_hash
    spans = []
    for start, k in zip(starts[exact], found[exact]):
        item, pos = int(index.window_item[k]), int(index.window_pos[k])
        if _decode(codes[start : start + w]) == index.questions[item][pos : pos + w]:
            spans.append((int(start), int(start) + w, "question", item))
    return spans


def _phrase_spans(codes, text_of, hashes: _PrefixHash, index: "LeakageIndex | RawForm",
                  candidates: np.ndarray | None = None, prefix: np.ndarray | None = None) -> list:
    """The whole phrases in ``codes``; ``candidates`` and ``prefix``: the positions the bitmap
    let through and every position's prefix hash, where the caller has looked them up already."""
    m = index.prefix_chars
    if codes.size < m or index.prefix_hash.size == 0:
        return []
    n = codes.size
    if candidates is None:
        prefix = hashes.every_window(m)
        candidates = _bitmap_candidates(index.prefix_filter, prefix)
    found = np.minimum(np.searchsorted(index.prefix_hash, prefix[candidates]), index.prefix_hash.size - 1)
    exact = index.prefix_hash[found] == prefix[candidates]
    candidates, found = candidates[exact], found[exact]
    # one (position, phrase) pair per phrase that shares the prefix
    count = index.prefix_count[found]
    at = np.repeat(candidates, count)
    phrase = np.repeat(index.prefix_first[found], count) + (
        np.arange(at.size) - np.repeat(np.cumsum(count) - count, count)
    )
    length = index.phrase_len[phrase]
    fits = at + length <= n
    at, phrase, length = at[fits], phrase[fits], length[fits]
    same_text = text_of[at] == text_of[at + length - 1]
    at, phrase, length = at[same_text], phrase[same_text], length[same_text]
    match = hashes.windows(at, length) == index.phrase_hash[phrase]
    spans = []
    for start, k in zip(at[match], phrase[match]):
        text = index.phrases[k]
        if _decode(codes[start : start + len(text)]) == text:
            kind = "question" if index.phrase_is_question[k] else "option"
            spans.append((int(start), int(start) + len(text), kind, int(index.phrase_item[k])))
    return spans
