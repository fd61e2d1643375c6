"""Item loaders and sampling: real CMMLU (asserting counts, uids and hashes only, never text) and
our own C-Eval-format fixtures."""

from __future__ import annotations

import csv
import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from cube.errors import ConfigError, ItemsError
from cube.protocol.benchmarks import load_items
from cube.protocol.items import (
    Item,
    allocate_per_subject,
    default_benchmark_root,
    load_ceval,
    load_cmmlu,
    qhash,
    stratified_sample,
)

CEVAL_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ceval"
CMMLU_HEADER = ",Question,A,B,C,D,Answer\n"


@pytest.fixture(scope="module")
def cmmlu_root(benchmarks_root) -> Path:
    return benchmarks_root / "cmmlu"


@pytest.fixture(scope="module")
def cmmlu_test(cmmlu_items) -> list[Item]:
    return cmmlu_items(("test",))


def _independent_cmmlu_answers(folder: Path) -> Counter:
    """Answer letters counted straight from the CSVs, by a reader that shares no code with cube."""
    counts: Counter = Counter()
    for path in folder.glob("*.csv"):
        with path.open(encoding="utf-8", newline="") as fh:
            counts.update(row["Answer"] for row in csv.DictReader(fh))
    return counts


# --- CMMLU, real data ---------------------------------------------------------------------------


def test_cmmlu_test_split_has_the_documented_size_and_subjects(cmmlu_root, cmmlu_test):
    assert len(cmmlu_test) == 11582
    subjects = {item.subject for item in cmmlu_test}
    assert len(subjects) == 67
    assert subjects == set(json.loads((cmmlu_root / "subjects.json").read_text(encoding="utf-8")))


def test_cmmlu_dev_split_has_five_items_per_subject(cmmlu_root):
    dev = load_cmmlu(cmmlu_root, splits=("dev",))
    assert len(dev) == 335
    assert set(Counter(item.subject for item in dev).values()) == {5}


def test_cmmlu_answers_match_an_independent_reading(cmmlu_root, cmmlu_test):
    expected = _independent_cmmlu_answers(cmmlu_root / "test")
    got = Counter("ABCD"[item.answer] for item in cmmlu_test)
    assert got == expected


def test_cmmlu_uids_are_unique_and_rows_are_the_first_column(cmmlu_test):
    uids = [item.uid for item in cmmlu_test]
    assert len(set(uids)) == len(uids)
    assert cmmlu_test[0].uid == f"cmmlu/{cmmlu_test[0].subject}/test/0"
    by_subject: dict[str, list[int]] = {}
    for item in cmmlu_test:
        assert item.uid == f"cmmlu/{item.subject}/test/{item.row}"
        by_subject.setdefault(item.subject, []).append(item.row)
    # The upstream index column numbers each subject's rows 0..n-1 in file order.
    assert all(rows == list(range(len(rows))) for rows in by_subject.values())


def test_cmmlu_qhash_is_sha256_of_the_utf8_question(cmmlu_test):
    for item in cmmlu_test[::97]:
        assert item.qhash == hashlib.sha256(item.question.encode("utf-8")).hexdigest()[:16]
    # No two distinct questions collide in 64 bits.
    pairs = {(item.qhash, item.question) for item in cmmlu_test}
    assert len({h for h, _ in pairs}) == len({q for _, q in pairs})


def test_cmmlu_items_carry_the_chinese_subject_name(cmmlu_root, cmmlu_test):
    names = json.loads((cmmlu_root / "subjects.json").read_text(encoding="utf-8"))
    assert all(item.subject_zh == names[item.subject]["name_zh"] for item in cmmlu_test)
    assert all(len(item.options) == 4 and item.answer in range(4) for item in cmmlu_test)


def test_cmmlu_subject_filter_and_unknown_subject(cmmlu_root):
    items = load_cmmlu(cmmlu_root, splits=("dev", "test"), subjects=["anatomy", "agronomy"])
    assert {(i.subject, i.split) for i in items} == {
        (s, sp) for s in ("agronomy", "anatomy") for sp in ("dev", "test")
    }
    with pytest.raises(ItemsError, match="no_such_subject"):
        load_cmmlu(cmmlu_root, subjects=["no_such_subject"])


def test_cmmlu_missing_split_folder_is_named(cmmlu_root):
    with pytest.raises(ItemsError, match="val"):
        load_cmmlu(cmmlu_root, splits=("val",))


