"""The leakage index: the hashed windows and phrases of every item, built once and looked up."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from cube.errors import ConfigError
from cube.records.leakage.rules import (
    MIN_OPTION_CHARS,
    MIN_QUESTION_CHARS,
    NEAR_CHARS_PER_EDIT,
    NEAR_MIN_CHARS,
    RAW_MIN_OPTION_CHARS,
    RAW_MIN_SYMBOLS,
    STOCK_ITEMS,
    WINDOW,
    _PIECE,
    _QUESTION_SEED,
)
from cube.records.leakage.normal import _char_classes, _code_points, _normal_strings, _raw_strings

# 4 MiB per bitmap, small enough to stay in cache (a larger one is slower for all its fewer false
# candidates); about 5 % of windows reach the exact check against CMMLU's question windows.
_BITMAP_BITS = 22
_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64
_BASE_INV = pow(_BASE, -1, 1 << 64)


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
        self.prefix = np.empty(n + 1, dtype=np.uint64)
        self.prefix[0] = 0
        terms = self.prefix[1:]  # computed in place: no temporary array of n
        np.multiply(codes, _powers(_BASE_INV, n), out=terms, dtype=np.uint64, casting="unsafe")
        np.cumsum(terms, out=terms)
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


_SECOND_PROBE = np.uint64(0xD6E8FEB86659FD93)  # odd: a second, independent slot per hash


def _bitmap_slots(hashes: np.ndarray, bits: int, probe: int = 0) -> np.ndarray:
    # int64 indices: numpy would otherwise copy uint64 indices into a new array before gathering
    if probe:
        hashes = hashes * _SECOND_PROBE
    return (hashes >> np.uint64(64 - bits)).view(np.int64)


def _bitmap(hashes: np.ndarray) -> np.ndarray:
    """Two bitmaps of about 16 slots per hash each, at most ``_BITMAP_BITS``, one per probe: a
    one-item index (the scrub builds one per item) stays tiny, a benchmark's stays in cache. The
    second is read only for the ~6 % of windows the first lets through, so about 0.4 % reach the
    random-access binary search of the sorted hashes (each one costs a cache miss or two)."""
    bits = int(min(_BITMAP_BITS, max(8, int(hashes.size).bit_length() + 4)))
    bitmap = np.zeros((2, 1 << bits), dtype=bool)
    bitmap[0, _bitmap_slots(hashes, bits)] = True
    bitmap[1, _bitmap_slots(hashes, bits, probe=1)] = True
    return bitmap


def _bitmap_candidates(bitmap: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Positions in ``hashes`` that may be in the filter; the second probe only for the first's."""
    bits = bitmap.shape[1].bit_length() - 1
    at = np.flatnonzero(bitmap[0][_bitmap_slots(hashes, bits)])
    return at[bitmap[1][_bitmap_slots(hashes[at], bits, probe=1)]]


# ---------------------------------------------------------------------------- index


@dataclass(frozen=True)
class ItemText:
    """What the index needs of a benchmark item (``cube.protocol.items.Item`` has these attributes)."""

    uid: str
    question: str
    options: tuple[str, ...]


