import json

import pytest

from cube.errors import PredictionMismatch
from cube.protocol.label_sets import LabelSet
from cube.tokenizers.audit import (
    Context,
    audit_cell,
    diff_predictions,
    first_token_collisions,
    format_table,
    load_contexts,
    prediction_document,
    read_prediction,
    run_audit,
)
from tests.synthetic import char_bpe

# A minimal template so synthetic tokenizers see a short, fully known prompt.
TEMPLATES = {"header": "", "question": "Q\n", "option": "{label}.{text}\n",
             "audit_item": {"subject": "", "question": "Q", "options": ["o"]}}
CUE = Context("cue", ":", "")
ABCD = LabelSet("abcd", ("XA", "XB", "XC", "XD"))


def cell(tok, labels=ABCD, ctx=CUE):
    return audit_cell(tok, "synthetic", labels, ctx, TEMPLATES)


def test_full_collision_all_labels_share_one_first_token():
    tok = char_bpe(["X", "A", "B", "C", "D", "Q", ":", ".", "o"])
    c = cell(tok)
    assert c.verdict == "DEGEN" and c.collision == "full"
    assert c.collision_groups == (("XA", "XB", "XC", "XD"),)
    assert {lt.ids[0] for lt in c.labels} == {tok.token_to_id("X")}


def test_partial_collision_is_degenerate_and_names_the_group():
    tok = char_bpe(["X", "A", "B", "C", "D", "Q", ":", ".", "o"])
    labels = LabelSet("mixed", ("XA", "B", "XC", "D"))
    c = cell(tok, labels)
    assert c.verdict == "DEGEN" and c.collision == "partial"
    assert c.collision_groups == (("XA", "XC"),)


def test_multi_token_labels_with_distinct_first_tokens_are_defined():
    tok = char_bpe(["A", "B", "C", "D", "Z", "Q", ":", ".", "o"])
    c = cell(tok, LabelSet("two", ("AZ", "BZ", "CZ", "DZ")))
    assert c.verdict == "max2tok" and c.collision is None
    assert [lt.tokens for lt in c.labels] == [("A", "Z"), ("B", "Z"), ("C", "Z"), ("D", "Z")]


def test_boundary_merge_is_flagged_per_label():
    tok = char_bpe(["A", "B", "C", "D", "Q", ":", ".", "o"], merges=[(":", "A")])
    c = cell(tok, LabelSet("abcd", ("A", "B", "C", "D")))
    assert c.boundary_merge == ("A",)
    assert c.labels[0].tokens == (":A",)
    assert c.verdict == "max1tok"


@pytest.mark.parametrize("bos", [False, True])
def test_bos_added_or_not_gives_the_same_verdict(bos):
    tok = char_bpe(["X", "A", "B", "C", "D", "Q", ":", ".", "o"], bos=bos)
    assert cell(tok).verdict == "DEGEN"


def test_first_token_collisions_keeps_label_order():
    assert first_token_collisions([5, 7, 5, 7], ("a", "b", "c", "d")) == (("a", "c"), ("b", "d"))
    assert first_token_collisions([1, 2, 3], ("a", "b", "c")) == ()


def test_the_audit_prompt_is_the_templates_around_the_audit_item_for_every_label_set_and_context():
    """Built here from templates.yaml by hand, as the audit built it before it used the harness's
    prompt builder: header, question, one option per label (the item's options in turn), the cue."""
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import load_templates
    from cube.tokenizers.audit import audit_prompt

    t = load_templates()
    item = t["audit_item"]
    for label_set in [*load_label_sets().values(), LabelSet("six", tuple("UVWXYZ"))]:
        for context in load_contexts():
            expected = (t["header"].format(subject=item["subject"]) + t["question"].format(question=item["question"])
                        + "".join(t["option"].format(label=label, text=item["options"][i % len(item["options"])])
                                  for i, label in enumerate(label_set.labels))
                        + context.cue)
            assert audit_prompt(label_set, context) == expected


def test_contexts_come_from_config_with_the_default_first():
    names = [c.name for c in load_contexts()]
    assert names[0] == "zh_cue"
    assert set(names) == {"zh_cue", "zh_cue_newline", "en_label_space", "en_prompt_space",
                          "en_prompt_space_separate"}
    by = {c.name: c for c in load_contexts()}
    assert (by["en_label_space"].cue, by["en_label_space"].label_prefix) == ("Answer:", " ")
    assert (by["en_prompt_space"].cue, by["en_prompt_space"].label_prefix) == ("Answer: ", "")
    assert by["en_prompt_space_separate"].cue == by["en_prompt_space"].cue
    assert [by[n].tokenization for n in ("en_prompt_space", "en_prompt_space_separate")] == ["in_context", "separate"]


# ---- real tokenizers -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_cells(real_tokenizers):
    from cube.protocol.label_sets import load_label_sets

    return {(c.family, c.label_set, c.context): c
            for c in run_audit(real_tokenizers, list(load_label_sets().values()), load_contexts())}


def test_qwen_circled_labels_share_their_first_token(real_cells):
    for family in ("qwen2.5", "qwen3", "r1-distill-qwen"):
        c = real_cells[(family, "L4_circled", "zh_cue")]
        assert c.verdict == "DEGEN" and c.collision == "full"
        assert len({lt.ids[0] for lt in c.labels}) == 1
        assert real_cells[(family, "L1_halfwidth", "zh_cue")].verdict == "max1tok"