def test_load_items_dispatches_and_rejects_unknown_benchmarks(cmmlu_root):
    items = load_items("cmmlu", cmmlu_root, splits="dev", subjects=["anatomy"])
    assert [i.uid for i in items] == [f"cmmlu/anatomy/dev/{r}" for r in range(5)]
    with pytest.raises(ConfigError, match="mmlu_pro"):
        load_items("mmlu_pro", cmmlu_root, splits=("test",))


def test_default_benchmark_root_follows_the_environment(monkeypatch, tmp_path, benchmarks_root):
    # wherever this checkout sits (CUBE_BENCHMARKS, a fetched data home or the shared copy):
    # without CUBE_BENCHMARKS, the data home comes first, then the shared copy
    monkeypatch.delenv("CUBE_BENCHMARKS", raising=False)
    monkeypatch.setenv("CUBE_DATA", str(tmp_path / "empty-home"))
    monkeypatch.setenv("CUBE_SHARED_BENCHMARKS", str(benchmarks_root))
    assert default_benchmark_root("cmmlu") == benchmarks_root / "cmmlu"
    monkeypatch.setenv("CUBE_DATA", str(benchmarks_root))
    monkeypatch.setenv("CUBE_SHARED_BENCHMARKS", str(tmp_path / "no-shared"))
    assert default_benchmark_root("cmmlu") == benchmarks_root / "cmmlu"
    monkeypatch.setenv("CUBE_BENCHMARKS", str(tmp_path))
    (tmp_path / "ceval").mkdir()
    assert default_benchmark_root("ceval") == tmp_path / "ceval"


# --- CMMLU-format bad rows ------------------------------------------------------------------------


def _cmmlu_root_with(tmp_path: Path, body: str, header: str = CMMLU_HEADER) -> Path:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "toy.csv").write_text(header + body, encoding="utf-8")
    names = {"toy": {"name_zh": "玩具学", "subcategories": [], "category": "Other"}}
    (tmp_path / "subjects.json").write_text(json.dumps(names, ensure_ascii=False), encoding="utf-8")
    return tmp_path


GOOD_ROW = "0,一加一等于几？,一,二,三,四,B\n"


def test_a_well_formed_toy_file_loads(tmp_path):
    (item,) = load_cmmlu(_cmmlu_root_with(tmp_path, GOOD_ROW))
    assert (item.uid, item.answer, item.options, item.subject_zh) == (
        "cmmlu/toy/test/0",
        1,
        ("一", "二", "三", "四"),
        "玩具学",
    )


@pytest.mark.parametrize(
    "row, message",
    [
        ("1,,一,二,三,四,B\n", "row 1 .*empty question"),
        ("2,   ,一,二,三,四,B\n", "row 2 .*empty question"),
        ("3,问题？,一,,三,四,B\n", "row 3 .*option B is empty"),
        ("4,问题？,一,二,三,四,E\n", "row 4 .*answer 'E'"),
        ("5,问题？,一,二,三,四,\n", "row 5 .*answer ''"),
        ("6,问题？,一,二,三,四,b\n", "row 6 .*answer 'b'"),
        ("7,问题？,一,二,三,B\n", "line 3: 6 columns"),
        ("x,问题？,一,二,三,四,B\n", "row id 'x'"),
        ("0,问题？,一,二,三,四,B\n", "row 0 .*duplicate"),
    ],
)
def test_bad_cmmlu_rows_name_the_file_and_row(tmp_path, row, message):
    root = _cmmlu_root_with(tmp_path, GOOD_ROW + row)
    with pytest.raises(ItemsError, match=message) as info:
        load_cmmlu(root)
    assert "toy.csv" in str(info.value)


def test_a_wrong_cmmlu_header_is_named(tmp_path):
    root = _cmmlu_root_with(tmp_path, GOOD_ROW, header="idx,Question,A,B,C,D,Answer\n")
    with pytest.raises(ItemsError, match="toy.csv: header"):
        load_cmmlu(root)


