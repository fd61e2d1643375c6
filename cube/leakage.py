"""Finding benchmark text in records: the normal form, the scrub and the leakage audit.

The released records must not carry C-Eval or CMMLU text: the licences forbid redistribution and a
leaked test item contaminates every model trained on it afterwards. Models quote items in disguise
(full-width digits, a line break in the middle, Chinese instead of ASCII commas), so both the scrub
and the audit compare texts in one normal form:

- compatibility decomposition (NFKD), which folds full-width and other compatibility forms as
  NFKC does, with combining marks dropped (accents are ignored). Unlike NFKC, this can be done
  one character at a time, so every normalised character maps back to one index of the original;
- every whitespace, line break, zero-width and other format or control character is dropped;
- every punctuation character (Unicode category P*) is DROPPED rather than mapped to a canonical
  mark. Dropping survives ASCII vs Chinese punctuation, and also a model that adds or removes a
  comma, at the price of matching "A、B" against "AB"; a 20-character span without punctuation is
  still specific to its item. Symbols (``$``, ``+``, ``=``) and case are kept.

What counts as a leak (the audit's rules; the scrub removes all of these, stock answers included,
for the record's own item, so a scrubbed record can fail the audit only by quoting another item):

- any span of ``window`` (20) normalised characters that occurs in a question;
- a whole option of at least ``min_option_chars`` (4) normalised characters;
- a whole question shorter than the window, if it has at least ``min_question_chars`` (8): almost
  half of CMMLU's questions are shorter than 20 characters and would otherwise never count;
- except options and short questions that occur in ``stock_items`` (10) items or more: a stock
  answer such as "以上都对" identifies no item.

The audit is linear: each normalised text is hashed once (a polynomial prefix hash over uint64,
vectorised with numpy), every window of ``window`` characters is looked up in a bitmap of the
questions' windows, and every window of ``min(min_option_chars, min_question_chars)`` characters in
a bitmap of the whole phrases' first characters. The rare candidates are confirmed by exact hash and
then by string comparison, so a hit is never a hash collision.
"""

from __future__ import annotations

import functools
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

WINDOW = 20
MIN_OPTION_CHARS = 4
# A question shorter than the window is matched whole when it has at least this many characters.
MIN_QUESTION_CHARS = 8
# An option (or whole short question) found in this many items or more ("以上都对", "无法确定") is
# a stock phrase: finding it identifies no item, and flagging it would bury real leaks.
STOCK_ITEMS = 10
MARKER = "[REMOVED]"

# 4 MiB per bitmap, small enough to stay in cache (a larger one is slower for all its fewer false
# candidates); about 5 % of windows reach the exact check against CMMLU's question windows.
_BITMAP_BITS = 22
_TEXTS_PER_BATCH_CHARS = 4_000_000  # bounds the memory of one vectorised pass
_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64
_BASE_INV = pow(_BASE, -1, 1 << 64)


# ---------------------------------------------------------------------------- normal form


def _normal_char(char: str) -> str:
    """The normal form of one character: NFKD with dropped classes removed (may be empty)."""
    kept = []
    for part in unicodedata.normalize("NFKD", char):
        category = unicodedata.category(part)
        if part.isspace() or category[0] in "PZ" or category in ("Cc", "Cf"):
            continue
        if unicodedata.combining(part):
            continue
        kept.append(part)
    return "".join(kept)


@functools.cache
def _normal_form_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per code point: where its normal form starts in ``flat`` and how long it is.

    Built once per process (about a quarter second) so that normalising is three array lookups.
    """
    size = sys.maxunicode + 1
    length = np.ones(size, dtype=np.uint8)
    start = np.arange(size, dtype=np.int64)  # identity: flat[cp] == cp
    flat = list(range(size))
    for cp in range(size):
        char = chr(cp)
        if unicodedata.category(char) in ("Cn", "Cs", "Co"):
            continue
        normal = _normal_char(char)
        if normal == char:
            continue
        length[cp] = len(normal)
        if len(normal) == 1:
            start[cp] = len(flat)
            flat.append(ord(normal))
        elif normal:
            start[cp] = len(flat)
            flat.extend(ord(c) for c in normal)
    return start, length, np.asarray(flat, dtype=np.uint32)


def _code_points(texts: Sequence[str]) -> np.ndarray:
    joined = "".join(texts).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(joined, dtype=np.uint32)


def _normalize_code_points(cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(normalised code points, index into ``cps`` of the character each one came from)."""
    start, length, flat = _normal_form_table()
    lens = length[cps]
    if lens.size == 0 or lens.max() <= 1:  # the usual case: no character expands
        source = np.flatnonzero(lens)
        return flat[start[cps[source]]], source
    source = np.repeat(np.arange(cps.size), lens)
    first = np.cumsum(lens, dtype=np.int64) - lens
    within = np.arange(source.size) - np.repeat(first, lens)
    return flat[start[cps[source]] + within], source


