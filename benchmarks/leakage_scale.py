"""Wall time of the leakage audit at the release's scale, with planted leaks that must all be found.

The target: 2.5 million records (the simulated cube) against every CMMLU test + dev item in under
60 s on 2 cores. Records are synthetic: 1-3 free-text fields of 10-80 characters each, drawn from
the unigram character frequencies of the CMMLU text itself (harder than a uniform alphabet: common
characters make the options' 4-character prefixes match often) plus ASCII, spaces and punctuation.
A fixed share of fields carries one planted leak, a question span of 20-40 characters or an option
text, disguised with full-width ASCII, inserted spaces and line breaks, and swapped punctuation;
a third of them also in traditional characters or with HTML entities, ``&nbsp;``, ``<br>`` and
``\quad`` inserted, and a third of the options of 14+ characters with one character changed (a
near copy).

    python benchmarks/leakage_scale.py [--records 2500000] [--naive-records 5000]

One process, one core: it already meets the two-core target, and it is how ``cube release audit``
runs (a worker pool would mostly pay for pickling the texts).

Printed: records/s and wall time of the audit alone (generation and index excluded), hits found vs planted,
offsets that point at the planted position, hits in unplanted fields, and the speed-up over a
naive per-text loop (normalise, slide a window over a set of strings, find every option) timed on
a subset whose hits must agree with the fast audit's (in the normal form and as written).
"""

from __future__ import annotations

import argparse
import functools
import time
import unicodedata
from collections import Counter

import numpy as np
from tqdm import tqdm

from cube.protocol.items import load_cmmlu
from cube.records import leakage

FIELDS = ("generation", "reasoning", "raw_output")
FULL_WIDTH = {chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)}
PUNCT_SWAP = {"，": ",", ",": "，", "。": ".", "：": ":", ":": "：", "；": ";", "？": "?", "（": "(",
              "）": ")", "(": "（", ")": "）", "、": ",", "“": '"', "”": '"'}

def character_distribution(items) -> tuple[np.ndarray, np.ndarray]:
    """Code points and probabilities: CMMLU unigram frequencies, 80 %, then ASCII and separators."""
    counts = Counter()
    for item in items:
        counts.update(item.question)
        for option in item.options:
            counts.update(option)
    cjk = sorted(c for c in counts if "\u4e00" <= c <= "\u9fff")
    p_cjk = np.array([counts[c] for c in cjk], dtype=float)
    other = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + [" ", "，", "。", "\n"]
    p_other = np.full(len(other), 1.0)
    probs = np.concatenate([0.8 * p_cjk / p_cjk.sum(), 0.2 * p_other / p_other.sum()])
    return np.array([ord(c) for c in cjk + other], dtype=np.uint32), probs


def inside_word(text: str, k: int) -> bool:
    """Between two ASCII letters: a break there would split a word or a LaTeX command (\\frac),
    which no model writes, and a split command is no longer markup."""
    return (text[k] == "\\" or text[k].isascii() and text[k].isalpha()) and \
        text[k + 1].isascii() and text[k + 1].isalpha()


def disguise(text: str, rng: np.random.Generator) -> str:
    """Full-width ASCII, swapped punctuation, and spaces or line breaks inserted inside."""
    out = []
    for k, char in enumerate(text):
        if rng.random() < 0.5:
            char = FULL_WIDTH.get(char, char)
        if rng.random() < 0.7:
            char = PUNCT_SWAP.get(char, char)
        out.append(char)
        if 0 < k < len(text) - 1 and not inside_word(text, k) and rng.random() < 0.08:
            out.append(" " if rng.random() < 0.5 else "\n")
    return "".join(out)


def markup(text: str, rng: np.random.Generator) -> str:
    """HTML numeric entities for some characters, and ``&nbsp;``, ``<br>`` or ``\\quad`` between."""
    out = []
    for k, char in enumerate(text):
        out.append(f"&#{ord(char)};" if rng.random() < 0.15 else char)
        if 0 < k < len(text) - 1 and not inside_word(text, k) and rng.random() < 0.08:
            out.append(("&nbsp;", "<br>", "\\quad ")[int(rng.integers(3))])
    return "".join(out)