def test_a_subject_without_a_chinese_name_is_an_error(tmp_path):
    root = _cmmlu_root_with(tmp_path, GOOD_ROW)
    (root / "subjects.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ItemsError, match="no Chinese name for subject 'toy'"):
        load_cmmlu(root)


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    root = _cmmlu_root_with(tmp_path, "")
    (root / "test" / "toy.csv").write_bytes(
        CMMLU_HEADER.encode() + "0,问,一,二,三,四,A\n".encode("gbk")
    )
    with pytest.raises(ItemsError, match="toy.csv: not UTF-8"):
        load_cmmlu(root)


# --- C-Eval fixtures (our own text, the official format) ----------------------------------------


def test_ceval_fixture_splits_load_with_answers_where_public():
    items = load_ceval(CEVAL_FIXTURES, splits=("dev", "val", "test"))
    counts = Counter((i.split, i.subject) for i in items)
    assert counts == {
        ("dev", "computer_network"): 5,
        ("dev", "high_school_physics"): 5,
        ("val", "computer_network"): 3,
        ("val", "high_school_physics"): 3,
        ("test", "computer_network"): 2,
        ("test", "high_school_physics"): 2,
    }
    assert all(i.answer is None for i in items if i.split == "test")
    val = {i.uid: i.answer for i in items if i.split == "val"}
    assert val == {
        "ceval/computer_network/val/0": 0,
        "ceval/computer_network/val/1": 1,
        "ceval/computer_network/val/2": 2,
        "ceval/high_school_physics/val/0": 1,
        "ceval/high_school_physics/val/1": 3,
        "ceval/high_school_physics/val/2": 1,
    }


def test_ceval_fixture_fields_survive_csv_quoting():
    by_uid = {i.uid: i for i in load_ceval(CEVAL_FIXTURES, splits=("val",))}
    assert by_uid["ceval/computer_network/val/1"].options[1] == "不可靠的, 无连接的"
    assert "\n" in by_uid["ceval/high_school_physics/val/2"].question
    assert by_uid["ceval/computer_network/val/0"].subject_zh == "计算机网络"
    assert by_uid["ceval/computer_network/val/0"].qhash == qhash("下列设备中，工作在物理层的是：")


def test_ceval_explicit_mapping_and_missing_subject_name(tmp_path):
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"computer_network": ["CN", "网络", "STEM"]}), encoding="utf-8")
    items = load_ceval(CEVAL_FIXTURES, subjects=["computer_network"], mapping=mapping)
    assert {i.subject_zh for i in items} == {"网络"}
    with pytest.raises(ItemsError, match="high_school_physics"):
        load_ceval(CEVAL_FIXTURES, mapping=mapping)


def _ceval_root_with(tmp_path: Path, split: str, text: str) -> Path:
    (tmp_path / split).mkdir()
    (tmp_path / split / f"toy_{split}.csv").write_text(text, encoding="utf-8")
    (tmp_path / "subject_mapping.json").write_text(
        json.dumps({"toy": ["Toy", "玩具学", "Other"]}, ensure_ascii=False), encoding="utf-8"
    )
    return tmp_path


CEVAL_HEADER = "id,question,A,B,C,D,answer,explanation\n"


def test_ceval_test_split_accepts_files_without_answer_columns(tmp_path):
    root = _ceval_root_with(tmp_path, "test", "id,question,A,B,C,D\n0,问题？,一,二,三,四\n")
    (item,) = load_ceval(root, splits=("test",))
    assert (item.uid, item.answer) == ("ceval/toy/test/0", None)


@pytest.mark.parametrize(
    "split, body, message",
    [
        ("val", "0,问题？,一,二,三,四,,\n", "row 0 .*answer ''"),
        ("dev", "0,问题？,一,二,三,四,Z,解析\n", "row 0 .*answer 'Z'"),
        ("val", "3,问题？,一,二,三,,A,\n", "row 3 .*option D is empty"),
        ("val", "4,,一,二,三,四,A,\n", "row 4 .*empty question"),
        ("test", "5,问题？,一,二,三,四,C,\n", "row 5 .*no public answers"),
    ],
)
def test_bad_ceval_rows_name_the_file_and_row(tmp_path, split, body, message):
    root = _ceval_root_with(tmp_path, split, CEVAL_HEADER + body)
    with pytest.raises(ItemsError, match=message) as info:
        load_ceval(root, splits=(split,))
    assert f"toy_{split}.csv" in str(info.value)


def test_ceval_val_without_answer_columns_is_rejected(tmp_path):
    root = _ceval_root_with(tmp_path, "val", "id,question,A,B,C,D\n0,问题？,一,二,三,四\n")
    with pytest.raises(ItemsError, match="toy_val.csv: header"):
        load_ceval(root, splits=("val",))