@dataclass(repr=False)
class RawForm:
    """The raw form's question windows and phrases, with the same lookups as the normal form's
    (``LeakageIndex`` has the same attribute names, so one implementation serves both forms).

    Phrases: options of at least ``raw_min_option_chars`` characters as written and
    ``RAW_MIN_SYMBOLS`` normalised ones, and questions of ``min_question_chars`` up to the window;
    a phrase whose raw OR normal form is in ``stock_items`` items is stock and left out (a stock
    answer spelt with a full stop is still a stock answer). No near copies: the normal form's near
    rules already see through the disguises a near copy adds.
    """

    window: int
    raw_min_option_chars: int
    n_stock_phrases: int
    questions: list[str]
    windows: tuple[np.ndarray, np.ndarray, np.ndarray]  # hash, item, position; sorted by hash
    # one lookup of every prefix_chars-gram serves windows and phrases: prefix_filter holds the
    # grams that begin a window (gram_hash, unique and sorted) and the phrases' prefixes
    gram_hash: np.ndarray
    prefix_chars: int
    table: "_PhraseTable"
    prefix_filter: np.ndarray
    # True where the raw lookups must read every text, not only those with a class 1 or 2
    # character (``_char_classes``): set by build_index, which checks that the normal form covers
    # the rest
    every_text: bool = True

    # the names the lookups read (LeakageIndex's)
    window_hash = property(lambda self: self.windows[0])
    window_item = property(lambda self: self.windows[1])
    window_pos = property(lambda self: self.windows[2])
    phrases = property(lambda self: self.table.texts)
    phrase_is_question = property(lambda self: self.table.is_question)
    phrase_item = property(lambda self: self.table.item)
    phrase_hash = property(lambda self: self.table.hash)
    phrase_len = property(lambda self: self.table.length)
    prefix_hash = property(lambda self: self.table.prefix_hash)
    prefix_first = property(lambda self: self.table.prefix_first)
    prefix_count = property(lambda self: self.table.prefix_count)

    def __repr__(self) -> str:  # never the benchmark text
        return f"<RawForm: {len(self.phrases)} phrases>"


@dataclass(repr=False)
class LeakageIndex:
    """Every question window and every countable phrase of a benchmark, ready for lookups.

    A *phrase* is a text matched whole: an option, or a question shorter than the window (nearly
    half of CMMLU's questions are; a model repeating one in full would otherwise go unseen).
    ``raw`` holds the same for the raw form (the text as written, see the module docstring).
    """

    window: int
    min_option_chars: int
    min_question_chars: int
    stock_items: int
    item_uids: list[str]
    n_short_options: int  # distinct normalised options below min_option_chars, ignored
    n_stock_phrases: int  # distinct phrases in >= stock_items items, ignored
    # question windows, sorted by hash; found from the 10-grams (gram_hash, seed_filter): a window
    # starts with one, so one lookup serves the exact windows and the near copies' seeds
    question_normal: list[str]
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
    # near copies: the questions' 10-grams (template ones left out) and the phrases' pieces, each
    # sorted by hash; a piece names its phrase (an index into phrase_*) and its offset in it
    near_min_chars: int
    near_chars_per_edit: int
    question_len: np.ndarray
    gram_hash: np.ndarray  # every question 10-gram, templates too, unique and sorted
    seed_filter: np.ndarray  # of gram_hash
    seed_hash: np.ndarray
    seed_item: np.ndarray
    seed_pos: np.ndarray
    pieces_in_prefix_filter: bool  # prefix_filter holds the pieces' first characters too
    piece_filter: np.ndarray
    piece_hash: np.ndarray
    piece_phrase: np.ndarray
    piece_offset: np.ndarray
    raw: RawForm

    def __repr__(self) -> str:  # never the benchmark text: tracebacks and test logs print this
        return f"<LeakageIndex: {self.n_items} items; {self.thresholds()}>"

    @property
    def n_items(self) -> int:
        return len(self.item_uids)

    @property
    def questions(self) -> list[str]:  # the name RawForm shares, for the lookups of both forms
        return self.question_normal

    @property
    def phrases(self) -> list[str]:
        return self.phrase_normal

    @property
    def option_normal(self) -> list[str]:
        return [p for p, q in zip(self.phrase_normal, self.phrase_is_question) if not q]

    def thresholds(self) -> str:
        return (
            f"window {self.window} chars, whole questions >= {self.min_question_chars} chars, "
            f"min option chars {self.min_option_chars}, options and questions shared by >= "
            f"{self.stock_items} items ignored ({self.n_short_options} short options and "
            f"{self.n_stock_phrases} stock texts skipped), near copies of texts >= "
            f"{self.near_min_chars} chars within 1 edit per {self.near_chars_per_edit} chars; "
            f"as written (NFKC, whitespace dropped) too: windows {self.raw.window} chars, whole "
            f"questions >= {self.min_question_chars} chars, options >= "
            f"{self.raw.raw_min_option_chars} chars of >= {RAW_MIN_SYMBOLS} normalised characters "
            f"({self.raw.n_stock_phrases} stock texts skipped)"
        )

    def near_edits(self, length: int) -> int:
        """Edits a near copy of a benchmark string of ``length`` characters may have."""
        return length // self.near_chars_per_edit


