import pytest

from cube.errors import ConfigError
from cube.protocol.label_sets import LabelSet, load_label_sets, parse_label_set, select_label_sets, short_label_sets


def test_frozen_sets_are_the_studys_four_then_their_ten_label_forms():
    sets = load_label_sets()
    assert {k: "".join(v.labels) for k, v in sets.items()} == {
        "L1_halfwidth": "ABCD", "L2_fullwidth": "ＡＢＣＤ", "L3_ganzhi": "甲乙丙丁", "L4_circled": "①②③④",
        "A10_halfwidth": "ABCDEFGHIJ", "A10_fullwidth": "ＡＢＣＤＥＦＧＨＩＪ", "A10_ganzhi": "甲乙丙丁戊己庚辛壬癸",
        "A10_circled": "①②③④⑤⑥⑦⑧⑨⑩",
    }
    assert list(sets)[:4] == ["L1_halfwidth", "L2_fullwidth", "L3_ganzhi", "L4_circled"]
    # on N options a ten-label set shows the four-label set's labels, then its own
    for four, ten in zip(list(sets)[:4], list(sets)[4:]):
        assert sets[ten].shown(4) == sets[four].labels and len(sets[ten].shown(7)) == 7


def test_short_label_sets_counts_the_items_that_need_more():
    sets = load_label_sets()
    assert short_label_sets([sets["A10_ganzhi"]], [2, 10, 4]) is None
    line = short_label_sets([sets["L3_ganzhi"], sets["A10_ganzhi"]], [2, 5, 4, 7, 4])
    assert line.startswith("label set 'L3_ganzhi' has 4 labels but 2 of 5 items have more options (up to 7); ")


def test_user_set_from_command_line():
    ls = parse_label_set("roman=Ⅰ,Ⅱ,Ⅲ,Ⅳ")
    assert ls.name == "roman" and ls.labels == ("Ⅰ", "Ⅱ", "Ⅲ", "Ⅳ")
    assert parse_label_set("abc=a b c").labels == ("a", "b", "c")


@pytest.mark.parametrize("labels, needle", [
    (("A", "", "C"), "empty label"),
    (("A", "B", "A"), "duplicate label 'A'"),
    (("A",), "at least 2"),
    ((), "at least 2"),
    (("A", "Ａ", "C"), "differ only under Unicode normalisation"),
    (("Ⅰ", "I"), "differ only under Unicode normalisation"),
])
def test_bad_sets_are_rejected_with_the_bad_value_named(labels, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        LabelSet("mine", labels)
    assert "\n" not in str(info.value)


def test_unknown_and_clashing_names():
    with pytest.raises(ConfigError, match="unknown label set 'L9'"):
        select_label_sets(["L9"])
    with pytest.raises(ConfigError, match="already in use"):
        select_label_sets(["L1_halfwidth"], ["L1_halfwidth=x,y"])
    with pytest.raises(ConfigError, match="NAME=A,B,C,D"):
        parse_label_set("ABCD")
