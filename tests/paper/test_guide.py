"""The Guide's machinery: examples run as a reader runs them and fail loudly when they stop
working; the command reference holds every command and option cube's own parsers define."""

from __future__ import annotations

import argparse

import pytest

from cube.cli import build_parser
from cube.errors import ConfigError
from cube.commands.reference import command_reference, commands
from cube.paper.guide import cube


def _every_parser(parser, prefix="cube"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield f"{prefix} {name}", child
                yield from _every_parser(child, f"{prefix} {name}")


def test_the_reference_holds_every_command_and_option_of_the_parsers():
    reference = command_reference()
    walked = list(_every_parser(build_parser()))
    assert commands() == [name for name, _ in walked]
    assert "cube report" in commands() and "cube data fetch" in commands()
    for name, parser in walked:
        assert f">{name}</h2>" in reference
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in reference, f"{name}: {flag} missing from the reference"


def test_an_example_shows_the_command_and_its_output_with_the_readers_paths(tmp_path):
    example = cube(f"cube rescore {tmp_path}/nowhere", expect=2, paths={str(tmp_path): "runs"})
    assert example.command == "cube rescore runs/nowhere"
    assert "runs/nowhere" in example.output and str(tmp_path) not in example.output
    assert example._repr_markdown_().startswith("```console\n$ cube rescore runs/nowhere\n")


def test_an_example_that_stops_working_fails_the_page_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"guide example `cube rescore .*nowhere` exited 2, not 0: cube: error"):
        cube(f"cube rescore {tmp_path}/nowhere")
