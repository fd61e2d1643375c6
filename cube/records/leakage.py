r"""Finding benchmark text in records: the normal form, the raw form, the scrub and the audit.

The released records must not carry C-Eval or CMMLU text: the licences forbid redistribution and a
leaked test item contaminates every model trained on it afterwards. Models quote items in disguise
(full-width digits, a line break in the middle, Chinese instead of ASCII commas, traditional
characters, HTML or LaTeX markup, one character changed), so both the scrub and the audit compare
texts in one normal form and also accept near copies.

The normal form, in this order:

- markup is decoded first, because its own characters would otherwise survive as letters: HTML
  character references (``&#20013;``, ``&#x4e2d;``, ``&nbsp;``, ``&amp;``) become their character,
  HTML tags (``<br>``, ``</p>``, ``<span class=x>``) and comments are dropped, LaTeX spacing and
  sizing commands (``\quad``, ``\qquad``, ``\hspace{1em}``, ``\left``, ``\displaystyle``, ``\>``)
  and wrappers (``\frac``, ``\dfrac``, ``\text``, ``\mathrm``) are dropped, and common LaTeX symbol
  commands become their symbol (``\times`` -> ×, ``\leq`` -> ≤, ``^\circ`` -> °). Dropping
  ``\frac`` is what makes ``\frac{a}{b}`` equal ``a/b``: braces and the slash are punctuation and go
  anyway. Up to three rounds, so that ``&amp;nbsp;`` is decoded too. Each decoded character keeps
  the first and the one-past-last index of its construct, so a scrub cuts the whole entity or tag;
- compatibility decomposition (NFKD), which folds full-width and other compatibility forms as
  NFKC does, with combining marks dropped (accents are ignored). Unlike NFKC, this can be done
  one character at a time, so every normalised character maps back to one index of the original;
- traditional characters are folded to simplified ones, one character at a time, with OpenCC's
  own character table (``TSCharacters.txt``, the first candidate of each entry) as shipped by
  ``opencc-python-reimplemented``. Why that package: OpenCC's table is the reference for
  traditional -> simplified conversion; this distribution ships it as plain text in a pure-Python
  wheel (no native code to build or trust, ``pip --only-binary :all:`` installs it), whereas
  zhconv's newest release is an sdist only and the ``opencc`` binding is a C++ extension. Only
  characters are folded, never phrases: phrase rules would break the one-index-per-character map,
  and both sides of a comparison are folded alike, so a per-character fold is all matching needs;
- every whitespace, line break, zero-width and other format or control character is dropped;
- every punctuation character (Unicode category P*) and ``$`` (LaTeX's math delimiter) is DROPPED
  rather than mapped to a canonical mark. Dropping survives ASCII vs Chinese punctuation, and also
  a model that adds or removes a comma, at the price of matching "A、B" against "AB"; a
  20-character span without punctuation is still specific to its item. Other symbols (``+``,
  ``=``) and case are kept.

What counts as a leak (the audit's rules; the scrub removes all of these, stock answers included,
for the record's own item, so a scrubbed record can fail the audit only by quoting another item):

- any span of ``window`` (20) normalised characters that occurs in a question;
- a whole option of at least ``min_option_chars`` (4) normalised characters;
- a whole question shorter than the window, if it has at least ``min_question_chars`` (8): almost
  half of CMMLU's questions are shorter than 20 characters and would otherwise never count;
- except options and short questions that occur in ``stock_items`` (10) items or more: a stock
  answer such as "以上都对" identifies no item;
- a near copy (kinds ``near-question`` and ``near-option``): a span T within Levenshtein distance
  ``k = len(B) // near_chars_per_edit`` (one edit per 12 characters) of a benchmark string B of at
  least ``near_min_chars`` (12) characters, where B is a countable phrase of that length or any
  ``window``-character question window (k = 1), and T begins and ends with B's first and last
  characters. Why this rule: a model that changes one digit of a 35-character option, or one
  character inside a quoted question, copies the item as surely as an exact quote; one edit per 12
  characters still leaves a near copy far more specific to its item than the 4-character exact
  option minimum. The anchoring keeps the exact rules' thresholds meaningful: an exact quote one
  character short of a window, followed by any character, is one substitution from that window,
  but it does not end on the window's last character. Below 12 characters one edit is too cheap
  (short options differ from each other by one character), so near matching starts there.
  False positives, measured on the archived generations (all 5,068 generations of the 48,140
  records in data/records, as the old exact rules had scrubbed them): 134 near-copy hits in 14
  generations (7 items, each generation stored twice, as M6-strict and M6-lenient), every one a
  copy of an option of the record's OWN item (spans of 11-60 original characters) with one edit
  (a digit or a character changed, or one letter inserted), repeated by a looping model; 0 hits
  naming another item, so no near hit was a chance match. On the synthetic 2.5 M-record scale
  benchmark (random CMMLU-frequency text) the near rules add no hit in unplanted fields.

The raw form: the same exact rules, applied to the text as written too (kinds ``raw-question``
and ``raw-option`` name a hit only this form finds). The raw form is NFKC, one character at a
time, with whitespace, control and format (zero-width) characters dropped; punctuation, ``$``,
markup and traditional characters are kept. Why: the paper's rules (generations "scrubbed of
option strings and any remaining >=20-char question-text span") count the text as written, and
the normal form shortens exactly the texts that are long as written. An independent scan of
data/records (NFKC and whitespace removal only) found what the normal form had let through: the
options of a CMMLU item that are LaTeX fractions, 14-15 characters as written and 3 normalised
(``\frac``, the braces and ``$`` dropped: below the 4-character minimum), quoted by a chain of
thought, and a 20-character question span with ``\angle``, ``^{\circ}``, ``$`` and braces that
normalises to 7 characters (the longest normal-form run it shares with its question). In the raw
form, a leak is:

- any span of ``window`` (20) characters as written that occurs in a question as written (a
  quote with commas in it counts at 20 characters, where the normal form needs 20 without them);
- a whole question of ``min_question_chars`` (8) up to the window, as written;
- a whole option of at least ``raw_min_option_chars`` (``RAW_MIN_OPTION_CHARS``, 8) characters
  as written. Why 8 and not the normal form's 4: markup and punctuation make a text longer
  without making it more specific, and 4 characters as written would count ``$12$``, ``0.05`` or
  ``3.14``, numbers every mathematics chain of thought writes (the harness scrubs each generation
  against every item, so a chance match deletes text); 8 is the length at which the normal form
  already trusts a whole question to be specific, and the independent scan's option threshold;
- but only a phrase of at least ``RAW_MIN_SYMBOLS`` (2) normalised characters: ``$\alpha$`` has 8
  characters as written and does NOT count. It is one symbol, as "α" is, and the normal form
  ignores one-symbol options for the reason it ignores "对": they identify no item (α is the
  significance level of every statistics text). The archive proves the point: the one occurrence
  of ``$\alpha$`` outside its own item was a chance match, in the chain of thought and the answer
  of ANOTHER item of the same subject, and counting it would have the harness cut every
  ``$\alpha$`` from every generation. The scrub is the audit run on the record's own item, so it
  applies the same rule: ``$\alpha$`` stays even in its own item's generation, as "对" does;
  CMMLU has 4 such options (8+ characters as written, one symbol) and 121 raw-only options of 2-3;
- except phrases in ``stock_items`` items or more, in the raw form OR in the normal form (a stock
  answer written with a full stop is still a stock answer). No near copies in the raw form: the
  normal form's near rules already see through the disguises a near copy adds.

The audit is linear: each normalised text is hashed once (a polynomial prefix hash over uint64,
vectorised with numpy), every 10-character window is looked up in a two-probe Bloom filter of the
questions' 10-grams (an exact ``window``-character match starts with one, so this one lookup
finds the windows, whose hash is then checked only there, and the near copies' seeds), and every
window of ``min(min_option_chars, min_question_chars)`` characters in one of the whole phrases'
first characters and the near pieces' first characters. The rare candidates are confirmed by exact
hash and then by string comparison, so a hit is never a hash collision. Near copies are found
through seeds, never by comparing a text with every item: by the pigeonhole principle a near copy
of B with k edits contains one of k + 1 disjoint pieces of B unchanged, so every 10-character
window of a text is looked up among the questions' 10-grams (a window with one edit keeps one of
its halves) and every 6-character window among the phrases' pieces (``6 * (k + 1) <= len(B)`` for
``len(B) >= 12``).
Each seed names one benchmark string and where a copy would start; that candidate is verified by
a bounded, anchored edit distance (Myers' bit-parallel algorithm, linear in the copy's length).
10-grams found in ``stock_items`` questions or more are template text ("下列关于...的说法") and
are not seeds: a near copy whose only unchanged half is template text is not found. The raw form
costs one more lookup (8-character windows, which begin every raw window and phrase), and only
for the texts holding a character whose two forms differ (punctuation, ``$``, markup, traditional
characters; ``_char_classes``): a text without one reads the same in both forms, so the normal
lookups already find its raw matches, unless the index has a raw window of such characters that
is no normal window (a quote starting inside a LaTeX command: ``alpha...`` of ``\alpha...``),
which ``build_index`` checks; then every text is read.
"""

