"""A file's language from its questions (cube.protocol.language)."""

from __future__ import annotations

import pytest

from cube.protocol.language import cjk_share, detect_language


def test_the_cjk_share_counts_letters_only():
    assert cjk_share("What is 2 + 2?") == 0.0
    assert cjk_share("二加二等于几？") == 1.0
    assert cjk_share("DNA的全称是什么？") == pytest.approx(6 / 9)  # D, N, A and six Han characters
    assert cjk_share("1 + 1 = ?") == 0.0


@pytest.mark.parametrize("questions, language", [
    (["What is 2 + 2?"] * 10, "en"),
    (["DNA的全称是什么？"] * 10, "zh"),  # English terms in a Chinese question keep it Chinese
    (["What is 2 + 2?"] * 9 + ["二加二等于几？"], "en"),  # one in ten: still an English file
    (["What is 2 + 2?"] * 5 + ["二加二等于几？"] * 5, "mixed"),
    (["What does 中 mean in Mandarin, in one word?"] * 4, "en"),  # one Han character quoted
])
def test_a_file_is_english_chinese_or_mixed_by_its_share_of_chinese_questions(questions, language):
    assert detect_language(questions).language == language
