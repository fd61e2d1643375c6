"""One typed run configuration: the CLI, the run log and a notebook all build the same object (issue 25)."""

from __future__ import annotations

import json
import shlex
from dataclasses import fields, replace
from pathlib import Path

import pytest

from cube.cli import build_parser
from cube.errors import ConfigError
from cube.harness.run_config import COMMAND_FIELDS, RunConfig


def parsed(*argv: str) -> RunConfig:
    return RunConfig.from_cli(build_parser().parse_args(["run", *argv]))


def test_the_cli_defaults_are_the_configs_own():
    assert parsed("--model", "m", "--out", "x") == RunConfig(model="m", out=Path("x"))
    config = RunConfig(model="m")
    assert (config.shard_size, config.batch_size, config.shard, config.scorers) == (50, 16, (0, 1), ("M1-seq", "M1-strict"))


def test_a_logged_command_parses_back_to_the_same_config_through_argparse_and_without_it():
    config = parsed("--model", "m", "--card", "mine.card.yaml", "--subjects", "anatomy,virology", "--sample", "6", "--within", "60",
                    "--seed", "3", "--label-sets", "L1_halfwidth,L4_circled", "--scorers", "M1-seq,M2",
                    "--shots", "0,5", "--cues", "zh_cue,en_label_space", "--orders", "original,shift1",
                    "--chat-template", "none,model", "--thinking", "off", "--dtype", "float32", "--batch-size", "8",
                    "--shard-size", "2", "--shard", "1/3",
                    "--max-new-tokens", "7", "--out", "o", "--data", "/d", "--device", "cpu")
    command = config.command_line()
    argv = shlex.split(command)
    assert "--data" not in argv and "--device" not in argv  # they name this machine
    assert [a for a in argv if a.startswith("--")] == [
        {"contexts": "--cues", "chat_templates": "--chat-template"}.get(f, "--" + f.replace("_", "-"))
        for f in COMMAND_FIELDS]
    assert dict(zip(argv[2::2], argv[3::2]))["--shard"] == "1/3"
    again = replace(config, data=None)
    assert RunConfig.from_command(command) == again  # no argparse: a notebook or a provenance page
    assert RunConfig.from_cli(build_parser().parse_args(argv[1:])) == again  # the CLI's own reading
    with pytest.raises(ConfigError, match="unknown option '--nope'"):
        RunConfig.from_command(command + " --nope 1")


def test_a_run_without_the_chat_axis_logs_the_command_it_logged_before_the_axis_existed():
    """``--chat-template none`` (the default) is not spelt out: an older run's logged command, and
    the provenance pages that quote it, stay as they were; any other value is."""
    plain = parsed("--model", "m", "--out", "o")
    assert plain.chat_templates == ("none",)
    # no --cues: the benchmark's own, which build_spec fills in (CMMLU's zh_cue) before the run logs it
    assert plain.contexts is None and "--cues" not in plain.command_line()
    # no --label-sets: likewise the benchmark's own (L1_halfwidth, or A10_halfwidth for items of more options)
    assert plain.label_sets is None and "--label-sets" not in plain.command_line()
    assert replace(plain, contexts=("zh_cue",), label_sets=("L1_halfwidth",)).command_line() == "cube run --model m --benchmark cmmlu --split test " \
        "--seed 0 --label-sets L1_halfwidth --scorers M1-seq,M1-strict --shots 0 --cues zh_cue --orders original " \
        "--backend hf --dtype auto --batch-size 16 --shard-size 50 --shard 0/1 --out o"
    chat = parsed("--model", "m", "--out", "o", "--chat-template", "model")
    assert "--orders original --chat-template model --backend hf" in chat.command_line()
    assert RunConfig.from_command(chat.command_line()) == chat
    with pytest.raises(ConfigError, match=r"^unknown chat template 'chatml'; known: none, model"):
        parsed("--model", "m", "--out", "o", "--chat-template", "none,chatml")


def test_the_run_log_records_the_config_and_reads_it_back():
    config = RunConfig(model="m", sample=4, subjects=("anatomy",), shots=(0, 5), out=Path("o"), data=Path("/d"))
    logged = json.loads(json.dumps(config.to_log()))  # as the run log's JSON line holds it
    assert "data" not in logged and logged["shots"] == [0, 5] and logged["out"] == "o"
    assert RunConfig.from_log({"config": logged, "command": "ignored"}) == replace(config, data=None)
    assert {f.name for f in fields(RunConfig)} - set(logged) == {"data"}


def test_an_old_log_line_reads_back_through_its_command_or_its_cells():
    assert RunConfig.from_log({"command": "cube run --model m --sample 3 --out o"}) == RunConfig(
        model="m", sample=3, out=Path("o"))
    old = {"model": "m1", "benchmark": "cmmlu", "split": "test", "sample": 600, "seed": 0, "dtype": "bfloat16",
           "backend": "hf", "scorers": ["M1-seq"], "cells": ["L1_halfwidth|zh_cue|0shot|original",
                                                            "L1_halfwidth|zh_cue|5shot|original"]}
    config = RunConfig.from_log(old)
    assert (config.model, config.sample, config.shots, config.dtype, config.out) == ("m1", 600, (0, 5), "bfloat16",
                                                                                    Path("data/records"))


@pytest.mark.parametrize("changes, needle", [
    ({"batch_size": 0}, "--batch-size 0 must be at least 1"),
    ({"shard_size": -2}, "--shard-size -2 must be at least 1"),
    ({"shard": (2, 2)}, "--shard 2/2: need 0 <= K < N"),
    ({"scorers": ("M9",)}, "unknown scorer 'M9'"),
    ({"sample": 67, "within": 60}, "--within 60 needs a --sample of at most 60"),
])
def test_bad_settings_are_one_line_errors_without_argparse(changes, needle):
    with pytest.raises(ConfigError, match=needle) as caught:
        RunConfig(model="m", **changes)
    assert "\n" not in str(caught.value)


def test_a_bad_shard_text_names_the_value():
    with pytest.raises(ConfigError, match=r"--shard 'x' must look like K/N"):
        parsed("--model", "m", "--out", "o", "--shard", "x")


def test_the_identity_includes_the_dtype_and_not_the_shard():
    """A resume under another dtype must refuse; v1 of the hash left the dtype out (issue 25)."""
    from cube.harness.run_config import RunSettings
    from cube.harness.run_spec import RunSpec
    from cube.protocol.items import Item

    made_up = tuple(Item("cmmlu", "s", "test", n, f"q{n}", ("a", "b", "c", "d"), 0) for n in range(3))
    spec = RunSpec(model="m", items=made_up, cells=(), scorers=("M2",), shard_size=2,
                   settings=RunSettings(dtype="float32"))
    assert spec.config_hash() != replace(spec, settings=RunSettings(dtype="bfloat16")).config_hash()
    # the batch size changes a record only by floating-point noise: not the identity (hash version 3)
    assert spec.config_hash() == replace(spec, batch_size=8).config_hash()
    assert spec.config_hash() == replace(spec, shard=(1, 2)).config_hash()  # parallel shards: one run


def test_a_config_is_built_and_checked_without_pyarrow():
    """A notebook or the audit-only install builds a config: the scorer names come from the table."""
    import subprocess
    import sys

    code = ("import sys; from cube.harness.run_config import RunConfig; RunConfig(model='m', scorers=('M2', 'TF')); "
            "print('pyarrow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr
