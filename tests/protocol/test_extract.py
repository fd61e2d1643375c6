"""Answer extraction (M6) on constructed generations, including adversarial ones.

None means a parse failure; each case checks that a generation the rules cannot read is reported
as None, not as some option.
"""

from __future__ import annotations

import pytest

from cube.protocol.extract import extract_lenient, extract_strict
from cube.protocol.label_sets import load_label_sets

SETS = load_label_sets()
ABCD = SETS["L1_halfwidth"].labels
FULL = SETS["L2_fullwidth"].labels
GANZHI = SETS["L3_ganzhi"].labels
CIRCLED = SETS["L4_circled"].labels
OPTIONS = ("二进制", "十进制", "十六进制", "八进制")


@pytest.mark.parametrize(
    "text, labels, expected",
    [
        ("答案：B", ABCD, 1),
        ("答案:C", ABCD, 2),
        ("答案：  D", ABCD, 3),
        ("答案:\nA", ABCD, 0),
        ("答案：B。", ABCD, 1),
        ("首先排除A。答案：C\n经检查，答案：D", ABCD, 3),  # the last one wins
        ("答案：D\n……再想想，答案：A", ABCD, 0),
        ("答案：B 然后是无关的话：答案：不确定", ABCD, 1),  # the last *valid* one
        ("答案：Ｃ", FULL, 2),
        ("答案：丙", GANZHI, 2),
        ("答案：④", CIRCLED, 3),
        ("答案：①②", CIRCLED, 0),
        # Not strict:
        ("答案：Apple", ABCD, None),  # a word, not a label
        ("答案：Because", ABCD, None),
        ("答案：E", ABCD, None),  # not in the set
        ("答案：B", FULL, None),  # the other width is not the cell's label
        ("答案：Ｂ", ABCD, None),
        ("答案：1", CIRCLED, None),
        ("答案是B", ABCD, None),
        ("答案 ：B", ABCD, None),
        ("答案：（B）", ABCD, None),
        ("答：B", ABCD, None),
        ("B", ABCD, None),
        ("", ABCD, None),
    ],
)
def test_strict(text, labels, expected):
    assert extract_strict(text, labels) == expected


@pytest.mark.parametrize(
    "text, labels, expected",
    [
        # Rule 1: the strict form, also with decoration before the label.
        ("答案：B", ABCD, 1),
        ("答案：**C**", ABCD, 2),
        ("答案：（D）", ABCD, 3),
        ("答案：“乙”", GANZHI, 1),
        ("答案 ：B", ABCD, 1),
        # Widths are folded for letters only.
        ("答案：Ｂ", ABCD, 1),
        ("答案：B", FULL, 1),
        ("答案：1", CIRCLED, None),
        # Rule 2: 答案是 / 答案为.
        ("所以正确答案是C。", ABCD, 2),
        ("答案为 D", ABCD, 3),
        ("答案应该是：甲", GANZHI, 0),
        ("答案是①。", CIRCLED, 0),
        ("我认为答案是Ｄ", FULL, 3),
        # Rule 3: 选X / 选择X, not 不选, not 选项.
        ("综上，选B。", ABCD, 1),
        ("应选择丁", GANZHI, 3),
        ("故选：③", CIRCLED, 2),
        ("不选A，选C", ABCD, 2),
        ("不选A", ABCD, None),
        ("选项A和选项B都不对", ABCD, None),
        # Precedence: 答案： beats 选; 答案是 beats 选.
        ("选A。不过答案：D", ABCD, 3),
        ("答案是C，虽然有人会选A", ABCD, 2),
        # Rule 4: a bare label opening the generation.
        ("B", ABCD, 1),
        (" C\n", ABCD, 2),
        ("(A)", ABCD, 0),
        ("【D】", ABCD, 3),
        ("B. 因为二进制只有两个数码", ABCD, 1),
        ("B因为……", ABCD, 1),
        ("D 因为其余都错", ABCD, 3),
        ("Ｃ", FULL, 2),
        ("C", FULL, 2),
        ("乙。", GANZHI, 1),
        ("②", CIRCLED, 1),
        ("① 正确", CIRCLED, 0),
        # Adversarial: label letters inside (or starting) English words are not bare labels.
        ("Because the base is two.", ABCD, None),
        ("A bit is one binary digit.", ABCD, None),
        ("Clearly the decimal system.", ABCD, None),
        ("Decimal.", ABCD, None),
        ("ABCD", ABCD, None),
        ("The answer is B", ABCD, None),  # English phrasing is not among the rules
        ("甲醛", GANZHI, None),  # 甲 starts a word
        ("丙烯酸", GANZHI, None),
        ("①②都对", CIRCLED, None),
        ("1", CIRCLED, None),
        ("我不知道。", ABCD, None),
        ("", ABCD, None),
    ],
)
def test_lenient_labels(text, labels, expected):
    assert extract_lenient(text, labels, OPTIONS) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("计算机内部使用二进制。", 0),
        ("“十六进制”", 2),
        ("应该是八进制吧", 3),
        ("十六进制和十进制都不是", None),  # two options quoted: ambiguous
        ("计算机使用三进制", None),
        ("进制", None),
    ],
)
def test_lenient_option_text(text, expected):
    assert extract_lenient(text, ABCD, OPTIONS) == expected


