"""The audit: every leaked span of a batch of texts, exact and near matches merged into hits."""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from cube.records.leakage.rules import KINDS, _PIECE, _QUESTION_SEED
from cube.records.leakage.normal import (
    _char_classes,
    _code_points,
    _normalize_code_points,
    _normalize_texts,
)
from cube.records.leakage.index import LeakageIndex, _PrefixHash, _bitmap_candidates
from cube.records.leakage.exact import (
    _gram_starts,
    _in_sorted,
    _phrase_spans,
    _raw_spans,
    _window_spans,
)
from cube.records.leakage.near import _near_spans

_TEXTS_PER_BATCH_CHARS = 4_000_000  # bounds the memory of one vectorised pass


@dataclass(frozen=True)
class TextHit:
    """A leak in ``texts[text]`` of one ``audit_texts`` call; never holds the leaked text."""

    text: int
    offset: int  # index of the first leaked character in the original text
    n_chars: int  # length of the leaked span in the original text
    kind: str  # one of KINDS
    item_uid: str  # an item whose question or option contains the span
    encoding: str = ""  # "" as written; else the decoding that showed it (ENCODINGS)


@dataclass(frozen=True)
class Hit:
    """A leak in one field of one record; never holds the leaked text."""

    uid: str
    field: str
    offset: int
    n_chars: int
    kind: str
    item_uid: str


def audit_texts(texts: Sequence[str], index: LeakageIndex, min_phrase_chars: int = 0,
                decode: bool = True) -> list[TextHit]:
    """Every leaked span in ``texts``: one hit per maximal run of overlapping matches.

    ``min_phrase_chars`` raises the whole-phrase minimum for these texts only: identifiers (a
    qhash, a model name) share short options such as "1949" by chance. ``decode``: also audit
    each text as the encodings a harness's own files use would decode it (``decoded_forms``:
    JSON ``\\uXXXX`` escapes, %-encoding, and the text reversed), each hit's span mapped back to
    the characters of the text as written that encode it.
    """
    hits = _audit_texts(texts, index, min_phrase_chars)
    if not decode:
        return hits
    for reversed_ in (False, True):
        variants: list[str] = []
        owners: list[tuple[int, str, list[int], list[int]]] = []
        for number, text in enumerate(texts):
            for name, variant, starts, ends in decoded_forms(text):
                if (name == "reversed") == reversed_:
                    variants.append(variant)
                    owners.append((number, name, starts, ends))
        # reversed, short symbolic strings match by chance: measured on the archive's 2,285 distinct
        # generations, one reversed ASCII formula matched another item's 4-character option
        floor = max(min_phrase_chars, REVERSED_MIN_PHRASE_CHARS) if reversed_ else min_phrase_chars
        for hit in _audit_texts(variants, index, floor) if variants else []:
            number, name, starts, ends = owners[hit.text]
            if name == "reversed":  # the span's first character is the last one written
                n = len(texts[number])
                start, end = n - hit.offset - hit.n_chars, n - hit.offset
            else:
                start, end = starts[hit.offset], ends[hit.offset + hit.n_chars - 1]
            hits.append(TextHit(number, start, end - start, hit.kind, hit.item_uid, name))
    return sorted(hits, key=lambda h: (h.text, h.offset))


