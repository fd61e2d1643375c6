"""``cube book``: executing one claim with the reader's parameters, and failing loudly."""

from __future__ import annotations

import nbformat
import pytest

from cube import cli
from cube.commands.book import parse_params
from cube.errors import ConfigError
from cube.paper import plan


@pytest.fixture
def cube(monkeypatch, tmp_path, capsys):
    """The real ``cube`` entry point, with the book command, writing into a temp folder."""
    if "cube.commands.book" not in cli.COMMAND_MODULES:  # until the lead registers it
        monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "cube.commands.book"])
    monkeypatch.setattr(plan, "EXECUTED_DIR", tmp_path / "executed")

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["book", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_params_are_read_as_yaml_or_json():
    assert parse_params(['extra_label_sets=["roman=Ⅰ,Ⅱ,Ⅲ,Ⅳ"]', "n=3", "x=null", "s=abc"]) == {
        "extra_label_sets": ["roman=Ⅰ,Ⅱ,Ⅲ,Ⅳ"], "n": 3, "x": None, "s": "abc"}
    with pytest.raises(ConfigError, match="must look like NAME=VALUE"):
        parse_params(["no-equals-sign"])
    with pytest.raises(ConfigError, match="not valid YAML/JSON"):
        parse_params(["x=[unclosed"])


def test_execute_one_claim_with_a_parameter(cube, tmp_path):
    code, out, _ = cube("execute", "--only", "07_partial_credit", "--param", 'exams=["thpt2025_math"]',
                        "--as", "math_only", "--out", str(tmp_path / "mine"))
    assert code == 0
    produced = tmp_path / "mine" / "math_only.ipynb"  # a reader's run: never the book's page
    assert f"executed math_only -> {produced}" in out
    assert not (tmp_path / "executed").exists()
    assert "a reader's run (math_only)" in nbformat.read(produced, as_version=4).cells[0].source
    claims = nbformat.read(produced, as_version=4).cells[-1].outputs[0]["text"]
    assert "thpt2025_math: baseline 1.975 (ladder) < 2.75 (additive)" in claims
    assert "thpt2025_standard" not in claims


def test_a_claim_that_stops_holding_fails_the_command(cube, tmp_path):
    concave = tmp_path / "concave.yaml"  # pays more than additive for 1..3 right: claim 7 fails
    concave.write_text("statements: 4\npoints: [0, 0.5, 0.75, 0.9, 1]\n", encoding="utf-8")
    code, _, err = cube("execute", "--only", "07_partial_credit", "--param", f"scheme={concave}", "--as", "concave")
    assert code == 1
    assert err.startswith("cube: notebook concave failed in cell ")
    assert "AssertionError: the ladder pays more than additive for some count" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "executed" / "concave.ipynb").exists()
    assert (tmp_path / "executed" / "failed" / "concave.ipynb").is_file()


@pytest.mark.parametrize("argv, message", [
    (["execute", "--only", "nope"], "unknown notebook 'nope'"),
    (["execute", "--only", "07_partial_credit", "--param", "exam=[]", "--as", "x"], "parameter 'exam' is not in 07_partial_credit.md"),
    (["execute", "--only", "01_tokenizer_audit", "--param", "extra_label_sets=[]"], "name it with --as NAME"),
    (["execute", "--only", "01_tokenizer_audit", "--param", "extra_label_sets=[]", "--as", "01_tokenizer_audit"],
     "'01_tokenizer_audit' is one of the book's runs"),
    (["execute", "--param", "scheme=ladder", "--as", "x"], "--only selects"),
    (["build"], "book/_executed/guide_01_first_run.ipynb is missing: run `cube book execute` first"),  # the plan's first run
])
def test_bad_input_is_one_line_and_exit_2(cube, argv, message):
    code, _, err = cube(*argv)
    assert code == 2 and err.startswith("cube: error: ") and message in err.replace(str(plan.EXECUTED_DIR), "book/_executed")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.registry
def test_a_notebook_on_a_killed_runs_store_fails_in_one_line_unless_allowed(
        cube, tmp_path, benchmarks_root, tiny_qwen3, qwen3_tokenizer):
    """Issue 22: the book read 2 of the 6 shards of `--sample 30 --shard-size 5` as a finished run."""
    pytest.importorskip("torch")
    from tests.killed_run import killed_run

    store = tmp_path / "records"
    killed_run(store, benchmarks_root, tiny_qwen3, qwen3_tokenizer)
    argv = ("execute", "--only", "08_benchmark_practice", "--param", f"records={store}", "--as", "partial",
            "--out", str(tmp_path / "mine"))
    code, _, err = cube(*argv)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("cube: notebook partial failed in cell ") and "RecordsError: " in err
    assert "incomplete store: tiny/label--L1_halfwidth__zh_cue__0shot__original: 2 of 6 shards, 10 of 30 items" in err
    code, out, err = cube(*argv, "--allow-incomplete")
    assert "incomplete store" not in err  # read; whatever the page then finds on 10 items is its own


def test_a_readers_own_label_set_is_summed_up_in_one_line():
    """Issue 36 §6: a reader's run gave an .ipynb only; it now says, per label set of theirs,
    which families it degenerates for (the same verdicts `cube audit --label-set` gives)."""
    from cube.commands.book import reader_label_set_summary
    from cube.cli import main

    assert reader_label_set_summary({}) == []
    (line,) = reader_label_set_summary({"extra_label_sets": ["circ=①,②,③,④"]})
    assert line.startswith("your label set circ (①,②,③,④) at zh_cue: DEGEN for ")
    degenerate = line.split("DEGEN for ", 1)[1].split(";", 1)[0].split(", ")
    # the study's circled set, audited independently: the same families degenerate
    import io
    from contextlib import redirect_stdout

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        assert main(["audit", "--label-sets", "L4_circled", "--contexts", "zh_cue", "--brief"]) == 0
    expected = [row.split()[0] for row in buffer.getvalue().splitlines() if row.split()[1:] == ["DEGEN"]]
    assert sorted(degenerate) == sorted(expected) and expected
