"""Subject taxonomies read from the real benchmark metadata, checked against the files directly."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from cube.config import REPO_ROOT
from cube.errors import ConfigError, ItemsError
from cube.protocol.taxonomy import (
    CATEGORIES,
    CEVAL_HARD,
    CEVAL_HARD_GROUP,
    CHINA_SPECIFIC_GROUP,
    load_ceval_taxonomy,
    load_cmmlu_taxonomy,
    load_taxonomy,
    taxonomy_for_benchmark,
)


def test_cmmlu_categories_and_china_flag_match_subjects_json(benchmarks_root):
    path = benchmarks_root / "cmmlu" / "subjects.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    tax = load_cmmlu_taxonomy(path)
    assert set(tax.categories) == set(raw)
    for subject, meta in raw.items():
        cats = meta["category"] if isinstance(meta["category"], list) else [meta["category"]]
        assert tax.categories_of(subject) == tuple(cats)
    assert tax.groups[CHINA_SPECIFIC_GROUP] == {s for s, m in raw.items() if m["china_specific"]}
    naive = Counter(c for m in raw.values() for c in
                    (m["category"] if isinstance(m["category"], list) else [m["category"]]))
    assert {c: len(tax.subjects_in(c)) for c in CATEGORIES} == {c: naive[c] for c in CATEGORIES}


def test_ceval_categories_and_hard_subset(benchmarks_root):
    # the shared copy of the official map where there is one; a fetched data home holds CMMLU only,
    # and then the copy cube ships (the same file) is what is checked
    path = benchmarks_root / "ceval" / "subject_mapping.json"
    if not path.is_file():
        path = REPO_ROOT / "config" / "benchmarks" / "ceval_subject_mapping.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    tax = load_ceval_taxonomy(path)
    assert {s: tax.categories_of(s)[0] for s in raw} == {s: v[2] for s, v in raw.items()}
    assert Counter(v[0] for v in tax.categories.values()) == {
        "STEM": 20, "Social Science": 10, "Humanities": 11, "Other": 11}
    assert tax.groups[CEVAL_HARD_GROUP] == CEVAL_HARD and len(CEVAL_HARD) == 8
    assert all(tax.categories_of(s) == ("STEM",) for s in CEVAL_HARD)


def test_default_paths_and_dispatch():
    assert load_taxonomy("cmmlu").name == "cmmlu"
    assert load_taxonomy("ceval").name == "ceval"
    assert taxonomy_for_benchmark("sim") == "cmmlu"
    with pytest.raises(ConfigError, match="unknown taxonomy 'mmlu'"):
        load_taxonomy("mmlu")
    with pytest.raises(ConfigError, match="no default taxonomy for benchmark 'mmlu'"):
        taxonomy_for_benchmark("mmlu")


def test_two_category_subject_belongs_to_both(tmp_path):
    path = tmp_path / "subjects.json"
    path.write_text(json.dumps({
        "made_up_a": {"name_zh": "甲", "category": ["STEM", "Other"], "china_specific": False},
        "made_up_b": {"name_zh": "乙", "category": "Humanities", "china_specific": True},
    }))
    tax = load_cmmlu_taxonomy(path)
    assert tax.categories_of("made_up_a") == ("STEM", "Other")
    assert tax.subjects_in("STEM") == {"made_up_a"} and tax.subjects_in("Other") == {"made_up_a"}
    assert tax.subjects_in(CHINA_SPECIFIC_GROUP) == {"made_up_b"}
    with pytest.raises(ConfigError, match="subject 'nope' is not in the cmmlu taxonomy"):
        tax.categories_of("nope")


@pytest.mark.parametrize("meta, message", [
    ({"category": "Science"}, "category 'Science', not one of"),
    ({"name_zh": "x"}, "has no 'category'"),
    ({"category": "STEM", "china_specific": "yes"}, "china_specific 'yes', not a bool"),
])
def test_malformed_cmmlu_map(tmp_path, meta, message):
    path = tmp_path / "subjects.json"
    path.write_text(json.dumps({"made_up": meta}))
    with pytest.raises(ItemsError, match=message):
        load_cmmlu_taxonomy(path)


def test_missing_map_is_an_items_error(tmp_path):
    with pytest.raises(ItemsError, match="subject map not found"):
        load_ceval_taxonomy(tmp_path / "subject_mapping.json")