from __future__ import annotations

import bisect
import functools
import html
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Iterator, Sequence

import numpy as np

from cube.errors import ConfigError

WINDOW = 20
MIN_OPTION_CHARS = 4
# A question shorter than the window is matched whole when it has at least this many characters.
MIN_QUESTION_CHARS = 8
# An option (or whole short question) found in this many items or more ("以上都对", "无法确定") is
# a stock phrase: finding it identifies no item, and flagging it would bury real leaks.
STOCK_ITEMS = 10
MARKER = "[REMOVED]"
# The raw form (the text as written, see the module docstring): an option counts there when it has
# at least this many characters as written AND at least RAW_MIN_SYMBOLS characters of the normal
# form. A single symbol ("$\alpha$", 8 characters as written, is one letter) identifies no item.
RAW_MIN_OPTION_CHARS = 8
RAW_MIN_SYMBOLS = 2
# What a hit is, in the order that names a merged hit: an exact question match first, then exact
# matches that only the raw form shows, then near copies.
KINDS = ("question", "option", "raw-question", "raw-option", "near-question", "near-option")
# Near copies: benchmark strings of at least this many normalised characters, one edit allowed per
# NEAR_CHARS_PER_EDIT characters (see the module docstring for why).
NEAR_MIN_CHARS = 12
NEAR_CHARS_PER_EDIT = 12
_QUESTION_SEED = 10  # a question window with one edit keeps one of its two halves unchanged
_PIECE = 6  # phrase pieces: k + 1 of them fit in a phrase of 12 * k or more characters

