"""The thresholds and names every part of the leakage engine shares (why each: ``cube.records.leakage``)."""

from __future__ import annotations

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