def build_index(
    items: Iterable[ItemText],
    window: int = WINDOW,
    min_option_chars: int = MIN_OPTION_CHARS,
    stock_items: int = STOCK_ITEMS,
    min_question_chars: int = MIN_QUESTION_CHARS,
    near_min_chars: int = NEAR_MIN_CHARS,
    near_chars_per_edit: int = NEAR_CHARS_PER_EDIT,
    raw_min_option_chars: int = RAW_MIN_OPTION_CHARS,
) -> LeakageIndex:
    """Index the questions (every ``window``-character window) and options of ``items``, in the
    normal form and in the raw form.

    Every item is indexed, not only the record's own: a model can quote another item.
    """
    if near_min_chars < 2 * _PIECE or near_chars_per_edit < 2 * _PIECE:
        raise ConfigError(
            f"near_min_chars {near_min_chars} and near_chars_per_edit {near_chars_per_edit} must "
            f"be at least {2 * _PIECE}: k + 1 pieces of {_PIECE} characters must fit in a phrase"
        )
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
    prefix_chars = min(min_option_chars, min_question_chars)
    table = _phrase_table(entries, prefix_chars)
    window_hash, window_item, window_pos = _sorted_windows(questions, window)
    seed_hash, seed_item, seed_pos = _question_windows(questions, _QUESTION_SEED)
    gram_hash = np.unique(seed_hash)
    seed_hash, seed_item, seed_pos = _drop_templates(seed_hash, seed_item, seed_pos, stock_items)
    # a piece's first prefix_chars characters join the phrases' prefixes in one bitmap, so one
    # lookup of every position serves both (where a prefix is no longer than a piece)
    pieces_in_prefix_filter = prefix_chars <= _PIECE
    piece_hash, piece_phrase, piece_offset, piece_gram = _phrase_pieces(
        table.texts, table.length, near_min_chars, near_chars_per_edit,
        prefix_chars if pieces_in_prefix_filter else _PIECE)
    raw = _raw_form_index(items, questions, all_options, window, raw_min_option_chars,
                          min_question_chars, stock_items)
    raw.every_text = raw_min_option_chars < min_option_chars or not _normal_form_covers(
        raw, questions, window_hash, window_item, window_pos, set(table.texts))
    return LeakageIndex(
        window=window,
        min_option_chars=min_option_chars,
        min_question_chars=min_question_chars,
        stock_items=stock_items,
        item_uids=[item.uid for item in items],
        n_short_options=len(short),
        n_stock_phrases=len(stock),
        question_normal=questions,
        window_hash=window_hash,
        window_item=window_item,
        window_pos=window_pos,
        prefix_chars=prefix_chars,
        phrase_normal=table.texts,
        phrase_is_question=table.is_question,
        phrase_item=table.item,
        phrase_hash=table.hash,
        phrase_len=table.length,
        prefix_filter=_bitmap(np.concatenate([table.prefix_hash, piece_gram]) if pieces_in_prefix_filter
                              else table.prefix_hash),
        prefix_hash=table.prefix_hash,
        prefix_first=table.prefix_first,
        prefix_count=table.prefix_count,
        near_min_chars=near_min_chars,
        near_chars_per_edit=near_chars_per_edit,
        question_len=np.array([len(q) for q in questions], dtype=np.int64),
        gram_hash=gram_hash,
        seed_filter=_bitmap(gram_hash),
        seed_hash=seed_hash,
        seed_item=seed_item,
        seed_pos=seed_pos,
        pieces_in_prefix_filter=pieces_in_prefix_filter,
        piece_filter=_bitmap(piece_hash),
        piece_hash=piece_hash,
        piece_phrase=piece_phrase,
        piece_offset=piece_offset,
        raw=raw,
    )