# 4 MiB per bitmap, small enough to stay in cache (a larger one is slower for all its fewer false
# candidates); about 5 % of windows reach the exact check against CMMLU's question windows.
_BITMAP_BITS = 22
_TEXTS_PER_BATCH_CHARS = 4_000_000  # bounds the memory of one vectorised pass
_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64
_BASE_INV = pow(_BASE, -1, 1 << 64)


# ---------------------------------------------------------------------------- normal form


# LaTeX commands dropped (spacing, sizing, style and the wrappers whose arguments are kept) and
# mapped to their symbol. Unknown commands are left alone: their name then survives as letters.
_LATEX_DROPPED = frozenset("""
    quad qquad enspace enskip thinspace medspace thickspace negthinspace negmedspace
    negthickspace hfill hfil displaystyle textstyle scriptstyle scriptscriptstyle left right middle
    big Big bigg Bigg bigl bigr Bigl Bigr biggl biggr Biggl Biggr frac dfrac tfrac cfrac mathrm
    mathit mathbf mathsf mathtt mathcal mathbb boldsymbol text textrm textbf textit textsf texttt
    rm bf it operatorname limits nolimits ldots cdots dots vdots ddots
""".split())
_LATEX_SYMBOLS = {
    "times": "×", "div": "÷", "pm": "±", "mp": "∓", "cdot": "·", "leq": "≤", "le": "≤",
    "geq": "≥", "ge": "≥", "neq": "≠", "ne": "≠", "approx": "≈", "equiv": "≡", "infty": "∞",
    "sqrt": "√", "angle": "∠", "triangle": "△", "perp": "⊥", "parallel": "∥", "in": "∈",
    "notin": "∉", "subset": "⊂", "subseteq": "⊆", "supset": "⊃", "cup": "∪", "cap": "∩",
    "emptyset": "∅", "varnothing": "∅", "forall": "∀", "exists": "∃", "to": "→",
    "rightarrow": "→", "leftarrow": "←", "Rightarrow": "⇒", "Leftrightarrow": "⇔",
    "because": "∵", "therefore": "∴", "sim": "∼", "circ": "∘", "prime": "′", "partial": "∂",
    "sum": "∑", "prod": "∏", "int": "∫", "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ",
    "epsilon": "ε", "varepsilon": "ε", "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π",
    "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "varphi": "φ", "omega": "ω", "Delta": "Δ",
    "Sigma": "Σ", "Omega": "Ω", "Phi": "Φ",
}
_MARKUP = re.compile(
    r"&(?:#[0-9０-９]{1,7}|#[xX][0-9A-Fa-f０-９]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"  # HTML references
    r"|<(?:/?[A-Za-z][A-Za-z0-9]{0,15}(?:\s[^<>]{0,200})?/?|!--[^<>]{0,200}?--)>"  # tags
    r"|\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])"  # degrees
    r"|\\[hv]space\*?\s*\{[^{}]{0,20}\}"
    r"|\\[A-Za-zＡ-Ｚａ-ｚ]+|\\[,;:!> ]"
)
_MARKUP_ROUNDS = 3  # "&amp;lt;br&amp;gt;" needs three
# Full-width ASCII and the ideographic space are folded before markup is decoded (NFKD would fold
# them only afterwards): a model writing "＼ｆｒａｃ" or "＆＃２００１３；" writes markup too.
# Folded (with numpy: str.translate costs 0.4 s per 4 M characters) only when a full-width marker
# is present; after an ASCII marker, the pattern itself accepts full-width letters and digits.


