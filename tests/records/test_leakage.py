"""The normal form, the scrub and the leakage audit, on real CMMLU text read at test time.

Spans and options are picked programmatically from ``../shared/benchmarks/cmmlu``; no benchmark
text is written into the repository. Every planted leak is checked for the record, the kind and
the character offset into the ORIGINAL (disguised) text.

PYTEST_DONT_REWRITE: pytest's assertion introspection would print the compared values, i.e.
benchmark text, into test logs. Assertions here carry their own messages, built from hits, offsets
and counts only.
"""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from collections import Counter

import numpy as np
import pytest

from cube.records import leakage
from cube.records.leakage import (
    MARKER,
    ItemText,
    audit_records,
    audit_texts,
    build_index,
    normalize_for_match,
    scrub,
)


@pytest.fixture(scope="module")
def items(cmmlu_items):
    return cmmlu_items(("dev", "test"))


@pytest.fixture(scope="module")
def index(cmmlu_leak_index):
    return cmmlu_leak_index


@pytest.fixture(scope="module")
def by_uid(items):
    return {item.uid: item for item in items}


@pytest.fixture(scope="module")
def sep(index):
    """A kept symbol that no question or option contains: planted text cannot merge across it."""
    for char in "|~^¤§":
        if all(char not in q for q in index.question_normal) and all(
            char not in p for p in index.phrase_normal
        ):
            return char
    pytest.fail("no separator symbol free of benchmark text")


def normal(text: str) -> str:
    return normalize_for_match(text)[0]


# --- disguises -----------------------------------------------------------------------------------


def full_width(text: str) -> str:
    return "".join(
        chr(ord(c) + 0xFEE0) if 0x21 <= ord(c) <= 0x7E else "\u3000" if c == " " else c for c in text
    )


SWAP = {"，": ",", ",": "，", "。": ".", "：": ":", ":": "：", "；": ";", ";": "；", "？": "?",
        "?": "？", "！": "!", "（": "(", "）": ")", "(": "（", ")": "）", "、": ",", "“": '"',
        "”": '"', '"': "“"}


def swap_punctuation(text: str) -> str:
    return "".join(SWAP.get(c, c) for c in text)


