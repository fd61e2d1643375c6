"""A RunConfig built into a RunSpec without argparse: the same items, cells and settings as ``cube run``."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from cube.cli import build_parser
from cube.harness.run_config import RunConfig


@pytest.mark.registry
def test_a_config_builds_the_same_spec_as_the_command_line(benchmarks_root):
    pytest.importorskip("torch")
    from cube.commands.run import build_spec as from_args
    from cube.harness.build import build_spec

    config = RunConfig(model="smollm2-135m-instruct", subjects=("anatomy", "virology"), sample=3,
                       label_sets=("L1_halfwidth", "L4_circled"), dtype="float32", out=Path("o"),
                       data=benchmarks_root / "cmmlu")
    spec = build_spec(config)
    argv = shlex.split(config.command_line())[1:] + ["--data", str(benchmarks_root / "cmmlu")]
    assert spec == from_args(build_parser().parse_args(argv))  # items, cells, settings, command alike
    assert [c.key for c in spec.cells] == ["L1_halfwidth|zh_cue|0shot|original", "L4_circled|zh_cue|0shot|original"]
    # the settings hold the configuration as it ran: the benchmark's own cues filled in (no --cues given)
    ran = replace(config, contexts=("zh_cue",))
    assert len(spec.items) == 3 and spec.settings.config == ran and spec.settings.dtype == "float32"
    assert spec.settings.to_log()["command"] == ran.command_line() and spec.settings.to_log()["config"] == ran.to_log()