def _markup_replacement(match: re.Match) -> str | None:
    """What a markup construct stands for ("" = dropped), or None to leave it as it is."""
    text = unicodedata.normalize("NFKC", match.group())  # "\\ｆｒａｃ", "&#２０;" are markup too
    if text[0] == "&":
        decoded = html.unescape(text)
        return None if decoded == text else decoded
    if text[0] in "<^":
        return "" if text[0] == "<" else "°"
    name = text[1:]
    if name in _LATEX_SYMBOLS:
        return _LATEX_SYMBOLS[name]
    if name in _LATEX_DROPPED or not name.isalpha():  # \hspace{..}, \, \; \> ...
        return ""
    return None


_MARKER_CHARS = "&<\\^＆＜＼＾"  # every markup construct starts with one of these


@functools.cache
def _is_marker() -> np.ndarray:
    """Per code point: does a markup construct start with it? One gather finds the texts that
    need decoding; the others (nearly all) skip the regular expression."""
    table = np.zeros(sys.maxunicode + 1, dtype=bool)
    table[[ord(c) for c in _MARKER_CHARS]] = True
    return table


def _decode_markup(joined: str, ends: np.ndarray) -> tuple[str, np.ndarray, np.ndarray] | None:
    """``joined`` with markup decoded, and per decoded character [start, end) in ``joined``.

    ``ends`` are the texts' end offsets: a construct never spans two texts. None if nothing is
    markup. The audit calls it only on the texts that hold a marker character (``_is_marker``).
    """
    if any(c in joined for c in _MARKER_CHARS[4:]):  # full-width, one character for one: offsets stay
        codes = _code_points([joined]).copy()
        codes[(codes >= 0xFF01) & (codes <= 0xFF5E)] -= 0xFEE0
        codes[codes == 0x3000] = 0x20
        joined = codes.tobytes().decode("utf-32-le", "surrogatepass")
    start = end = None
    changed = False
    for _ in range(_MARKUP_ROUNDS):
        text_ends = ends.tolist()
        cut_begin, cut_stop, replacements = [], [], []
        for match in _MARKUP.finditer(joined):
            begin, stop = match.span()
            if bisect.bisect_right(text_ends, begin) != bisect.bisect_right(text_ends, stop - 1):
                continue  # spans two texts
            replacement = _markup_replacement(match)
            if replacement is not None:
                cut_begin.append(begin)
                cut_stop.append(stop)
                replacements.append(replacement)
        if not cut_begin:
            break
        # kept characters, and each replacement's characters at its construct's start, in order
        cps = _code_points([joined])
        delta = np.zeros(cps.size + 1, dtype=np.int64)
        np.add.at(delta, cut_begin, 1)
        np.add.at(delta, cut_stop, -1)
        kept = np.flatnonzero(np.cumsum(delta[:-1]) == 0)
        sizes = np.array([len(r) for r in replacements], dtype=np.int64)
        inserted_at = np.repeat(np.asarray(cut_begin, dtype=np.int64), sizes)
        slot = np.searchsorted(kept, inserted_at)  # np.insert keeps the order of equal slots
        round_start = np.insert(kept, slot, inserted_at)
        round_stop = np.insert(kept + 1, slot, np.repeat(np.asarray(cut_stop, dtype=np.int64), sizes))
        codes = np.insert(cps[kept], slot, _code_points(["".join(replacements)]))
        if start is None:
            start, end = round_start, round_stop
        else:  # compose with the earlier rounds
            start, end = start[round_start], end[round_stop - 1]
        # the texts' ends in the new coordinates: constructs never span two texts
        ends = np.searchsorted(round_start, ends, side="left")
        joined = codes.astype(np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
        changed = True
    if not changed:
        return None
    return joined, start, end


@functools.cache
def _traditional_to_simplified() -> dict[str, str]:
    """Character -> the one character its whole variant class folds to (absent: itself).

    OpenCC maps some characters one to many (simplified 干 is traditional 乾, 幹 or 干 by phrase;
    乾 stays 乾 on its own), so folding each character to its first candidate would leave 乾燥
    apart from 干燥. Every character is therefore joined with all its candidates, both ways
    (``TSCharacters.txt`` and ``STCharacters.txt``), and each class folds to one member: the
    lowest code point among those that are simplified forms (a first candidate of some
    traditional character). Distinctions such as 乾/干 are lost on both sides alike, which costs
    matching nothing.
    """
    parent: dict[str, str] = {}

    def root(char: str) -> str:
        while parent.get(char, char) != char:
            parent[char] = parent.get(parent[char], parent[char])
            char = parent[char]
        return char

    simplified: set[str] = set()
    for name in ("TSCharacters.txt", "STCharacters.txt"):
        try:
            lines = (resources.files("opencc") / "dictionary" / name).read_text(encoding="utf-8")
        except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError, OSError):
            raise ConfigError(
                f"opencc/dictionary/{name} not found: the leakage normal form needs the package "
                "opencc-python-reimplemented (pip install -e '.[analysis]')"
            ) from None
        for line in lines.splitlines():
            source, _, targets = line.partition("\t")
            candidates = [c for c in targets.split() if len(c) == 1]
            if len(source) != 1 or not candidates:
                continue
            simplified.add(candidates[0] if name.startswith("TS") else source)
            for candidate in candidates:
                a, b = root(source), root(candidate)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    members: dict[str, list[str]] = {}
    for char in parent:
        members.setdefault(root(char), []).append(char)
    folds = {}
    for group in members.values():
        group = sorted(set(group) | {root(group[0])})
        target = min((c for c in group if c in simplified), default=group[0])
        folds.update({c: target for c in group if c != target})
    return folds


