"""Near copies: a window or phrase with one edit per ``NEAR_CHARS_PER_EDIT`` characters."""

from __future__ import annotations

import numpy as np

from cube.records.leakage.rules import _PIECE, _QUESTION_SEED
from cube.records.leakage.index import LeakageIndex, _PrefixHash
from cube.records.leakage.normal import _decode


def _near_spans(codes, text_of, hashes: _PrefixHash, index: LeakageIndex, exact: list,
                grams: tuple[np.ndarray, np.ndarray], pieces: tuple[np.ndarray, np.ndarray]) -> list:
    """Near copies of question windows and long phrases, from seeds (see the module docstring).

    A seed inside an exact match, and a candidate whose whole extent is, are skipped: they could
    only widen that hit (by less than a seed), and skipping keeps the verification count near the
    number of real near copies. The scrub stays consistent with this: once the exact match is
    cut, what is left beside the marker is shorter than a seed plus its edits. ``grams``: the
    positions and hashes of the text's question 10-grams (``_gram_starts``), templates included;
    ``pieces``: those of the phrases' pieces.
    """
    seeds = [_seed_pairs(*grams, index.seed_hash), _seed_pairs(*pieces, index.piece_hash)]
    if not any(at.size for at, _ in seeds):  # the usual case
        return []
    # the exact matches as sorted, disjoint runs: [run_begin[r], run_end[r])
    run_begin, run_end = [], []
    for begin, end in sorted((b, e) for b, e, _, _ in exact):
        if run_end and begin <= run_end[-1]:
            run_end[-1] = max(run_end[-1], end)
        else:
            run_begin.append(begin)
            run_end.append(end)
    run_begin_a = np.asarray(run_begin, dtype=np.int64)
    run_end_a = np.asarray(run_end, dtype=np.int64)

    def uncovered(starts: np.ndarray, length: np.ndarray | int) -> np.ndarray:
        if run_begin_a.size == 0:
            return np.ones(starts.size, dtype=bool)
        run = np.searchsorted(run_begin_a, starts, side="right") - 1
        inside = (run >= 0) & (run_end_a[np.maximum(run, 0)] >= starts + length)
        return ~inside

    candidates: list[tuple[int, str, tuple]] = []  # (expected start, benchmark string, (kind, item))
    w = index.window
    question_len = index.question_len
    at, entry = seeds[0]
    keep = uncovered(at, _QUESTION_SEED)
    at, entry = at[keep], entry[keep]
    item, pos = index.seed_item[entry], index.seed_pos[entry]
    for shift in (0, _QUESTION_SEED):  # the seed is the window's first half, or its second
        begin = pos - shift
        ok = (begin >= 0) & (begin + w <= question_len[item]) & uncovered(at - shift, w)
        for start, k, b in np.unique(np.stack([at[ok] - shift, item[ok], begin[ok]]), axis=1).T:
            candidates.append((int(start), index.question_normal[k][b : b + w], ("near-question", int(k))))
    at, entry = seeds[1]
    keep = uncovered(at, _PIECE)
    at, entry = at[keep], entry[keep]
    phrase, offset = index.piece_phrase[entry], index.piece_offset[entry]
    ok = uncovered(at - offset, index.phrase_len[phrase])
    for start, k in np.unique(np.stack([at[ok] - offset[ok], phrase[ok]]), axis=1).T:
        kind = "near-question" if index.phrase_is_question[k] else "near-option"
        candidates.append((int(start), index.phrase_normal[k], (kind, int(index.phrase_item[k]))))

    spans = []
    for start, target, (kind, item) in candidates:
        edits = index.near_edits(len(target))
        found = _near_copy(codes, text_of, start, target, edits)
        if found is not None:
            spans.append((found[0], found[1], kind, item))
    return spans


def _seed_pairs(at: np.ndarray, wanted: np.ndarray, sorted_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(text position, index entry) for every gram at ``at`` (hash ``wanted``) in ``sorted_hashes``;
    a hash may have several entries, and one that has none (a template 10-gram) gives no pair."""
    if at.size == 0 or sorted_hashes.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo = np.searchsorted(sorted_hashes, wanted, side="left")
    count = np.searchsorted(sorted_hashes, wanted, side="right") - lo
    pairs_at = np.repeat(at, count)
    entry = np.repeat(lo, count) + (np.arange(pairs_at.size) - np.repeat(np.cumsum(count) - count, count))
    return pairs_at, entry


def _near_copy(codes, text_of, start: int, target: str, edits: int) -> tuple[int, int] | None:
    """[begin, end) of the best copy of ``target`` within ``edits`` edits that starts within
    ``edits`` of ``start``, stays inside one text, and begins and ends on ``target``'s first and
    last characters; None if there is none."""
    n = codes.size
    anchor = text_of[min(max(start, 0), n - 1)]
    best = None
    for begin in range(max(start - edits, 0), min(start + edits + 1, n)):
        if codes[begin] != ord(target[0]) or text_of[begin] != anchor:
            continue
        stop = min(begin + len(target) + edits, n)
        stop = begin + int(np.searchsorted(text_of[begin:stop], anchor, side="right"))
        match = _anchored_distance(target, _decode(codes[begin:stop]), edits)
        if match is not None and (best is None or match[1] < best[2]):
            best = (begin, begin + match[0], match[1])
    return None if best is None else (best[0], best[1])


def _anchored_distance(pattern: str, text: str, limit: int) -> tuple[int, int] | None:
    """(end, distance) of the prefix ``text[:end]`` closest to ``pattern`` in Levenshtein distance,
    among those ending on ``pattern``'s last character and within ``limit``; the longest on a tie.

    Myers' bit-parallel algorithm (Hyyrö's formulation for the edit distance of a pattern against
    each prefix of a text): one pass over ``text``, a few integer operations per character.
    """
    m = len(pattern)
    if m == 0:
        return None
    peq: dict[str, int] = {}
    for i, char in enumerate(pattern):
        peq[char] = peq.get(char, 0) | (1 << i)
    full, high, last = (1 << m) - 1, 1 << (m - 1), pattern[-1]
    pv, mv, score = full, 0, m
    best = None
    for j, char in enumerate(text):
        eq = peq.get(char, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | (~(xh | pv) & full)
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        ph = ((ph << 1) | 1) & full
        mh = (mh << 1) & full
        pv = mh | (~(xv | ph) & full)
        mv = ph & xv
        if char == last and score <= limit and (best is None or score <= best[1]):
            best = (j + 1, score)
    return best
