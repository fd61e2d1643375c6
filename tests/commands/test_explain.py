"""``cube explain``: the table and the JSON, the committed lm-eval import, one-line errors, and an
incomplete store refused unless --allow-incomplete."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import pyarrow.compute as pc
import pytest

from cube import cli
from cube.config import REPO_ROOT
from cube.records.store import MANIFEST_NAME, read_records, write_records
from tests.record_tables import record, scores_for, table

IMPORTED = REPO_ROOT / "data" / "imported" / "lm-eval-smollm2"


@pytest.fixture
def run(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.explain"])

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["explain", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


@pytest.fixture
def store(tmp_path):
    """Two scorers on 10 items: M1-seq right on 0-7, M1-strict right on 0-4."""
    recs = []
    for scorer, right in (("M1-seq", 8), ("M1-strict", 5)):
        for row in range(10):
            pred = 0 if row < right else 1
            recs.append(record(scorer=scorer, uid=f"cmmlu/arts/test/{row}", pred=pred, scores=scores_for(pred),
                               first_token_ids=[49, 50, 51, 52], n_tokens=[1, 1, 1, 1]))
    write_records(tmp_path / "recs", table(recs))
    return str(tmp_path / "recs")


def test_json_and_table(run, store):
    code, out, err = run(f"{store}:scorer=M1-seq", f"{store}:scorer=M1-strict", "--json", "--bootstrap", "200")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["gap"]["exact"] == "-3/10"
    assert doc["items"] == {"both": 10, "only_a": 0, "only_b": 0, "a_on_both": {"value": 0.8, "exact": "4/5"},
                            "b_on_both": {"value": 0.5, "exact": "1/2"}}
    assert doc["paired"]["only_a"] == 3 and doc["paired"]["only_b"] == 0
    shares = {f["name"]: Fraction(f["share"]["exact"]) for f in doc["factors"]}
    assert shares["scorer_normalisation"] == Fraction(-3, 10) and sum(shares.values()) == Fraction(-3, 10)
    code, out, _ = run(f"{store}:scorer=M1-seq", f"{store}:scorer=M1-strict", "--bootstrap", "200")
    assert code == 0
    assert "gap B - A: -30.00 pp (exactly -3/10)" in out
    assert re.search(r"^scorer_normalisation +-30.00 pp .* 3  identified$", out, re.M) and "arts" in out


def test_the_committed_lm_eval_import(run):
    """acc against acc_norm of the cube-prompt task, and the two prompts against each other: the
    scores are the records' own means (computed here from the table, not by cube explain)."""
    records = read_records(IMPORTED)

    def accuracy(**where) -> Fraction:
        mask = None
        for k, v in where.items():
            m = pc.equal(records.column(k), v)
            mask = m if mask is None else pc.and_(mask, m)
        correct = records.filter(mask).column("correct").to_pylist()
        return Fraction(sum(correct), len(correct))

    a = f"{IMPORTED}:scorer=M1-seq,context=zh_cue,label_set=L1_halfwidth"
    b = f"{IMPORTED}:scorer=M1-seq,context=lmeval-07341e3f"
    code, out, err = run(a, b, "--json", "--bootstrap", "200")
    assert code == 0, err
    doc = json.loads(out)
    gap = accuracy(scorer="M1-seq", context="lmeval-07341e3f") - accuracy(scorer="M1-seq", context="zh_cue",
                                                                         label_set="L1_halfwidth")
    assert Fraction(doc["gap"]["exact"]) == gap
    assert sum(Fraction(f["share"]["exact"]) for f in doc["factors"]) == gap
    # the two tasks differ in the prompt's header and in the delimiter before the label
    assert doc["protocol"]["prompt_bytes"]["status"] == doc["protocol"]["label_tokenization"]["status"] == "differs"
    assert any('答案： {{label}}' in line for line in doc["prompt_diff"])


@pytest.mark.parametrize("slice_b, needle", [
    ("{s}:colour=red", "unknown field 'colour'"),
    ("{s}:scorer=M9", "no records have scorer=M9; scorer here: M1-seq, M1-strict"),
    ("{s}", "matches 2 cells; narrow it with scorer=M1-seq|M1-strict"),
    ("{s}:agg=median", "agg='median'"),
    ("{s}/nowhere:scorer=M1-seq", "nowhere"),
])
def test_bad_slices_are_one_line(run, store, slice_b, needle):
    code, out, err = run(f"{store}:scorer=M1-seq", slice_b.format(s=store))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("cube: error: ")
    assert needle in err