def _normal_form_covers(raw: RawForm, questions: list[str], window_hash: np.ndarray,
                        window_item: np.ndarray, window_pos: np.ndarray, phrases: set[str]) -> bool:
    """Whether every raw window and phrase made of class-0 characters only (``_char_classes``)
    is also a normal window or a countable normal phrase, so that the raw lookups can skip the
    texts of class-0 characters (they read the same in both forms). False, e.g., for a raw window
    that begins inside a LaTeX command (``alpha x=...`` of ``\\alpha x=...``), which the normal
    form of the question decodes."""
    classes = _char_classes()
    if any(not classes[_code_points([p])].any() and p not in phrases for p in raw.phrases):
        return False
    w = raw.window
    sizes = np.fromiter((len(q) for q in raw.questions), dtype=np.int64, count=len(raw.questions))
    differ = np.concatenate([[0], np.cumsum(classes[_code_points(raw.questions)] > 0)])
    begin = (np.cumsum(sizes) - sizes)[raw.window_item] + raw.window_pos
    clean = np.flatnonzero(differ[begin + w] == differ[begin])
    lo = np.searchsorted(window_hash, raw.window_hash[clean], side="left")
    hi = np.searchsorted(window_hash, raw.window_hash[clean], side="right")
    for k, first, last in zip(clean.tolist(), lo.tolist(), hi.tolist()):
        item, pos = int(raw.window_item[k]), int(raw.window_pos[k])
        text = raw.questions[item][pos : pos + w]
        if not any(questions[window_item[j]][window_pos[j] : window_pos[j] + w] == text
                   for j in range(first, last)):
            return False
    return True


def _raw_form_index(items: list, questions: list[str], all_options: list[str], window: int,
                    raw_min_option_chars: int, min_question_chars: int, stock_items: int) -> RawForm:
    """The raw form's windows and phrases; ``questions`` and ``all_options`` are the normal forms."""
    raw_questions = _raw_strings([item.question for item in items])
    raw_options = _raw_strings([option for item in items for option in item.options])
    # items per text, in each form, over every option and whole question whatever its length
    normal_items: Counter = Counter()
    raw_items: Counter = Counter()
    phrases_of_item: list[set[tuple[str, str, bool]]] = []
    cursor = 0
    for item, question, raw_question in zip(items, questions, raw_questions):
        n = len(item.options)
        pairs = list(zip(raw_options[cursor : cursor + n], all_options[cursor : cursor + n]))
        cursor += n
        normal_items.update({normal for _, normal in pairs} | {question})
        raw_items.update({raw for raw, _ in pairs} | {raw_question})
        phrases = {(raw, normal, False) for raw, normal in pairs
                   if len(raw) >= raw_min_option_chars and len(normal) >= RAW_MIN_SYMBOLS}
        if min_question_chars <= len(raw_question) < window and len(question) >= RAW_MIN_SYMBOLS:
            phrases.add((raw_question, question, True))
        phrases_of_item.append(phrases)
    stock = {raw for phrases in phrases_of_item for raw, normal, _ in phrases
             if raw_items[raw] >= stock_items or normal_items[normal] >= stock_items}
    entries = sorted({(raw, is_question, k) for k, phrases in enumerate(phrases_of_item)
                      for raw, _, is_question in phrases if raw not in stock})
    prefix_chars = min(raw_min_option_chars, min_question_chars)
    table = _phrase_table(entries, prefix_chars)
    # the gram that begins each window: windows start at 0 .. len - window
    gram, gram_item, gram_pos = _question_windows(raw_questions, prefix_chars)
    gram_hash = np.unique(gram[gram_pos + window <= np.asarray([len(q) for q in raw_questions] or [0])[gram_item]])
    return RawForm(window, raw_min_option_chars, len(stock), raw_questions, _sorted_windows(raw_questions, window),
                   gram_hash, prefix_chars, table, _bitmap(np.concatenate([gram_hash, table.prefix_hash])))


