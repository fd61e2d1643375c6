"""``cube confirm``: the matrix; exit 0 all confirmed, 1 on a mismatch, 2 on bad input."""

from __future__ import annotations

import json

import pytest

from cube import cli
from cube.config import REPO_ROOT
from cube.records.store import write_records
from tests.record_tables import record, table

PREDICTION = str(REPO_ROOT / "data" / "predictions" / "audit_frozen.json")


@pytest.fixture
def run(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.confirm"])

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["confirm", *argv, "--prediction", PREDICTION])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def strict_records(model: str, label_set: str, tie: bool, n: int = 4) -> list[dict]:
    scores = [-1.0] * 4 if tie else [-1.0, -2.0, -3.0, -4.0]
    return [record(model=model, scorer="M1-strict", label_set=label_set, uid=f"cmmlu/arts/test/{i}",
                   scores=scores, tie_groups="0=1=2=3" if tie else "") for i in range(n)]


@pytest.fixture
def store(tmp_path):
    # qwen3 at zh_cue: L4_circled is predicted DEGEN, L1_halfwidth defined.
    recs = strict_records("qwen3-8b", "L4_circled", tie=True)
    recs += strict_records("qwen3-8b", "L1_halfwidth", tie=False)
    write_records(tmp_path / "recs", table(recs))
    return tmp_path / "recs"


def test_all_confirmed_exit_0(run, store):
    code, out, err = run(str(store))
    assert code == 0 and err == ""
    assert "2/2 confirmed" in out and "partial collisions: none" in out
    assert "qwen3-8b" in out.splitlines()[2] and "1/1" in out.splitlines()[2]


def test_mismatch_exit_1_with_explanation(run, store):
    write_records(store, table(strict_records("llama-3.1-8b", "L1_halfwidth", tie=True)))
    code, out, _ = run(str(store))
    assert code == 1
    assert "2/3 confirmed" in out
    assert "llama-3.1-8b / L1_halfwidth / zh_cue: predicted max1tok" in out


def test_family_option_and_json(run, store):
    write_records(store, table(strict_records("my-demo", "L4_circled", tie=True)))
    code, out, _ = run(str(store), "--family", "my-demo=qwen3", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["matrix"]["my-demo"] == {"L4_circled": "1/1"}
    assert doc["confirmed"] == doc["predicted"] == 3


def test_bad_input_is_exit_2(run, store, tmp_path):
    code, _, err = run(str(store), "--family", "nonsense")
    assert code == 2 and "expected MODEL=FAMILY" in err
    code, _, err = run(str(tmp_path / "nowhere"))
    assert code == 2 and "no manifest" in err
    other = tmp_path / "seq-only"
    write_records(other, table([record()]))
    code, _, err = run(str(other))
    assert code == 2 and "no M1-strict records" in err


@pytest.mark.registry
def test_a_killed_runs_store_is_refused_unless_allowed(run, tmp_path, benchmarks_root, tiny_qwen3, qwen3_tokenizer):
    """Issue 22: 2 of the 6 shards of `--sample 30 --shard-size 5` were confirmed as if complete."""
    pytest.importorskip("torch")
    from tests.killed_run import killed_run

    killed_run(tmp_path / "records", benchmarks_root, tiny_qwen3, qwen3_tokenizer)
    code, out, err = run(str(tmp_path / "records"), "--family", "tiny=qwen3")
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("cube: error: ")
    assert "incomplete store: tiny/label--L1_halfwidth__zh_cue__0shot__original: 2 of 6 shards, 10 of 30 items" in err
    assert "--allow-incomplete" in err
    code, out, err = run(str(tmp_path / "records"), "--family", "tiny=qwen3", "--allow-incomplete")
    assert code in (0, 1) and "tiny" in out, err


def test_a_users_own_model_is_not_a_silent_zero_of_zero(tmp_path, run):
    """Issue 36 §5: a store of a model the prediction has no family for printed `0/0 confirmed`
    with exit 0; it is an error that names --family (and the prediction's families)."""
    write_records(tmp_path / "mine", table(strict_records("my-own-model", "L4_circled", tie=True)))
    code, out, err = run(str(tmp_path / "mine"))
    assert code == 2 and out == "" and "0/0" not in out
    (line,) = err.strip().splitlines()
    assert "nothing to confirm: the tokenizer family of my-own-model is unknown" in line
    assert "--family MODEL=FAMILY (the prediction's families: " in line and "qwen3" in line
    code, out, err = run(str(tmp_path / "mine"), "--family", "my-own-model=qwen3")
    assert code == 0 and "1/1 confirmed" in out


def test_the_default_prediction_is_found_from_any_folder(tmp_path, monkeypatch, capsys):
    """`cube confirm` resolved data/predictions/audit_frozen.json against the current folder."""
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["cube.commands.confirm"])
    monkeypatch.chdir(tmp_path)
    assert cli.main(["confirm", str(REPO_ROOT / "data" / "sample")]) == 0
    assert "confirmed" in capsys.readouterr().out
