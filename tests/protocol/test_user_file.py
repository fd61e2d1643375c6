"""A user's own multiple-choice file (issue 31 §2): reading, the card, and every bad-file case.

The fixture (tests/fixtures/user_benchmark) is cube's own text: arithmetic, units and geography in
English (a folder of dev/test JSONL files with a card) and in Chinese (one CSV, columns A..E).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import pytest

from cube.config import REPO_ROOT
from cube.errors import ConfigError, ItemsError
from cube.protocol.benchmarks import BENCHMARKS, resolve
from cube.protocol.user_file import UserBenchmark, option_warnings

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "user_benchmark"
LETTERS = "ABCDEFGHIJ"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_english_fixture_reads_as_its_rows_say():
    bench = resolve(str(FIXTURE / "en"))
    assert bench.name == "cube_en_fixture" and bench.prompt_format == "en_mcq"
    assert bench.contexts == ("en_label_space",) and bench.licence.startswith("CC0")
    rows = {"test": _jsonl(FIXTURE / "en" / "test.jsonl"), "dev": _jsonl(FIXTURE / "en" / "dev.jsonl")}
    for split, expected in rows.items():
        items = bench.load(splits=(split,))
        assert len(items) == len(expected)
        by_uid = {i.uid: i for i in items}
        for row in expected:
            item = by_uid[f"cube_en_fixture/{row['subject']}/{split}/{row['id']}"]
            gold = row["answer"] if isinstance(row["answer"], int) else LETTERS.index(row["answer"])
            assert item.options == tuple(row["choices"]) and item.answer == gold
            assert item.qhash == hashlib.sha256(row["question"].encode("utf-8")).hexdigest()[:16]
    counts = {len(i.options) for i in bench.load(splits=("test",))}
    assert counts == {2, 3, 4, 5, 10}
    # the identity a run records: the sha256 of the two files' and the card's sums
    listing = "".join(f"{hashlib.sha256((FIXTURE / 'en' / n).read_bytes()).hexdigest()}  {n}\n"
                      for n in ("dev.jsonl", "test.jsonl"))
    listing += f"{hashlib.sha256((FIXTURE / 'en' / 'card.yaml').read_bytes()).hexdigest()}  card.yaml\n"
    assert bench.sha256 == hashlib.sha256(listing.encode()).hexdigest()


def test_the_chinese_csv_reads_with_letter_columns_and_the_exam_format():
    bench = resolve(str(FIXTURE / "zh.csv"))
    assert bench.name == "zh" and bench.prompt_format is None  # no card: the exam format, named after the file
    assert bench.sha256 == hashlib.sha256((FIXTURE / "zh.csv").read_bytes()).hexdigest()  # a lone file: its own
    with open(FIXTURE / "zh.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    items = bench.load()
    assert [i.uid for i in items] == [f"zh/{r['subject']}/test/{r['id']}" for r in
                                      sorted(rows, key=lambda r: r["subject"])]  # by subject, file order within
    for item in items:
        row = next(r for r in rows if int(r["id"]) == item.row)
        assert item.options == tuple(row[c] for c in "ABCDE" if row[c])
        assert item.answer == "ABCDE".index(row["answer"])
    assert {len(i.options) for i in items} == {2, 3, 4, 5}
    assert bench.user.categories["地理"] == "Social Science"


def test_a_registered_name_is_its_entry_and_an_unknown_one_names_the_path_form():
    assert resolve("cmmlu") is BENCHMARKS["cmmlu"] and resolve("ceval") is BENCHMARKS["ceval"]
    with pytest.raises(ConfigError, match="unknown benchmark 'mmlu'; known: cmmlu, ceval, or the path"):
        resolve("mmlu")
    with pytest.raises(ConfigError, match="--card describes your own file"):
        resolve("cmmlu", card="x.yaml")


def test_the_release_manifest_lists_the_registrys_licences():
    from cube.release.manifest import BENCHMARK_LICENCES
    from cube.protocol.benchmarks import taxonomy_of

    assert BENCHMARK_LICENCES == {"cmmlu": {"name": "CMMLU", "licence": "CC BY-NC-SA 4.0",
                                            "source": "https://github.com/haonan-li/CMMLU"},
                                  "ceval": {"name": "C-Eval", "licence": "CC BY-NC-SA 4.0",
                                            "source": "https://github.com/hkust-nlp/ceval"}}
    assert [taxonomy_of(n) for n in ("cmmlu", "ceval", "sim")] == ["cmmlu", "ceval", "cmmlu"]


def test_an_en_mcq_prompt_shows_the_labels_of_its_options_only():
    """A ten-label set on a 2-option item shows A and B; the header is the English format's."""
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import Cell, cloze_prompt, render_prompt

    bench = resolve(str(FIXTURE / "en"))
    templates = bench.templates()
    item = next(i for i in bench.load() if i.row == 103)
    dev = bench.load(splits=("dev",))
    cell = Cell(load_label_sets()["A10_halfwidth"], "en_label_space", 0)
    prompt = render_prompt(item, cell, dev, templates)
    assert prompt.context == ("The following are multiple choice questions (with answers) about arithmetic.\n\n"
                              "Is 9 an even number?\nA. yes\nB. no\nAnswer:")
    assert prompt.label_continuations == (" A", " B") and prompt.gold == 1
    # one shot of 4 options before a 2-option item: each shows its own labels
    two_shot = render_prompt(item, Cell(cell.label_set, "en_label_space", 2), dev, templates).context
    assert "\nC. 5\nD. 6\nAnswer: B\n\nWhat is 10 - 7?\nA. 3\nB. 4\nAnswer: A\n\nIs 9" in two_shot
    assert cloze_prompt(item, templates=templates).continuations == (" yes", " no")


