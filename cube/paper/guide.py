"""The Guide's examples, executed when the book is built, so that they cannot drift.

Each example is a ``cube`` command line run as a reader runs it, in a process of its own, with
its standard output and error captured as a terminal interleaves them; the page shows the command
and what it printed today. A command that exits otherwise than the page
expects fails the notebook, and with it ``cube book execute`` and nbval: a guide whose example no
longer works does not build. Folders a page writes into (a temporary store) are shown under the
name a reader would type (``runs/quiz``), never as the build machine's paths.

The command reference is generated from ``cube``'s own parsers (``cube.commands.reference``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from cube.config import REPO_ROOT
from cube.errors import ConfigError

# A tqdm progress line ("desc:  41%|####      | 405/987 [00:00<00:01, 529.89tok/s]"), and its
# notebook warning: shown on a terminal as it redraws, meaningless on a page.
PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+ \[|TqdmWarning|from \.autonotebook import")


@dataclass(frozen=True)
class Example:
    command: str  # as a reader types it
    status: int
    output: str  # stdout then stderr, as the terminal shows them (paths shown as the reader's)

    def _repr_markdown_(self) -> str:
        fence = "````" if "```" in self.output else "```"
        return f"{fence}console\n$ {self.command}\n{self.output.rstrip()}\n{fence}"


def cube(command: str, expect: int = 0, paths: Mapping[str, str] | None = None, max_lines: int = 60,
         timeout: float = 600) -> Example:
    """Run ``cube ...`` (the text after ``cube``, as a reader types it) and keep what it printed.

    It runs as a reader's terminal runs it: a fresh process (``python -m cube``, the interpreter of
    this kernel) in the clone's root, standard error interleaved with standard output as they
    were written (unbuffered), progress bars left out (a page is not a terminal).
    ``paths`` maps a folder the page uses to the name shown for it (a temporary store shown as
    ``runs/quiz``), in the command and in the output. A status other than ``expect`` raises,
    naming the command and the last line it printed.
    """
    paths = dict(paths or {})
    argv = shlex.split(command)
    if argv[:1] == ["cube"]:
        argv = argv[1:]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "100"}
    # in the clone's root, as the README's commands are typed (nbval starts kernels in the page's folder)
    proc = subprocess.run([sys.executable, "-m", "cube", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, timeout=timeout, check=False, cwd=REPO_ROOT)
    text, status = proc.stdout, proc.returncode
    shown = "cube " + " ".join(shlex.quote(a) for a in argv)
    for real, name in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        text, shown = text.replace(real, name), shown.replace(real, name)
    lines = [line for line in text.replace("\x1b[A", "").replace("\r", "\n").rstrip().splitlines()
             if not PROGRESS.search(line)]
    lines = [line for i, line in enumerate(lines) if line.strip() or (i and lines[i - 1].strip())]
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"... ({len(lines) - max_lines} more lines)"]
    if status != expect:
        last = (text.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"guide example `{shown}` exited {status}, not {expect}: {last}")
    return Example(shown, status, "\n".join(lines))


__all__ = ["Example", "cube"]
