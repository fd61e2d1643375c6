"""The language of a user's file without a card: English questions get the English prompt.

A file of English questions scored under CMMLU's Chinese exam header and 答案： cue measures the
prompt, not the model, and nothing warned (issue 44). Without a card's ``language:`` or
``format:``, the file's questions decide: a question is in Chinese script when at least
``CJK_SHARE_OF_QUESTION`` of its letters are CJK characters (a Chinese question naming "DNA" stays
Chinese); a file is English when at most ``MIXED_BELOW`` of its questions are, Chinese when at least
``1 - MIXED_BELOW`` are, and mixed in between (the exam format, and a line saying so and how to
choose). What lm-eval's custom tasks and inspect_ai's datasets do is leave the prompt to the user;
cube's default has to fit the file because the prompt is part of what a run measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CJK_SHARE_OF_QUESTION = 0.2
MIXED_BELOW = 0.1  # at most this share of Chinese-script questions: English; at least 1 - it: Chinese
LANGUAGES = ("en", "zh", "mixed")


def is_cjk(char: str) -> bool:
    """A Han ideograph (basic, extension A, compatibility), kana or hangul syllable."""
    code = ord(char)
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF
            or 0x3040 <= code <= 0x30FF or 0xAC00 <= code <= 0xD7AF or 0x20000 <= code <= 0x2FA1F)


def cjk_share(text: str) -> float:
    """The share of ``text``'s letters that are CJK characters (0 for a text without letters)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    return sum(map(is_cjk, letters)) / len(letters)


@dataclass(frozen=True)
class FileLanguage:
    """What a file's questions say about its language: how many are in Chinese script, of how many."""

    chinese_questions: int
    questions: int

    @property
    def share(self) -> float:
        return self.chinese_questions / self.questions if self.questions else 0.0

    @property
    def language(self) -> str:
        """``en``, ``zh`` or ``mixed``."""
        if self.share <= MIXED_BELOW:
            return "en"
        if self.share >= 1 - MIXED_BELOW:
            return "zh"
        return "mixed"

    def counted(self) -> str:
        return f"{self.chinese_questions} of {self.questions} questions in Chinese script"


def detect_language(questions: Sequence[str]) -> FileLanguage:
    """Count the questions in Chinese script (``CJK_SHARE_OF_QUESTION`` of their letters or more)."""
    return FileLanguage(sum(cjk_share(q) >= CJK_SHARE_OF_QUESTION for q in questions), len(questions))


__all__ = ["CJK_SHARE_OF_QUESTION", "FileLanguage", "LANGUAGES", "MIXED_BELOW", "cjk_share", "detect_language",
           "is_cjk"]
