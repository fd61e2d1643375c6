"""The normal form and the raw form: what both the scrub and the audit compare texts in."""

from __future__ import annotations

import bisect
import functools
import html
import re
import sys
import unicodedata
from importlib import resources
from typing import Sequence

import numpy as np

from cube.errors import ConfigError


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


def _decode(codes: np.ndarray) -> str:
    return codes.tobytes().decode("utf-32-le", "surrogatepass")


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
