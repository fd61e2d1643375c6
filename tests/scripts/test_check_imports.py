"""``scripts/check_imports.py``: circles and imports against the flow, found in a package it reads."""

import importlib.util
import sys
import textwrap

from cube.config import REPO_ROOT

spec = importlib.util.spec_from_file_location("check_imports", REPO_ROOT / "scripts" / "check_imports.py")
check_imports = importlib.util.module_from_spec(spec)
sys.modules["check_imports"] = check_imports  # its dataclass looks its module up there
spec.loader.exec_module(check_imports)

STAGES = (("shared", ("cube", "cube.errors")), ("early", ("cube.early",)), ("late", ("cube.late",)))


def _package(root, files: dict[str, str]):
    for rel, text in {"cube/__init__.py": "", "cube/errors.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_a_function_level_import_closes_a_circle(tmp_path):
    root = _package(tmp_path, {
        "cube/early/__init__.py": "",
        "cube/early/a.py": "from cube.early.b import thing\n",
        "cube/early/b.py": "def thing():\n    from cube.early import a\n    return a\n",
    })
    found = check_imports.problems(root, frozenset(), STAGES)
    assert found == ["circle of 2: cube.early.a, cube.early.b "
                     "(cube.early.a:1 -> cube.early.b; cube.early.b:2 -> cube.early.a)"]


def test_relative_imports_resolve_to_the_module_they_name(tmp_path):
    root = _package(tmp_path, {
        "cube/early/__init__.py": "from . import a\n",
        "cube/early/a.py": "from .b import x\nfrom ..errors import CubeError\n",
        "cube/early/b.py": "x = 1\n",
    })
    edges = {(e.importer, e.imported) for e in check_imports.import_edges(check_imports.module_files(root))}
    assert edges == {("cube.early", "cube.early.a"), ("cube.early.a", "cube.early.b"),
                     ("cube.early.a", "cube.errors")}
    assert check_imports.problems(root, frozenset(), STAGES) == []


def test_an_earlier_stage_importing_a_later_one_is_named_with_its_line(tmp_path):
    root = _package(tmp_path, {
        "cube/early/__init__.py": "",
        "cube/early/a.py": "import json\n\n\ndef f():\n    import cube.late.z\n",
        "cube/late/__init__.py": "",
        "cube/late/z.py": "from cube.early import a\nfrom cube.errors import CubeError\n",
    })
    assert check_imports.problems(root, frozenset(), STAGES) == [
        "circle of 2: cube.early.a, cube.late.z (cube.early.a:5 -> cube.late.z; cube.late.z:1 -> cube.early.a)",
        "against the flow: cube.early.a:5 (early) imports cube.late.z (late)",
    ]
    # an allowed import is left out; one that is allowed but gone is reported, so the list shrinks
    assert check_imports.problems(root, frozenset({("cube.early.a", "cube.late.z")}), STAGES) == []
    assert check_imports.problems(root, frozenset({("cube.late.z", "cube.errors.x")}), STAGES)[0] == (
        "allowed but gone: cube.late.z -> cube.errors.x; delete it from ALLOWED")


def test_a_module_of_no_stage_is_an_error_naming_it(tmp_path):
    import pytest

    with pytest.raises(SystemExit, match="module 'cube.stray' belongs to no stage"):
        check_imports.stage_of("cube.stray", STAGES)


def test_a_long_module_is_refused_unless_it_says_why_near_its_top(tmp_path):
    body = "x = 1\n" * 9
    root = _package(tmp_path, {
        "cube/early/__init__.py": "",
        "cube/early/short.py": body,
        "cube/early/long.py": body + "y = 2\n",
        "cube/early/reasoned.py": '"""Doc."""\n# Longer than 600 lines: one table, kept whole\n' + body,
        "cube/early/late_reason.py": body * 4 + "# Longer than 600 lines: too far down\n",  # past line 30
    })
    found = check_imports.too_long(root, max_lines=9)
    assert [line.split(" has ")[0] for line in found] == [
        "too long: cube.early.late_reason (cube/early/late_reason.py)",
        "too long: cube.early.long (cube/early/long.py)",
    ]
    assert found[1].startswith("too long: cube.early.long (cube/early/long.py) has 10 lines, over 9: split it")
    # an empty reason is no reason
    (root / "cube/early/reasoned.py").write_text("# Longer than 600 lines:\n" + body + body)
    assert "cube.early.reasoned" in " ".join(check_imports.too_long(root, max_lines=9))


def test_cube_itself_has_no_circle_and_no_import_against_the_flow(capsys):
    assert check_imports.main([str(REPO_ROOT)]) == 0, capsys.readouterr().out