def test_qwen_families_agree_token_for_token(real_cells):
    # Qwen2.5 (GGUF header), Qwen3 (tokenizer.json) and R1-distill (GGUF) share one BPE vocabulary:
    # three independent file formats must give identical label ids in every cell.
    for (fam, ls, ctx), c in real_cells.items():
        if fam == "qwen3":
            for other in ("qwen2.5", "r1-distill-qwen"):
                assert [lt.ids for lt in real_cells[(other, ls, ctx)].labels] == [lt.ids for lt in c.labels]


def test_gemma_has_single_token_labels_under_the_chinese_cue(real_cells):
    assert all(real_cells[("gemma3", ls, "zh_cue")].verdict == "max1tok"
               for ls in ("L1_halfwidth", "L2_fullwidth", "L3_ganzhi", "L4_circled"))


def test_llama_ganzhi_with_label_space_is_a_partial_collision(real_cells):
    c = real_cells[("llama3.1", "L3_ganzhi", "en_label_space")]
    assert c.collision == "partial" and c.collision_groups == (("甲", "丁"),)


def test_space_left_in_prompt_merges_with_halfwidth_label(real_cells):
    c = real_cells[("qwen3", "L1_halfwidth", "en_prompt_space")]
    assert c.boundary_merge == ("A", "B", "C", "D")
    same_as_label_space = real_cells[("qwen3", "L1_halfwidth", "en_label_space")]
    assert [lt.ids for lt in c.labels] == [lt.ids for lt in same_as_label_space.labels]


# ---- freeze / check ----------------------------------------------------------------------------

def _doc(tok):
    cells = [cell(tok)]
    return prediction_document(cells, [ABCD], [CUE], {"synthetic": {"spec": "x", "sha256": "0" * 64}}, {})


def test_frozen_prediction_round_trips_and_detects_tampering(tmp_path):
    tok = char_bpe(["X", "A", "B", "C", "D", "Q", ":", ".", "o"])
    doc = _doc(tok)
    path = tmp_path / "frozen.json"
    path.write_text(json.dumps(doc, ensure_ascii=False))
    assert read_prediction(path) == doc
    assert diff_predictions(doc, _doc(tok)) == []

    doc["cells"][0]["verdict"] = "max1tok"
    path.write_text(json.dumps(doc, ensure_ascii=False))
    with pytest.raises(PredictionMismatch, match="content_sha256"):
        read_prediction(path)


def test_diff_names_the_changed_cell():
    degen = _doc(char_bpe(["X", "A", "B", "C", "D", "Q", ":", ".", "o"]))
    defined = _doc(char_bpe(["XA", "XB", "XC", "XD", "Q", ":", ".", "o"],
                            merges=[("X", "A"), ("X", "B"), ("X", "C"), ("X", "D")]))
    diffs = diff_predictions(degen, defined)
    assert len(diffs) == 1 and "synthetic/abcd/cue" in diffs[0] and "frozen DEGEN, now max1tok" in diffs[0]


# ---- tokens a person can read (issue 23 §4) ------------------------------------------------------

CIRCLED_LAST_BYTES = ("A0", "A1", "A2", "A3")  # ①..④ are E2 91 A0 .. E2 91 A3 in UTF-8


def test_circled_labels_show_the_bytes_they_share_for_qwen25_and_smollm2(real_cells):
    """Byte-level BPE printed ① as ['âĳ', 'ł']: nobody could see the shared E2 91."""
    qwen = real_cells[("qwen2.5", "L4_circled", "zh_cue")]
    assert [lt.tokens for lt in qwen.labels][0] == ("âĳ", "ł")  # the vocabulary's own strings, kept
    assert [lt.shown for lt in qwen.labels] == [("<E2 91>", f"<{b}>") for b in CIRCLED_LAST_BYTES]
    smollm = real_cells[("smollm2", "L4_circled", "zh_cue")]
    assert [lt.shown for lt in smollm.labels] == [("<E2>", "<91>", f"<{b}>") for b in CIRCLED_LAST_BYTES]
    table = format_table([qwen, smollm])
    assert "① -> [48312, 254] [<E2 91>, <A0>]; ② -> [48312, 94] [<E2 91>, <A1>]" in table
    assert "④ -> [173, 235, 113] [<E2>, <91>, <A3>]" in table
    assert "âĳ" not in table
    # whole characters are shown as text, quoted so that a space shows
    assert [lt.shown for lt in real_cells[("gemma3", "L4_circled", "zh_cue")].labels] == [
        ("'①'",), ("'②'",), ("'③'",), ("'④'",)]
    assert real_cells[("qwen2.5", "L1_halfwidth", "en_label_space")].labels[0].shown == ("' A'",)


def test_every_label_reads_back_as_its_own_text(real_cells):
    """The bytes shown are the label's own: joined, every label without a boundary merge is its
    answer context's prefix plus the label, for every family (byte-level, byte-fallback, ▁)."""
    prefix = {c.name: c.label_prefix for c in load_contexts()}
    for (family, _, context), c in real_cells.items():
        for lt in c.labels:
            if not lt.boundary_merge:
                assert b"".join(lt.raw).decode("utf-8") == prefix[context] + lt.label, (family, context, lt)


def test_audit_json_keeps_the_raw_strings_and_adds_the_bytes(capsys):
    from cube.cli import main

    assert main(["audit", "--families", "qwen2.5,smollm2", "--label-sets", "L4_circled", "--contexts", "zh_cue",
                 "--json"]) == 0
    cells = {c["family"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    first = cells["qwen2.5"]["labels"][0]
    assert first["tokens"] == ["âĳ", "ł"] and first["bytes"] == ["E2 91", "A0"] and first["shown"] == ["<E2 91>", "<A0>"]
    assert [lt["bytes"] for lt in cells["smollm2"]["labels"]][3] == ["E2", "91", "A3"]
