"""Reading a file cube loads: the one helper for "read a file, one-line error".

Every loader reads through these functions, so that a missing file, a folder in its place,
unreadable bytes and a parse error read alike everywhere: one line naming the file (and the
line, for a parse error), raised as the caller's own ``CubeError`` subclass: ``ConfigError`` for
config, ``ItemsError`` for benchmark files, ``RecordsError`` for a store. Writing lives in
``cube.atomic`` (temp file, then rename) and hashing in ``cube.checksums``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from cube.errors import ConfigError, CubeError


def read_text(path: str | Path, error: type[CubeError] = ConfigError, what: str = "file",
              encoding: str = "utf-8") -> str:
    """The file's text; ``what`` names it in the error ("subject map", "frozen prediction")."""
    path = Path(path)
    try:
        return path.read_text(encoding=encoding)
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise error(f"{path} is a folder, not a {what}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror})") from None


def parse_json(text: str | bytes, error: type[CubeError] = ConfigError, where: str = "JSON text",
               what: str = "JSON file") -> Any:
    """``text`` parsed as JSON; a parse error, and nesting too deep for the parser, are one line.

    Python's parser recurses once per nested array or object, so a hostile file of 200,000
    ``[`` (a MANIFEST.json, a frozen prediction, an lm-eval results file) raised RecursionError
    with a traceback. No file cube reads nests more than a few levels.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: {what} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise error(f"{where}: {what} nests arrays or objects too deep to parse; not a file cube "
                    "writes or reads") from None


def read_json(path: str | Path, error: type[CubeError] = ConfigError, what: str = "JSON file") -> Any:
    return parse_json(read_text(path, error, what), error, str(path), what)


def read_json_lines(path: str | Path, error: type[CubeError] = ConfigError,
                    what: str = "JSON-lines file") -> list[tuple[int, Any]]:
    """(line number, value) for every non-blank line."""
    out = []
    for number, line in enumerate(read_text(path, error, what).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{number}: not a JSON line ({exc.msg})") from None
        except RecursionError:
            raise error(f"{path}:{number}: a JSON line nesting too deep to parse") from None
    return out


def read_yaml(path: str | Path, error: type[CubeError] = ConfigError, what: str = "YAML file",
              loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """Parsed YAML; ``loader`` must be ``yaml.SafeLoader`` or a subclass (never one that runs code)."""
    if not issubclass(loader, yaml.SafeLoader):
        raise TypeError(f"{loader!r} is not a SafeLoader")  # a programming error, not bad input
    text = read_text(path, error, what)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader, checked above
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None)
        raise error(f"invalid YAML in {path}{where}" + (f": {problem}" if problem else "")) from None
    except RecursionError:  # PyYAML composes nested nodes recursively, as json parses them
        raise error(f"invalid YAML in {path}: {what} nests too deep to parse") from None
