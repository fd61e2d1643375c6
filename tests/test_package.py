"""cube as a user installs it: a wheel built from this clone, installed into a fresh environment
away from the clone, runs the commands the README starts with.

The wheel must carry everything cube reads at run time (the config, the committed sample, the
frozen prediction): a wheel of the ``cube*`` modules alone failed ``cube audit`` with ``config
file not found: <site-packages>/config/label_sets.yaml``. The fresh environment gets no network:
the wheel goes in with ``--no-deps`` and the dependencies are the ones this interpreter already
has, reached through a path line (not the editable install of this clone: a ``.pth`` listed in a
``.pth`` folder is never run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from cube.config import REPO_ROOT

# What cube reads at run time, as the wheel must hold it.
SHIPPED = ("cube/_config/label_sets.yaml", "cube/_config/models.yaml", "cube/_config/templates.yaml",
           "cube/_config/data.yaml", "cube/_config/benchmarks/cmmlu_subjects.json",
           "cube/_data/predictions/audit_frozen.json", "cube/_data/sample/MANIFEST.json")


def _run(argv: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict, Path]:
    """(the fresh venv's bin folder, the environment to run it in, a folder away from the clone)."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("builds the wheel from a git clone's tracked files")
    root = tmp_path_factory.mktemp("package")
    # The clone's tracked sources only (no build/ or egg-info of a developer's own), copied so that
    # the build writes nothing into the clone and two test processes never build in one place.
    source = root / "source"
    tracked = subprocess.run(["git", "ls-files", "-z", "--", "pyproject.toml", "README.md", "cube"],
                             cwd=REPO_ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUBE_CONFIG_DIR", "VIRTUAL_ENV")}
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "-w", root / "wheels", source], root, env)
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "wheels").glob("cube-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(SHIPPED) <= names, sorted(set(SHIPPED) - names)

    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], root, env)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    put = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
               root, env)
    assert put.returncode == 0, put.stderr
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root, env)
                .stdout.strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    away = root / "elsewhere"
    away.mkdir()
    return venv / "bin", env, away


def test_the_wheel_runs_from_its_own_install_not_the_clone(installed):
    bin_dir, env, away = installed
    where = _run([bin_dir / "python", "-c", "import cube.config as c; print(c.PACKAGE_DIR); print(c.config_dir())"],
                 away, env)
    package, config = where.stdout.split()
    assert Path(package).is_relative_to(bin_dir.parent) and not Path(package).is_relative_to(REPO_ROOT)
    assert Path(config) == Path(package) / "_config"


def test_installed_audit_reads_its_packaged_config(installed):
    bin_dir, env, away = installed
    proc = _run([bin_dir / "cube", "audit", "--brief"], away, env)
    assert proc.returncode == 0, proc.stderr
    assert "smollm2 {'L1_halfwidth': 'max1tok', 'L2_fullwidth': 'DEGEN'" in proc.stdout
    assert "config file not found" not in proc.stderr


def test_installed_smoke_and_rescore_on_the_packaged_sample(installed):
    bin_dir, env, away = installed
    smoke = _run([bin_dir / "cube", "smoke"], away, env)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "smoke test PASS: 5/5 checks passed" in smoke.stdout
    sample = _run([bin_dir / "python", "-c", "from cube.config import SAMPLE_RECORDS; print(SAMPLE_RECORDS)"],
                  away, env).stdout.strip()
    rescore = _run([bin_dir / "cube", "rescore", sample, "--scorer", "M1-strict", "--label-set", "L4_circled"],
                   away, env)
    assert rescore.returncode == 0, rescore.stderr
    assert "all    overall  micro      67  0.194" in rescore.stdout
    assert "WARNING: tie-breaks decide 100.0% (67/67)" in rescore.stdout


def test_installed_report_builds_a_site_from_the_packaged_pages(installed):
    """cube report needs its pages and the book's stylesheet and scripts: the wheel ships them."""
    bin_dir, env, away = installed
    sample = _run([bin_dir / "python", "-c", "from cube.config import SAMPLE_RECORDS; print(SAMPLE_RECORDS)"],
                  away, env).stdout.strip()
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}  # jupyter-book
    report = _run([bin_dir / "cube", "report", sample, "--out", away / "report"], away, env)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "smollm2-135m-instruct: across" in report.stdout
    assert (away / "report" / "index.html").is_file() and (away / "report" / "_static" / "cube.css").is_file()


def test_cube_config_dir_overrides_the_packaged_config(installed, tmp_path):
    """A user's own study: a copy of the shipped config with a label set of their own."""
    bin_dir, env, away = installed
    mine = tmp_path / "config"
    shutil.copytree(REPO_ROOT / "cube" / "_config", mine)
    with (mine / "label_sets.yaml").open("a", encoding="utf-8") as f:
        f.write("\nmine_roman: [\"Ⅰ\", \"Ⅱ\", \"Ⅲ\", \"Ⅳ\"]\n")
    proc = _run([bin_dir / "cube", "audit", "--brief", "--label-sets", "mine_roman"], away,
                {**env, "CUBE_CONFIG_DIR": str(mine)})
    assert proc.returncode == 0, proc.stderr
    assert "'mine_roman'" in proc.stdout
    refused = _run([bin_dir / "cube", "audit", "--brief", "--label-sets", "mine_roman"], away, env)
    assert refused.returncode != 0 and "mine_roman" in refused.stderr