def _normal_char(char: str) -> str:
    """The normal form of one character: NFKD, simplified, dropped classes removed (may be empty)."""
    folds = _traditional_to_simplified()
    kept = []
    for part in unicodedata.normalize("NFKD", char):
        category = unicodedata.category(part)
        if part.isspace() or category[0] in "PZ" or category in ("Cc", "Cf") or part == "$":
            continue
        if unicodedata.combining(part):
            continue
        kept.append(folds.get(part, part))
    return "".join(kept)


@functools.cache
def _normal_form_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per code point: where its normal form starts in ``flat`` and how long it is.

    Built once per process (about a quarter second) so that normalising is three array lookups.
    """
    return _table_of(_normal_char)


def _table_of(form) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, length, flat) of ``form`` (one character -> its form, a string) at every code point."""
    size = sys.maxunicode + 1
    length = np.ones(size, dtype=np.uint8)
    start = np.arange(size, dtype=np.int64)  # identity: flat[cp] == cp
    flat = list(range(size))
    for cp in range(size):
        char = chr(cp)
        if unicodedata.category(char) in ("Cn", "Cs", "Co"):
            continue
        image = form(char)
        if image == char:
            continue
        length[cp] = len(image)
        if image:
            start[cp] = len(flat)
            flat.extend(ord(c) for c in image)
    return start, length, np.asarray(flat, dtype=np.uint32)