def test_the_exam_format_is_unchanged_for_cmmlu():
    """CMMLU's templates (no format) are config/templates.yaml without its formats: the cells'
    template digests of every store written before formats existed stay."""
    from cube.protocol.prompts import load_templates

    plain = {k: v for k, v in load_templates().items() if k != "formats"}
    assert BENCHMARKS["cmmlu"].templates() == plain


# ---- bad files: one line naming the file, the row and the field --------------------------------

GOOD = {"question": "What is 1 + 1?", "choices": ["1", "2", "3"], "answer": "B"}

BAD_ROWS = [
    ("missing column", [{"question": "q?", "choices": ["a", "b"]}], "row 0: field answer is missing"),
    ("answer out of range", [GOOD, {**GOOD, "answer": "D"}], "row 1: field answer 'D' is out of range: the item has 3"),
    ("answer index out of range", [{**GOOD, "answer": 3}], "row 0: field answer 3 is out of range"),
    ("empty option", [{**GOOD, "choices": ["1", " ", "3"]}], "row 0: field choices[1]: empty option"),
    ("duplicate ids", [{**GOOD, "id": 7}, {**GOOD, "id": 7}], "row 1: field id 7 duplicates row 0"),
    ("one option", [{**GOOD, "choices": ["2"], "answer": 0}], "row 0: field choices has 1 option(s); an item needs 2 to 10"),
    ("eleven options", [{**GOOD, "choices": [str(n) for n in range(11)]}], "row 0: field choices has 11 option(s)"),
    ("absurd size", [{**GOOD, "question": "x" * 100_001}], "row 0: field question has 100,001 characters"),
    ("answer not a label", [{**GOOD, "answer": "two"}], "row 0: field answer 'two' is not a letter A..J"),
    # an option's text in the answer field is named by its digest, never quoted (issue 48 §4)
    ("answer is an option's text", [{**GOOD, "answer": "What is 1 + 1"}],
     f"row 0: field answer text sha256:{hashlib.sha256(b'What is 1 + 1').hexdigest()[:12]} (13 chars) is not a letter"),
]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("case, rows, needle", BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_each_bad_jsonl_row_is_one_line_naming_file_row_and_field(tmp_path, case, rows, needle):
    path = _write_jsonl(tmp_path / "mine.jsonl", rows)
    with pytest.raises(ItemsError) as exc:
        UserBenchmark.read(path)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{path} ") and needle in re.sub(r" \(line \d+\)", "", message)


def test_a_line_that_is_not_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n{\"question\": \n", encoding="utf-8")
    with pytest.raises(ItemsError, match=r"mine\.jsonl line 3: not a JSON line \("):
        UserBenchmark.read(path)
    path.write_text("[" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(ItemsError, match=r"mine\.jsonl line 1: a JSON line nesting too deep to parse"):
        UserBenchmark.read(path)


def test_non_utf8_names_the_line(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_bytes("question,A,B,answer\nok?,1,2,A\n".encode() + "caf\xe9?,1,2,B\n".encode("latin-1"))
    with pytest.raises(ItemsError, match=r"mine.csv line 3: not UTF-8 \(byte 0xe9\)"):
        UserBenchmark.read(path)


def test_csv_letter_columns_missing_and_gaps(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("question,answer\nq?,A\n", encoding="utf-8")
    with pytest.raises(ItemsError, match=r"mine.csv row 0 \(line 2\): field choices is missing"):
        UserBenchmark.read(path)
    path.write_text("question,A,B,C,answer\nq?,1,,3,A\n", encoding="utf-8")
    with pytest.raises(ItemsError, match=r"row 0 \(line 2\): field B: empty option"):
        UserBenchmark.read(path)
    path.write_text("question,A,B,C,answer\nq?,1,2,,1\n", encoding="utf-8")  # two options, index answer
    item = UserBenchmark.read(path).items[0]
    assert item.options == ("1", "2") and item.answer == 1


def test_parquet_reads_like_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{**GOOD, "id": 1, "subject": "sums"}, {**GOOD, "id": 2, "subject": "sums", "answer": "C"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mine.parquet")
    _write_jsonl(tmp_path / "mine.jsonl", rows)
    assert UserBenchmark.read(tmp_path / "mine.parquet").items == UserBenchmark.read(tmp_path / "mine.jsonl").items


def test_duplicate_option_texts_are_a_warning_not_an_error(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [GOOD, {**GOOD, "choices": ["none", "2", "none"]}])
    items = UserBenchmark.read(path).items
    assert option_warnings(list(items)) == [
        "1 item(s) have two options with the same text (mine/all/test/1): the cloze scorers (M2-M5) and TF tie "
        "between them"]


def test_card_errors_are_one_line(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [GOOD])
    card = tmp_path / "mine.card.yaml"
    card.write_text("name: mine\nlanguge: en\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown card key 'languge'"):
        UserBenchmark.read(path)
    card.write_text("language: fr\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="language 'fr' is not one of en, zh"):
        UserBenchmark.read(path)
    card.write_text("name: house\nheader: \"Quiz on {subject}\\n\"\nsubject_names: {all: general knowledge}\n",
                    encoding="utf-8")
    bench = resolve(str(path))
    assert bench.name == "house" and bench.templates()["header"] == "Quiz on {subject}\n"
    assert bench.load()[0].subject_zh == "general knowledge" and bench.load()[0].uid == "house/all/test/0"


# ---- issue 48 -----------------------------------------------------------------------------------------

def test_a_csv_header_that_repeats_a_column_is_refused(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("id,question,A,A,B,answer\n1,q?,one,two,three,B\n", encoding="utf-8")
    with pytest.raises(ItemsError, match=r"mine.csv: the header repeats column 'A'; each column name must appear once"):
        UserBenchmark.read(path)


def test_superscript_digits_are_not_an_answer_index_and_an_id_of_them_is_text(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [{**GOOD, "answer": "²"}])
    with pytest.raises(ItemsError, match=r"row 0 \(line 1\): field answer '²' is not a letter A..J or a 0-based index"):
        UserBenchmark.read(path)
    _write_jsonl(path, [{**GOOD, "id": "²"}])
    assert UserBenchmark.read(path).items[0].uid.endswith("/²")


def test_a_device_or_fifo_as_a_benchmark_says_what_it_is(tmp_path):
    import os

    from cube.protocol.user_file import split_files

    with pytest.raises(ItemsError, match=r"--benchmark /dev/zero: not a regular file or folder \(a device, FIFO"):
        split_files(Path("/dev/zero"))
    folder = tmp_path / "mine"
    folder.mkdir()
    os.mkfifo(folder / "test.jsonl")  # a folder's split file that is a FIFO: refused, not waited on
    with pytest.raises(ItemsError, match=r"test.jsonl: not a regular file \(a device, FIFO or socket\)"):
        UserBenchmark.read(folder)


@pytest.mark.parametrize("text, needle", [
    ('option: "{nope}. {text}"\n', r"card key option names \{nope\}; its line format takes \{label\}, \{text\} only"),
    ('question: "{0}"\n', r"card key question names \{0\}"),
    ('header: "{subject.__class__}"\n', r"card key header names \{subject.__class__\}"),
    ('option: "{label"\n', r"card key option '\{label' is not a line format"),
    ("contexts: " + "[" * 5000 + "]" * 5000 + "\n", r"YAML nesting too deep to parse"),
])
def test_a_card_with_a_bad_line_format_or_deep_yaml_is_one_line(tmp_path, text, needle):
    path = _write_jsonl(tmp_path / "mine.jsonl", [GOOD])
    (tmp_path / "mine.card.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=needle) as caught:
        resolve(str(path)).load()
    assert "\n" not in str(caught.value)


def test_a_card_names_the_thinking_markers_of_its_generations(tmp_path):
    """Issue 49: ``thinking_markers: [OPEN, CLOSE]`` in a card reaches the templates' generation block
    (where cube run reads it; the rest of the block kept), and a bad value is one line."""
    path = _write_jsonl(tmp_path / "mine.jsonl", [GOOD])
    card = tmp_path / "mine.card.yaml"
    card.write_text("thinking_markers: ['<reasoning>', '</reasoning>']\n", encoding="utf-8")
    generation = resolve(str(path)).templates()["generation"]
    assert generation["thinking_markers"] == ["<reasoning>", "</reasoning>"]
    assert generation["cot_max_new_tokens"] == resolve("cmmlu").templates()["generation"]["cot_max_new_tokens"]
    assert "thinking_markers" not in resolve("cmmlu").templates()["generation"]
    card.write_text("thinking_markers: '</think>'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mine.card.yaml: card key: thinking_markers '</think>' must be two "
                                          r"non-empty strings") as error:
        UserBenchmark.read(path)
    assert "\n" not in str(error.value)