def normalize_for_match(text: str) -> tuple[str, np.ndarray]:
    """The normal form of ``text`` and, per normalised character, its index in ``text``.

    The offsets let the scrub cut the original span and the audit report a position a reader can
    find in the original field.
    """
    codes, source = _normalize_code_points(_code_points([text]))
    return codes.tobytes().decode("utf-32-le", "surrogatepass"), source.astype(np.int64)


def _normal_string(text: str) -> str:
    return normalize_for_match(text)[0]


def _normal_strings(texts: Sequence[str]) -> list[str]:
    """The normal form of many texts in one vectorised pass (building the index uses ~60k)."""
    sizes = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    codes, source = _normalize_code_points(_code_points(texts))
    counts = np.bincount(np.repeat(np.arange(len(texts)), sizes)[source], minlength=len(texts))
    joined = codes.tobytes().decode("utf-32-le", "surrogatepass")
    ends = np.cumsum(counts).tolist()
    return [joined[end - count : end] for end, count in zip(ends, counts.tolist())]


# ---------------------------------------------------------------------------- scrub


@dataclass(frozen=True)
class ScrubResult:
    text: str
    n_removed_spans: int  # all removed spans, own item and other items
    n_removed_chars: int
    n_other_item_spans: int = 0  # of those, spans the audit matched to another item (``index``)


def scrub(
    text: str,
    question: str,
    options: Sequence[str],
    window: int = WINDOW,
    marker: str = MARKER,
    min_option_chars: int = MIN_OPTION_CHARS,
    min_question_chars: int = MIN_QUESTION_CHARS,
    index: "LeakageIndex | None" = None,
) -> ScrubResult:
    """Remove the item's own text from a free-text field before release.

    First every occurrence of each option with at least ``min_option_chars`` normalised characters
    (shorter ones, such as "对", are ordinary words: deleting them would shred the text and they
    identify no item) and of the whole question when it is shorter than ``window`` but has at
    least ``min_question_chars``; then every remaining span of ``window`` or more normalised
    characters that also occurs in the question. The audit counts exactly these as leaks, so a
    scrubbed record passes it for its own item. Each removed span, widened to whole original
    characters, becomes ``marker`` so that readers see that something was cut.

    With ``index``, whatever the audit would still find afterwards (a model quoting ANOTHER item,
    in practice a short option from the same subject, such as a term of art) is removed too, so
    the result passes the audit against every indexed item by construction.
    """
    normal, source = normalize_for_match(text)
    question_normal = _normal_string(question)
    phrases = [p for p in map(_normal_string, options) if len(p) >= min_option_chars]
    if min_question_chars <= len(question_normal) < window:
        phrases.append(question_normal)
    removed = np.zeros(len(normal), dtype=bool)
    for phrase in phrases:
        at = normal.find(phrase)
        while at != -1:
            removed[at : at + len(phrase)] = True
            at = normal.find(phrase, at + 1)
    question_windows = {
        question_normal[i : i + window] for i in range(len(question_normal) - window + 1)
    }
    after_phrases = removed.copy()
    for i in range(len(normal) - window + 1):
        if not after_phrases[i : i + window].any() and normal[i : i + window] in question_windows:
            removed[i : i + window] = True
    spans = _original_spans(removed, source)
    own = _replace_spans(text, spans, marker)
    if index is None:
        return ScrubResult(own, len(spans), sum(end - begin for begin, end in spans))
    others = [(hit.offset, hit.offset + hit.n_chars) for hit in audit_texts([own], index)]
    return ScrubResult(
        text=_replace_spans(own, others, marker),
        n_removed_spans=len(spans) + len(others),
        n_removed_chars=sum(end - begin for begin, end in spans + others),
        n_other_item_spans=len(others),
    )


def _replace_spans(text: str, spans: list[tuple[int, int]], marker: str) -> str:
    """``text`` with each sorted, disjoint [begin, end) span replaced by ``marker``."""
    pieces, cursor = [], 0
    for begin, end in spans:
        pieces += [text[cursor:begin], marker]
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)


