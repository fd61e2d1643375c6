"""`cube run` end to end on a real demo model (SmolLM2-135M, converted once into the store)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from cube.cli import main
from cube.config import REPO_ROOT
from cube.errors import ConfigError


def run_cli(*argv):
    return subprocess.run([sys.executable, "-m", "cube", "run", *argv], capture_output=True, text=True, cwd=REPO_ROOT)


@pytest.mark.parametrize("argv, needle", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--model", "nope"], "give one of these demo names, the path of your model's folder or .gguf file"),
    (["--model", "smollm2-135m-instruct", "--scorers", "M9"], "unknown scorer 'M9'"),
    (["--model", "smollm2-135m-instruct", "--shard", "3/2"], "--shard 3/2"),
    (["--model", "smollm2-135m-instruct", "--shard", "x"], "--shard 'x' must look like K/N"),
    (["--model", "smollm2-135m-instruct", "--label-sets", "L9"], "unknown label set 'L9'"),
    (["--model", "smollm2-135m-instruct", "--label-sets", "L9"], "point CUBE_CONFIG_DIR at it"),
    (["--model", "smollm2-135m-instruct", "--data", "pyproject.toml"],
     "--data pyproject.toml is a file, not a benchmark folder; install it with `cube data fetch cmmlu --from "
     "pyproject.toml`"),
    (["--model", "smollm2-135m-instruct", "--shots", "five"], "--shots 'five'"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, argv, needle):
    proc = run_cli("--out", str(tmp_path / "out"), "--subjects", "anatomy", "--sample", "1", *argv)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cube: error: ") and needle in last
    assert not (tmp_path / "out").exists()


@pytest.mark.registry
def test_real_model_run_writes_records_and_resumes(tmp_path, capsys):
    pytest.importorskip("torch")
    from cube.records.store import read_records

    out = tmp_path / "records"
    argv = ["run", "--model", "smollm2-135m-instruct", "--subjects", "anatomy,virology", "--sample", "2",
            "--label-sets", "L1_halfwidth,L4_circled", "--scorers", "M1-seq,M1-strict", "--out", str(out)]
    assert main(argv) == 0
    table = read_records(out)
    assert table.num_rows == 2 * 2 * 2  # items x label sets x scorers
    # the run ends with each cell's score, its tie and parse-failure shares (issue 36 §4)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split()[-3:] == ["tied", "parse-fail", "in-noise"]
    circled_line = next(line for line in printed if "M1-strict L4_circled zh_cue 0-shot" in line)
    assert circled_line.split()[-3:-1] == ["100.0%", "0.0%"]
    assert any(line.startswith("WARNING: tie-breaks decide 100.0% (2/2)") for line in printed)
    circled = [r for r in table.to_pylist() if r["label_set"] == "L4_circled" and r["scorer"] == "M1-strict"]
    assert all(r["tied"] and r["tie_groups"] == "0=1=2=3" for r in circled)  # predicted DEGEN for smollm2
    import json
    import shlex

    logged = json.loads((out / "smollm2-135m-instruct" / "runlog.jsonl").read_text().splitlines()[-1])
    replay = shlex.split(logged["command"])  # the logged command names every option: same run
    assert replay[:2] == ["cube", "run"] and "--data" not in replay and "--device" not in replay
    assert dict(zip(replay[2::2], replay[3::2]))["--label-sets"] == "L1_halfwidth,L4_circled"
    capsys.readouterr()
    assert main(replay[1:]) == 0  # a re-run (here: of the logged command) finds every shard done
    assert "0 shards to run" in capsys.readouterr().err
    assert read_records(out).num_rows == table.num_rows


def test_within_draws_the_subset_from_the_full_sample():
    """A CoT or 5-shot subset run must share its items with the full run, or nothing pairs."""
    from cube.cli import build_parser
    from cube.commands.run import build_spec

    def uids(*extra):
        args = build_parser().parse_args(["run", "--model", "smollm2-135m-instruct", "--out", "x", *extra])
        return [item.uid for item in build_spec(args).items]

    full, subset = uids("--sample", "600"), uids("--sample", "67", "--within", "600")
    assert len(subset) == 67 and set(subset) <= set(full)
    assert len({u.split("/")[1] for u in subset}) == 67  # still one item per subject
    assert not set(uids("--sample", "67")) <= set(full)  # what a plain 67-item sample gives
    with pytest.raises(ConfigError, match="--within 60 needs a --sample of at most 60"):
        uids("--sample", "67", "--within", "60")


def _no_model_loads(monkeypatch):
    import cube.harness.models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded although an argument is bad")

    monkeypatch.setattr(cube.harness.models, "load_model", refuse)


@pytest.mark.parametrize("argv, needle", [
    (["--sample", "0"], "--sample 0 must be at least 1"),
    (["--sample", "100000"], "--sample 100000 is more than the"),
    (["--sample", "1", "--within", "0"], "--within 0 must be at least 1"),
    (["--label-sets", ","], "--label-sets ',' has an empty entry"),
    (["--scorers", ","], "--scorers ',' has an empty entry"),
    (["--scorers", "M1-seq,M1-seq"], "--scorers 'M1-seq,M1-seq' names 'M1-seq' twice"),
    (["--max-new-tokens", "-1", "--scorers", "M6"], "--max-new-tokens -1 must be at least 1"),
    (["--cues", "nope"], "unknown answer context 'nope'"),
    (["--orders", "sideways"], "cell order 'sideways'"),
    (["--shots", "0,,5"], "--shots '0,,5' has an empty entry"),
    (["--batch-size", "0"], "--batch-size 0 must be at least 1"),
    (["--model", "nope"], "unknown model 'nope'"),
    # issue 22 §2: each of these failed only once the model had loaded, and left its cell recorded
    (["--shots", "6"], "needs 6 dev items of subject 'anatomy'; found 5"),  # CMMLU has 5 per subject
    (["--split", "dev", "--shots", "5"], "needs 5 dev items of subject 'anatomy'; found 4"),  # never its own shot
    (["--orders", "shift4"], "option order 'shift4' is not 'original' or shift1..shift3"),
])
def test_a_bad_argument_fails_before_any_model_loads(tmp_path, monkeypatch, capsys, argv, needle):
    _no_model_loads(monkeypatch)
    base = {"--model": "smollm2-135m-instruct", "--subjects": "anatomy", "--sample": "1", "--out": str(tmp_path / "out")}
    base.update(dict(zip(argv[::2], argv[1::2])))
    assert main(["run", *[x for pair in base.items() for x in pair]]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("cube: error: ") and needle in last
    assert not (tmp_path / "out").exists()


def test_out_must_be_a_records_folder_before_any_model_loads(tmp_path, monkeypatch, capsys):
    _no_model_loads(monkeypatch)
    argv = ["run", "--model", "smollm2-135m-instruct", "--subjects", "anatomy", "--sample", "1", "--out"]
    target = tmp_path / "records.parquet"
    target.write_bytes(b"x")
    assert main([*argv, str(target)]) == 2
    assert "is a file" in capsys.readouterr().err
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    assert main([*argv, str(tmp_path / "home")]) == 2
    assert "a folder with other files and no MANIFEST.json" in capsys.readouterr().err


@pytest.mark.registry
def test_real_model_resume_under_another_configuration_is_refused(tmp_path, monkeypatch, capsys):
    """The issue's repro: agronomy, then the same store with anatomy, another sample or seed."""
    pytest.importorskip("torch")
    from cube.records.store import read_records

    out = str(tmp_path / "K")
    argv = ["run", "--model", "smollm2-135m-instruct", "--label-sets", "L1_halfwidth", "--scorers", "M1-seq",
            "--sample", "4", "--out", out]
    assert main([*argv, "--subjects", "agronomy"]) == 0
    before = read_records(out)
    _no_model_loads(monkeypatch)
    capsys.readouterr()
    for extra, needle in ((["--subjects", "anatomy"], r'subjects \["agronomy"\] -> \["anatomy"\]'),
                          (["--subjects", "agronomy", "--seed", "1"], "seed 0 -> 1"),
                          (["--subjects", "agronomy", "--sample", "3"], "sample 4 -> 3")):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("cube: error: ") and "written under another configuration" in err[0]
        assert re.search(needle, err[0]) and "items " in err[0]
    assert read_records(out).equals(before)
    assert main([*argv, "--subjects", "agronomy"]) == 0  # the same command: nothing to do
    err = capsys.readouterr().err
    assert "0 shards to run" in err
    # Issue 36 §3: --dtype auto (the default) resumed in the store's dtype and said so, without
    # a probe that could flip; the other dtype is refused with the option that resumes it; the
    # batch size does not block a resume.
    from cube.records.store import read_manifest

    written = {c["dtype"] for c in read_manifest(out)["cells"].values()}
    assert len(written) == 1
    (recorded,) = written
    assert f"auto: resuming a store whose records are {recorded}" in err
    other = "float32" if recorded == "bfloat16" else "bfloat16"
    assert main([*argv, "--subjects", "agronomy", "--dtype", other]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f'dtype "{recorded}" -> "{other}"' in err[0]
    assert err[0].endswith(f"(resume it with --dtype {recorded}, or write to a new --out)"), err[0]
    assert main([*argv, "--subjects", "agronomy", "--batch-size", "3"]) == 0
    assert "0 shards to run" in capsys.readouterr().err


@pytest.mark.parametrize("name, labels, needle", [
    ("L_three", "[A, B, C]", "label set 'L_three' has 3 labels but 1 of 1 items have more options (up to 4)"),
    ("L_26", "[" + ", ".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ") + "]", "label set 'L_26' has 26 labels but"),
    ("'L/slash'", "[A, B, C, D]", "label set name 'L/slash' cannot name a record shard"),
])
def test_a_label_set_that_cannot_fit_fails_before_any_model_loads(tmp_path, monkeypatch, capsys, name, labels, needle):
    """Issue 22 §2: a user's label set (config/label_sets.yaml) of the wrong size or with a '/' in its
    name failed after the model loaded, and its cell stayed recorded in the manifest without records."""
    import shutil

    config = tmp_path / "config"
    shutil.copytree(REPO_ROOT / "config", config)
    with open(config / "label_sets.yaml", "a", encoding="utf-8") as fh:
        fh.write(f"{name}: {labels}\n")
    monkeypatch.setenv("CUBE_CONFIG_DIR", str(config))
    _no_model_loads(monkeypatch)
    out = tmp_path / "out"
    argv = ["run", "--model", "smollm2-135m-instruct", "--subjects", "anatomy", "--sample", "1",
            "--label-sets", name.strip("'"), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cube: error: ") and needle in err[0], err
    assert not out.exists()  # nothing written, so nothing recorded


@pytest.mark.registry
def test_a_second_run_on_one_store_refuses_naming_the_first_ones_pid(tmp_path):
    """Issue 22: two processes on one --out interleaved their writes (both rc 0, the store then
    failing its own check), and the second one's start-up cleanup deleted the first one's temp
    file in flight. Two real `cube run` processes: the first is held (SIGSTOP) once it has taken
    the store's writer lock, so the second meets the lock however fast either machine is."""
    import os
    import signal

    pytest.importorskip("torch")
    from cube.records.store import read_records

    out = tmp_path / "records"
    argv = [sys.executable, "-m", "cube", "run", "--model", "smollm2-135m-instruct", "--subjects", "anatomy,virology",
            "--sample", "2", "--label-sets", "L1_halfwidth", "--scorers", "M1-seq", "--out", str(out)]
    first = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)
    try:
        seen = []
        while not any("shards to run" in line for line in seen):
            line = first.stderr.readline()
            assert line, f"the first run ended early: {seen}"
            seen.append(line)
        os.kill(first.pid, signal.SIGSTOP)  # holds the lock, mid-run
        in_flight = out / "smollm2-135m-instruct" / ".label--L1_halfwidth__zh_cue__0shot__original--00000.parquet.x1.tmp"
        in_flight.parent.mkdir(parents=True, exist_ok=True)
        in_flight.write_bytes(b"half a shard")  # what the first run's write would leave in flight
        second = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
        err = second.stderr.strip().splitlines()
        assert second.returncode == 2 and len(err) == 1, second.stderr
        assert err[0].startswith("cube: error: ") and f"another process (pid {first.pid}) is writing" in err[0]
        assert in_flight.exists()  # the refused run touched nothing
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, rest = first.communicate(timeout=600)
    assert first.returncode == 0, rest
    assert read_records(out).num_rows == 2


# issue 23 §2: on a machine without CMMLU, every one of these answered "benchmark data not found";
# the user fixed the data only to learn that the command was wrong
@pytest.mark.parametrize("argv, needle", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--shard", "3/2"], "--shard 3/2: need 0 <= K < N"),
    (["--scorers", "M9"], "unknown scorer 'M9'"),
    (["--sample", "0"], "--sample 0 must be at least 1"),
    (["--sample", "5", "--within", "4"], "--within 4 needs a --sample of at most 4"),
    (["--cues", "nope"], "unknown answer context 'nope'"),
    (["--label-sets", "L9"], "unknown label set 'L9'"),
    (["--orders", "sideways"], "cell order 'sideways'"),
    (["--device", "bogus"], "--device 'bogus'"),
])
def test_without_benchmark_data_a_bad_argument_is_named_before_the_data(tmp_path, monkeypatch, capsys, argv, needle):
    _no_model_loads(monkeypatch)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("CUBE_BENCHMARKS", str(tmp_path / "empty"))  # holds no cmmlu/: the lookup misses
    base = {"--model": "smollm2-135m-instruct", "--sample": "1", "--out": str(tmp_path / "out")}
    base.update(dict(zip(argv[::2], argv[1::2])))
    assert main(["run", *[x for pair in base.items() for x in pair]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cube: error: ") and needle in err[0], err
    assert not (tmp_path / "out").exists()
    # and a right command still says, last, that the data is missing and how to get it
    assert main(["run", "--model", "smollm2-135m-instruct", "--sample", "1", "--out", str(tmp_path / "out")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cmmlu: benchmark data not found" in last and "cube data fetch cmmlu" in last


def test_a_missing_vllm_is_one_line_saying_how_to_get_it(tmp_path, monkeypatch, capsys):
    """Issue 36 §5: `--backend vllm` without vLLM was a traceback after the items and a dtype probe."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed in this environment")
    import cube.harness.precision
    import cube.protocol.benchmarks

    def refuse(*args, **kwargs):
        raise AssertionError("items or the dtype probe came before the backend check")

    _no_model_loads(monkeypatch)
    monkeypatch.setattr(cube.protocol.benchmarks, "resolve", refuse)  # the registry reads the items
    monkeypatch.setattr(cube.harness.precision, "matmul_speedup", refuse)
    assert main(["run", "--model", "smollm2-135m-instruct", "--sample", "1", "--backend", "vllm",
                 "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("cube: error: --backend vllm: vllm is not installed in this environment (")
    assert "scripts/install_vllm_env.sh" in line and ".venv-vllm/bin/python -m cube run" in line
    assert not (tmp_path / "out").exists()


def test_every_run_option_has_help_that_states_its_default():
    """Issue 36 §6: `cube run --help` left --label-sets, --split, --seed, --out, --device and
    --batch-size without help, and stated few defaults (they exist in RunConfig)."""
    import argparse

    from cube.cli import build_parser
    from cube.harness.run_config import RunConfig

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    run_parser = sub.choices["run"]
    for action in run_parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{action.option_strings[0]} has no help"
        if action.default not in (None, False):
            shown = action.default if isinstance(action.default, str) else str(action.default)
            assert shown in action.help or "(default)" in action.help, (action.option_strings[0], action.help)
    sample = next(a for a in run_parser._actions if "--sample" in a.option_strings)
    assert "11,582" in sample.help and RunConfig.default("sample") is None


def _store_of(tmp_path, model: str, scorers: tuple[str, ...], margin: float):
    """A store as a run of ``scorers`` in bf16 leaves it (real shards, the cells' recorded
    configurations), every label decision won by ``margin`` and every generation parsed but one; no
    model runs."""
    from cube.harness.run_config import RunSettings
    from cube.harness.run_spec import RunSpec, cell_configs, plan_jobs
    from cube.harness.runner import write_job_shard
    from tests.record_tables import record
    from tests.records.test_merge import CELLS, ITEMS

    spec = RunSpec(model=model, items=ITEMS, cells=CELLS, scorers=scorers, shard_size=4,
                   settings=RunSettings(dtype="bfloat16"))
    configs = cell_configs(spec)
    for job in plan_jobs(spec):
        rows = []
        for it in job.items:
            if job.kind == "gen":
                for name in ("M6-strict", "M6-lenient"):
                    pred = -1 if (name == "M6-strict" and it.uid == ITEMS[0].uid) else it.answer
                    rows.append(record(model=model, uid=it.uid, scorer=name, label_set="L1", gold=it.answer, pred=pred,
                                       scores=[float("nan")] * 4, tied=False, generation="答案",
                                       probs=[float(i == pred) for i in range(4)], dtype="bfloat16"))
            else:
                scores = [-1.0 - 2 * i for i in range(4)]
                scores[it.answer], scores[(it.answer + 1) % 4] = -1.0, -1.0 - margin
                scores = [s if i in (it.answer, (it.answer + 1) % 4) else -9.0 - i for i, s in enumerate(scores)]
                rows.append(record(model=model, uid=it.uid, scorer="M1-seq" if job.kind == "label" else "M2",
                                   label_set="L1" if job.kind == "label" else "-",
                                   context="zh_cue" if job.kind == "label" else "cloze", gold=it.answer,
                                   pred=it.answer, scores=scores, dtype="bfloat16"))  # as the runner writes them
        write_job_shard(tmp_path / "out", model, job, rows, config=configs[f"{model}/{job.cell_name}"])
    return spec


def test_issue45_the_closing_table_has_the_generation_cells_wide_names_and_says_what_in_noise_is(tmp_path, capsys):
    """``cube run``'s closing table left out M6's cells (selected by the scorer's name, not its
    records'), cut nothing but overflowed its 58-character cell column, never said what ``in-noise``
    is, and gave no warning where most decisions were within the precision's noise."""
    from cube.analysis.noise import DECISION_NOISE
    from cube.commands.run import cell_count, print_scores

    model = "a-model-whose-name-is-longer-than-the-old-column-really-7b-instruct"
    spec = _store_of(tmp_path, model, ("M1-seq", "M2", "M6"), margin=DECISION_NOISE["bfloat16"] / 2)
    print_scores(tmp_path / "out", spec)
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0], lines[1:5]
    cells = sorted(line[:header.index(" n ") + 1].strip() for line in rows)
    assert cells == sorted(f"{model} {s}" for s in ("M1-seq L1 zh_cue 0-shot original", "M2 - cloze 0-shot original",
                                                     "M6-lenient L1 zh_cue 0-shot original",
                                                     "M6-strict L1 zh_cue 0-shot original"))
    assert len({line.index("[") for line in rows}) == 1  # every row's columns line up under the header
    strict = next(line for line in rows if " M6-strict " in line)
    assert strict.split()[-2:] == [f"{1 / 7:.1%}", "-"]  # parse failures; no margin for a generation
    label = next(line for line in rows if " M1-seq " in line)
    assert label.split()[-1] == "100.0%"  # every decision by half the bf16 bound
    assert any(line.startswith(f"WARNING: 100.0% (7/7) of the decisions in model={model}, benchmark=cmmlu, scorer=M1-seq")
               and line.endswith("score it again with --dtype float32, whose noise is 10,000 times smaller")
               for line in lines)
    assert lines[-1].startswith("tied: decisions a tie-break made; parse-fail: generations no extractor could read; "
                                "in-noise: the share of a cell's decisions whose margin")
    assert cell_count(spec) == "3 cells (1 label, 1 gen, 1 cloze)"  # it said "1 cells": label cells alone


def test_issue45_no_noise_warning_where_the_decisions_are_clear(tmp_path, capsys):
    from cube.commands.run import print_scores

    print_scores(tmp_path / "out", _store_of(tmp_path, "m1", ("M1-seq",), margin=1.0))
    out = capsys.readouterr().out
    assert "WARNING" not in out and out.splitlines()[1].split()[-1] == "0.0%"


def test_issue45_in_noise_is_explained_in_help_with_the_measured_bounds():
    from cube.analysis.noise import DECISION_NOISE
    from cube.analysis.cell_table import IN_NOISE_MEANS

    assert f"bf16 {DECISION_NOISE['bfloat16']} nats, fp32 {DECISION_NOISE['float32']:g};".replace("e-05", "e-5") in IN_NOISE_MEANS
    for command in ("run", "rescore"):
        shown = " ".join(run_cli_help(command).split())
        assert "in-noise: the share of a cell's decisions whose margin" in shown and "--dtype float32" in shown


def run_cli_help(command: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "cube", command, "--help"], capture_output=True, text=True,
                          cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
