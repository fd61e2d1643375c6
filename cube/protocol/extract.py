"""Answer extraction from generations (M6).

A generation in which no answer is found is a parse failure (``None``), never a wrong answer:
the two must be reported apart, because a model that rambles is not a model that is wrong.

strict: the LAST ``答案：X`` or ``答案:X`` (whitespace allowed after the colon), X a label of the
cell's set. The last one, because chain-of-thought often states a tentative answer first.

lenient: the first rule below that finds anything decides; within a rule the last match wins.
  1. ``答案：X`` as in strict, also with space before the colon and ``**``, brackets or quotes
     before X;
  2. ``答案是X`` / ``答案为X`` (also ``答案应该是X``, an optional colon after 是/为);
  3. ``选X`` / ``选择X`` (not ``不选X``; ``选项X`` names an option, it is not a choice);
  4. a bare label opening the generation: ``B``, ``(B)``, ``B.``, ``B，因为…``;
  5. the text of exactly one option quoted verbatim (an option text that is part of another
     found option text, e.g. ``1`` in ``10``, does not count).
In the lenient rules a label written in the other width also counts (``Ａ`` for ``A`` and back),
since a model shown one width often answers in the other; circled digits are not widened to
plain digits, which occur everywhere in reasoning.

Labels made of ASCII letters or digits never match inside a word: ``Because`` is not ``B``.

A benchmark in another prompt format names its own answer word (templates ``generation.answer_word``:
``Answer`` in ``en_mcq``): strict reads the last ``Answer: X``, lenient also ``Answer is X`` and
rules 4-5; the Chinese rules 2-3 belong to ``答案`` only. The default is ``答案``, so CMMLU and
C-Eval extract exactly as before.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

_COLON = "[：:]"
# What may stand between a cue and the label in lenient matching: markdown bold, brackets, quotes.
_OPENERS = "*＊(（[【「『“\"'‘"
_CLOSERS = "*＊)）]】」』”\"'’"
_LATIN_WORD_CHARS = "A-Za-z0-9Ａ-Ｚａ-ｚ０-９"


def _width_variants(label: str) -> list[str]:
    """The label and, for a single Latin letter, its half-/full-width twin."""
    folded = unicodedata.normalize("NFKC", label)
    if len(folded) == 1 and folded.isascii() and folded.isalpha():
        return [folded, chr(ord(folded) + 0xFEE0)]
    return [label]


def _label_alternatives(labels: tuple[str, ...], widen: bool) -> dict[str, int]:
    """Every accepted spelling -> label index."""
    if not labels or any(not isinstance(x, str) or not x for x in labels):
        raise ValueError(f"labels must be non-empty strings, got {labels!r}")
    spellings: dict[str, int] = {}
    for index, label in enumerate(labels):
        for spelling in _width_variants(label) if widen else [label]:
            spellings.setdefault(spelling, index)
    for index, label in enumerate(labels):  # the exact label always wins over a width twin
        spellings[label] = index
    return spellings


def _is_word_like(spelling: str) -> bool:
    return bool(re.fullmatch(f"[{_LATIN_WORD_CHARS}]+", spelling[-1]))


def _label_regex(spellings: dict[str, int]) -> str:
    """A named group ``label`` matching any spelling, longest first, never inside a word."""
    parts = []
    for spelling in sorted(spellings, key=len, reverse=True):
        guard = f"(?![{_LATIN_WORD_CHARS}])" if _is_word_like(spelling) else ""
        parts.append(re.escape(spelling) + guard)
    return "(?P<label>" + "|".join(parts) + ")"


ANSWER_WORD = "答案"  # the exam format's; a prompt format may name another (``generation.answer_word``)


@lru_cache(maxsize=64)
def _strict_rule(labels: tuple[str, ...], word: str = ANSWER_WORD) -> tuple[re.Pattern, dict[str, int]]:
    spellings = _label_alternatives(labels, widen=False)
    return re.compile(f"{re.escape(word)}{_COLON}\\s*" + _label_regex(spellings)), spellings


@lru_cache(maxsize=64)
def _lenient_rules(labels: tuple[str, ...], word: str = ANSWER_WORD) -> tuple[list[re.Pattern], dict[str, int]]:
    """Rules 1-3 of the module docstring, in precedence order (another answer word: 1 and ``WORD is X``)."""
    spellings = _label_alternatives(labels, widen=True)
    label = _label_regex(spellings)
    opener = f"[\\s{re.escape(_OPENERS)}]*"
    if word != ANSWER_WORD:
        w = re.escape(word)
        rules = [f"{w}\\s*{_COLON}{opener}{label}", f"(?i:{w})\\s+is{_COLON}?{opener}{label}"]
        return [re.compile(rule) for rule in rules], spellings
    rules = [
        f"答案\\s*{_COLON}{opener}{label}",
        f"答案\\s*(?:应该|应|就)?\\s*(?:是|为){_COLON}?{opener}{label}",
        f"(?<!不)选(?:择)?{_COLON}?{opener}{label}",
    ]
    return [re.compile(rule) for rule in rules], spellings


def _last_match(pattern: re.Pattern, text: str, spellings: dict[str, int]) -> int | None:
    found = None
    for match in pattern.finditer(text):
        found = spellings[match.group("label")]
    return found


def extract_strict(text: str, labels: Sequence[str], answer_word: str = ANSWER_WORD) -> int | None:
    """The index of the label in the last ``答案：X`` (``answer_word``: X); None when there is none."""
    pattern, spellings = _strict_rule(tuple(labels), answer_word)
    return _last_match(pattern, text, spellings)


def _bare_label(text: str, spellings: dict[str, int]) -> int | None:
    """A label opening the generation, followed by the end, punctuation or whitespace, or (for a
    Latin label) by non-Latin text: ``B因为`` is an answer, ``甲醛`` and ``Because`` are words."""
    rest = text.lstrip().lstrip(_OPENERS)
    for spelling in sorted(spellings, key=len, reverse=True):
        if not rest.startswith(spelling):
            continue
        after = rest[len(spelling) :].lstrip(_CLOSERS)
        if after == "":
            return spellings[spelling]
        head = after[0]
        if head.isspace():
            # "B 因为…" is an answer; "A bit of…" is English.
            tail = after.lstrip()
            if tail == "" or not re.match(f"[{_LATIN_WORD_CHARS}]", tail):
                return spellings[spelling]
            return None
        if unicodedata.category(head).startswith("P"):
            return spellings[spelling]
        if _is_word_like(spelling) and not re.match(f"[{_LATIN_WORD_CHARS}]", head):
            return spellings[spelling]  # "B因为…"
        return None  # the label starts a word
    return None


def _quoted_option(text: str, option_texts: Sequence[str] | None) -> int | None:
    """The one option whose text the generation quotes; None when none or several are quoted."""
    present: dict[str, list[int]] = {}
    for index, option in enumerate(option_texts or []):
        stripped = option.strip()
        if stripped and stripped in text:
            present.setdefault(stripped, []).append(index)
    # A found text that is part of another found option text (``1`` in ``10``) is no evidence.
    maximal = [o for o in present if not any(o != other and o in other for other in present)]
    if len(maximal) == 1 and len(present[maximal[0]]) == 1:
        return present[maximal[0]][0]
    return None


def extract_lenient(
    text: str, labels: Sequence[str], option_texts: Sequence[str] | None = None, answer_word: str = ANSWER_WORD
) -> int | None:
    """The index of the answer under the lenient rules (module docstring), else None."""
    strict = extract_strict(text, labels, answer_word)
    if strict is not None:
        return strict
    rules, spellings = _lenient_rules(tuple(labels), answer_word)
    for pattern in rules:
        found = _last_match(pattern, text, spellings)
        if found is not None:
            return found
    found = _bare_label(text, spellings)
    if found is not None:
        return found
    return _quoted_option(text, option_texts)