# --- sampling -----------------------------------------------------------------------------------


def test_stratified_sample_of_cmmlu_represents_every_subject_proportionally(cmmlu_test):
    sample = stratified_sample(cmmlu_test, 600, seed=0)
    assert len(sample) == 600 and len({i.uid for i in sample}) == 600
    sizes = Counter(i.subject for i in cmmlu_test)
    got = Counter(i.subject for i in sample)
    assert set(got) == set(sizes)
    for subject, size in sizes.items():
        assert abs(got[subject] - 600 * size / len(cmmlu_test)) < 1
    # Input order is kept, and every sampled item is one of the inputs.
    position = {item.uid: k for k, item in enumerate(cmmlu_test)}
    assert [position[i.uid] for i in sample] == sorted(position[i.uid] for i in sample)


def test_stratified_sample_is_deterministic_and_seeded(cmmlu_test):
    first = [i.uid for i in stratified_sample(cmmlu_test, 300, seed=7)]
    assert first == [i.uid for i in stratified_sample(cmmlu_test, 300, seed=7)]
    assert first != [i.uid for i in stratified_sample(cmmlu_test, 300, seed=8)]


def test_stratified_sample_of_one_subject_ignores_the_others(cmmlu_test):
    """A subject's picks come from its own stream: dropping other subjects must not move them."""
    anatomy = [i for i in cmmlu_test if i.subject == "anatomy"]
    two = [i for i in cmmlu_test if i.subject in ("anatomy", "agronomy")]
    alloc = allocate_per_subject(Counter(i.subject for i in two), 40)
    from_two = [i.uid for i in stratified_sample(two, 40, seed=3) if i.subject == "anatomy"]
    alone = [i.uid for i in stratified_sample(anatomy, alloc["anatomy"], seed=3)]
    assert from_two == alone


def test_allocation_floors_small_subjects_at_one_and_sums_to_n():
    assert allocate_per_subject({"a": 1000, "b": 1, "c": 1}, 10) == {"a": 8, "b": 1, "c": 1}
    assert allocate_per_subject({"a": 5, "b": 5}, 3) in ({"a": 2, "b": 1}, {"a": 1, "b": 2})
    assert allocate_per_subject({"a": 5, "b": 5}, 3) == allocate_per_subject({"b": 5, "a": 5}, 3)
    assert allocate_per_subject({"a": 2, "b": 3}, 50) == {"a": 2, "b": 3}


def test_allocation_properties_on_many_size_vectors():
    import numpy as np

    rng = np.random.default_rng(0)
    for _ in range(200):
        sizes = {
            f"s{k}": int(x) for k, x in enumerate(rng.integers(1, 60, size=rng.integers(1, 12)))
        }
        n = int(rng.integers(len(sizes), sum(sizes.values()) + 5))
        alloc = allocate_per_subject(sizes, n)
        assert sum(alloc.values()) == min(n, sum(sizes.values()))
        assert all(1 <= alloc[s] <= sizes[s] for s in sizes)


def test_a_sample_smaller_than_the_subject_count_draws_subjects_then_one_item_each(cmmlu_test):
    """`--sample 20` is what a new user tries first: 20 subjects, drawn by the seed, one item each."""
    sample = stratified_sample(cmmlu_test, 20, seed=0)
    assert len(sample) == 20 and len({i.subject for i in sample}) == 20
    assert [i.uid for i in sample] == [i.uid for i in stratified_sample(cmmlu_test, 20, seed=0)]
    assert {i.subject for i in sample} != {i.subject for i in stratified_sample(cmmlu_test, 20, seed=1)}
    order = {i.uid: k for k, i in enumerate(cmmlu_test)}
    assert [order[i.uid] for i in sample] == sorted(order[i.uid] for i in sample)  # file order kept
    # Nested: a subset drawn from the 600-item sample stays inside it (cube run --within 600).
    within = stratified_sample(stratified_sample(cmmlu_test, 600, seed=0), 20, seed=0)
    assert {i.uid for i in within} <= {i.uid for i in stratified_sample(cmmlu_test, 600, seed=0)}
    with pytest.raises(ConfigError, match="0"):
        stratified_sample(cmmlu_test, 0, seed=0)


def test_item_rejects_an_answer_outside_its_options():
    with pytest.raises(ItemsError, match="answer index 4"):
        Item("toy", "s", "test", 0, "q", ("a", "b", "c", "d"), 4)
