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

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cube.config import REPO_ROOT

# What cube reads at run time, as the wheel must hold it.
SHIPPED = ("cube/_config/label_sets.yaml", "cube/_config/models.yaml", "cube/_config/templates.yaml",
           "cube/_config/data.yaml", "cube/_config/benchmarks/cmmlu_subjects.json",
           "cube/_data/predictions/audit_frozen.json", "cube/_data/sample/MANIFEST.json")


def _run(argv: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from this clone's tracked sources."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("builds the wheel from a git clone's tracked files")
    root = tmp_path_factory.mktemp("wheel")
    # The clone's tracked sources only (no build/ or egg-info of a developer's own), copied so that
    # the build writes nothing into the clone and two test processes never build in one place.
    source = root / "source"
    tracked = subprocess.run(["git", "ls-files", "-z", "--", "pyproject.toml", "README.md", "cube"],
                             cwd=REPO_ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "-w", root / "wheels", source], root, _clean_env())
    assert built.returncode == 0, built.stderr
    (found,) = (root / "wheels").glob("cube-*.whl")
    names = set(zipfile.ZipFile(found).namelist())
    assert set(SHIPPED) <= names, sorted(set(SHIPPED) - names)
    return found


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUBE_CONFIG_DIR", "VIRTUAL_ENV")}


def _fresh_venv(root: Path, wheel: Path, dependencies: Path) -> Path:
    """A venv holding the wheel alone (no network: ``--no-deps``), its dependencies reached through a
    path line to the folder ``dependencies``; its bin folder."""
    venv = root / "venv"
    env = _clean_env()
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], root, env)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    put = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
               root, env)
    assert put.returncode == 0, put.stderr
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root, env)
                .stdout.strip())
    (site / "zz_dependencies.pth").write_text(f"{dependencies}\n", encoding="utf-8")
    return venv / "bin"


def _declared(wheel: Path, extras: set[str]) -> list[Requirement]:
    """The wheel's own Requires-Dist that a ``pip install 'cube[EXTRAS]'`` installs (its self-references
    such as ``cube[audit,analysis]`` expanded)."""
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        lines = z.read(meta).decode().splitlines()
    listed = [Requirement(line.partition(":")[2].strip()) for line in lines if line.startswith("Requires-Dist:")]
    wanted, grown = set(extras), True
    while grown:  # cube[harness] names cube[audit,analysis]
        grown = False
        for req in listed:
            if canonicalize_name(req.name) == "cube" and _applies(req, wanted) and not req.extras <= wanted:
                wanted |= req.extras
                grown = True
    return [r for r in listed if canonicalize_name(r.name) != "cube" and _applies(r, wanted)]


def _applies(req: Requirement, extras: set[str]) -> bool:
    return req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""}))


def _dependency_folder(root: Path, wheel: Path, extras: set[str]) -> Path:
    """A folder of links to exactly the distributions ``pip install 'cube[EXTRAS]'`` would bring: the
    closure of the wheel's declared requirements, taken from this interpreter's installed copies
    (offline). A module the metadata forgets is then missing there, as it is for a user."""
    folder = root / "dependencies"
    folder.mkdir()
    seen: set[tuple[str, frozenset]] = set()
    stack = _declared(wheel, extras)
    while stack:
        req = stack.pop()
        if (canonicalize_name(req.name), frozenset(req.extras)) in seen:
            continue
        seen.add((canonicalize_name(req.name), frozenset(req.extras)))
        dist = importlib.metadata.distribution(req.name)
        stack += [child for child in map(Requirement, dist.requires or []) if _applies(child, set(req.extras))]
        base = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if not (folder / top).exists() and (base / top).exists():
                (folder / top).symlink_to(base / top)
    return folder


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict, Path]:
    """(the fresh venv's bin folder, the environment to run it in, a folder away from the clone); its
    dependencies are all this interpreter has."""
    root = tmp_path_factory.mktemp("package")
    bin_dir = _fresh_venv(root, wheel, Path(sysconfig.get_paths()["purelib"]))
    away = root / "elsewhere"
    away.mkdir()
    return bin_dir, _clean_env(), away


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
    assert "\nsmollm2          max1tok       DEGEN         DEGEN      DEGEN\n" in proc.stdout
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
    assert proc.stdout.splitlines()[1].split() == ["family", "mine_roman"]
    refused = _run([bin_dir / "cube", "audit", "--brief", "--label-sets", "mine_roman"], away, env)
    assert refused.returncode != 0 and "mine_roman" in refused.stderr


def _venv_with_extras(wheel: Path, root: Path, extras: set[str]) -> tuple[Path, Path]:
    bin_dir = _fresh_venv(root, wheel, _dependency_folder(root, wheel, extras))
    away = root / "elsewhere"
    away.mkdir()
    return bin_dir, away


def test_a_plain_install_runs_the_headline_audit(wheel, tmp_path):
    """``pip install cube`` with no extra, then ``cube audit --brief`` from another folder: it failed
    with ``No module named 'tokenizers'`` while tokenizers and jinja2 were the [audit] extra's."""
    bin_dir, away = _venv_with_extras(wheel, tmp_path, set())
    absent = _run([bin_dir / "python", "-c", "import importlib.util as u; "
                   "print([m for m in ('torch', 'transformers', 'pyarrow') if u.find_spec(m)])"], away, _clean_env())
    assert absent.stdout.strip() == "[]", absent.stdout + absent.stderr  # the venv holds only the core
    proc = _run([bin_dir / "cube", "audit", "--brief"], away, _clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "smollm2" in proc.stdout and "Traceback" not in proc.stderr


def test_a_missing_extra_is_one_line_naming_it(wheel, tmp_path):
    """With ``[audit,analysis]`` only: ``cube run`` (torch), ``cube book execute`` (papermill) were
    tracebacks; each is one line naming the extra, and nothing is written. ``cube plan make --dry-run``
    needs no torch at all (it imported torch to check the CPU device)."""
    bin_dir, away = _venv_with_extras(wheel, tmp_path, {"audit", "analysis"})
    env = _clean_env()
    run = _run([bin_dir / "cube", "run", "--model", "smollm2-135m-instruct", "--sample", "4", "--out", "runs/a"],
               away, env)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stdout == "" and run.stderr.splitlines() == [
        "cube: error: `cube run` needs torch, which cube's [harness] extra installs: pip install 'cube[harness]' "
        "(from a clone: pip install -e '.[harness]')"]
    assert not (away / "runs").exists()
    book = _run([bin_dir / "cube", "book", "execute", "--out", "executed"], away, env)
    assert book.returncode == 2 and len(book.stderr.splitlines()) == 1, book.stderr
    assert "`cube book execute` needs papermill" in book.stderr and "pip install 'cube[book]'" in book.stderr
    from cube.errors import ItemsError
    from cube.protocol.benchmarks import resolve

    try:
        data = resolve("cmmlu", None).root(None)
    except ItemsError:
        pytest.skip("CMMLU is not here (cube data fetch cmmlu)")
    plan = _run([bin_dir / "cube", "plan", "make", "--out", "plan", "--models", "smollm2-135m-instruct", "--dry-run",
                 "--", "--dtype", "float32", "--sample", "20", "--data", data], away, env)
    assert plan.returncode == 0, plan.stderr
    assert "smollm2-135m-instruct" in plan.stdout and not (away / "plan").exists()
