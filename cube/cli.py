"""The ``cube`` console command: one subcommand per module in ``cube.commands``.

Every CubeError becomes one line on stderr and exit status 2 (argparse's own errors keep theirs).
Two failures of the machine rather than of cube's input are also one line, not a traceback: a
reader that closes the pipe (``cube rescore --json | head``: exit 141, as a shell reports SIGPIPE)
and a full disk (exit 2). A module of one of cube's pip extras that is not installed is one line
naming the extra (``cube.commands.extras``), checked before the command starts where the command
declares it. Nothing else is caught: any other exception is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from cube import __version__
from cube.commands.extras import check as check_extras
from cube.commands.extras import command_name, missing_extra
from cube.errors import CubeError
from cube.harness.threads import choose_wait_policy

# Each module defines ``register(subparsers)``, which adds its parser and sets ``func``.
COMMAND_MODULES = [
    "cube.commands.audit",
    "cube.commands.data",
    "cube.commands.credit",
    "cube.commands.release",
    "cube.commands.run",
    "cube.commands.rescore",
    "cube.commands.confirm",
    "cube.commands.simulate",
    "cube.commands.book",
    "cube.commands.merge",
    "cube.commands.plan",
    "cube.commands.smoke",
    "cube.commands.import_run",
    "cube.commands.explain",
    "cube.commands.report",
]


# What `cube --help` says first: for the user, not this module's developer.
DESCRIPTION = ("cube: trustworthy multiple-choice LLM evaluation. Predict from tokenizers alone which (model, "
               "label set, cue) cells a first-token scorer cannot score (audit), score models (run), and "
               "rescore, confirm and explain the records. `cube COMMAND --help` for each command.")
EPILOG = ("environment: CUBE_CONFIG_DIR a config folder of your own (a copy of the shipped one, "
          "cube/_config, with your label sets, cues or models); CUBE_DATA where `cube data fetch` "
          "installs benchmarks (default ~/.cache/cube/data); CUBE_BENCHMARKS a folder of benchmark folders "
          "to read instead; CUBE_CACHE tokenizers and models (default ~/.cache/cube).")


def plain(text: str | None) -> str | None:
    """A module docstring as help text: its reStructuredText literals (````cube run````) as plain text."""
    import re

    return re.sub(r"``(.+?)``", r"\1", text) if text else text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cube", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"cube {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for command in sub.choices.values():  # and their own subcommands (cube data fetch, ...)
        for one in [command] + [p for a in command._actions if isinstance(a, argparse._SubParsersAction)
                                for p in a.choices.values()]:
            one.description = plain(one.description)
    return parser


# A disk that is full (or over quota) fails whichever write comes first; the writers that can clean
# up after themselves do (cube.atomic), and the user needs one line saying why, not a traceback.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing will flush to it
        pass


def main(argv: list[str] | None = None) -> int:
    choose_wait_policy()  # before anything loads torch: libgomp reads it once (cube.harness.threads)
    argv = sys.argv[1:] if argv is None else argv
    command = ""
    try:
        parser = build_parser()
        command = command_name(parser, argv)
        args = parser.parse_args(argv)  # a list option's ConfigError (cube.commands.options)
        check_extras(args, command)  # a missing extra: one line before the command starts
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
        return status
    except CubeError as exc:
        print(f"cube: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        line = missing_extra(exc.name or "", command)
        if line is None:  # not a module of cube's extras: a bug, with its traceback
            raise
        print(f"cube: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cube: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        print("cube: output closed by the reader (broken pipe); output stopped", file=sys.stderr)
        return 141
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        print(f"cube: error: {exc.strerror}{where}; free some space and run the command again",
              file=sys.stderr)
        return 2