def test_arguments_are_checked_before_any_record_is_read(run, store, monkeypatch):
    import cube.records.store as store_module

    def refuse(*args, **kwargs):
        raise AssertionError("records read before the arguments were checked")

    monkeypatch.setattr(store_module, "read_records", refuse)
    for argv in ((f"{store}:scorer=M1-seq", f"{store}:shots=five"),
                 (f"{store}:scorer=M1-seq", f"{store}:scorer=M1-strict", "--bootstrap", "0")):
        code, _, err = run(*argv)
        assert code == 2 and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, needle", [
    (("{s}:shots=\u00b2",), "shots='\u00b2' is not a whole number"),  # "²".isdigit(): a ValueError traceback
    (("{s}:scorer=M1-strict", "--seed", "-1"), "--seed -1"),  # numpy's ValueError traceback
    (("{s}:scorer=M1-strict", "--bootstrap", "1000000000"), "--bootstrap 1000000000"),  # a 7.45 GiB array
])
def test_issue32_bad_arguments_are_one_line_before_any_record(run, store, monkeypatch, argv, needle):
    """Issue 32 §3: each of these was a traceback (or gigabytes) on the code before it."""
    import cube.records.store as store_module

    monkeypatch.setattr(store_module, "read_records", lambda *a, **k: pytest.fail("records read"))
    code, out, err = run(f"{store}:scorer=M1-seq", *(a.format(s=store) for a in argv))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("cube: error: "), err
    assert needle in err, err


def test_an_incomplete_store_is_refused_unless_allowed(run, store):
    """A cell whose configuration promises 30 items in shards of 5 and has none of them written."""
    path = f"{store}/{MANIFEST_NAME}"
    manifest = json.loads(open(path, encoding="utf-8").read())
    manifest["cells"] = {"m1/label--L1_halfwidth__zh_cue__0shot__original": {
        "kind": "label", "scorers": ["M1-seq"], "n_items": 30, "shard_size": 5}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    argv = (f"{store}:scorer=M1-seq", f"{store}:scorer=M1-strict", "--bootstrap", "50")
    code, out, err = run(*argv)
    assert code == 2 and out == "" and "incomplete store" in err and "--allow-incomplete" in err
    code, out, err = run(*argv, "--allow-incomplete")
    assert code == 0 and "gap B - A: -30.00 pp" in out, err
    # issue 32 §5: with the flag the numbers came with no mark at all; now printed, and in the JSON
    needle = "incomplete cell (a killed or unfinished run?): m1/label--L1_halfwidth__zh_cue__0shot__original: 0 of 6"
    assert needle in out and needle in err, out
    code, out, _ = run(*argv, "--allow-incomplete", "--json")
    assert code == 0 and any(needle in w for w in json.loads(out)["warnings"])


def test_cube_and_lm_eval_on_byte_equal_prompts(run):
    """cube's own run against lm-eval running cube's prompt: the same decisions on all 24 items,
    and the largest log-likelihood difference as the two tables give it."""
    cube_store = REPO_ROOT / "data" / "harnesses" / "cube-smollm2-24"
    where = "scorer=M1-seq,label_set=L1_halfwidth,context=zh_cue"
    code, out, err = run(f"{cube_store}:{where}", f"{IMPORTED}:{where}", "--json", "--bootstrap", "100")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["gap"]["exact"] == "0/1" and doc["items"]["both"] == 24
    assert doc["paired"]["only_a"] == doc["paired"]["only_b"] == 0

    def scores(path):
        t = read_records(path)
        t = t.filter(pc.and_(pc.equal(t.column("scorer"), "M1-seq"), pc.equal(t.column("context"), "zh_cue")))
        t = t.filter(pc.equal(t.column("label_set"), "L1_halfwidth"))
        return dict(zip(t.column("uid").to_pylist(), t.column("scores").to_pylist()))

    a, b = scores(cube_store), scores(IMPORTED)
    expected = max(abs(x - y) for uid in a for x, y in zip(a[uid], b[uid]))
    assert doc["max_score_difference"] == expected and 0 < expected < 1e-3


def test_an_unattributed_remainder_says_which_run_would_separate_its_factors(run):
    """Issue 36 §6: the remainder said only that the factors were not identifiable; the columns
    were named `over orders` and `items` (an items count the sample's detail line contradicted)."""
    harness = REPO_ROOT / "data" / "harnesses" / "cube-smollm2-24"
    code, out, err = run(f"{harness}:scorer=M1-seq,label_set=L1_halfwidth",
                         f"{IMPORTED}:scorer=M1-seq,context=lmeval-07341e3f")
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("factor "))
    assert header.split() == ["factor", "share", "range", "over", "path", "orders", "flips", "status"]
    assert "over orders" not in out and "None" not in out
    remainder = out.splitlines()[out.splitlines().index(next(l for l in out.splitlines() if l.startswith("remainder"))) + 1]
    assert "the slices differ in prompt_bytes and label_tokenization" in remainder
    assert ("a third slice that differs from A in prompt_bytes alone separates the factors (e.g. cube run with "
            "B's prompt as an answer context of your own (--cues, CUBE_CONFIG_DIR))") in remainder
    assert "flips: common items whose right/wrong the factor changes" in out


def test_a_generation_slice_shows_no_python_none(run):
    opencompass = REPO_ROOT / "data" / "imported" / "opencompass-smollm2"
    code, out, err = run(f"{opencompass}:scorer=OC-ppl", f"{opencompass}:scorer=M6-oc")
    assert code == 0, err
    assert "None" not in out and "not applicable: a generation scores no label tokens" in out
