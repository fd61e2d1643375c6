"""Which of cube's pip extras brings a missing module, said in one line before a command starts.

``pip install cube`` is the core: the tokenizer audit (tokenizers, jinja2). Each other command
needs an extra (``pyproject.toml``): a user with ``[audit,analysis]`` who typed ``cube run`` got
``ModuleNotFoundError: No module named 'torch'`` as a traceback, after the items had loaded. A
command declares the modules it needs (``declare``); the CLI checks them before the command runs
(``check``), and any other missing module of an extra that surfaces later is the same one line
(``missing_extra``), as the missing-vLLM case always was (``cube.harness.backends``).
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable, Iterable

from cube.errors import CubeError

# A module cube imports from a package of one of its extras -> that extra (pyproject.toml).
EXTRA_OF: dict[str, str] = {
    "transformers": "audit",  # hf: tokenizer sources; the harness's models
    "pyarrow": "analysis", "scipy": "analysis", "opencc": "analysis",
    "torch": "harness", "safetensors": "harness", "gguf": "harness", "accelerate": "harness",
    "papermill": "book", "jupytext": "book", "ipykernel": "book",
    "jupyter_book": "book", "altair": "book", "vl_convert": "book", "websocket": "book",
}


class MissingExtra(CubeError):
    """A module of one of cube's pip extras is not installed in this environment."""


def missing_extra(module: str, command: str | None = None) -> str | None:
    """The one line for a missing ``module`` (a dotted name's top package counts), or None when no
    extra of cube's provides it (then the missing module is a bug, and its traceback stays)."""
    top = module.partition(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    who = f"`cube {command}`" if command else "this command"
    return (f"{who} needs {top}, which cube's [{extra}] extra installs: pip install 'cube[{extra}]' "
            f"(from a clone: pip install -e '.[{extra}]')")


def declare(parser: argparse.ArgumentParser, needs: Iterable[str] | Callable[[argparse.Namespace], Iterable[str]]
            ) -> None:
    """Let ``parser``'s command need ``needs`` (modules, or a function of its arguments giving them:
    ``cube run --backend openai`` needs no torch)."""
    parser.set_defaults(needs=needs)


def check(args: argparse.Namespace, command: str) -> None:
    """Raise MissingExtra for the first declared module that is not importable here; found without
    importing it (torch's import alone takes seconds)."""
    needs = getattr(args, "needs", None) or ()
    for module in (needs(args) if callable(needs) else needs):
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(missing_extra(module, command) or f"`cube {command}` needs {module}; install it")


def command_name(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    """The command as the user typed it: ``run``, or ``book execute`` where the command has actions."""
    words = [w for w in argv if not w.startswith("-")][:2]
    if not words:
        return ""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and words[0] in action.choices:
            sub = action.choices[words[0]]
            actions = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
            if len(words) == 2 and actions and words[1] in actions[0].choices:
                return " ".join(words)
    return words[0]
