"""Reading a file cube loads: the one helper for "read a file, one-line error".

Every loader reads through these functions, so that a missing file, a folder in its place,
unreadable bytes and a parse error read alike everywhere: one line naming the file (and the
line, for a parse error), raised as the caller's own ``CubeError`` subclass: ``ConfigError`` for
config, ``ItemsError`` for benchmark files, ``RecordsError`` for a store. Writing lives in
``cube.atomic`` (temp file, then rename) and hashing in ``cube.checksums``.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cube.errors import ConfigError, CubeError

# The most cube reads of one file it is given. The largest it reads legitimately are lm-eval
# samples files (tens of MB for all of CMMLU); a results file that was /dev/zero grew cube to
# 24 GB before the kernel killed it, and a FIFO hung the import for good.
MAX_FILE_BYTES = 512 << 20


def check_within(path: str | Path, within: str | Path, error: type[CubeError] = ConfigError,
                 what: str = "file") -> None:
    """Refuse ``path`` if it resolves outside the folder ``within`` (a symlink out of it)."""
    root, real = Path(within).resolve(), Path(path).resolve()
    if real != root and root not in real.parents:
        raise error(f"{path}: the {what} leads to {real}, outside {within}; cube reads only files inside the "
                    "folder it is given (a symbolic link out of it is refused as a ../ name is: copy the file in)")


def read_bytes(path: str | Path, error: type[CubeError] = ConfigError, what: str = "file",
               max_bytes: int = MAX_FILE_BYTES, within: str | Path | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``: the one reader of a file from outside.

    Why each check: a device (``/dev/zero``) or a FIFO never ends, or never starts (the open does
    not wait for a writer: ``O_NONBLOCK``, then ``fstat`` refuses anything but a regular file); a
    regular file larger than any cube reads is refused before it is read, and one that grows
    while read stops at the bound. ``within``: the folder the caller was given; a path that
    resolves outside it (a symlink out of an import folder) is refused, as ``../`` names are.
    """
    path = Path(path)
    if within is not None:
        check_within(path, within, error, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise error(f"{path} is a folder, not a {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{path} is a folder, not a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: the {what} is not a regular file (a FIFO, device or socket never ends); "
                        "give the file itself")
        if info.st_size > max_bytes:
            raise error(f"{path}: the {what} is {info.st_size:,} bytes, more than the {max_bytes:,} cube reads "
                        "from one file; not a file cube writes or reads")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise error(f"{path}: the {what} grew past the {max_bytes:,} bytes cube reads from one file "
                            "while it was read")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror})") from None
    finally:
        os.close(fd)


def read_text(path: str | Path, error: type[CubeError] = ConfigError, what: str = "file",
              encoding: str = "utf-8", max_bytes: int = MAX_FILE_BYTES,
              within: str | Path | None = None) -> str:
    """The file's text (read by :func:`read_bytes`); ``what`` names it in the error ("subject map",
    "frozen prediction")."""
    data = read_bytes(path, error, what, max_bytes, within)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None


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


def parse_json_lines(text: str, error: type[CubeError] = ConfigError,
                     where: Callable[[int], str] = lambda number: f"line {number}") -> list[tuple[int, Any]]:
    """(line number, value) for every non-blank line of ``text``; a line that is not JSON, or nests
    too deep for the parser, is one error naming ``where(line number)``."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise error(f"{where(number)}: not a JSON line ({exc.msg})") from None
        except RecursionError:
            raise error(f"{where(number)}: a JSON line nesting too deep to parse") from None
    return out


def read_json_lines(path: str | Path, error: type[CubeError] = ConfigError,
                    what: str = "JSON-lines file") -> list[tuple[int, Any]]:
    """(line number, value) for every non-blank line."""
    return parse_json_lines(read_text(path, error, what), error, lambda number: f"{path}:{number}")


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
