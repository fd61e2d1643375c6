"""``cube rescore``: the printed table, JSON, the regression view, warnings and one-line errors."""

from __future__ import annotations

import json

import pytest

from cube import cli
from cube.records.store import write_records
from tests.record_tables import record, scores_for, table


@pytest.fixture
def run(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.rescore"])

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["rescore", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


@pytest.fixture
def store(tmp_path):
    recs = []
    for model, right in (("v1", 8), ("v2", 5)):
        for row in range(10):
            pred = 0 if row < right else 1
            recs.append(record(model=model, uid=f"cmmlu/arts/test/{row}", pred=pred,
                               scores=scores_for(pred)))
    for row in range(10):  # a generation run with 3 parse failures in 10
        pred = -1 if row < 3 else 0
        recs.append(record(model="v1", scorer="M6-strict", uid=f"cmmlu/arts/test/{row}",
                           pred=pred, scores=scores_for(0)))
    write_records(tmp_path / "recs", table(recs))
    return str(tmp_path / "recs")


def test_overall_table_and_json(run, store):
    code, out, err = run(store, "--model", "v1", "--scorer", "M1-seq")
    assert code == 0 and err == ""
    assert "== v1 | M1-seq | L1_halfwidth | zh_cue | 0-shot | original (cmmlu)" in out
    assert "micro      10  0.800" in out
    code, out, _ = run(store, "--model", "v1", "--scorer", "M1-seq", "--level", "subject",
                       "--json")
    rows = json.loads(out)["rows"]
    assert [(r["group"], r["n"], r["n_correct"]) for r in rows] == [("arts", 10, 8)]


def test_a_slice_option_takes_a_comma_list_like_repeating_it(run, store):
    _, listed, _ = run(store, "--model", "v1,v2", "--scorer", "M1-seq", "--json")
    _, repeated, _ = run(store, "--model", "v1", "--model", "v2", "--scorer", "M1-seq", "--json")
    rows = json.loads(listed)["rows"]
    assert listed == repeated and {(r["model"], r["n_correct"]) for r in rows} == {("v1", 8), ("v2", 5)}
    code, _, err = run(store, "--shots", "0,x")  # one line (cube.commands.options), not argparse's usage
    assert code == 2 and err.strip() == "cube: error: --shots '0,x' must be comma-separated integers"


def test_category_level_uses_the_cmmlu_taxonomy(run, store):
    code, out, _ = run(store, "--model", "v2", "--level", "category", "--json")
    groups = {(r["group"], r["aggregation"]) for r in json.loads(out)["rows"]}
    assert groups == {("Humanities", "micro"), ("Humanities", "macro")}


def test_parse_failure_warning_is_visible(run, store):
    code, out, err = run(store, "--scorer", "M6-strict")
    assert code == 0
    assert "WARNING: parse failures 30.0% (3/10) exceed 2%" in err
    assert "WARNING" in out  # also under the table, where a reader looks


def test_a_mostly_tied_cell_shows_its_tie_share_and_warns(run, tmp_path):
    """Issue 36 §4: the tie share beside each score, in the table and the JSON, and a warning in both
    places the parse-failure warning goes."""
    recs = [record(model="degen", uid=f"cmmlu/arts/test/{row}", pred=0,
                   scores=[-1.0] * 4 if row < 7 else scores_for(0)) for row in range(10)]
    write_records(tmp_path / "recs", table(recs))
    code, out, err = run(str(tmp_path / "recs"))
    assert code == 0
    assert out.splitlines()[1].split()[-2] == "tied" and out.splitlines()[2].split()[-2] == "70.0%"
    warning = "WARNING: tie-breaks decide 70.0% (7/10) of the decisions"
    assert warning in err and warning in out
    _, out, _ = run(str(tmp_path / "recs"), "--json")
    report = json.loads(out)
    assert [(r["n_tied"], r["tie_rate"]) for r in report["rows"]] == [(7, 0.7)] * 2
    assert any(w.startswith(warning) for w in report["warnings"])


def test_versus_prints_the_regression_table(run, store):
    code, out, _ = run(store, "--model", "v1", "--scorer", "M1-seq", "--versus", "model=v2")
    assert code == 0
    lines = out.splitlines()
    assert lines[2] == "precision: not recorded"  # the fixture's records say no precision
    assert lines[4].split()[:5] == ["arts", "10", "0.800", "0.500", "-0.300"]
    assert lines[-1].startswith("OVERALL")
    code, out, _ = run(store, "--model", "v1", "--scorer", "M1-seq", "--versus", "model=v2",
                       "--json")
    assert json.loads(out)["overall"]["a_only_right"] == 3


@pytest.mark.parametrize("argv, message", [
    (["--model", "nobody"], "no records match {'model': ['nobody']}: the store holds model v1, v2; choose from "
                            "those (--model), or leave the option out for all"),
    (["--shots", "3"], "the store holds shots 0; choose from those (--shots)"),
    (["--scorer", "M1-seq", "--versus", "model=v2"], "slice A holds 20 records for 10 items"),
    (["--model", "v1", "--scorer", "M1-seq", "--versus", "colour=red"], "expected FIELD=VALUE"),
])
def test_bad_slices_are_one_line_errors(run, store, argv, message):
    code, out, err = run(store, *argv)
    assert code == 2 and out == ""
    assert err.startswith("cube: error: ") and message in err and err.count("\n") == 1


def test_corrupt_store_is_exit_2_and_no_verify_skips_only_the_checksum(run, store):
    from pathlib import Path

    from cube.records.store import MANIFEST_NAME

    manifest_path = Path(store) / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["v2/part-00000.parquet"]["sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    code, _, err = run(store)
    assert code == 2 and "v2/part-00000.parquet: sha256" in err and err.count("\n") == 1
    code, _, _ = run(store, "--no-verify")
    assert code == 0
    shard = Path(store) / "v1" / "part-00000.parquet"
    shard.write_bytes(shard.read_bytes()[:-10])
    code, _, err = run(store, "--no-verify")
    assert code == 2 and "v1/part-00000.parquet: not a readable Parquet file" in err


def test_calibration_prints_one_ece_per_scored_cell(run, store):
    code, out, _ = run(store, "--calibration")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 and all(": ECE " in line for line in lines)  # v1, v2; M6 left out
    code, out, _ = run(store, "--calibration", "--json")
    assert {r["model"] for r in json.loads(out)["rows"]} == {"v1", "v2"}


def test_a_file_instead_of_a_records_folder_is_one_line(run, tmp_path):
    path = tmp_path / "records.parquet"
    path.write_bytes(b"PAR1")
    code, _, err = run(str(path))
    assert code == 2 and err.startswith("cube: error: ") and "is not a folder" in err and err.count("\n") == 1


# --- issue 22: a killed run's store is not reported as a finished one ---------------------------


@pytest.fixture(scope="module")
def killed_store(tmp_path_factory, benchmarks_root, tiny_qwen3, qwen3_tokenizer):
    """2 of the 6 shards of `--sample 30 --shard-size 5`, as a kill leaves them (tests/killed_run.py)."""
    pytest.importorskip("torch")
    from tests.killed_run import killed_run

    out = tmp_path_factory.mktemp("killed") / "records"
    killed_run(out, benchmarks_root, tiny_qwen3, qwen3_tokenizer)
    return out


@pytest.mark.registry
def test_a_killed_runs_store_is_rescored_with_a_loud_warning(run, killed_store):
    code, out, err = run(str(killed_store), "--scorer", "M1-seq", "--json")
    assert code == 0
    doc = json.loads(out)
    assert [r["n"] for r in doc["rows"] if r["aggregation"] == "micro"] == [10]
    needle = "incomplete cell (a killed or unfinished run?): tiny/label--L1_halfwidth__zh_cue__0shot__original: " \
             "2 of 6 shards, 10 of 30 items"
    assert len(doc["warnings"]) == 1 and needle in doc["warnings"][0]
    assert needle in err  # printed too, not only in the JSON
    code, out, err = run(str(killed_store), "--scorer", "M1-seq")
    assert code == 0 and needle in out and needle in err


def test_versus_refuses_two_precisions_unless_told_and_then_prints_it(run, tmp_path):
    recs = [record(model=model, uid=f"cmmlu/arts/test/{row}", pred=0, scores=scores_for(0), dtype=dtype)
            for model, dtype in (("v1", "bfloat16"), ("v2", "float32")) for row in range(6)]
    write_records(tmp_path / "mixed", table(recs))
    code, out, err = run(str(tmp_path / "mixed"), "--model", "v1", "--scorer", "M1-seq", "--versus", "model=v2")
    assert code != 0 and out == ""
    assert "slice A was scored in bfloat16 and slice B in float32" in err and "--allow-mixed-precision" in err
    assert len(err.strip().splitlines()) == 1
    code, out, _ = run(str(tmp_path / "mixed"), "--model", "v1", "--scorer", "M1-seq", "--versus", "model=v2",
                       "--allow-mixed-precision")
    assert code == 0 and "precision: mixed: A bfloat16, B float32" in out


def test_an_empty_store_says_to_run_into_it_first(run, tmp_path):
    from cube.records.store import create_store

    create_store(tmp_path / "empty")
    code, out, err = run(str(tmp_path / "empty"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "the store holds no records yet" in err and "`cube run ... --out`" in err


def test_the_help_names_each_slice_option_in_english(capsys):
    with pytest.raises(SystemExit):
        cli.main(["rescore", "--help"])
    out = capsys.readouterr().out
    assert "shotss" not in out and "keep only these shots (comma-separated" in out
    assert "FIELD one of model, scorer, label_set, shots, order, context" in " ".join(out.split())


def test_items_checks_the_qhashes_against_a_users_file(run, tmp_path):
    """``--items PATH[/SPLITS]``: a user's file or folder (README: Your benchmark) is an item set
    to check against, as a registered name is; a path is not cut at its first '/'."""
    from cube.commands.store_options import items_option
    from cube.config import REPO_ROOT
    from cube.protocol.benchmarks import load_items

    folder = REPO_ROOT / "tests" / "fixtures" / "user_benchmark" / "en"
    items = load_items(str(folder), splits=("test",))
    recs = [record(uid=i.uid, qhash=i.qhash, benchmark=i.benchmark, scores=[-0.5, -1.5]) for i in items[:6]]
    write_records(tmp_path / "mine", table(recs))
    code, out, err = run(str(tmp_path / "mine"), "--items", str(folder))
    assert code == 0, err
    code, _, err = run(str(tmp_path / "mine"), "--items", f"{folder}/dev")  # the test items are not dev's
    assert code == 2 and "is not in the item set in use" in err
    recs[0]["qhash"] = "0" * 16  # another question under the same uid
    write_records(tmp_path / "changed", table(recs))
    code, _, err = run(str(tmp_path / "changed"), "--items", f"{folder}/dev,test")
    assert code == 2 and "qhash" in err and len(err.strip().splitlines()) == 1
    assert items_option("cmmlu/test") == ("cmmlu", ("test",)) and items_option("ceval") == ("ceval", ("test",))
    assert items_option(str(folder)) == (str(folder), ("test",))
    assert items_option(f"{folder}/dev,test") == (str(folder), ("dev", "test"))


def test_chance_is_the_mean_of_one_over_n_for_mixed_option_counts(run, tmp_path):
    """A user's file of 3-, 4- and 5-option items: chance is mean(1/N) over the items, not 1/4, in
    the table and in --json (per subject, category micro and macro, overall), with the exact
    Poisson-binomial test against it."""
    from fractions import Fraction

    from cube.analysis.stats import above_chance_p_per_item

    widths = {"alg": [3, 4, 5, 5], "geo": [4, 4, 3]}
    recs = []
    for subject, ks in widths.items():
        for row, k in enumerate(ks):
            pred = 0 if row % 2 == 0 else 1
            recs.append(record(uid=f"quiz/{subject}/test/{row}", benchmark="quiz", pred=pred,
                               scores=scores_for(pred, k)))
    write_records(tmp_path / "recs", table(recs))
    code, out, _ = run(str(tmp_path / "recs"), "--json")
    (overall,) = [r for r in json.loads(out)["rows"] if r["aggregation"] == "micro"]
    all_k = widths["alg"] + widths["geo"]
    assert overall["chance"] == pytest.approx(float(sum(Fraction(1, k) for k in all_k) / len(all_k)), rel=1e-12)
    assert overall["p_above_chance"] == pytest.approx(above_chance_p_per_item(4, [1 / k for k in all_k]), rel=1e-12)
    code, out, _ = run(str(tmp_path / "recs"), "--json", "--level", "subject")
    rows = {r["group"]: r for r in json.loads(out)["rows"]}
    for subject, ks in widths.items():
        assert rows[subject]["chance"] == pytest.approx(float(sum(Fraction(1, k) for k in ks) / len(ks)), rel=1e-12)
    code, out, _ = run(str(tmp_path / "recs"))
    header = out.splitlines()[1]
    line = next(line for line in out.splitlines() if " micro " in line)
    assert "chance" in header and f"{overall['chance']:.3f}" in line


def test_category_level_of_a_users_file_is_its_own_category_column(run, tmp_path):
    """``--level category`` on a user's file's records groups subjects by the file's ``category``
    column (it refused: no default taxonomy for the benchmark); a subject without one is '(no
    category)'. Accuracies against a count by hand."""
    rows = [("alg", "STEM", 1), ("alg", "STEM", 0), ("geo", "STEM", 1), ("poems", "Humanities", 0),
            ("poems", "Humanities", 0), ("misc", None, 1)]
    path = tmp_path / "quiz.jsonl"
    path.write_text("".join(json.dumps({"id": n, "subject": s, "question": f"q{n}?", "choices": ["a", "b"],
                                        "answer": "A", **({"category": c} if c else {})}) + "\n"
                            for n, (s, c, _) in enumerate(rows)), encoding="utf-8")
    from cube.protocol.benchmarks import load_items

    items = load_items(str(path))
    recs = [record(uid=i.uid, qhash=i.qhash, benchmark=i.benchmark, pred=1 - rows[i.row][2],
                   scores=scores_for(1 - rows[i.row][2], 2)) for i in items]
    write_records(tmp_path / "recs", table(recs))
    code, out, err = run(str(tmp_path / "recs"), "--level", "category", "--items", str(path), "--json")
    assert code == 0, err
    micro = {r["group"]: (r["n"], r["n_correct"]) for r in json.loads(out)["rows"] if r["aggregation"] == "micro"}
    assert micro == {"STEM": (3, 2), "Humanities": (2, 0), "(no category)": (1, 1)}
