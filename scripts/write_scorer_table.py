#!/usr/bin/env python3
"""Write the scorer table of the Guide's scoring page and book/method.md from the one scorer table
(``cube.protocol.scorers.SCORERS``), so that the docs never drift from the code.

The table in each file is the block of ``|`` lines that starts with the table's header row;
``tests/protocol/test_scorers.py`` fails while a file's block differs from the generated one.
Usage: ``scripts/write_scorer_table.py`` (rewrites the files in place, atomically).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cube.atomic import atomic_write_text  # noqa: E402
from cube.protocol.scorers import markdown_table  # noqa: E402

DOCS = ("notebooks/guide/09_scoring.md", "book/method.md")


def table_span(lines: list[str], header: str) -> tuple[int, int]:
    """(first, past-last) line index of the table that starts with ``header``."""
    start = next((i for i, line in enumerate(lines) if line.strip() == header), None)
    if start is None:
        raise SystemExit(f"no scorer table (a line {header!r}) found")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def rewrite(text: str) -> str:
    table = markdown_table().splitlines()
    lines = text.splitlines()
    start, end = table_span(lines, table[0])
    return "\n".join(lines[:start] + table + lines[end:]) + "\n"


def main() -> int:
    for name in DOCS:
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            atomic_write_text(path, new)
            print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
