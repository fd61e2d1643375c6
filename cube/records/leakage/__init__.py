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

Encodings (``audit.decoded_forms``): every text is also audited as JSON ``\\uXXXX`` escapes and
%-encoding decode it (the escapes a harness's JSON, JSON-lines and URL fields hold, once more than
their parsers undo) and reversed, each hit mapped back to the characters as written and named by
its ``encoding``; a reversed text counts whole options from 5 normalised characters (a reversed
ASCII formula of the archive matched a 4-character option by chance). Why: each encoding passed
every channel (generation, imported config, bundle manifest) although it is the item's text to
anyone who decodes it. Metadata (``audit_metadata``: an import's logged configuration, a
bundle's MANIFEST.json) is audited as a generation is, except identifiers (ASCII without spaces:
paths, hashes, names), which keep the near-copy minimum, and whole options from 5 characters.
"""

from cube.records.leakage.rules import (
    KINDS,
    MARKER,
    MIN_OPTION_CHARS,
    MIN_QUESTION_CHARS,
    NEAR_CHARS_PER_EDIT,
    NEAR_MIN_CHARS,
    RAW_MIN_OPTION_CHARS,
    RAW_MIN_SYMBOLS,
    STOCK_ITEMS,
    WINDOW,
)
from cube.records.leakage.normal import _traditional_to_simplified, normalize_for_match, raw_form
from cube.records.leakage.index import ItemText, LeakageIndex, RawForm, build_index
from cube.records.leakage.near import _anchored_distance
from cube.records.leakage.audit import Hit, TextHit, audit_metadata, audit_records, audit_texts
from cube.records.leakage.scrubbing import ScrubResult, scrub

__all__ = [
    "KINDS", "MARKER", "MIN_OPTION_CHARS", "MIN_QUESTION_CHARS", "NEAR_CHARS_PER_EDIT", "NEAR_MIN_CHARS",
    "RAW_MIN_OPTION_CHARS", "RAW_MIN_SYMBOLS", "STOCK_ITEMS", "WINDOW", "Hit", "ItemText", "LeakageIndex",
    "RawForm", "ScrubResult", "TextHit", "audit_metadata", "audit_records", "audit_texts", "build_index", "normalize_for_match",
    "raw_form", "scrub",
]
