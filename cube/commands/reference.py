"""The command reference, generated from the argparse parsers ``cube`` itself builds.

Every command, subcommand and option with its default and help, for the Guide's reference page:
it cannot disagree with ``cube COMMAND --help``, since it is read off the same parsers.
"""

from __future__ import annotations

import argparse
import html


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """(``cube COMMAND [SUB]``, its parser) for every command and subcommand, in ``--help`` order."""
    from cube.cli import build_parser

    out = []

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if prefix != "cube":
            out.append((prefix, parser))
        for action in subs:
            for name, child in action.choices.items():
                walk(f"{prefix} {name}", child)

    walk("cube", build_parser())
    return out


def option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """(flags or name, default, help) of each argument but ``--help`` and subcommand choosers."""
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) or action.metavar or action.dest
        if action.option_strings and action.nargs != 0 and action.metavar:
            name += f" {action.metavar}"
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or isinstance(default, list) and not default \
            else str(default)
        rows.append((str(name), shown, (action.help or "").replace("%%", "%")))
    return rows


def command_reference() -> str:
    """Every command's usage, description and options, as HTML (one table per command)."""
    from cube.paper.tables import html_table

    parts = []
    for name, parser in _parsers():
        usage = parser.format_usage().removeprefix("usage: ").strip()
        anchor = name.replace(" ", "-")
        parts.append(f'<h2 id="{anchor}">{html.escape(name)}</h2>')
        if parser.description:
            parts.append(f"<p>{html.escape(parser.description.strip().splitlines()[0])}</p>")
        parts.append(f"<pre>{html.escape(usage)}</pre>")
        rows = option_rows(parser)
        if rows:
            parts.append(html_table(["option", "default", "what it does"], rows))
    return "\n".join(parts)


def commands() -> list[str]:
    """``cube COMMAND [SUB]`` for every command the reference covers."""
    return [name for name, _ in _parsers()]


__all__ = ["command_reference", "commands", "option_rows"]