def _original_spans(removed: np.ndarray, source: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of removed normalised characters, as [begin, end) in the original text."""
    if not removed.any():
        return []
    edges = np.diff(np.concatenate(([0], removed.astype(np.int8), [0])))
    run_starts, run_ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(source[a]), int(source[b - 1]) + 1) for a, b in zip(run_starts, run_ends)]


# ---------------------------------------------------------------------------- hashing


def _powers(base: int, n: int) -> np.ndarray:
    """base**i modulo 2**64 for i in [0, n); cached and grown by doubling."""
    cached = _POWERS.get(base)
    if cached is None or cached.size < n:
        size = max(n, 2 * (cached.size if cached is not None else 1024))
        factors = np.full(size, base, dtype=np.uint64)
        factors[0] = 1
        cached = np.cumprod(factors, dtype=np.uint64)  # wraps modulo 2**64, as intended
        _POWERS[base] = cached
    return cached[:n]


_POWERS: dict[int, np.ndarray] = {}


class _PrefixHash:
    """Hash of any substring in O(1) after one linear pass: h = sum c[i+k] * BASE_INV**k.

    ``P[j] = sum_{t<j} c[t] * BASE_INV**t`` so ``(P[i+L] - P[i]) * BASE**i`` no longer depends on
    where the substring sits, and the same window hashes equally in a question and in a record.
    """

    def __init__(self, codes: np.ndarray):
        n = codes.size
        self.prefix = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum(codes.astype(np.uint64) * _powers(_BASE_INV, n), out=self.prefix[1:])
        self.shift = _powers(_BASE, n)

    def windows(self, starts: np.ndarray, length: int | np.ndarray) -> np.ndarray:
        return (self.prefix[starts + length] - self.prefix[starts]) * self.shift[starts]

    def every_window(self, length: int) -> np.ndarray:
        """The hash of the window at every start; slices, which are cheaper than gathers."""
        count = self.prefix.size - length
        return (self.prefix[length:] - self.prefix[:count]) * self.shift[:count]


def _hash_strings(strings: Sequence[str], lengths: Sequence[int] | None = None) -> np.ndarray:
    """Hash of each string (or of its first ``lengths[k]`` characters); strings are normal already."""
    codes = _code_points(strings)
    sizes = np.fromiter((len(s) for s in strings), dtype=np.int64, count=len(strings))
    starts = np.cumsum(sizes) - sizes
    take = sizes if lengths is None else np.asarray(lengths, dtype=np.int64)
    return _PrefixHash(codes).windows(starts, take)


def _bitmap_slots(hashes: np.ndarray) -> np.ndarray:
    # int64 indices: numpy would otherwise copy uint64 indices into a new array before gathering
    return (hashes >> np.uint64(64 - _BITMAP_BITS)).view(np.int64)


def _bitmap(hashes: np.ndarray) -> np.ndarray:
    bitmap = np.zeros(1 << _BITMAP_BITS, dtype=bool)
    bitmap[_bitmap_slots(hashes)] = True
    return bitmap


def _in_bitmap(bitmap: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    return bitmap[_bitmap_slots(hashes)]


# ---------------------------------------------------------------------------- index


@dataclass(frozen=True)
class ItemText:
    """What the index needs of a benchmark item (``cube.items.Item`` has these attributes)."""

    uid: str
    question: str
    options: tuple[str, ...]


@dataclass
class LeakageIndex:
    """Every question window and every countable phrase of a benchmark, ready for lookups.

    A *phrase* is a text matched whole: an option, or a question shorter than the window (nearly
    half of CMMLU's questions are; a model repeating one in full would otherwise go unseen).
    """

    window: int
    min_option_chars: int
    min_question_chars: int
    stock_items: int
    item_uids: list[str]
    n_short_options: int  # distinct normalised options below min_option_chars, ignored
    n_stock_phrases: int  # distinct phrases in >= stock_items items, ignored
    # question windows, sorted by hash
    question_normal: list[str]
    question_filter: np.ndarray
    window_hash: np.ndarray
    window_item: np.ndarray
    window_pos: np.ndarray
    # phrases, sorted by the hash of their first prefix_chars characters
    prefix_chars: int
    phrase_normal: list[str]
    phrase_is_question: np.ndarray
    phrase_item: np.ndarray
    phrase_hash: np.ndarray
    phrase_len: np.ndarray
    prefix_filter: np.ndarray
    prefix_hash: np.ndarray  # unique prefix hashes; phrases of prefix k are
    prefix_first: np.ndarray  # phrase_* [prefix_first[k] : prefix_first[k] + prefix_count[k]]
    prefix_count: np.ndarray

    @property
    def n_items(self) -> int:
        return len(self.item_uids)

    @property
    def option_normal(self) -> list[str]:
        return [p for p, q in zip(self.phrase_normal, self.phrase_is_question) if not q]

    def thresholds(self) -> str:
        return (
            f"window {self.window} chars, whole questions >= {self.min_question_chars} chars, "
            f"min option chars {self.min_option_chars}, options and questions shared by >= "
            f"{self.stock_items} items ignored ({self.n_short_options} short options and "
            f"{self.n_stock_phrases} stock texts skipped)"
        )


def build_index(
    items: Iterable[ItemText],
    window: int = WINDOW,
    min_option_chars: int = MIN_OPTION_CHARS,
    stock_items: int = STOCK_ITEMS,
    min_question_chars: int = MIN_QUESTION_CHARS,
) -> LeakageIndex:
    """Index the questions (every ``window``-character window) and options of ``items``.

    Every item is indexed, not only the record's own: a model can quote another item.
    """
    items = list(items)
    questions = _normal_strings([item.question for item in items])
    all_options = _normal_strings([option for item in items for option in item.options])

    # (normalised text, is a question) per item; a set, so an item counts once per text
    phrases_of_item: list[set[tuple[str, bool]]] = []
    cursor = 0
    for item, question in zip(items, questions):
        phrases = {(o, False) for o in all_options[cursor : cursor + len(item.options)]}
        cursor += len(item.options)
        if min_question_chars <= len(question) < window:
            phrases.add((question, True))
        phrases_of_item.append(phrases)
    items_per_text = Counter(text for phrases in phrases_of_item for text in {t for t, _ in phrases})
    short = {t for ps in phrases_of_item for t, is_q in ps if not is_q and len(t) < min_option_chars}
    stock = {t for t, n in items_per_text.items() if n >= stock_items} - short
    entries = sorted(
        (text, is_question, k)
        for k, phrases in enumerate(phrases_of_item)
        for text, is_question in phrases
        if text not in short and text not in stock
    )
    phrase_normal = [text for text, _, _ in entries]
    prefix_chars = min(min_option_chars, min_question_chars)
    phrase_hash = _hash_strings(phrase_normal)
    prefix = _hash_strings(phrase_normal, [prefix_chars] * len(entries))
    order = np.argsort(prefix, kind="stable")
    prefix_hash, prefix_first, prefix_count = np.unique(prefix[order], return_index=True, return_counts=True)

    window_hash, window_item, window_pos = _question_windows(questions, window)
    by_hash = np.argsort(window_hash, kind="stable")
    return LeakageIndex(
        window=window,
        min_option_chars=min_option_chars,
        min_question_chars=min_question_chars,
        stock_items=stock_items,
        item_uids=[item.uid for item in items],
        n_short_options=len(short),
        n_stock_phrases=len(stock),
        question_normal=questions,
        question_filter=_bitmap(window_hash),
        window_hash=window_hash[by_hash],
        window_item=window_item[by_hash],
        window_pos=window_pos[by_hash],
        prefix_chars=prefix_chars,
        phrase_normal=[phrase_normal[k] for k in order],
        phrase_is_question=np.array([entries[k][1] for k in order], dtype=bool),
        phrase_item=np.array([entries[k][2] for k in order], dtype=np.int64),
        phrase_hash=phrase_hash[order],
        phrase_len=np.array([len(phrase_normal[k]) for k in order], dtype=np.int64),
        prefix_filter=_bitmap(prefix_hash),
        prefix_hash=prefix_hash,
        prefix_first=prefix_first,
        prefix_count=prefix_count,
    )


def _question_windows(questions: list[str], window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sizes = np.fromiter((len(q) for q in questions), dtype=np.int64, count=len(questions))
    starts = np.cumsum(sizes) - sizes
    hashes = _PrefixHash(_code_points(questions))
    count = np.maximum(sizes - window + 1, 0)
    item = np.repeat(np.arange(len(questions)), count)
    pos = np.arange(item.size) - np.repeat(np.cumsum(count) - count, count)
    return hashes.windows(starts[item] + pos, window), item, pos


# ---------------------------------------------------------------------------- audit


@dataclass(frozen=True)
class TextHit:
    """A leak in ``texts[text]`` of one ``audit_texts`` call; never holds the leaked text."""

    text: int
    offset: int  # index of the first leaked character in the original text
    n_chars: int  # length of the leaked span in the original text
    kind: str  # "question" or "option"
    item_uid: str  # an item whose question or option contains the span


@dataclass(frozen=True)
class Hit:
    """A leak in one field of one record; never holds the leaked text."""

    uid: str
    field: str
    offset: int
    n_chars: int
    kind: str
    item_uid: str


def audit_texts(texts: Sequence[str], index: LeakageIndex) -> list[TextHit]:
    """Every leaked span in ``texts``: one hit per maximal run of overlapping matches."""
    hits: list[TextHit] = []
    batch: list[str] = []
    first, chars = 0, 0
    for k, text in enumerate(texts):
        batch.append(text)
        chars += len(text)
        if chars >= _TEXTS_PER_BATCH_CHARS:
            hits += _audit_batch(batch, first, index)
            batch, first, chars = [], k + 1, 0
    if batch:
        hits += _audit_batch(batch, first, index)
    return hits


def audit_records(records: Iterable[tuple[str, str, str]], index: LeakageIndex) -> list[Hit]:
    """Audit (uid, field name, text) triples against every item of ``index``."""
    hits: list[Hit] = []
    for chunk in _chunks(records, 100_000):
        for hit in audit_texts([text for _, _, text in chunk], index):
            uid, field, _ = chunk[hit.text]
            hits.append(Hit(uid, field, hit.offset, hit.n_chars, hit.kind, hit.item_uid))
    return hits


def _chunks(records: Iterable[tuple[str, str, str]], size: int) -> Iterator[list]:
    chunk = []
    for record in records:
        chunk.append(record)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _audit_batch(texts: list[str], first: int, index: LeakageIndex) -> list[TextHit]:
    sizes = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    text_start = np.cumsum(sizes) - sizes
    codes, source = _normalize_code_points(_code_points(texts))
    n = codes.size
    if n < index.prefix_chars:
        return []
    text_of = np.repeat(np.arange(len(texts)), sizes)[source]  # text index per normalised char
    hashes = _PrefixHash(codes)
    spans = _question_spans(codes, text_of, hashes, index) + _phrase_spans(codes, text_of, hashes, index)
    return [
        TextHit(
            text=first + int(text_of[begin]),
            offset=int(source[begin] - text_start[text_of[begin]]),
            n_chars=int(source[end - 1] + 1 - source[begin]),
            kind=kind,
            item_uid=index.item_uids[item],
        )
        for begin, end, kind, item in _merge_spans(spans, text_of)
    ]


def _decode(codes: np.ndarray) -> str:
    return codes.tobytes().decode("utf-32-le", "surrogatepass")


def _question_spans(codes, text_of, hashes: _PrefixHash, index: LeakageIndex) -> list:
    w = index.window
    if codes.size < w or index.window_hash.size == 0:
        return []
    window_hash = hashes.every_window(w)
    candidates = np.flatnonzero(_in_bitmap(index.question_filter, window_hash))
    candidates = candidates[text_of[candidates] == text_of[candidates + w - 1]]
    found = np.searchsorted(index.window_hash, window_hash[candidates])
    found = np.minimum(found, index.window_hash.size - 1)
    exact = index.window_hash[found] == window_hash[candidates]
    spans = []
    for start, k in zip(candidates[exact], found[exact]):
        item, pos = int(index.window_item[k]), int(index.window_pos[k])
        if _decode(codes[start : start + w]) == index.question_normal[item][pos : pos + w]:
            spans.append((int(start), int(start) + w, "question", item))
    return spans


def _phrase_spans(codes, text_of, hashes: _PrefixHash, index: LeakageIndex) -> list:
    m = index.prefix_chars
    if codes.size < m or index.prefix_hash.size == 0:
        return []
    n = codes.size
    prefix = hashes.every_window(m)
    candidates = np.flatnonzero(_in_bitmap(index.prefix_filter, prefix))
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
        text = index.phrase_normal[k]
        if _decode(codes[start : start + len(text)]) == text:
            kind = "question" if index.phrase_is_question[k] else "option"
            spans.append((int(start), int(start) + len(text), kind, int(index.phrase_item[k])))
    return spans


def _merge_spans(spans: list, text_of: np.ndarray) -> list:
    """Overlapping matches in one text become one hit; a question match names the hit's kind."""
    merged: list[list] = []
    # at one start, a question match first, then the longest option
    for begin, end, kind, item in sorted(spans, key=lambda s: (s[0], s[2] != "question", -s[1])):
        last = merged[-1] if merged else None
        if last and begin < last[1] and text_of[begin] == text_of[last[0]]:
            last[1] = max(last[1], end)
            if kind == "question" and last[2] == "option":
                last[2], last[3] = kind, item
        else:
            merged.append([begin, end, kind, item])
    return [tuple(m) for m in merged]
