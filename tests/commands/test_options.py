"""One comma-list parser for every command (issue 22, item 1.7).

On the main of issue 22, ``cube audit --label-sets ,`` (and ``--families ,``, ``--contexts ,``)
audited every family with exit 0, and ``cube rescore --model ,`` kept every model, while
``cube run`` refused the same value: each command split lists its own way.
"""

from __future__ import annotations

import re

import pytest

from cube.cli import main
from cube.commands.options import comma_list, joined, parse_comma_list
from cube.errors import ConfigError


@pytest.mark.parametrize("argv, needle", [
    (["audit", "--label-sets", ","], "--label-sets ',' has an empty entry"),
    (["audit", "--families", ","], "--families ',' has an empty entry"),
    (["audit", "--contexts", ","], "--contexts ',' has an empty entry"),
    (["audit", "--families", "smollm2,,qwen2.5"], "--families 'smollm2,,qwen2.5' has an empty entry"),
    (["audit", "--label-sets", "L1_halfwidth,L1_halfwidth"], "names 'L1_halfwidth' twice"),
    (["rescore", "records", "--model", ","], "--model ',' has an empty entry"),
    (["rescore", "records", "--shots", "0,x"], "--shots '0,x' must be comma-separated integers"),
    (["run", "--model", "m", "--out", "x", "--label-sets", ","], "--label-sets ',' has an empty entry"),
    (["run", "--model", "m", "--out", "x", "--subjects", " "], "--subjects ' ' has an empty entry"),
])
def test_an_empty_or_repeated_entry_is_one_line_and_exit_2_in_every_command(argv, needle, capsys, tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)  # "records" and "x" name nothing here: the parser must refuse first
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cube: error: ") and needle in err[0], err


def test_the_parser_strips_converts_and_round_trips():
    assert parse_comma_list(" a, b ,c", "--x") == ["a", "b", "c"]
    assert comma_list("--shots", int)("0,5") == [0, 5]
    assert joined([0, 5]) == "0,5" and joined("a") == "a"
    for bad in ("", ",", "a,", ",a", "a,,b", "a,a"):
        with pytest.raises(ConfigError, match="--x"):
            parse_comma_list(bad, "--x")


def test_rescore_versus_values_use_the_same_parser():
    from cube.commands.rescore import _versus_filters

    assert _versus_filters(["label_set=L1_halfwidth,L4_circled"], {}) == {"label_set": ["L1_halfwidth", "L4_circled"]}
    with pytest.raises(ConfigError, match="--versus label_set ',' has an empty entry"):
        _versus_filters(["label_set=,"], {})
    with pytest.raises(ConfigError, match="--versus shots '0,x' must be comma-separated integers"):
        _versus_filters(["shots=0,x"], {})


def _options(parser, path=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*path, name))
        elif action.option_strings:
            yield path, action


def test_every_comma_separated_option_of_every_command_parses_with_comma_list():
    """Found from the parser itself, so that a new command's list option cannot split its own way:
    an option that says it is comma-separated, or whose default holds a comma, is a comma_list."""
    from cube.cli import build_parser

    lists = [(path, action) for path, action in _options(build_parser())
             if re.search(r"\bcomma\b|\bcomma-", action.help or "") or "," in str(action.default or "")]
    assert len(lists) >= 9  # audit 3, run 6 (subjects, label sets, scorers, shots, cues, orders), rescore's
    for path, action in lists:
        where = f"cube {' '.join(path)} {action.option_strings[0]}"
        assert getattr(action.type, "__name__", "").startswith("comma_list("), where
        with pytest.raises(ConfigError, match="has an empty entry"):
            action.type("a,,b")