def _code_points(texts: Sequence[str]) -> np.ndarray:
    joined = "".join(texts).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(joined, dtype=np.uint32)


def _normalize_code_points(cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(normalised code points, index into ``cps`` of the character each one came from)."""
    return _map_code_points(cps, _normal_form_table(), _single_table("normal"))


_EXPANDS = np.uint32(0xFFFFFFFF)  # in a single table: the character becomes several


@functools.cache
def _single_table(form: str) -> np.ndarray:
    """Per code point, the one character its form is (0: none, ``_EXPANDS``: several): one gather
    maps nearly every text, where the (start, length, flat) table takes three."""
    start, length, flat = _normal_form_table() if form == "normal" else _raw_form_table()
    single = np.zeros(length.size, dtype=np.uint32)
    one = length == 1
    single[one] = flat[start[one]]
    single[length > 1] = _EXPANDS
    return single


def _map_code_points(cps: np.ndarray, table: tuple[np.ndarray, np.ndarray, np.ndarray],
                     single: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``cps`` through a per-code-point table (start, length, flat; ``single``: the same as one
    gather, ``_single_table``), and per output code point the index of the input it came from."""
    mapped = single[cps]
    source = np.flatnonzero(mapped)
    codes = mapped[source]
    if codes.size == 0 or codes.max() != _EXPANDS:  # the usual case: no character expands
        return codes, source
    start, length, flat = table
    lens = length[cps]
    source = np.flatnonzero(lens)
    first = start[cps[source]]
    codes = flat[first]
    expands = np.flatnonzero(lens[source] > 1)  # rare ("…" is "..." in NFKC): spliced in after
    extra = lens[source[expands]].astype(np.int64) - 1
    of = np.repeat(expands, extra)
    within = np.arange(of.size) - np.repeat(np.cumsum(extra) - extra, extra) + 1
    at = of + 1  # np.insert keeps the order of values inserted at one position
    return np.insert(codes, at, flat[first[of] + within]), np.insert(source, at, source[of])


def _normalize_texts(texts: Sequence[str], sizes: np.ndarray | None = None,
                     cps: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalised code points of all ``texts`` joined, and per normalised character the [start,
    end) of the original characters it came from, as offsets into ``"".join(texts)``.
    ``sizes`` are the texts' lengths and ``cps`` their code points, where the caller has them."""
    joined = "".join(texts)
    if cps is None:
        cps = _code_points([joined])
    decoded = None
    if _is_marker()[cps].any():
        if sizes is None:
            sizes = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
        decoded = _decode_markup(joined, np.cumsum(sizes))
    if decoded is None:
        codes, source = _normalize_code_points(cps)
        return codes, source, source + 1
    text, start, end = decoded
    codes, source = _normalize_code_points(_code_points([text]))
    return codes, start[source], end[source]


def normalize_for_match(text: str) -> tuple[str, np.ndarray]:
    """The normal form of ``text`` and, per normalised character, its index in ``text``.

    The offsets let the scrub cut the original span and the audit report a position a reader can
    find in the original field. A character decoded from markup (``&#20013;``) has the index of
    the construct's first character.
    """
    codes, start, _ = _normalize_texts([text])
    return codes.tobytes().decode("utf-32-le", "surrogatepass"), start.astype(np.int64)


def _normal_string(text: str) -> str:
    return normalize_for_match(text)[0]


def _normal_strings(texts: Sequence[str]) -> list[str]:
    """The normal form of many texts in one vectorised pass (building the index uses ~60k)."""
    sizes = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    codes, source, _ = _normalize_texts(texts, sizes)
    return _split(codes, source, sizes)


def _split(codes: np.ndarray, source: np.ndarray, sizes: np.ndarray) -> list[str]:
    """The texts of a joined form again: ``source`` maps each code to its original character,
    ``sizes`` are the original texts' lengths."""
    counts = np.bincount(np.repeat(np.arange(sizes.size), sizes)[source], minlength=sizes.size)
    joined = _decode(codes)
    ends = np.cumsum(counts).tolist()
    return [joined[end - count : end] for end, count in zip(ends, counts.tolist())]


# ---------------------------------------------------------------------------- raw form


def _raw_char(char: str) -> str:
    """The raw form of one character: NFKC, with whitespace, control and format characters
    (zero-width spaces, joiners) dropped, since a reader does not see them (may be empty)."""
    if unicodedata.is_normalized("NFKC", char) and not char.isspace() and unicodedata.category(char) not in ("Cc", "Cf"):
        return char  # the usual case, decided without building a string
    return "".join(part for part in unicodedata.normalize("NFKC", char)
                   if not part.isspace() and unicodedata.category(part) not in ("Cc", "Cf"))


@functools.cache
def _raw_form_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per code point, as ``_normal_form_table``: where its raw form starts in ``flat``, how long."""
    return _table_of(_raw_char)


@functools.cache
def _char_classes() -> np.ndarray:
    """Per code point: 0 if its raw form and its normal form are the same characters, 1 if they
    differ (punctuation, ``$``, traditional characters, combining marks), 2 for a character that
    starts markup (which the normal form decodes in context).

    A text of class-0 characters only reads the same in both forms, so the normal form's lookups
    already find every raw match in it (where ``RawForm.every_text`` is False): the raw form's
    lookups run only on the texts with a class 1 or 2 character.
    """
    raw_start, raw_length, raw_flat = _raw_form_table()
    normal_start, normal_length, normal_flat = _normal_form_table()
    classes = (raw_length != normal_length).astype(np.uint8)
    single = np.flatnonzero((raw_length == 1) & (normal_length == 1))
    classes[single[raw_flat[raw_start[single]] != normal_flat[normal_start[single]]]] = 1
    for cp in np.flatnonzero((raw_length == normal_length) & (raw_length > 1)).tolist():
        size = int(raw_length[cp])
        if not np.array_equal(raw_flat[raw_start[cp] : raw_start[cp] + size],
                              normal_flat[normal_start[cp] : normal_start[cp] + size]):
            classes[cp] = 1
    classes[[ord(c) for c in _MARKER_CHARS]] = 2
    return classes


def _raw_code_points(cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(raw-form code points, index into ``cps`` of the character each one came from)."""
    return _map_code_points(cps, _raw_form_table(), _single_table("raw"))


def raw_form(text: str) -> str:
    """``text`` as written, for the raw-form rules: NFKC, one character at a time, with whitespace
    and invisible characters dropped; punctuation, ``$`` and markup are kept."""
    return _decode(_raw_code_points(_code_points([text]))[0])


def _raw_strings(texts: Sequence[str]) -> list[str]:
    """The raw form of many texts in one vectorised pass."""
    sizes = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    return _split(*_raw_code_points(_code_points(texts)), sizes)


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
    raw_min_option_chars: int = RAW_MIN_OPTION_CHARS,
) -> ScrubResult:
    """Remove the item's own text from a free-text field before release.

    Whatever the audit would count as a leak of the record's own item is removed, by the audit
    itself run against an index of that one item (so the two can never disagree): every
    occurrence of each option with at least ``min_option_chars`` normalised characters (shorter
    ones, such as "对", are ordinary words: deleting them would shred the text and they identify
    no item), of the whole question when it is shorter than ``window`` but has at least
    ``min_question_chars``, every span of ``window`` or more normalised characters that also occurs
    in the question, and every near copy of those (see the module docstring); and the same exact
    rules in the raw form, the text as written (options of ``raw_min_option_chars`` characters as
    written and ``RAW_MIN_SYMBOLS`` normalised: a one-symbol option such as ``$\\alpha$`` stays,
    as "对" does). Stock answers are
    removed too: for its own item even "以上都对" is a quote. Each removed span, widened to whole
    original characters (a whole HTML entity or tag), becomes ``marker`` so that readers see that
    something was cut; touching spans become one marker.

    With ``index``, whatever the audit would still find afterwards (a model quoting ANOTHER item,
    in practice a short option from the same subject, such as a term of art) is removed too, so
    the result passes the audit against every indexed item by construction.
    """
    own_index = _own_index(question, tuple(options), window, min_option_chars, min_question_chars,
                           raw_min_option_chars)
    spans = _touching_merged([(h.offset, h.offset + h.n_chars) for h in audit_texts([text], own_index)])
    own = _replace_spans(text, spans, marker)
    if index is None:
        return ScrubResult(own, len(spans), sum(end - begin for begin, end in spans))
    others = _touching_merged([(h.offset, h.offset + h.n_chars) for h in audit_texts([own], index)])
    return ScrubResult(
        text=_replace_spans(own, others, marker),
        n_removed_spans=len(spans) + len(others),
        n_removed_chars=sum(end - begin for begin, end in spans + others),
        n_other_item_spans=len(others),
    )


@functools.lru_cache(maxsize=1024)
def _own_index(
    question: str, options: tuple[str, ...], window: int, min_option_chars: int, min_question_chars: int,
    raw_min_option_chars: int = RAW_MIN_OPTION_CHARS,
) -> "LeakageIndex":
    """The index of one item; cached, since a harness scrubs every generation of an item in turn."""
    # stock_items=2: with one item nothing is stock, so stock answers are removed for the own item
    return build_index([ItemText("own", question, options)], window=window,
                       min_option_chars=min_option_chars, stock_items=2,
                       min_question_chars=min_question_chars, raw_min_option_chars=raw_min_option_chars)


def _touching_merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return [(begin, end) for begin, end in merged]


def _replace_spans(text: str, spans: list[tuple[int, int]], marker: str) -> str:
    """``text`` with each sorted, disjoint [begin, end) span replaced by ``marker``."""
    pieces, cursor = [], 0
    for begin, end in spans:
        pieces += [text[cursor:begin], marker]
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)


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


# ---------------------------------------------------------------------------- audit


@dataclass(frozen=True)
class TextHit:
    """A leak in ``texts[text]`` of one ``audit_texts`` call; never holds the leaked text."""

    text: int
    offset: int  # index of the first leaked character in the original text
    n_chars: int  # length of the leaked span in the original text
    kind: str  # one of KINDS
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


def audit_texts(texts: Sequence[str], index: LeakageIndex, min_phrase_chars: int = 0) -> list[TextHit]:
    """Every leaked span in ``texts``: one hit per maximal run of overlapping matches.

    ``min_phrase_chars`` raises the whole-phrase minimum for these texts only: identifiers (a
    qhash, a model name) share short options such as "1949" by chance.
    """
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


def _decode(codes: np.ndarray) -> str:
    return codes.tobytes().decode("utf-32-le", "surrogatepass")


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
