"""Prompt rendering: exact strings on our own C-Eval-format fixtures, structure on real CMMLU."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cube.errors import ConfigError, ItemsError
from cube.protocol.items import load_ceval, stratified_sample
from cube.protocol.label_sets import LabelSet, load_label_sets
from cube.protocol.prompts import (
    Cell,
    cloze_prompt,
    judgement_prompts,
    load_contexts,
    load_templates,
    option_permutation,
    render_prompt,
)

CEVAL_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ceval"
LABEL_SETS = load_label_sets()
ABCD = LABEL_SETS["L1_halfwidth"]
GANZHI = LABEL_SETS["L3_ganzhi"]


@pytest.fixture(scope="module")
def ceval():
    items = load_ceval(CEVAL_FIXTURES, splits=("dev", "val", "test"))
    return {item.uid: item for item in items}


@pytest.fixture(scope="module")
def ceval_dev(ceval):
    return [item for item in ceval.values() if item.split == "dev"]


HEADER_CN = "以下是中国关于计算机网络考试的单项选择题，请选出其中的正确答案。\n\n"
HEADER_PHYS = "以下是中国关于高中物理考试的单项选择题，请选出其中的正确答案。\n\n"
CN_VAL0 = "下列设备中，工作在物理层的是：\n"


def test_zero_shot_chinese_cue_is_the_ceval_format(ceval):
    prompt = render_prompt(ceval["ceval/computer_network/val/0"], Cell(ABCD, "zh_cue", 0))
    assert (
        prompt.context == HEADER_CN + CN_VAL0 + "A. 中继器\nB. 交换机\nC. 路由器\nD. 网关\n答案："
    )
    assert prompt.label_continuations == ("A", "B", "C", "D")
    assert prompt.gold == 0
    assert prompt.permutation == (0, 1, 2, 3)


@pytest.mark.parametrize(
    "context, ending, continuations",
    [
        ("en_label_space", "网关\nAnswer:", (" 甲", " 乙", " 丙", " 丁")),
        ("en_prompt_space", "网关\nAnswer: ", ("甲", "乙", "丙", "丁")),
        ("zh_cue_newline", "网关\n答案：\n", ("甲", "乙", "丙", "丁")),
    ],
)
def test_the_whitespace_axis_moves_the_space_between_prompt_and_label(
    ceval, context, ending, continuations
):
    prompt = render_prompt(ceval["ceval/computer_network/val/0"], Cell(GANZHI, context, 0))
    assert (
        prompt.context == HEADER_CN + CN_VAL0 + "甲. 中继器\n乙. 交换机\n丙. 路由器\n丁. " + ending
    )
    assert prompt.label_continuations == continuations


def test_a_cyclic_shift_moves_the_gold_label_not_the_gold_text(ceval):
    item = ceval["ceval/computer_network/val/0"]  # gold is option 0, 中继器
    prompt = render_prompt(item, Cell(ABCD, "zh_cue", 0, order="shift1"))
    assert (
        prompt.context == HEADER_CN + CN_VAL0 + "A. 交换机\nB. 路由器\nC. 网关\nD. 中继器\n答案："
    )
    assert prompt.permutation == (1, 2, 3, 0)
    assert prompt.gold == 3


def test_every_shift_shows_the_gold_text_under_the_gold_label(ceval):
    for item in (i for i in ceval.values() if i.answer is not None):
        golds = set()
        for order in ("original", "shift1", "shift2", "shift3"):
            prompt = render_prompt(item, Cell(ABCD, "zh_cue", 0, order=order))
            shown = f"{ABCD.labels[prompt.gold]}. {item.options[item.answer]}\n"
            assert shown in prompt.context
            assert prompt.permutation[prompt.gold] == item.answer
            assert sorted(prompt.permutation) == [0, 1, 2, 3]
            golds.add(prompt.gold)
        assert golds == {0, 1, 2, 3}


def test_five_shot_prompt_is_header_once_then_dev_items_in_file_order(ceval, ceval_dev):
    item = ceval["ceval/high_school_physics/val/0"]
    prompt = render_prompt(item, Cell(GANZHI, "zh_cue", 5), ceval_dev)
    expected = (
        HEADER_PHYS
        + "在国际单位制中，力的单位是：\n甲. 焦耳\n乙. 牛顿\n丙. 瓦特\n丁. 帕斯卡\n答案：乙\n\n"
        + "物体做自由落体运动时，下列哪个物理量保持不变？\n甲. 速度\n乙. 位移\n丙. 加速度\n丁. 动能\n答案：丙\n\n"
        + "光在真空中的传播速度约为：\n甲. 3×10^5 m/s\n乙. 3×10^8 m/s\n丙. 3×10^6 km/s\n丁. 340 m/s\n答案：乙\n\n"
        + "下列哪种现象说明光具有波动性？\n甲. 光电效应\n乙. 光的直线传播\n丙. 光的干涉\n丁. 光的反射\n答案：丙\n\n"
        + "一个电阻两端电压为6 V，通过的电流为2 A，则其阻值为：\n甲. 3 Ω\n乙. 12 Ω\n丙. 4 Ω\n丁. 8 Ω\n答案：甲\n\n"
        + "质量为2 kg的物体受到4 N的合力，其加速度为：\n甲. 1 m/s²\n乙. 2 m/s²\n丙. 4 m/s²\n丁. 8 m/s²\n答案："
    )
    assert prompt.context == expected
    assert prompt.gold == 1


def test_shots_keep_their_order_while_the_scored_item_is_shifted(ceval, ceval_dev):
    item = ceval["ceval/computer_network/val/0"]
    prompt = render_prompt(item, Cell(ABCD, "en_label_space", 5, order="shift2"), ceval_dev)
    assert "IPv4地址的长度是多少位？\nA. 16\nB. 32\nC. 64\nD. 128\nAnswer: B\n\n" in prompt.context
    assert prompt.context.endswith(CN_VAL0 + "A. 路由器\nB. 网关\nC. 中继器\nD. 交换机\nAnswer:")
    assert prompt.context.count("以下是中国关于") == 1
    assert prompt.gold == 2


def test_a_prompt_is_a_pure_function_of_item_cell_and_dev_set(ceval, ceval_dev):
    item = ceval["ceval/computer_network/val/2"]
    cell = Cell(ABCD, "zh_cue", 5, order="shift3")
    shuffled = list(ceval_dev)
    random.Random(1).shuffle(shuffled)
    assert render_prompt(item, cell, ceval_dev) == render_prompt(item, cell, shuffled)
    assert render_prompt(item, cell, ceval_dev) == render_prompt(
        item, cell, ceval_dev + ceval_dev[:0]
    )


def test_too_few_dev_items_is_an_error_naming_the_subject(ceval, ceval_dev):
    item = ceval["ceval/computer_network/val/0"]
    with pytest.raises(
        ItemsError, match="needs 5 dev items of subject 'computer_network'; found 0"
    ):
        render_prompt(item, Cell(ABCD, "zh_cue", 5), None)
    # A dev item is never its own shot, so 5-shot on a dev item finds only 4.
    with pytest.raises(ItemsError, match="found 4"):
        render_prompt(ceval["ceval/computer_network/dev/0"], Cell(ABCD, "zh_cue", 5), ceval_dev)
    shots = render_prompt(ceval["ceval/computer_network/dev/0"], Cell(ABCD, "zh_cue", 4), ceval_dev)
    assert shots.context.count("在OSI参考模型中") == 1
    assert shots.context.endswith(
        "在OSI参考模型中，负责路由选择的是哪一层？\nA. 物理层\nB. 数据链路层\nC. 网络层\nD. 应用层\n答案："
    )


def test_items_without_answers_render_with_gold_none(ceval, ceval_dev):
    prompt = render_prompt(
        ceval["ceval/high_school_physics/test/1"], Cell(ABCD, "zh_cue", 5), ceval_dev
    )
    assert prompt.gold is None
    with pytest.raises(ItemsError, match="has no answer"):
        test_items = [i for i in ceval.values() if i.split == "test"]
        render_prompt(ceval["ceval/high_school_physics/val/0"], Cell(ABCD, "zh_cue", 1), test_items)


def test_bad_cells_are_rejected_with_the_bad_value(ceval):
    item = ceval["ceval/computer_network/val/0"]
    with pytest.raises(ConfigError, match="'shift4'"):
        render_prompt(item, Cell(ABCD, "zh_cue", 0, order="shift4"))
    with pytest.raises(ConfigError, match="'reverse'"):
        Cell(ABCD, "zh_cue", 0, order="reverse")
    with pytest.raises(ConfigError, match="-1"):
        Cell(ABCD, "zh_cue", -1)
    with pytest.raises(ConfigError, match="'fr_cue'"):
        render_prompt(item, Cell(ABCD, "fr_cue", 0))
    with pytest.raises(ConfigError, match="3 labels"):
        render_prompt(item, Cell(LabelSet("three", ("X", "Y", "Z")), "zh_cue", 0))


def test_an_unknown_answer_context_is_the_same_one_line_error_from_every_reader(ceval):
    from cube.protocol.prompts import answer_context

    message = r"^unknown answer context 'zh_cu'; known: zh_cue, zh_cue_newline, en_label_space, "
    item = ceval["ceval/computer_network/val/0"]
    for read in (lambda: load_contexts(["zh_cue", "zh_cu"]),
                 lambda: render_prompt(item, Cell(ABCD, "zh_cu", 0)),
                 lambda: answer_context(load_templates(), "zh_cu")):
        with pytest.raises(ConfigError, match=message) as caught:
            read()
        assert "\n" not in str(caught.value)


def test_a_context_with_an_unknown_tokenization_is_named():
    templates = {**load_templates(), "contexts": {"odd": {"cue": ":", "tokenization": "apart"}}}
    with pytest.raises(ConfigError, match="apart"):
        load_contexts(None, templates)


def test_option_permutation_is_a_cyclic_shift():
    assert option_permutation("original", 4) == (0, 1, 2, 3)
    assert option_permutation("shift1", 4) == (1, 2, 3, 0)
    assert option_permutation("shift3", 4) == (3, 0, 1, 2)
    assert option_permutation("shift2", 3) == (2, 0, 1)


def test_templates_passed_in_replace_the_frozen_ones(ceval):
    templates = dict(load_templates())
    templates["option"] = "({label}) {text}\n"
    prompt = render_prompt(
        ceval["ceval/computer_network/val/0"], Cell(ABCD, "zh_cue", 0), templates=templates
    )
    assert "(A) 中继器\n(B) 交换机\n" in prompt.context
    del templates["header"]
    with pytest.raises(ConfigError, match="'header'"):
        render_prompt(
            ceval["ceval/computer_network/val/0"], Cell(ABCD, "zh_cue", 0), templates=templates
        )


def test_cloze_prompt_is_question_then_cue_with_option_texts(ceval):
    item = ceval["ceval/computer_network/val/1"]
    context, continuations, unconditional = cloze_prompt(
        item, Cell(ABCD, "en_label_space", 0, "shift1")
    )
    assert context == "UDP协议提供的服务是：\n答案："
    assert continuations == (
        "可靠的、面向连接的",
        "不可靠的, 无连接的",
        "可靠的、无连接的",
        "不可靠的、面向连接的",
    )
    assert unconditional == "答案："
    assert cloze_prompt(item) == cloze_prompt(item, Cell(GANZHI, "zh_cue", 5))


def test_judgement_prompts_recast_each_option_as_a_statement(ceval):
    prompts = judgement_prompts(ceval["ceval/computer_network/val/2"])
    assert [p.is_true for p in prompts] == [False, False, True, False]
    assert prompts[2].context == (
        "判断下面的说法是否正确。\n说法：“子网掩码255.255.255.0对应的前缀长度是：”的答案是“/24”。\n这个说法是"
    )
    assert {(p.true_word, p.false_word) for p in prompts} == {("对", "错")}
    assert [p.is_true for p in judgement_prompts(ceval["ceval/computer_network/test/0"])] == [
        None
    ] * 4


# --- real CMMLU: structure only -----------------------------------------------------------------


def test_every_cmmlu_subject_renders_five_shot_in_every_label_set(cmmlu_items):
    dev = cmmlu_items(("dev",))
    sample = stratified_sample(cmmlu_items(("test",)), 67, seed=0)
    templates = load_templates()
    for item in sample:
        for label_set in LABEL_SETS.values():
            cell = Cell(label_set, "zh_cue", 5, order="shift1")
            prompt = render_prompt(item, cell, dev, templates)
            assert prompt.context.startswith(f"以下是中国关于{item.subject_zh}考试")
            assert prompt.context.endswith("答案：")
            assert prompt.context.count("答案：") >= 6
            assert prompt.context.count("以下是中国关于") == 1
            assert prompt.permutation[prompt.gold] == item.answer
            assert prompt == render_prompt(item, cell, dev, templates)