def test_an_option_text_inside_a_longer_quoted_option_is_no_evidence():
    options = ("1", "10", "100", "7")
    assert extract_lenient("结果是100", ABCD, options) == 2
    assert extract_lenient("结果是10", ABCD, options) == 1
    assert extract_lenient("结果是7或10", ABCD, options) is None


def test_duplicate_option_texts_are_ambiguous():
    assert extract_lenient("答复：是", ABCD, ("是", "否", "是", "不确定")) is None


def test_labels_take_precedence_over_option_texts():
    assert extract_lenient("答案：C（二进制）", ABCD, OPTIONS) == 2
    assert extract_lenient("二进制\n选D", ABCD, OPTIONS) == 3


def test_lenient_without_option_texts():
    assert extract_lenient("二进制", ABCD) is None
    assert extract_lenient("选A", ABCD) == 0


def test_lenient_agrees_with_strict_whenever_strict_finds_something():
    texts = ["答案：A", "先选B，答案：C", "答案：D 选A", "答案是B 答案：A"]
    for text in texts:
        strict = extract_strict(text, ABCD)
        assert strict is not None and extract_lenient(text, ABCD, OPTIONS) == strict


def test_custom_multi_character_labels_prefer_the_longest_match():
    labels = ("X1", "X12", "Y", "Z")
    assert extract_strict("答案：X12", labels) == 1
    assert extract_strict("答案：X1", labels) == 0
    assert extract_strict("答案：X123", labels) is None


def test_empty_labels_are_a_programming_error():
    with pytest.raises(ValueError):
        extract_strict("答案：A", [])


def test_an_english_answer_word_reads_answer_x_and_leaves_the_chinese_rules_alone():
    """en_mcq's M6 reads ``Answer: X`` (templates generation.answer_word); the exam format's default
    word is 答案, so CMMLU's extraction is what it was."""
    from cube.protocol.extract import extract_lenient, extract_strict

    labels = tuple("ABCDE")
    assert extract_strict("Answer: B", labels, "Answer") == 1
    assert extract_strict("Answer: B", labels) is None  # the exam format reads 答案 only
    assert extract_strict("答案：C", labels, "Answer") is None
    assert extract_lenient("I think the answer is E.", labels, None, "Answer") == 4
    assert extract_lenient("选C", labels, None, "Answer") is None  # the Chinese rules belong to 答案
    assert extract_strict("Answer: A ... Answer: D", labels, "Answer") == 3  # the last one
