"""Which extra a missing module needs (issue 45): the map agrees with pyproject.toml, and the CLI
says it in one line, before the command runs."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cube.commands.extras import EXTRA_OF, missing_extra
from cube.config import REPO_ROOT


def test_each_module_is_a_distribution_its_extra_lists():
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    owners = importlib.metadata.packages_distributions()
    for module, extra in EXTRA_OF.items():
        listed = {canonicalize_name(Requirement(r).name) for r in extras[extra]}
        assert {canonicalize_name(d) for d in owners[module]} & listed, (module, extra, listed)


def test_an_unknown_module_is_no_extra_of_cubes():
    assert missing_extra("surely_not_a_module_of_cube") is None
    assert missing_extra("torch.nn", "run").startswith("`cube run` needs torch, which cube's [harness] extra")


def test_a_declared_module_missing_is_one_line_before_the_command_runs(tmp_path):
    """papermill hidden: `cube book execute` was a traceback from its first import."""
    code = ("import sys; sys.modules['papermill'] = None; from cube.cli import main; "
            f"raise SystemExit(main(['book', 'execute', '--out', {str(tmp_path / 'executed')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["cube: error: `cube book execute` needs papermill, which cube's [book] extra "
                                        "installs: pip install 'cube[book]' (from a clone: pip install -e '.[book]')"]
    assert not (tmp_path / "executed").exists()
