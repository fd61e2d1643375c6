"""cube.analysis.explain_selectors: the STORE[:SELECT] grammar, one line per bad selection, and a
prefix that joins one context per subject. Stores written with write_records; invented values."""

from __future__ import annotations

import pytest

from cube.analysis.explain_selectors import one_cell, parse_slice
from cube.errors import ConfigError
from cube.records.store import read_records
from tests.analysis.test_explain import UIDS, acc, explained, macro, outcome_records, pattern, store


def test_selector_grammar():
    spec = parse_slice("data/records:label_set=L1_halfwidth,scorer=M1-seq,shots=0,agg=macro")
    assert str(spec.store) == "data/records" and spec.aggregation == "macro"
    assert spec.filters == {"label_set": "L1_halfwidth", "scorer": "M1-seq", "shots": 0}
    assert parse_slice("some/store").filters == {} and parse_slice("some/store:").filters == {}
    assert parse_slice("c:/x/store").store.as_posix() == "c:/x/store"  # a colon in a path is not a selector
    assert parse_slice("s:label-set=L2_fullwidth").filters == {"label_set": "L2_fullwidth"}


@pytest.mark.parametrize("text, needle", [
    ("s:colour=red", "unknown field 'colour'"),
    ("{store}:scorer", "is not FIELD=VALUE"),
    ("s:scorer=M1-seq,scorer=M2", "given twice"),
    ("s:agg=median", "agg='median'"),
    ("s:shots=five", "shots='five'"),
    (":scorer=M1-seq", "no store"),
])
def test_bad_selectors_are_one_line(text, needle, tmp_path):
    with pytest.raises(ConfigError) as err:
        parse_slice(text.format(store=tmp_path))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_selection_must_name_one_present_cell(tmp_path):
    recs = outcome_records(pattern(30), scorer="M1-seq") + outcome_records(pattern(31), scorer="M1-strict")
    records = read_records(store(tmp_path, "s", recs))
    with pytest.raises(ConfigError, match=r"matches 2 cells; narrow it with scorer=M1-seq\|M1-strict$"):
        one_cell(records, parse_slice("s"))
    with pytest.raises(ConfigError, match=r"no records have scorer=M2; scorer here: M1-seq, M1-strict$"):
        one_cell(records, parse_slice("s:scorer=M2"))
    assert one_cell(records, parse_slice("s:scorer=M1-seq")).num_rows == len(UIDS)


def test_a_prefix_joins_one_context_per_subject(tmp_path):
    """OpenCompass names one context per CMMLU subject; context=oc-ppl-* makes them one slice."""
    right = pattern(41)
    recs = [dict(r, context=f"oc-ppl-{r['subject'][:4]}") for r in outcome_records(right, scorer="M2")]
    records = read_records(store(tmp_path, "s", recs))
    joined = one_cell(records, parse_slice("s:context=oc-ppl-*"))
    assert joined.num_rows == len(UIDS)
    with pytest.raises(ConfigError, match="matches 3 cells; narrow it with context=oc-ppl-agro|oc-ppl-anat"):
        one_cell(records, parse_slice("s:scorer=M2"))
    with pytest.raises(ConfigError, match=r"no records have context=lm-\*"):
        one_cell(records, parse_slice("s:context=lm-*"))
    doubled = read_records(store(tmp_path, "d", outcome_records(right, context="oc-ppl-1")
                                 + outcome_records(right, context="oc-ppl-2")))
    with pytest.raises(ConfigError, match="holds 48 records for 24 items"):
        one_cell(doubled, parse_slice("d:context=oc-ppl-*"))
    path = str(tmp_path / "s")
    e = explained(f"{path}:context=oc-ppl-*", f"{path}:context=oc-ppl-*,agg=macro")
    assert e.cell_a["context"] == "oc-ppl-agro ... (3 values)" and e.gap == macro(right) - acc(right.values())