@functools.cache
def _to_traditional():
    from opencc import OpenCC

    return OpenCC("s2t").convert


def near_copy(text: str) -> str:
    """One kept character in the middle replaced: the archive's case of a digit changed."""
    source = leakage.normalize_for_match(text)[1]
    at = int(source[len(source) // 2])
    new = str((int(text[at]) + 1) % 10) if text[at].isdigit() else ("乙" if text[at] != "乙" else "丙")
    return text[:at] + new + text[at + 1 :]


def dress(text: str, rng: np.random.Generator) -> str:
    """The old disguises, and for a third of the leaks traditional characters or markup too."""
    roll = rng.random()
    if roll < 1 / 6:
        text = _to_traditional()(text)
    elif roll < 1 / 3:
        return markup(text, rng)
    return disguise(text, rng)


def leak_sources(index: leakage.LeakageIndex, items) -> tuple[list, list]:
    """(item, question) pairs with >= 40 normalised characters and countable (item, option) pairs."""
    questions = [(k, item.question) for k, item in enumerate(items)
                 if len(index.question_normal[k]) >= 40]
    countable = set(index.option_normal)
    options = [(k, option) for k, item in enumerate(items) for option in item.options
               if leakage.normalize_for_match(option)[0] in countable]
    return questions, options


def planted_leak(rng, questions, options) -> tuple[str, str]:
    """A disguised leak text and its kind."""
    if rng.random() < 0.5:
        _, question = questions[rng.integers(len(questions))]
        normal, source = leakage.normalize_for_match(question)
        size = int(rng.integers(20, 41))
        begin = int(rng.integers(0, len(normal) - size + 1))
        original = question[source[begin] : source[begin + size - 1] + 1]
        return dress(original, rng), "question"
    _, option = options[rng.integers(len(options))]
    option = option.strip()
    if len(leakage.normalize_for_match(option)[0]) >= 14 and rng.random() < 1 / 3:
        return disguise(near_copy(option), rng), "near-option"
    return dress(option, rng), "option"


def separator(index: leakage.LeakageIndex) -> str:
    """A kept symbol in no question or phrase ("|" is not: P(y|x)), so a match cannot cross it."""
    return next(c for c in "¤§~^|" if not any(c in t for t in index.question_normal + index.phrase_normal))


def synthetic_chunk(seed, n_records, alphabet, probs, questions, options, leak_rate, sep):
    """Texts (one per field), their record number, and {text index: the offsets a hit may start at}."""
    rng = np.random.default_rng(seed)
    n_fields = rng.integers(1, 4, n_records)
    lengths = rng.integers(10, 81, int(n_fields.sum()))
    codes = rng.choice(alphabet, size=int(lengths.sum()), p=probs).astype(np.uint32)
    blob = codes.tobytes().decode("utf-32-le")
    ends = np.cumsum(lengths)
    texts = [blob[e - n : e] for e, n in zip(ends.tolist(), lengths.tolist())]
    planted = {}
    for k in np.flatnonzero(rng.random(len(texts)) < leak_rate).tolist():
        leak, _ = planted_leak(rng, questions, options)
        at = int(rng.integers(0, len(texts[k]) + 1))
        # a kept symbol on both sides, so the random neighbours cannot extend the match
        texts[k] = texts[k][:at] + sep + leak + sep + texts[k][at:]
        # the hit starts at the leak's first kept character (an option may open with "《"), or,
        # where the text as written matches too, at its first visible one (the "《" itself)
        visible = len(leak) - len(leak.lstrip())
        planted[k] = {at + 1 + int(leakage.normalize_for_match(leak)[1][0]), at + 1 + visible}
    record = np.repeat(np.arange(n_records), n_fields)
    return texts, record, planted


def as_written(text: str) -> str:
    """The raw form, stated independently: NFKC per character, whitespace and invisible dropped."""
    return "".join(part for char in text for part in unicodedata.normalize("NFKC", char)
                   if not part.isspace() and unicodedata.category(part) not in ("Cc", "Cf"))


def naive_audit(texts, index) -> list[tuple[int, int]]:
    """(text, form) of every text with a window or option match, in the normal form and as written:
    the reference, one text at a time."""
    found = set()
    for form, questions, phrases in ((lambda t: leakage.normalize_for_match(t)[0], index.question_normal,
                                      index.phrase_normal),
                                     (as_written, index.raw.questions, index.raw.phrases)):
        windows = {q[i : i + index.window] for q in questions for i in range(len(q) - index.window + 1)}
        options_by_length: dict[int, set[str]] = {}
        for phrase in phrases:
            options_by_length.setdefault(len(phrase), set()).add(phrase)
        for k, text in enumerate(texts):
            normal = form(text)
            starts = [i for i in range(len(normal) - index.window + 1)
                      if normal[i : i + index.window] in windows]
            for length, group in options_by_length.items():
                starts += [i for i in range(len(normal) - length + 1) if normal[i : i + length] in group]
            if starts:
                found.add(k)
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_500_000)
    parser.add_argument("--chunk", type=int, default=100_000, help="records per audit call")
    parser.add_argument("--leak-rate", type=float, default=0.001, help="share of fields with a leak")
    parser.add_argument("--naive-records", type=int, default=5_000)
    args = parser.parse_args()

    t0 = time.perf_counter()
    items = load_cmmlu(splits=("dev", "test"))
    index = leakage.build_index(items)
    print(f"index: {index.n_items:,} items, {index.window_hash.size:,} question windows, "
          f"{len(index.phrase_normal):,} whole options and short questions; {index.thresholds()}; built in {time.perf_counter() - t0:.2f} s")

    alphabet, probs = character_distribution(items)
    questions, options = leak_sources(index, items)
    sep = separator(index)
    chunks = []
    n_chunks = -(-args.records // args.chunk)
    for c in tqdm(range(n_chunks), desc="generating", unit="chunk"):
        size = min(args.chunk, args.records - c * args.chunk)
        chunks.append(synthetic_chunk(c, size, alphabet, probs, questions, options, args.leak_rate, sep))
    n_texts = sum(len(t) for t, _, _ in chunks)
    n_chars = sum(sum(map(len, t)) for t, _, _ in chunks)
    print(f"records: {args.records:,} with {n_texts:,} text fields, {n_chars / 1e6:.0f} M characters")

    t0 = time.perf_counter()
    results = [leakage.audit_texts(texts, index) for texts, _, _ in tqdm(chunks, desc="auditing")]
    wall = time.perf_counter() - t0
    print(f"audit: {wall:.1f} s wall on one core, {args.records / wall:,.0f} records/s, "
          f"{n_chars / wall / 1e6:.1f} M chars/s (target: < 60 s for 2.5 M records on 2 cores)")

    planted = found = exact_offset = 0
    unplanted: Counter = Counter()
    for (texts, _, plants), hits in zip(chunks, results):
        planted += len(plants)
        hit_texts, hit_offsets = {}, {}
        for hit in hits:
            hit_texts.setdefault(hit.text, hit)
            hit_offsets.setdefault(hit.text, set()).add(hit.offset)
        for k, at in plants.items():
            if k in hit_texts:
                found += 1
                exact_offset += bool(at & hit_offsets[k])
        unplanted.update((h.kind, h.n_chars) for k, h in hit_texts.items() if k not in plants)
    print(f"hits: {found:,} of {planted:,} planted leaks found, {exact_offset:,} at the planted offset; "
          f"{sum(unplanted.values()):,} hits in fields without a planted leak (chance matches in the "
          f"random text; kind, chars: {dict(unplanted.most_common(5))})")
    kinds = Counter(h.kind for hits in results for h in hits)
    print(f"hits by kind: {dict(kinds)}")

    subset = [t for texts, _, _ in chunks for t in texts][: args.naive_records]
    t0 = time.perf_counter()
    reference = naive_audit(subset, index)
    naive_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    fast = leakage.audit_texts(subset, index)
    fast_wall = time.perf_counter() - t0
    fast_texts = sorted({h.text for h in fast if not h.kind.startswith("near-")})  # exact reference
    agree = fast_texts == reference
    print(f"naive loop on {len(subset):,} fields: {naive_wall:.2f} s vs {fast_wall:.3f} s fast "
          f"({naive_wall / fast_wall:.0f}x, one core); same fields flagged: {agree} "
          f"({len(reference)} flagged)")


if __name__ == "__main__":
    main()