def metadata_texts(value: Any) -> list[str]:
    """Every string of a JSON value (keys and values), depth first: a manifest's free text."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (*metadata_texts(k), *metadata_texts(v))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in metadata_texts(v)]
    return []


# An ASCII string without spaces, escapes or %: a path, a hash, a model or task name, a number.
_IDENTIFIER = re.compile(r"[A-Za-z0-9_./:@+=,~#()\[\]-]*")


def audit_metadata(value: Any, index: LeakageIndex) -> tuple[list[str], list[TextHit]]:
    """The strings of ``value`` (an imported run's logged configuration, a manifest) and every
    leak in them, under the rules a generation is audited by.

    Why not a blanket 12-character floor (as before): a unique 5-8 character option planted in an
    OpenCompass or lm-eval config passed the import, shipped in a bundle's MANIFEST.json and was
    called clean by ``release verify --items``, while the same option in a generation was caught.
    Only identifiers (``_IDENTIFIER``: paths, hashes, model names, which share short options such
    as "135m" or "1949" by chance) keep the near-copy minimum; all other text, and every encoding
    of it (``decoded_forms``), is audited as a generation is, whole options from
    ``METADATA_MIN_PHRASE_CHARS`` (5) normalised characters: the 4-character ones are mostly years
    and numbers, which prose with version numbers in it hits by chance (measured: "part 2 0.2.0"
    in config/models.yaml's provenance note normalises to hold "2020", an option of CMMLU).
    """
    texts = metadata_texts(value)
    ident = [k for k, t in enumerate(texts) if _IDENTIFIER.fullmatch(t)]
    other = [k for k, t in enumerate(texts) if not _IDENTIFIER.fullmatch(t)]
    hits = []
    for chosen, floor in ((ident, index.near_min_chars), (other, METADATA_MIN_PHRASE_CHARS)):
        for hit in audit_texts([texts[k] for k in chosen], index, floor) if chosen else []:
            hits.append(TextHit(chosen[hit.text], hit.offset, hit.n_chars, hit.kind, hit.item_uid, hit.encoding))
    return texts, sorted(hits, key=lambda h: (h.text, h.offset))


REVERSED_MIN_PHRASE_CHARS = 5
METADATA_MIN_PHRASE_CHARS = 5  # a whole option read backwards counts from 5 normalised characters


ENCODINGS = ("json-escape", "percent", "reversed")
_JSON_ESCAPE = re.compile(r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})")
_PERCENT = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def _decode_runs(text: str, pattern: re.Pattern, decode) -> tuple[str, list[int], list[int]]:
    """``text`` with each match of ``pattern`` replaced by ``decode(match)``; for each character of
    the result, the first and one-past-last index of what it came from in ``text``."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    at = 0
    for match in pattern.finditer(text):
        for k in range(at, match.start()):
            out.append(text[k])
            starts.append(k)
            ends.append(k + 1)
        decoded = decode(match)
        out.append(decoded)
        starts += [match.start()] * len(decoded)
        ends += [match.end()] * len(decoded)
        at = match.end()
    for k in range(at, len(text)):
        out.append(text[k])
        starts.append(k)
        ends.append(k + 1)
    return "".join(out), starts, ends


def _json_char(match: re.Match) -> str:
    if match.group(3) is not None:
        return chr(int(match.group(3), 16))
    high, low = int(match.group(1), 16), int(match.group(2), 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def _percent_chars(match: re.Match) -> str:
    return bytes.fromhex(match.group(0).replace("%", "")).decode("utf-8", "replace")


def decoded_forms(text: str) -> list[tuple[str, str, list[int], list[int]]]:
    """(encoding, decoded text, source starts, source ends; none for reversed) for each encoding ``text`` may hide
    benchmark text in: JSON ``\\uXXXX`` escapes and %-encoding (what JSON, JSON-lines and URL
    fields of lm-eval and OpenCompass files hold, escaped once more: the importers' parsers decode
    one level only), and the text reversed. Why these: each passed every channel (a generation, an
    imported config, a bundle's MANIFEST.json) although it is the item's text to anyone who reads
    it back. Only texts holding an escape are decoded; every text of 4 characters or more is
    also read reversed."""
    forms = []
    if "\\u" in text and _JSON_ESCAPE.search(text):
        forms.append(("json-escape", *_decode_runs(text, _JSON_ESCAPE, _json_char)))
    if "%" in text and _PERCENT.search(text):
        forms.append(("percent", *_decode_runs(text, _PERCENT, _percent_chars)))
    if len(text) >= 4:  # its map is arithmetic (audit_texts): no per-character lists
        forms.append(("reversed", text[::-1], [], []))
    return forms


def _audit_texts(texts: Sequence[str], index: LeakageIndex, min_phrase_chars: int = 0) -> list[TextHit]:
    """``audit_texts`` of the texts as written."""
    hits: list[TextHit] = []
    sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    total = np.cumsum(sizes)
    first = 0
    while first < len(texts):  # a batch ends with the text that brings it to the limit
        before = int(total[first - 1]) if first else 0
        end = min(int(np.searchsorted(total, before + _TEXTS_PER_BATCH_CHARS, side="left")) + 1, len(texts))
        hits += _audit_batch(list(texts[first:end]), first, index, min_phrase_chars, sizes[first:end])
        first = end
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


def _audit_batch(texts: list[str], first: int, index: LeakageIndex, min_phrase_chars: int = 0,
                 sizes: np.ndarray | None = None) -> list[TextHit]:
    """The texts holding a marker character are audited apart from the rest, which thus skip the
    markup decoding and its offset arrays; windows never span two texts, so the hits are those of
    one pass, and a stable sort by text restores their order. The raw form's lookups read only
    the texts with a character that differs between the forms (``_char_classes``)."""
    if sizes is None:
        sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    cps = _code_points(texts)
    classes = _char_classes()[cps]
    differing = np.flatnonzero(classes)
    ends = np.cumsum(sizes)
    if index.raw.every_text:
        raw_texts = np.ones(len(texts), dtype=bool)
    else:
        raw_texts = np.zeros(len(texts), dtype=bool)
        raw_texts[np.searchsorted(ends, differing, side="right")] = True
    marked = differing[classes[differing] == 2]
    if marked.size == 0:
        return _audit_group(texts, np.arange(len(texts)), sizes, first, index, min_phrase_chars, cps,
                            raw_texts)
    is_marked = np.zeros(len(texts), dtype=bool)
    is_marked[np.searchsorted(ends, marked, side="right")] = True
    plain, decoded = np.flatnonzero(~is_marked), np.flatnonzero(is_marked)
    plain_texts = [texts[k] for k in plain.tolist()]
    hits = _audit_group(plain_texts, plain, sizes[plain], first, index, min_phrase_chars,
                        _code_points(plain_texts), raw_texts[plain])
    hits += _audit_group([texts[k] for k in decoded.tolist()], decoded, sizes[decoded], first, index,
                         min_phrase_chars, None, raw_texts[decoded])
    return sorted(hits, key=lambda hit: hit.text)


def _audit_group(texts: list[str], which: np.ndarray, sizes: np.ndarray, first: int,
                 index: LeakageIndex, min_phrase_chars: int, plain_cps: np.ndarray | None,
                 raw_texts: np.ndarray) -> list[TextHit]:
    """Audit ``texts``, the batch's texts ``which``; ``plain_cps``: their code points, where the
    caller knows they hold no markup; ``raw_texts``: per text, whether the raw form's lookups
    read it."""
    if not texts:
        return []
    text_start = np.cumsum(sizes) - sizes
    cps = plain_cps if plain_cps is not None else _code_points(texts)
    if plain_cps is not None:
        codes, source = _normalize_code_points(plain_cps)
        source_end = source + 1
    else:
        codes, source, source_end = _normalize_texts(texts, sizes, cps)
    owner = np.repeat(np.arange(len(texts), dtype=np.int32), sizes)  # text index per original character
    found = []  # (begin, end) in the joined original texts, kind, item
    if codes.size >= index.prefix_chars:
        text_of = owner[source]  # text index per normalised char
        hashes = _PrefixHash(codes)
        n = codes.size
        grams = _gram_starts(hashes, text_of, n, _QUESTION_SEED, index.seed_filter, index.gram_hash)
        spans = _window_spans(codes, text_of, hashes, index, grams[0])
        prefix = hashes.every_window(index.prefix_chars)
        candidates = _bitmap_candidates(index.prefix_filter, prefix)
        spans += [s for s in _phrase_spans(codes, text_of, hashes, index, candidates, prefix)
                  if s[1] - s[0] >= min_phrase_chars]
        if index.pieces_in_prefix_filter:  # a piece starts with a prefix the bitmap holds
            at = candidates[candidates + _PIECE <= n]
            at = at[text_of[at] == text_of[at + _PIECE - 1]]
            piece = hashes.windows(at, _PIECE)
            present = _in_sorted(index.piece_hash, piece)
            pieces = (at[present], piece[present])
        else:
            pieces = _gram_starts(hashes, text_of, n, _PIECE, index.piece_filter, index.piece_hash)
        spans += _near_spans(codes, text_of, hashes, index, spans, grams, pieces)
        found = [(int(source[begin]), int(source_end[end - 1]), kind, item)
                 for begin, end, kind, item in _merge_spans(spans, text_of)]
    if raw_texts.all():
        found += _raw_spans(cps, owner, None, index.raw, min_phrase_chars)
    elif raw_texts.any():
        read = np.flatnonzero(raw_texts)  # the characters of the texts the raw lookups read:
        lengths = sizes[read]
        at = np.repeat(text_start[read] - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
        found += _raw_spans(cps[at], owner[at], at, index.raw, min_phrase_chars)
    # merged in original offsets: a match both forms find keeps the normal form's kind
    return [
        TextHit(
            text=first + int(which[owner[begin]]),
            offset=int(begin - text_start[owner[begin]]),
            n_chars=int(end - begin),
            kind=kind,
            item_uid=index.item_uids[item],
        )
        for begin, end, kind, item in _merge_spans(found)
    ]




_KIND_RANK = {kind: rank for rank, kind in enumerate(KINDS)}


def _merge_spans(spans: list, text_of: np.ndarray | None = None) -> list:
    """Overlapping matches in one text become one hit, named by its first kind in ``KINDS``.
    ``text_of``: the text of each position, where positions run on across texts (normalised
    ones); None for positions in the joined original texts, which no match crosses."""
    merged: list[list] = []
    # at one start, the best kind first, then the longest span
    for begin, end, kind, item in sorted(spans, key=lambda s: (s[0], _KIND_RANK[s[2]], -s[1])):
        last = merged[-1] if merged else None
        if last and begin < last[1] and (text_of is None or text_of[begin] == text_of[last[0]]):
            last[1] = max(last[1], end)
            if _KIND_RANK[kind] < _KIND_RANK[last[2]]:
                last[2], last[3] = kind, item
        else:
            merged.append([begin, end, kind, item])
    return [tuple(m) for m in merged]