def insert_breaks(text: str) -> str:
    """Spaces, line breaks, tabs, an ideographic space and a zero-width space inside the text."""
    gaps = [" ", "\n", "\r\n", "\t", "\u3000", "\u200b"]
    out = []
    for k, char in enumerate(text):
        out.append(char)
        if k < len(text) - 1 and k % 3 == 2:
            out.append(gaps[(k // 3) % len(gaps)])
    return "".join(out)


def collapse_whitespace(text: str) -> str:
    return "".join(c for c in text if not c.isspace())


def every_disguise(text: str) -> str:
    return insert_breaks(swap_punctuation(full_width(text)))


# --- picking real text ---------------------------------------------------------------------------


def question_spans(items, size: int):
    """(item, original text of a span of ``size`` normalised characters) over every question."""
    for item in items:
        norm, source = normalize_for_match(item.question)
        for begin in range(0, len(norm) - size + 1, 7):
            yield item, item.question[source[begin] : source[begin + size - 1] + 1]


def pick_span(items, size: int, want=lambda span: True):
    for item, span in question_spans(items, size):
        if want(span):
            return item, span
    pytest.fail(f"no question span of {size} characters with the wanted property")


def contains_phrase(index, text: str) -> bool:
    """Whether an option or a whole short question lies inside ``text``."""
    norm = normal(text)
    return any(phrase in norm for phrase in index.phrase_normal)


def kept_range(text: str) -> tuple[int, int]:
    """[first, last + 1) of the characters that survive normalisation."""
    source = normalize_for_match(text)[1]
    return int(source[0]), int(source[-1]) + 1


# --- normal form ---------------------------------------------------------------------------------


def naive_normal_form(text: str) -> tuple[str, list[int]]:
    """The reference: one character at a time, straight from unicodedata and OpenCC's table."""
    folds = leakage._traditional_to_simplified()
    chars, offsets = [], []
    for i, char in enumerate(text):
        for part in unicodedata.normalize("NFKD", char):
            category = unicodedata.category(part)
            if part.isspace() or category[0] in "PZ" or category in ("Cc", "Cf") or part == "$":
                continue
            if unicodedata.combining(part):
                continue
            chars.append(folds.get(part, part))
            offsets.append(i)
    return "".join(chars), offsets


def naive_raw_form(text: str) -> tuple[str, list[int]]:
    """The raw form's reference: NFKC one character at a time, whitespace and invisible dropped."""
    chars, offsets = [], []
    for i, char in enumerate(text):
        for part in unicodedata.normalize("NFKC", char):
            if not part.isspace() and unicodedata.category(part) not in ("Cc", "Cf"):
                chars.append(part)
                offsets.append(i)
    return "".join(chars), offsets


def test_normal_form_matches_a_per_character_reference(items):
    texts = [every_disguise(item.question) for item in items[::400]]
    texts += ["xﬁy½ Ｃａｆé\u0301 ㈱①", "", "  \n\t", "\u3000ＡＢＣ，ａｂｃ。"]
    for text in texts:
        norm, offsets = normalize_for_match(text)
        ref_norm, ref_offsets = naive_normal_form(text)
        assert norm == ref_norm
        assert offsets.tolist() == ref_offsets


def test_expanding_characters_map_every_piece_back_to_their_source():
    norm, offsets = normalize_for_match("xﬁy½")
    assert norm == "xfiy1⁄2"
    assert offsets.tolist() == [0, 1, 1, 2, 3, 3, 3]


def test_every_disguise_has_the_normal_form_of_the_original_and_of_its_nfkc(items):
    for item in items[::250]:
        for disguise in (full_width, swap_punctuation, insert_breaks, every_disguise):
            disguised = disguise(item.question)
            assert normal(disguised) == normal(item.question)
            assert normal(unicodedata.normalize("NFKC", disguised)) == normal(disguised)


# --- audit: planted leaks ------------------------------------------------------------------------


def has_ascii(span: str) -> bool:
    return sum(c.isascii() and c.isalnum() for c in span) >= 3


def has_punctuation(span: str) -> bool:
    return any(c in SWAP for c in span)


def has_inner_space(span: str) -> bool:
    return any(c.isspace() for c in span.strip())


QUESTION_DISGUISES = {
    "full_width": (has_ascii, full_width),
    "punctuation": (has_punctuation, swap_punctuation),
    "inserted_breaks": (lambda s: True, insert_breaks),
    "collapsed_whitespace": (has_inner_space, collapse_whitespace),
    "all_at_once": (lambda s: has_ascii(s) and has_punctuation(s), every_disguise),
}


@pytest.mark.parametrize("disguise", sorted(QUESTION_DISGUISES))
def test_a_disguised_question_span_is_caught_at_its_original_offset(items, index, by_uid, sep, disguise):
    want, transform = QUESTION_DISGUISES[disguise]
    item, span = pick_span(items, 30, want)
    leak = transform(span)
    assert leak != span or disguise == "inserted_breaks"
    prefix = "ok" + sep
    hits = audit_texts(["nothing here", prefix + leak + sep + "ok"], index)
    assert len(hits) == 1, hits
    hit = hits[0]
    first, end = kept_range(leak)
    assert (hit.text, hit.kind) == (1, "question"), hit
    assert hit.offset == len(prefix) + first, (hit, len(prefix) + first)
    assert hit.n_chars == end - first, (hit, end - first)
    assert normal(leak) in normal(by_uid[hit.item_uid].question)


@pytest.mark.parametrize("disguise", ["full_width", "punctuation", "all_at_once"])
def test_a_disguised_option_is_caught_at_its_original_offset(items, index, by_uid, sep, disguise):
    countable = set(index.option_normal)
    want = {"full_width": has_ascii, "punctuation": has_punctuation, "all_at_once": has_ascii}[disguise]
    transform = {"full_width": full_width, "punctuation": swap_punctuation,
                 "all_at_once": every_disguise}[disguise]
    option = next(
        o for item in items for o in item.options
        if 6 <= len(normal(o)) < 20 and normal(o) in countable and want(o.strip())
    )
    leak = transform(option.strip())
    prefix = "答案" + sep + " "
    hits = audit_texts([prefix + leak + sep], index)
    assert len(hits) == 1, hits
    first, end = kept_range(leak)
    expected = ("option", len(prefix) + first, end - first)
    assert (hits[0].kind, hits[0].offset, hits[0].n_chars) == expected, (hits, expected)
    assert normal(option) in {normal(o) for o in by_uid[hits[0].item_uid].options}


def test_a_model_quoting_another_item_is_caught_and_named(items, index, by_uid, sep):
    own = items[0]
    other, span = pick_span(items[len(items) // 2 :], 25)
    assert other.uid != own.uid
    hits = audit_records([(own.uid, "generation", "ok" + sep + every_disguise(span))], index)
    assert len(hits) == 1, hits
    assert (hits[0].uid, hits[0].field, hits[0].kind) == (own.uid, "generation", "question"), hits
    assert hits[0].item_uid != own.uid
    assert normal(span) in normal(by_uid[hits[0].item_uid].question)


def short_questions(items, low: int, high: int):
    return [i for i in items if low <= len(normal(i.question)) < high]


def test_a_whole_short_question_is_caught_but_not_one_below_the_minimum(items, index, by_uid, sep):
    counts = Counter(normal(i.question) for i in items)
    item = next(i for i in short_questions(items, 12, 20) if counts[normal(i.question)] == 1)
    leak = every_disguise(item.question.strip())
    hits = audit_texts(["ok" + sep + leak + sep], index)
    first, end = kept_range(leak)
    assert [(h.kind, h.item_uid, h.offset, h.n_chars) for h in hits] == [
        ("question", item.uid, 3 + first, end - first)], hits
    # short in the raw form as well (punctuation and brackets count there: see the raw-form tests)
    tiny = [i.question for i in short_questions(items, 4, leakage.MIN_QUESTION_CHARS)
            if len(naive_raw_form(i.question)[0]) < leakage.MIN_QUESTION_CHARS][:30]
    assert tiny
    quiet = [t for t in tiny if not contains_phrase(index, t)]
    assert quiet and audit_texts(["ok" + sep + t + sep for t in quiet], index) == []
    strict = build_index(items, min_question_chars=4)
    assert len(audit_texts(["ok" + sep + t + sep for t in quiet], strict)) == len(quiet)


def test_hits_never_carry_the_leaked_text(items, index, sep):
    _, span = pick_span(items, 40)
    hits = audit_records([("r1", "generation", "ok" + sep + span)], index)
    assert hits
    for hit in hits:
        for value in dataclasses.astuple(hit):
            assert normal(span)[:8] not in normal(str(value))


# --- audit: near misses --------------------------------------------------------------------------


def test_a_19_character_span_is_not_a_leak_but_its_20_character_extension_is(items, index, sep):
    for item, span20 in question_spans(items, 20):
        if contains_phrase(index, span20):
            continue
        span19 = span20[: kept_range(span20)[1] - 1]
        span19 = span19[: normalize_for_match(span19)[1][-1] + 1]
        assert len(normal(span19)) == 19
        assert audit_texts(["ok" + sep + every_disguise(span19) + sep], index) == []
        hits = audit_texts(["ok" + sep + every_disguise(span20) + sep], index)
        assert [h.kind for h in hits] == ["question"], hits
        return
    pytest.fail("no 20-character question span free of options")


def test_short_real_options_are_ignored_and_the_threshold_is_what_ignores_them(items, sep):
    index = build_index(items)
    short = sorted({o.strip() for item in items for o in item.options if 2 <= len(normal(o)) < 4
                    and len(naive_raw_form(o)[0]) < leakage.RAW_MIN_OPTION_CHARS})[:50]
    assert short
    text = sep.join(["ok", *short, "ok"])
    assert audit_texts([text], index) == []
    loose = build_index(items, min_option_chars=2)
    assert audit_texts([text], loose)  # the same text counts once the threshold is lowered
    assert "min option chars 4" in index.thresholds()


def test_stock_options_shared_by_many_items_are_not_leaks(items, index, sep):
    counts = Counter(o for item in items for o in {normal(x) for x in item.options})
    stock = [o for o, n in counts.items() if n >= leakage.STOCK_ITEMS and len(o) >= 4]
    assert stock and index.n_stock_phrases >= len(stock), (len(stock), index.n_stock_phrases)
    originals = {normal(o): o for item in items for o in item.options}
    text = sep.join(["ok", *(originals[o] for o in stock), "ok"])
    assert audit_texts([text], index) == []
    counted = build_index(items, stock_items=10**9)
    assert len(audit_texts([text], counted)) >= len(stock) - 1  # neighbours may merge


OWN_QUESTION = "自编测试题第{k}号：下列关于一座虚构城市的交通规划说法中，哪一项最合理"


def own_items(n: int) -> list[ItemText]:
    """Invented items whose choices include the common short answers named in the issue."""
    return [
        ItemText(f"own/{k}", OWN_QUESTION.format(k=k), ("正确", "错误", "以上都对", f"自编选项第{k}号答案"))
        for k in range(n)
    ]


def test_common_answers_like_zhengque_and_yishangdoudui_are_not_leaks():
    index = build_index(own_items(12))
    assert audit_texts(["我认为正确，以上都对。", "以上都对"], index) == []
    hits = audit_texts(["选自编选项第3号答案吧"], index)
    assert [(h.kind, h.item_uid, h.offset) for h in hits] == [("option", "own/3", 1)], hits
    rare = build_index(own_items(3))  # in only three items the same answer identifies them
    assert [h.kind for h in audit_texts(["以上都对"], rare)] == ["option"]


# --- audit: structure ----------------------------------------------------------------------------


def test_windows_never_span_two_texts(items, index):
    item, span = next((i, s) for i, s in question_spans(items, 30) if not contains_phrase(index, s))
    cut = len(span) // 2
    assert audit_texts([span[:cut], span[cut:]], index) == []
    assert len(audit_texts([span[:cut] + span[cut:]], index)) == 1


def test_results_do_not_depend_on_how_texts_are_batched(items, index, monkeypatch, sep):
    _, span = pick_span(items, 24)
    texts = [f"第{k}条普通输出" + (sep + every_disguise(span) if k % 7 == 3 else "") for k in range(40)]
    whole = audit_texts(texts, index)
    monkeypatch.setattr(leakage.audit, "_TEXTS_PER_BATCH_CHARS", 50)
    assert audit_texts(texts, index) == whole
    assert [h.text for h in whole] == [k for k in range(40) if k % 7 == 3]


def test_markup_decoded_in_a_few_texts_of_a_batch_keeps_every_offset(items, index, sep):
    """Only the texts holding a marker character are decoded and spliced back into the batch; the
    hits of every text, with or without markup, must be those it gets audited alone."""
    spans = [s for _, s in question_spans(items[::89], 30) if not contains_phrase(index, s)][:6]
    texts = []
    for k in range(60):
        text = f"第{k}条输出" + sep
        if k % 10 == 1:
            text += html_disguise(spans[k % len(spans)]) + sep + "a&b<c"  # markup, and a leak
        elif k % 10 == 4:
            text += spans[k % len(spans)] + "^2"  # a marker character, no markup
        elif k % 10 == 7:
            text += "&amp;" * (k % 3) + spans[k % len(spans)]  # markup before a plain leak
        texts.append(text)
    batch = [(h.text, h.offset, h.n_chars, h.kind, h.item_uid) for h in audit_texts(texts, index)]
    alone = [(k, h.offset, h.n_chars, h.kind, h.item_uid)
             for k, text in enumerate(texts) for h in audit_texts([text], index)]
    assert batch == alone
    assert {k for k, *_ in batch} == {k for k in range(60) if k % 10 in (1, 4, 7)}


def naive_audit(texts, index) -> dict[int, int]:
    """{text: offset of the first leaked character}: a window set and ``in`` over every phrase,
    in the normal form and in the raw form (the reference's own, ``naive_raw_form``)."""
    forms = [(lambda t: normalize_for_match(t), index.question_normal, index.phrase_normal),
             (naive_raw_form, index.raw.questions, index.raw.phrases)]
    first = {}
    for form, questions, phrases in forms:
        windows = {q[i : i + index.window] for q in questions for i in range(len(q) - index.window + 1)}
        for k, text in enumerate(texts):
            norm, source = form(text)
            starts = [i for i in range(len(norm) - index.window + 1) if norm[i : i + index.window] in windows]
            starts += [norm.find(p) for p in phrases if p in norm]
            if starts:
                first[k] = min(first.get(k, len(text)), int(source[min(starts)]))
    return first


def test_audit_agrees_with_a_brute_force_reference_on_random_text(items, index):
    rng = np.random.default_rng(7)
    alphabet = np.array(sorted({c for item in items[::20] for c in item.question}))
    spans = [s for _, s in question_spans(items[::97], 22)]
    options = [o for item in items[::53] for o in item.options]
    texts = []
    for k in range(120):
        text = "".join(rng.choice(alphabet, int(rng.integers(5, 60))))
        if k % 4 == 0:
            leak = spans[k % len(spans)] if k % 8 == 0 else options[k % len(options)]
            at = int(rng.integers(0, len(text) + 1))
            text = text[:at] + every_disguise(leak) + text[at:]
        texts.append(text)
    hits = audit_texts(texts, index)
    first = {}
    for hit in hits:
        first.setdefault(hit.text, hit.offset)
    reference = naive_audit(texts, index)
    assert first == reference, (first, reference)
    assert len(first) >= 15, first


# --- scrub ---------------------------------------------------------------------------------------


def test_scrub_removes_the_items_options_and_question_spans_and_leaves_markers(items, sep):
    item = next(
        i for i in items
        if len(normal(i.question)) >= 45 and any(6 <= len(normal(o)) < 20 for o in i.options)
    )
    option = next(o.strip() for o in item.options if 6 <= len(normal(o)) < 20)
    norm, source = normalize_for_match(item.question)
    span = item.question[source[10] : source[34] + 1]  # 25 normalised characters
    pieces = ["开头" + sep, every_disguise(option), sep + "中间" + sep, every_disguise(span), sep + "结尾"]
    expected = ""
    for k, piece in enumerate(pieces):
        if k % 2:
            first, end = kept_range(piece)
            piece = piece[:first] + MARKER + piece[end:]
        expected += piece
    result = scrub("".join(pieces), item.question, item.options)
    assert result.text == expected
    assert result.n_removed_spans == 2, result.n_removed_spans
    assert result.n_removed_chars == sum(kept_range(p)[1] - kept_range(p)[0] for p in pieces[1::2])
    own = build_index([ItemText(item.uid, item.question, item.options)])
    assert audit_texts([result.text], own) == []


def test_scrub_removes_every_occurrence_and_keeps_what_is_no_leak(items, index, sep):
    item, span = next((i, s) for i, s in question_spans(items, 19) if not contains_phrase(index, s))
    short = "对"
    long_option = next((o for o in item.options if len(normal(o)) >= 4), None)
    text = f"甲{sep}{span}{sep}{short}{sep}"
    result = scrub(text, item.question, item.options + (short,))
    assert result == leakage.ScrubResult(text, 0, 0)
    if long_option is not None:
        twice = f"甲{sep}{long_option}{sep}乙{sep}{full_width(long_option)}"
        result = scrub(twice, item.question, item.options)
        assert result.n_removed_spans == 2 and result.text.count(MARKER) == 2
        assert normal(long_option) not in normal(result.text)


def test_scrub_removes_a_whole_short_question(items, sep):
    item = next(i for i in short_questions(items, 10, 20) if not any(
        len(normal(o)) >= 4 and normal(o) in normal(i.question) for o in i.options))
    leak = every_disguise(item.question.strip())
    result = scrub(f"问题{sep}{leak}{sep}答案", item.question, item.options)
    first, end = kept_range(leak)
    expected = f"问题{sep}{leak[:first]}{MARKER}{leak[end:]}{sep}答案"
    assert result.text == expected and result.n_removed_spans == 1, result.n_removed_spans


def test_scrub_uses_its_own_marker_and_window():
    question = OWN_QUESTION.format(k=1)
    text = "引用：" + question[5:20] + "。"
    assert scrub(text, question, ()).text == text  # 15 characters: under the default window
    result = scrub(text, question, (), window=10, marker="<cut>")
    assert result.text == "引用：<cut>。" and result.n_removed_spans == 1


def test_scrub_with_the_index_also_removes_another_items_text_and_then_passes_the_audit(items, index, sep):
    own = items[0]
    other, span = pick_span(items[len(items) // 2 :], 25)
    option = next(o for it in items[1:] for o in it.options
                  if len(normal(o)) >= 6 and audit_texts([o], index)
                  and not contains_phrase(build_index([own]), o) and normal(o) not in normal(own.question))
    text = f"我认为{sep}{every_disguise(span)}{sep}所以{sep}{option}"
    without = scrub(text, own.question, own.options)
    assert without.n_removed_spans == 0 and audit_texts([without.text], index)  # own item only
    result = scrub(text, own.question, own.options, index=index)
    assert result.n_other_item_spans == result.n_removed_spans == 2, result
    assert result.text.startswith("我认为") and result.text.count(MARKER) == 2
    assert audit_texts([result.text], index) == []


# --- near copies, markup, traditional characters (issue 11, point 9) -----------------------------


def unique_countable_options(items, index, low: int, high: int):
    """(item, option) whose normal form is countable, ``low`` to ``high`` characters long, and in
    one item only, so that a hit can name it."""
    counts = Counter(normal(o) for item in items for o in {x for x in item.options})
    countable = set(index.option_normal)
    for item in items:
        for option in item.options:
            norm = normal(option)
            if low <= len(norm) < high and norm in countable and counts[norm] == 1:
                yield item, option.strip()


def change_one_character(text: str) -> str:
    """The middle kept character replaced by another of its kind (a digit by a digit)."""
    source = normalize_for_match(text)[1]
    at = int(source[len(source) // 2])
    old = text[at]
    new = str((int(old) + 1) % 10) if old.isdigit() else ("乙" if old != "乙" else "丙")
    return text[:at] + new + text[at + 1 :]


def test_a_near_copy_of_an_option_with_one_character_changed_is_caught(items, index, by_uid, sep):
    item, option = next(unique_countable_options(items, index, 14, 40))
    near = change_one_character(option)
    assert normal(near) != normal(option) and not contains_phrase(index, near)
    prefix = "答案" + sep
    hits = audit_texts([prefix + near + sep + "完"], index)
    first, end = kept_range(near)
    assert [(h.kind, h.item_uid, h.offset, h.n_chars) for h in hits] == [
        ("near-option", item.uid, len(prefix) + first, end - first)], hits


def test_a_near_copy_of_a_question_window_is_caught_but_not_an_unrelated_text(items, index, sep):
    item, span = next((i, s) for i, s in question_spans(items, 24) if not contains_phrase(index, s))
    near = change_one_character(span)
    hits = audit_texts(["ok" + sep + near + sep], index)
    assert hits and {h.kind for h in hits} <= {"question", "near-question"}, hits
    assert any(h.kind == "near-question" for h in hits) or len(hits) == 1, hits


@functools.cache
def s2t_converter():
    """OpenCC builds its phrase tables on construction (0.15 s): once per session, not per call."""
    from opencc import OpenCC

    return OpenCC("s2t")


def traditional(text: str) -> str:
    return s2t_converter().convert(text)


def test_a_question_span_in_traditional_characters_is_caught(items, index, sep):
    item, span = pick_span(items, 30, lambda s: sum(a != b for a, b in zip(s, traditional(s))) >= 3)
    leak = traditional(span)
    prefix = "ok" + sep
    hits = audit_texts([prefix + leak + sep], index)
    first, end = kept_range(leak)
    assert [(h.kind, h.offset, h.n_chars) for h in hits] == [
        ("question", len(prefix) + first, end - first)], hits


def html_disguise(text: str) -> str:
    """Every third character as a numeric entity (decimal, then hex), ``&nbsp;`` and ``<br>``."""
    out = []
    for k, char in enumerate(text):
        if k % 3 == 1:
            out.append(f"&#{ord(char)};" if k % 2 else f"&#x{ord(char):x};")
        else:
            out.append(char)
        if k % 5 == 4 and k < len(text) - 1:
            out.append("&nbsp;" if k % 10 == 4 else "<br/>")
    return "".join(out)


def test_html_entities_nbsp_and_br_are_seen_through_and_cut_whole(items, index, sep):
    item, span = pick_span(items, 30, lambda s: not contains_phrase(index, s))
    leak = html_disguise(span)
    assert leak.endswith(";") or leak.endswith(">") or leak[-1] == span[-1]
    prefix = "ok" + sep
    hits = audit_texts([prefix + leak + sep], index)
    assert [(h.kind, h.offset) for h in hits] == [("question", len(prefix))], hits
    scrubbed = scrub(prefix + leak + sep, item.question, item.options)
    assert scrubbed.text == prefix + MARKER + sep, "the scrub left part of an entity or tag behind"


def test_latex_spacing_and_a_fraction_written_with_a_slash_are_seen_through(items, index, by_uid, sep):
    import re

    frac = re.compile(r"\\frac\{([^{}]+)\}\{([^{}]+)\}")
    item, option = next((i, o) for i, o in unique_countable_options(items, index, 6, 60)
                        if frac.search(o))
    leak = frac.sub(lambda m: f"{m.group(1)}/{m.group(2)}", option)
    leak = leak[: len(leak) // 2] + r"\quad " + leak[len(leak) // 2 :]
    hits = audit_texts(["ok" + sep + leak + sep, "ok" + sep + full_width(leak) + sep], index)
    assert [(h.text, h.kind, h.item_uid) for h in hits] == [
        (0, "option", item.uid), (1, "option", item.uid)], hits  # full-width markup too
    spaced = r"\quad".join(pick_span(items, 24, lambda s: not contains_phrase(index, s))[1])
    assert [h.kind for h in audit_texts(["ok" + sep + spaced.replace("\\quad", "\\,\\;\\quad ", 3)
                                         + sep], index)] == ["question"]


def test_the_scrub_removes_near_traditional_and_markup_copies_of_the_own_item(items, index, sep):
    item, option = next(unique_countable_options(items, index, 14, 40))
    norm, source = normalize_for_match(item.question)
    if len(norm) < 30:
        item = next(i for i, _ in unique_countable_options(items, index, 14, 40)
                    if len(normal(i.question)) >= 30)
        option = next(o.strip() for o in item.options if 14 <= len(normal(o)) < 40)
        norm, source = normalize_for_match(item.question)
    span = item.question[source[0] : source[24] + 1]
    pieces = [change_one_character(option), traditional(span), html_disguise(span)]
    text = sep.join(["开始", *pieces, "结束"])
    result = scrub(text, item.question, item.options)
    assert result.text == sep.join(["开始", MARKER, MARKER, MARKER, "结束"]), result.n_removed_spans
    assert audit_texts([result.text], build_index([item])) == []


MODEL_LIKE = [
    "让我们一步一步地思考这个问题。首先，3 + 4 = 7，然后 7 × 2 = 14，所以结果是 14。答案是 B。",
    "根据题意，设 x = 2，则 2x + 1 = 5。因此正确的选项是 C。",
    "我认为这道题考查的是基本概念。选项 A 不对，选项 B 也不对，所以选择 D。",
    "The answer is A because 12 - 5 = 7 and 7 is odd. 答案：A",
    "经过计算，概率为 0.25，即 25%。综上所述，本题选 A。",
    "这个问题需要结合背景来分析，第 2 步和第 3 步都不难。答案是 C。",
]


def test_a_clean_model_like_generation_is_not_flagged(index):
    texts = MODEL_LIKE + [" ".join(MODEL_LIKE), "\n".join(t.replace("。", "<br>") for t in MODEL_LIKE)]
    assert audit_texts(texts, index) == []


def edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def test_the_bounded_edit_distance_agrees_with_the_textbook_one():
    rng = np.random.default_rng(3)
    for _ in range(2000):
        pattern = "".join(rng.choice(list("abc"), int(rng.integers(1, 16))))
        text = "".join(rng.choice(list("abc"), int(rng.integers(0, 20))))
        limit = int(rng.integers(0, 4))
        want = None
        for end in range(1, len(text) + 1):
            d = edit_distance(pattern, text[:end])
            if text[end - 1] == pattern[-1] and d <= limit and (want is None or d <= want[1]):
                want = (end, d)
        assert leakage._anchored_distance(pattern, text, limit) == want, (pattern, text, limit)


def test_every_question_in_traditional_characters_has_the_normal_form_of_the_original(items):
    """OpenCC's own simplified -> traditional conversion (phrase rules included) is undone by the
    per-character fold for all but a few questions (phrase-only variants)."""
    sample = items[::10]
    differ = sum(normal(traditional(i.question)) != normal(i.question) for i in sample)
    changed = sum(traditional(i.question) != i.question for i in sample)
    assert changed > len(sample) // 2, changed
    assert differ <= len(sample) // 200, (differ, len(sample))


# --- the raw form: the rules applied to the text as written (issue 22, section 4) ----------------
#
# The archive held LaTeX quotes the normal form shortened below its thresholds: options such as
# "$\frac{a}{b}$" (14-15 characters as written, 3 normalised) and a 20-character question span
# with \angle, ^{\circ}, "$" and braces (7 normalised). These items are invented, not CMMLU's.

LATEX_QUESTION = "自编题：在三角形ABC中,$\\angle A=30^{\\circ}$,且$\\frac{a}{b}=\\frac{5}{12}$,求边长b与c之比"
LATEX_OPTIONS = ("$\\frac{5}{12}$", "$\\sqrt{3}$", "$\\alpha$", "$\\frac{7}{13}+1$")
PUNCTUATED_QUESTION = "自编题：甲,乙,丙,丁,戊,己,庚,辛,壬,癸,这十个字里排在第三位的是哪一个"


def latex_items() -> list[ItemText]:
    return [ItemText("own/latex/test/0", LATEX_QUESTION, LATEX_OPTIONS),
            ItemText("own/plain/test/1", PUNCTUATED_QUESTION, ("第三个字", "第五个字", "第七个字", "第九个字"))]


def hits_of(texts, index) -> list[tuple]:
    return [(h.text, h.offset, h.n_chars, h.kind, h.item_uid) for h in audit_texts(texts, index)]


def test_a_latex_option_counts_as_written_though_its_normal_form_is_short():
    index = build_index(latex_items())
    option = LATEX_OPTIONS[0]
    text = "所以答案是" + option + "。"
    assert hits_of([text], index) == [(0, 5, len(option), "raw-option", "own/latex/test/0")]
    assert len(normal(option)) < leakage.MIN_OPTION_CHARS <= leakage.RAW_MIN_OPTION_CHARS <= len(option)
    # spaces, a line break or full-width ASCII inside do not hide it (NFKC, whitespace dropped)
    spaced = "答：$ \\frac{5}\n{12} $"
    assert hits_of([spaced], index) == [(0, 2, len(spaced) - 2, "raw-option", "own/latex/test/0")]
    assert [h[3] for h in hits_of([full_width(option)], index)] == ["raw-option"]
    # an option every tenth item has (a stock answer, here written with and without a full stop)
    # is not a leak in either form
    stock = [ItemText(f"own/stock/test/{k}", f"自编题第{k}号：下列哪一项是这个虚构方程的解呢",
                      ("$\\frac{1}{9}$" + ("。" if k % 2 else ""), f"选项{k}甲", f"选项{k}乙", "x"))
             for k in range(leakage.STOCK_ITEMS)]
    assert hits_of(["解得$\\frac{1}{9}$。"], build_index(stock)) == []
    assert [h[3] for h in hits_of(["解得$\\frac{1}{9}$。"], build_index(stock[:3]))] == ["raw-option"]


def test_twenty_characters_of_a_question_as_written_count_though_fewer_survive_the_normal_form():
    index = build_index(latex_items())
    raw, offsets = naive_raw_form(LATEX_QUESTION)
    at = raw.index("$\\angle")
    span = LATEX_QUESTION[offsets[at] : offsets[at + leakage.WINDOW - 1] + 1]  # holds a space
    assert len(naive_raw_form(span)[0]) == leakage.WINDOW and len(normal(span)) < 10, len(normal(span))
    assert hits_of(["引用" + span + "。"], index) == [(0, 2, len(span), "raw-question", "own/latex/test/0")]
    assert hits_of(["引用" + span[:-1] + "。"], index) == []  # 19 characters as written
    # punctuation counts as written too: 20 characters, 10 of them commas, 10 normalised
    at = PUNCTUATED_QUESTION.index("甲")
    span = PUNCTUATED_QUESTION[at : at + leakage.WINDOW]
    assert len(normal(span)) == 10
    assert hits_of([span], index) == [(0, 0, 20, "raw-question", "own/plain/test/1")]
    assert hits_of([span[:-1]], index) == []


def test_a_single_symbol_written_in_latex_is_no_leak_but_two_symbols_are():
    """"$\\alpha$" has 8 characters as written but is one symbol, as "α" is: it identifies no
    item, and the harness would cut every alpha of every chain of thought if it counted."""
    index = build_index(latex_items())
    alpha, root = LATEX_OPTIONS[2], LATEX_OPTIONS[1]
    assert hits_of([f"取显著性水平{alpha}。"], index) == []
    assert hits_of([f"结果是{root}。"], index) == [(0, 3, len(root), "raw-option", "own/latex/test/0")]
    assert len(alpha) == leakage.RAW_MIN_OPTION_CHARS and len(normal(alpha)) == 1
    assert len(normal(root)) == leakage.RAW_MIN_SYMBOLS
    # the scrub applies the same rule to the item's own generation
    text = f"设{alpha}为角，则答案为{root}。"
    result = scrub(text, LATEX_QUESTION, LATEX_OPTIONS)
    assert result.text == f"设{alpha}为角，则答案为{MARKER}。" and result.n_removed_spans == 1


def test_the_scrub_removes_the_own_items_text_as_written():
    at = LATEX_QUESTION.index("$\\angle")
    span = LATEX_QUESTION[at : at + 24]  # 23 characters as written
    option = LATEX_OPTIONS[0]
    text = f"由题意{span}得{option}，即{option}。"
    result = scrub(text, LATEX_QUESTION, LATEX_OPTIONS)
    assert result.text == f"由题意{MARKER}得{MARKER}，即{MARKER}。", result.n_removed_spans
    assert (result.n_removed_spans, result.n_removed_chars) == (3, 24 + 2 * len(option))
    own = build_index([ItemText("own", LATEX_QUESTION, LATEX_OPTIONS)])
    assert audit_texts([result.text], own) == []
    # with the index, a LaTeX option of ANOTHER item is removed too, and the text then passes
    index = build_index(latex_items() + [ItemText("own/other/test/2", "自编题：另一道虚构的题目的题干，与上题无关联", ("$\\frac{11}{17}$", "甲乙丙丁", "x", "y"))])
    quoting = scrub("另一题的答案$\\frac{11}{17}$。", PUNCTUATED_QUESTION, ("第三个字",), index=index)
    assert quoting.text == f"另一题的答案{MARKER}。" and quoting.n_other_item_spans == 1
    assert audit_texts([quoting.text], index) == []


def test_a_quote_that_begins_inside_a_latex_command_is_caught():
    """A quote that starts after a command's backslash reads ``alpha...`` where the normal form
    of the question has α: only the raw form holds it, and it has no character whose forms
    differ, so the raw lookups must read such texts too (build_index checks for these)."""
    question = "自编题：已知\\alpha2357111317192329313741434753596167是一列数的开头，问下一项"
    items = [ItemText("own/cmd/test/0", question, ("71", "73", "79", "83"))]
    quote = question[question.index("alpha") :][: leakage.WINDOW]
    assert all(c.isascii() and c.isalnum() for c in quote)
    assert hits_of(["他写了" + quote + "。"], build_index(items)) == [(0, 3, 20, "raw-question", "own/cmd/test/0")]
    assert hits_of([quote], build_index(items)) == [(0, 0, 20, "raw-question", "own/cmd/test/0")]


def raw_only_options(items, index):
    """(item, option) for real options counted only as written: >= 8 characters as written,
    below the normal minimum, of >= 2 symbols, and not stock (in the raw index)."""
    countable = set(index.raw.phrases)
    return [(item, option) for item in items for option in item.options
            if len(normal(option)) < leakage.MIN_OPTION_CHARS
            and naive_raw_form(option)[0] in countable]


def test_real_latex_options_are_caught_as_written_and_single_symbols_are_not(items, index, sep):
    found = raw_only_options(items, index)
    assert len(found) >= 50, len(found)
    owners: dict[str, set] = {}
    for item, option in found:
        owners.setdefault(naive_raw_form(option)[0], set()).add(item.uid)
    texts = ["思考：" + sep + option + sep + "。" for _, option in found]
    hits = audit_texts(texts, index)
    assert sorted({h.text for h in hits}) == list(range(len(found))), (len(hits), len(found))
    wrong = [h.text for h in hits if h.kind != "raw-option"
             or h.item_uid not in owners[naive_raw_form(found[h.text][1])[0]]]
    assert wrong == [], len(wrong)
    single = [o for i in items for o in i.options
              if len(naive_raw_form(o)[0]) >= leakage.RAW_MIN_OPTION_CHARS and len(normal(o)) == 1]
    assert single, "no single-symbol option as long as the raw minimum"
    assert audit_texts(["思考：" + sep + o + sep for o in single], index) == []


# --- issue 32 §4: the encodings a harness's own files use, decoded before matching -----------------


def _json_escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def _percent(text: str) -> str:
    from urllib.parse import quote

    return quote(text)


@pytest.mark.parametrize("encode, encoding", [(_json_escaped, "json-escape"), (_percent, "percent"),
                                              (lambda t: t[::-1], "reversed")])
def test_issue32_an_encoded_option_is_caught_where_it_is_written(index, by_uid, unique_short_option, sep, encode,
                                                                 encoding):
    """JSON \\uXXXX escapes, %-encoding and reversed text passed every channel."""
    uid, option = unique_short_option
    encoded = encode(option)
    hits = audit_texts(["ok" + sep + encoded + sep + "end"], index)
    assert [(h.kind, h.item_uid, h.encoding) for h in hits] == [("option", uid, encoding)], \
        [(h.kind, h.encoding, h.offset, h.n_chars) for h in hits]
    assert (hits[0].offset, hits[0].n_chars) == (3, len(encoded)), (hits[0].offset, hits[0].n_chars)
    assert audit_texts(["ok" + sep + encoded + sep + "end"], index, decode=False) == []  # what it was before
    item = by_uid[uid]
    scrubbed = scrub("ok" + sep + encoded + sep + "end", item.question, item.options).text  # cut, too
    assert audit_texts([scrubbed], index) == [], "scrubbed text still leaks"


def test_issue32_metadata_is_audited_as_a_generation_is(index, unique_short_option):
    """A unique 5-8 character option in an imported config passed (the rule counted 12+ characters);
    identifiers keep the floor, as version numbers in prose do (4-character numbers are not counted)."""
    from cube.records.leakage import audit_metadata

    uid, option = unique_short_option
    texts, hits = audit_metadata({"dataset": {"description": f"说明：{option}。", "path": "a/b/135m-x"}}, index)
    assert [(h.kind, h.item_uid) for h in hits] == [("option", uid)], [(h.kind, h.offset) for h in hits]
    texts, hits = audit_metadata({"note": _json_escaped(option), "n": 3}, index)
    assert [(h.item_uid, h.encoding) for h in hits] == [(uid, "json-escape")], [(h.kind, h.offset) for h in hits]
    assert audit_metadata({"provenance": "the GGUF part 2 0.2.0 holds the weights", "id": "2020-x"}, index)[1] == []


def test_schema_2_columns_are_identifiers_of_a_fixed_form_so_a_release_carries_no_text_in_them():
    """dtype and finish_reason (schema 2) are identifiers: a value of another form is refused by
    row, never shown (the 05_leakage page asserts that only `generation` carries free text)."""
    import pyarrow as pa

    from cube.errors import RecordsError
    from cube.records.leakage.tables import ID_FORMS, check_id_forms

    assert {"dtype", "finish_reason"} <= set(ID_FORMS)
    good = pa.table({"dtype": ["float32", "bfloat16", None], "finish_reason": ["stop", "length", None]})
    check_id_forms(good, "records")
    for column, planted in (("dtype", "这是一段测试文字"), ("finish_reason", "stop because the answer is A")):
        bad = good.set_column(good.schema.get_field_index(column), column,
                              pa.array([good.column(column)[0].as_py(), planted, None]))
        with pytest.raises(RecordsError, match=rf"column {column}, row 1: a {len(planted)}-character value"):
            check_id_forms(bad, "records")


def test_a_chat_cells_context_is_an_identifier_a_release_keeps():
    """A record of a chat cell carries zh_cue@chat (and +nothink, +think with --thinking): the
    release's identifier check took `@` for text and refused every chat store's records."""
    import pyarrow as pa

    from cube.errors import RecordsError
    from cube.protocol.chat import CHAT_FORMS, record_context
    from cube.records.leakage.tables import check_id_forms

    contexts = [record_context("zh_cue", chat) for chat in CHAT_FORMS]
    assert contexts == ["zh_cue", "zh_cue@chat", "zh_cue@chat+nothink", "zh_cue@chat+think"]
    check_id_forms(pa.table({"context": contexts}), "records")
    for planted in ("zh_cue@答案", "zh_cue@chat+maybe", "zh_cue@chat@chat"):
        with pytest.raises(RecordsError, match="column context, row 0"):
            check_id_forms(pa.table({"context": [planted]}), "records")
