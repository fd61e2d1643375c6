"""Building a report's offline site: the paper's own stack, on the user's analysis.

The analysis is written as ``report.json`` into a build folder beside the output; each page of
``cube/report/pages`` (a parameterised MyST notebook) is executed there by papermill and the
pages are built by Jupyter Book 1 with the book's Sphinx extension, stylesheet and local vega
bundle (no network: every script a page loads is in the site). Only a finished site replaces
``DIR``: it is built in a temporary sibling and renamed into place, so a failed or killed build
leaves the previous report (or nothing) there, never half of one. Nothing is written into the
clone or the stores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from cube.config import PACKAGED_DATA
from cube.errors import ConfigError, CubeError
from cube.report.model import ReportAnalysis

PAGES_DIR = Path(__file__).resolve().parent / "pages"
PAGES = ("index", "audit", "sensitivity", "calibration", "subjects", "models", "flips", "provenance")
SITE_STATIC = PACKAGED_DATA / "site_static"  # the book's stylesheet and scripts (book/static links here)
MARKER = ".cube-report"  # a folder holding it is a report cube may replace


def check_out(out: str | Path) -> Path:
    """``--out DIR``: new, empty, or an earlier report (which a build replaces); anything else is
    refused before any work, so a report never lands over a user's files."""
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise ConfigError(f"--out {out}: a file, not a folder; give a new folder for the report")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise ConfigError(f"--out {out}: a folder that holds files and is not a cube report; give a new or "
                              "empty folder (cube replaces only an earlier report)")
    return out


def _book_config(title: str) -> dict:
    return {
        "title": title, "author": "cube report", "only_build_toc_files": True,
        "exclude_patterns": ["_build", "**.ipynb_checkpoints", "static", "*.md"],
        "execute": {"execute_notebooks": "off"},
        "parse": {"myst_enable_extensions": ["colon_fence", "dollarmath", "substitution"]},
        "repository": {"url": ""},
        "html": {"favicon": "static/favicon.svg", "use_repository_button": False, "use_issues_button": False,
                 "use_edit_page_button": False},
        "launch_buttons": {"binderhub_url": "", "jupyterhub_url": "", "colab_url": "", "deepnote_url": "",
                           "thebe": False},
        "sphinx": {"extra_extensions": ["cube.paper.sphinx_extension"], "recursive_update": True, "config": {
            "html_context": {"default_mode": "light"}, "html_show_copyright": False, "html_use_index": False,
            "html_show_sphinx": False, "html_static_path": ["static"],
            "html_js_files": ["vega-bundle.js", "cube-nav.js"], "html_css_files": ["cube.css"]}},
    }


def _toc() -> dict:
    return {"format": "jb-book", "root": "index", "chapters": [{"file": p} for p in PAGES[1:]]}


def _execute(page: str, project: Path) -> Path:
    """One page, executed in the build folder; the injected parameters cell hidden like the
    parameters cell it follows."""
    import jupytext
    import nbformat
    import papermill

    from cube.paper.execution import quiet_kernel_manager

    source = project / f".{page}.src.ipynb"
    jupytext.write(jupytext.read(PAGES_DIR / f"{page}.md", fmt="md:myst"), source, fmt="ipynb")
    target = project / f"{page}.ipynb"
    papermill.execute_notebook(str(source), str(target), parameters={"analysis": "report.json"}, cwd=str(project),
                               kernel_name="python3", progress_bar=False, log_output=False,
                               kernel_manager_class=quiet_kernel_manager())
    source.unlink()
    nb = nbformat.read(target, as_version=4)
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, target)
    return target


def write_project(analysis: ReportAnalysis, project: Path) -> None:
    """The build folder: report.json, the book's configuration and static files."""
    from cube.paper.charts import write_vega_bundle

    project.mkdir(parents=True, exist_ok=True)
    (project / "report.json").write_text(analysis.to_json() + "\n", encoding="utf-8")
    (project / "_config.yml").write_text(yaml.safe_dump(_book_config(analysis.title), allow_unicode=True,
                                                         sort_keys=False), encoding="utf-8")
    (project / "_toc.yml").write_text(yaml.safe_dump(_toc(), sort_keys=False), encoding="utf-8")
    static = project / "static"
    static.mkdir(exist_ok=True)
    for path in SITE_STATIC.iterdir():
        if path.is_file():
            shutil.copy2(path, static / path.name)
    favicon = static / "favicon.svg"
    if not favicon.exists():
        favicon.write_text('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" '
                           'height="16" fill="#2a6"/></svg>\n', encoding="utf-8")
    write_vega_bundle(static)


def _execute_or_say(page: str, project: Path) -> str | None:
    """``_execute`` in a worker process: None, or the one line saying where the page failed (an
    exception of papermill's does not cross a process boundary whole)."""
    from papermill.exceptions import PapermillExecutionError

    try:
        _execute(page, project)
    except PapermillExecutionError as exc:
        evalue = (exc.evalue or "").splitlines()[0] if exc.evalue else ""
        return f"report page {page} failed in cell {exc.exec_count}: {exc.ename}: {evalue}"
    return None


def execute_pages(project: Path, workers: int = 2) -> None:
    """Every page executed, two at a time in worker processes: papermill changes the process's
    working folder for each notebook, so two in one process (threads) would leave it in the
    other's (a build folder that is then removed)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        failed = [line for line in pool.map(_execute_or_say, PAGES, [project] * len(PAGES)) if line]
    if failed:
        raise CubeError(failed[0])


def build_site(project: Path) -> Path:
    from cube.paper.book import jupyter_book_command

    proc = subprocess.run([jupyter_book_command(), "build", "--all", str(project), "-W", "--keep-going", "-q"],
                          cwd=str(project), check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        last = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()][-3:]
        raise CubeError(f"jupyter-book build of the report failed (exit {proc.returncode}): {' | '.join(last)}")
    return project / "_build" / "html"


def build_report(analysis: ReportAnalysis, out: str | Path, keep: str | Path | None = None) -> Path:
    """The site of ``analysis`` at ``out/index.html``; ``keep`` also keeps the executed pages and
    report.json there (for nbval and for a reader who wants the notebooks)."""
    out = check_out(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".cube-report-", dir=out.parent) as tmp:
        project = Path(tmp) / "project"
        write_project(analysis, project)
        execute_pages(project)
        html = build_site(project)
        (html / MARKER).write_text("a site written by cube report; cube report --out may replace it\n",
                                   encoding="utf-8")
        if keep is not None:
            keep = Path(keep)
            if keep.exists():
                shutil.rmtree(keep)
            keep.mkdir(parents=True)
            for path in [project / "report.json", *(project / f"{p}.ipynb" for p in PAGES)]:
                shutil.copy2(path, keep / path.name)
        staged = Path(tmp) / "site"
        os.replace(html, staged)
        if out.exists():
            old = Path(tmp) / "old"
            os.replace(out, old)
        os.replace(staged, out)
    return out / "index.html"


__all__ = ["PAGES", "build_report", "check_out", "execute_pages", "write_project"]
