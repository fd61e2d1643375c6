import pytest

from cube.errors import ConfigError
from cube.protocol.label_sets import LabelSet, load_label_sets, parse_label_set, select_label_sets


def test_frozen_sets_are_the_studys_four():
    sets = load_label_sets()
    assert {k: "".join(v.labels) for k, v in sets.items()} == {
        "L1_halfwidth": "ABCD", "L2_fullwidth": "ＡＢＣＤ", "L3_ganzhi": "甲乙丙丁", "L4_circled": "①②③④",
    }


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
