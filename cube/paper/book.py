"""Building the offline book from the executed notebooks.

The book is Jupyter Book 1 with ``execute_notebooks: off``: it renders the executed copies that
:mod:`cube.paper.execution` wrote to ``book/_executed``. Its JavaScript is local: the vega bundle
(``cube.paper.charts``) in the static path and MathJax 3, fetched from the npm registry, in
``html_extra_path`` (JB1 would inject every script of the static path into every page, MathJax's
hundred lazy-loaded components included). A reader's own runs become pages of a part of their
own, without touching the committed ``_toc.yml``. It stands alone because building the site runs
no notebook: it needs only the executed copies, the assets and Jupyter Book.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from cube.config import REPO_ROOT, load_yaml
from cube.errors import ChecksumError, SourceError

ASSETS_DIR = REPO_ROOT / "build" / "book"
STATIC_DIR = ASSETS_DIR / "static"  # html_static_path: the vega bundle
EXTRA_DIR = ASSETS_DIR / "extra"  # html_extra_path: copied verbatim into the site root
MATHJAX_DIR = EXTRA_DIR / "_static" / "mathjax"
MATHJAX_PACKAGE = "mathjax@3.2.2"
# The registry's integrity for that exact tarball, recorded when it was first fetched: npm pack
# checks the download against the registry, and this pin checks the registry.
MATHJAX_INTEGRITY = "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
HTML_DIR = REPO_ROOT / "_build" / "html"


# ---- offline assets -----------------------------------------------------------------------------

def fetch_mathjax(dest: str | Path = MATHJAX_DIR, package: str = MATHJAX_PACKAGE) -> Path:
    """MathJax's ``es5`` build from the npm registry into ``dest`` (kept once fetched).

    ``npm pack`` checks the tarball against the registry's integrity hash; the version and that
    hash are recorded in ``dest/.npm-pack.json``. The folder is filled in a temp sibling and
    renamed, so an interrupted fetch leaves nothing half-extracted.
    """
    dest = Path(dest)
    if (dest / ".npm-pack.json").is_file() and (dest / "tex-chtml.js").is_file():
        return dest
    npm = shutil.which("npm")
    if npm is None:
        raise SourceError(f"{package}: npm is not installed (needed to fetch MathJax for the book)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".mathjax-") as tmp:
        # --ignore-scripts: nothing fetched runs code (npm pack would run prepack/prepare).
        proc = subprocess.run([npm, "pack", package, "--json", "--ignore-scripts", "--pack-destination", tmp],
                              check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise SourceError(f"{package}: npm pack failed: {last}")
        info = json.loads(proc.stdout)[0]
        if package == MATHJAX_PACKAGE and info.get("integrity") != MATHJAX_INTEGRITY:
            raise ChecksumError(f"{package}: registry integrity {info.get('integrity')} is not the pinned "
                                f"{MATHJAX_INTEGRITY}")
        staged = Path(tmp) / "mathjax"
        with tarfile.open(Path(tmp) / info["filename"]) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith("package/es5/")]
            for m in members:
                m.name = m.name[len("package/es5/"):]
            tar.extractall(staged, members=members, filter="data")
        stamp = {k: info.get(k) for k in ("name", "version", "integrity", "shasum")}
        (staged / ".npm-pack.json").write_text(json.dumps(stamp, indent=1) + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        staged.rename(dest)
    return dest


def prepare_assets() -> tuple[Path, Path]:
    """The vega bundle and MathJax, where ``_config.yml`` expects them."""
    from cube.paper.charts import write_vega_bundle

    return write_vega_bundle(STATIC_DIR), fetch_mathjax(MATHJAX_DIR)


def jupyter_book_command() -> str:
    local = Path(sys.executable).with_name("jupyter-book")
    found = str(local) if local.is_file() else shutil.which("jupyter-book")
    if not found:
        raise SourceError("jupyter-book is not installed (pip install 'jupyter-book<2')")
    return found


def html_dir(out: str | Path | None = None, root: str | Path = REPO_ROOT) -> Path:
    """Where the site lands: ``<out>/_build/html`` (Jupyter Book's layout), ``out`` the root by default."""
    return Path(out if out is not None else root) / "_build" / "html"


READERS_CAPTION = "Readers' runs"


def _toc_files(entry: Any) -> set[str]:
    """Every ``file:`` a table of contents lists, at any depth."""
    if isinstance(entry, dict):
        found = {str(entry["file"])} if "file" in entry else set()
        return found.union(*(_toc_files(v) for v in entry.values()))
    if isinstance(entry, list):
        return set().union(*(_toc_files(v) for v in entry))
    return set()


def reader_pages(root: str | Path = REPO_ROOT) -> list[str]:
    """The executed readers' runs (``cube book execute --as NAME``: ``book/_executed/NAME.ipynb``)
    that ``_toc.yml`` does not list, as table-of-contents entries. The book is built with only the
    pages its contents list (``only_build_toc_files``), so without this a reader's run never showed."""
    root = Path(root)
    listed = _toc_files(load_yaml(root / "_toc.yml"))
    pages = (f"book/_executed/{path.stem}" for path in sorted((root / "book" / "_executed").glob("*.ipynb")))
    return [page for page in pages if page not in listed]


def toc_with_readers(root: str | Path, pages: list[str]) -> Path:
    """``_toc.yml`` with a last part holding the readers' runs, written under ``build/book`` (never
    over the committed one); ``jupyter-book build --toc`` reads it."""
    import yaml

    root = Path(root)
    toc = load_yaml(root / "_toc.yml")
    toc.setdefault("parts", []).append({"caption": READERS_CAPTION, "chapters": [{"file": p} for p in pages]})
    path = root / "build" / "book" / "_toc_with_readers.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(toc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def build_book(root: str | Path = REPO_ROOT, strict: bool = True, out: str | Path | None = None) -> subprocess.CompletedProcess:
    """``jupyter-book build --all``: a clean build, since incremental ones miss static files.

    ``strict`` turns Sphinx warnings into errors: a glue key that a notebook no longer produces
    is only a warning to Sphinx, but it means a number is missing from the paper. ``out`` is
    Jupyter Book's ``--path-output``: the site goes to ``<out>/_build/html``.
    """
    site = html_dir(out, root)
    if site.exists():  # --all rebuilds every page but leaves pages of removed sources behind
        shutil.rmtree(site)
    cmd = [jupyter_book_command(), "build", "--all", str(root)]
    readers = reader_pages(root)
    if readers:  # a reader's own runs become pages of their own part, _toc.yml untouched
        cmd += ["--toc", str(toc_with_readers(root, readers))]
    if out is not None:
        cmd += ["--path-output", str(Path(out).resolve())]
    if strict:
        cmd += ["-W", "--keep-going"]
    return subprocess.run(cmd, cwd=str(root), check=False)