@dataclass(frozen=True)
class _PhraseTable:
    """Phrases sorted by the hash of their first ``prefix_chars`` characters; the phrases of the
    k-th unique prefix are ``[prefix_first[k] : prefix_first[k] + prefix_count[k]]``."""

    texts: list[str]
    is_question: np.ndarray
    item: np.ndarray
    hash: np.ndarray
    length: np.ndarray
    prefix_hash: np.ndarray
    prefix_first: np.ndarray
    prefix_count: np.ndarray


def _phrase_table(entries: list[tuple[str, bool, int]], prefix_chars: int) -> _PhraseTable:
    """The (text, is a question, item) entries of one form as the phrase lookups need them."""
    texts = [text for text, _, _ in entries]
    prefix = _hash_strings(texts, [prefix_chars] * len(texts))
    order = np.argsort(prefix, kind="stable")
    prefix_hash, prefix_first, prefix_count = np.unique(prefix[order], return_index=True, return_counts=True)
    ordered = [texts[k] for k in order]
    return _PhraseTable(
        texts=ordered,
        is_question=np.array([entries[k][1] for k in order], dtype=bool),
        item=np.array([entries[k][2] for k in order], dtype=np.int64),
        hash=_hash_strings(ordered),
        length=np.array([len(t) for t in ordered], dtype=np.int64),
        prefix_hash=prefix_hash,
        prefix_first=prefix_first,
        prefix_count=prefix_count,
    )


def _sorted_windows(questions: list[str], window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every ``window``-character window of ``questions``: hash, item, position, sorted by hash."""
    hashes, item, pos = _question_windows(questions, window)
    order = np.argsort(hashes, kind="stable")
    return hashes[order], item[order], pos[order]


def _drop_templates(hashes, items, positions, stock_items: int) -> tuple[np.ndarray, ...]:
    """The 10-grams sorted by hash, less those in ``stock_items`` questions or more (template
    text such as "下列关于...的说法" identifies no item and would make every text a candidate)."""
    order = np.lexsort((positions, items, hashes))
    hashes, items, positions = hashes[order], items[order], positions[order]
    first_of_pair = np.ones(hashes.size, dtype=bool)
    first_of_pair[1:] = (hashes[1:] != hashes[:-1]) | (items[1:] != items[:-1])
    distinct, inverse, n_items = np.unique(
        hashes[first_of_pair], return_inverse=True, return_counts=True)
    common = distinct[n_items >= stock_items]
    keep = ~np.isin(hashes, common)
    return hashes[keep], items[keep], positions[keep]


def _phrase_pieces(phrases: list[str], lengths: np.ndarray, near_min_chars: int, chars_per_edit: int,
                   gram: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """k + 1 disjoint pieces of ``_PIECE`` characters per phrase long enough for near copies, and
    the hash of each piece's first ``gram`` characters."""
    long = np.flatnonzero(lengths >= near_min_chars)
    n_pieces = lengths[long] // chars_per_edit + 1
    phrase = np.repeat(long, n_pieces)
    offset = (np.arange(phrase.size) - np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)) * _PIECE
    if phrase.size == 0:
        return np.zeros(0, dtype=np.uint64), phrase, offset, np.zeros(0, dtype=np.uint64)
    starts = np.cumsum(lengths) - lengths
    prefix_hash = _PrefixHash(_code_points(phrases))
    hashes = prefix_hash.windows(starts[phrase] + offset, _PIECE)
    order = np.argsort(hashes, kind="stable")
    grams = prefix_hash.windows(starts[phrase] + offset, gram)
    return hashes[order], phrase[order], offset[order], grams[order]


def _question_windows(questions: list[str], window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sizes = np.fromiter((len(q) for q in questions), dtype=np.int64, count=len(questions))
    starts = np.cumsum(sizes) - sizes
    hashes = _PrefixHash(_code_points(questions))
    count = np.maximum(sizes - window + 1, 0)
    item = np.repeat(np.arange(len(questions)), count)
    pos = np.arange(item.size) - np.repeat(np.cumsum(count) - count, count)
    return hashes.windows(starts[item] + pos, window), item, pos
