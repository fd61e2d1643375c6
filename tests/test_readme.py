"""The README fits on two screens and every command it shows runs (issue 50): its `cube` lines
parse with cube's own parser, its `make` targets exist, its pip extras are pyproject's, and each
Guide page it lists is a page the book builds."""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib

from cube.cli import build_parser
from cube.config import REPO_ROOT, load_yaml

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
MAX_LINES = 200


def bash_lines() -> list[list[str]]:
    found = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                found.append(shlex.split(line))
    return found


def test_the_readme_fits_on_two_screens():
    assert README.count("\n") <= MAX_LINES


def test_every_cube_line_parses_with_cubes_own_parser():
    parser = build_parser()
    lines = [words[1:] for words in bash_lines() if words[0] == "cube"]
    assert len(lines) >= 5
    for argv in lines:
        parser.parse_args(argv)  # an unknown option or command exits 2 here


def test_every_make_target_exists_and_every_extra_is_pyprojects():
    targets = subprocess.run(["make", "-s", "help"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    for words in bash_lines():
        if words[0] == "make":
            assert re.search(rf"^make {re.escape(words[1])}\b", targets, re.M), words
    extras = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
                 ["optional-dependencies"])
    for words in bash_lines():
        if words[:2] == ["pip", "install"] and "[" in words[-1]:
            named = set(words[-1].split("[", 1)[1].rstrip("]").split(","))
            assert named <= extras, named - extras
    for name in re.findall(r"^\| `(\w+)` \|", README, re.M):
        if name in ("make",):
            continue
        assert name in extras or name.startswith("make"), name


def test_every_guide_page_it_lists_is_built_by_the_book():
    planned = {str(entry["source"]) for entry in load_yaml(REPO_ROOT / "config" / "notebooks.yaml")["notebooks"]}
    listed = re.findall(r"`(notebooks/guide/[\w.]+)`", README)
    assert listed and set(listed) <= planned
    assert set(listed) == {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "notebooks" / "guide").glob("*.md")}
