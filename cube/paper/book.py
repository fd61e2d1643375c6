"""Executing the claim notebooks and building the offline book.

The notebooks live as MyST markdown in ``notebooks/``; ``config/notebooks.yaml`` lists each
execution (one notebook may run several times with different parameters). Each execution is
converted with jupytext, run by papermill with its parameters, and written to
``book/_executed/<name>.ipynb`` only once it has run to the end: a claim (an ``assert``) that no
longer holds fails the run, and then no executed copy is left for the book to render stale.

The book is Jupyter Book 1 with ``execute_notebooks: off``: it renders these executed copies. Its
JavaScript is local: the vega bundle (``cube.paper.charts``) in the static path and MathJax 3, fetched
from the npm registry, in ``html_extra_path`` (JB1 would inject every script of the static path
into every page, MathJax's hundred lazy-loaded components included).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cube.config import REPO_ROOT, config_dir, load_yaml
from cube.errors import ChecksumError, ConfigError, SourceError

EXECUTED_DIR = REPO_ROOT / "book" / "_executed"
ASSETS_DIR = REPO_ROOT / "build" / "book"
STATIC_DIR = ASSETS_DIR / "static"  # html_static_path: the vega bundle
EXTRA_DIR = ASSETS_DIR / "extra"  # html_extra_path: copied verbatim into the site root
MATHJAX_DIR = EXTRA_DIR / "_static" / "mathjax"
MATHJAX_PACKAGE = "mathjax@3.2.2"
# The registry's integrity for that exact tarball, recorded when it was first fetched: npm pack
# checks the download against the registry, and this pin checks the registry.
MATHJAX_INTEGRITY = "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
HTML_DIR = REPO_ROOT / "_build" / "html"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
PLAN_KEYS = ("name", "source", "parameters", "requires", "title", "summary")


@dataclass(frozen=True)
class NotebookRun:
    """One execution: a notebook source, the parameters it runs with, the output's name."""

    name: str
    source: Path
    parameters: dict[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()  # benchmarks whose items the notebook reads (not only records)
    title: str | None = None  # the page's own heading, for a run under other parameters
    summary: str | None = None  # its opening sentence: what this run shows that the base page does not

    def output(self, out_dir: str | Path = EXECUTED_DIR) -> Path:
        return Path(out_dir) / f"{self.name}.ipynb"


# ---- the plan -----------------------------------------------------------------------------------

def load_plan(path: str | Path | None = None) -> list[NotebookRun]:
    """The executions listed in ``config/notebooks.yaml`` (or ``path``), checked up front.

    Names become file names and must be unique; every source must exist and every parameter must
    be declared in the notebook's ``parameters`` cell, so a typo fails here, not as a silently
    ignored papermill injection.
    """
    path = Path(path) if path else config_dir() / "notebooks.yaml"
    raw = load_yaml(path)
    entries = raw.get("notebooks") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a non-empty list under 'notebooks'")
    runs: list[NotebookRun] = []
    for i, entry in enumerate(entries):
        where = f"{path} notebooks[{i}]"
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("source"):
            raise ConfigError(f"{where}: each entry needs a 'name' and a 'source'")
        unknown = sorted(set(map(str, entry)) - set(PLAN_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(PLAN_KEYS))}")
        name = str(entry["name"])
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: name {name!r} must be letters, digits, '_', '-' or '.'")
        if any(r.name == name for r in runs):
            raise ConfigError(f"{where}: name {name!r} is used twice")
        source = Path(entry["source"])
        source = source if source.is_absolute() else REPO_ROOT / source
        parameters = entry.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ConfigError(f"{where}: 'parameters' must be a mapping")
        requires = entry.get("requires") or []
        from cube.protocol.benchmarks import BENCHMARKS

        if not isinstance(requires, list) or any(r not in BENCHMARKS for r in requires):
            raise ConfigError(f"{where}: 'requires' must list benchmarks among {', '.join(BENCHMARKS)}, got {requires!r}")
        if parameters and not entry.get("title"):
            # two pages with one heading are two identical entries in navigation and search
            raise ConfigError(f"{where}: a run with parameters needs its own 'title'")
        run = NotebookRun(name, source, dict(parameters), tuple(requires),
                          entry.get("title") or None, entry.get("summary") or None)
        check_parameters(run)
        runs.append(run)
    return runs


def select_runs(plan: list[NotebookRun], only: Iterable[str] | None) -> list[NotebookRun]:
    """The runs named in ``only``: by run name, else by notebook (every run of that source)."""
    wanted = list(only or [])
    if not wanted:
        return plan
    chosen = []
    for name in wanted:
        hits = [r for r in plan if r.name == name] or [r for r in plan if r.source.stem == name]
        if not hits:
            raise ConfigError(f"unknown notebook {name!r}; known: {', '.join(r.name for r in plan)}")
        chosen += [r for r in hits if r not in chosen]
    return chosen


def with_parameters(run: NotebookRun, overrides: dict[str, Any], name: str | None = None) -> NotebookRun:
    """The same run with some parameters replaced (``cube book execute --param``).

    ``name`` makes it a reader's run of its own (``--as NAME``), titled after it, so that it is
    written beside the book's pages and never over one of them.
    """
    if name is not None and not _NAME.fullmatch(name):
        raise ConfigError(f"run name {name!r} must be letters, digits, '_', '-' or '.'")
    title = run.title
    if name is not None:
        title = f"{base_heading(read_myst_notebook(run.source)) or run.name}: a reader's run ({name})"
    updated = NotebookRun(name or run.name, run.source, {**run.parameters, **overrides}, run.requires,
                          title, run.summary if name is None else None)
    check_parameters(updated)
    return updated


def reader_run(plan: list[NotebookRun], runs: list[NotebookRun], overrides: dict[str, Any],
               name: str | None) -> list[NotebookRun]:
    """The runs ``cube book execute`` performs when a reader passes ``--param`` (and ``--as``).

    A run whose parameters differ from the plan's is a reader's run: it must be named, and the
    name must not be one of the book's, so the paper's pages are never overwritten by it.
    """
    if name is not None and not overrides:
        raise ConfigError(f"--as {name}: a reader's run is one with --param; without one, run the plan as it is")
    if not overrides:
        return runs
    if name is None:
        raise ConfigError("--param makes a reader's run: name it with --as NAME (it is written to NAME.ipynb, "
                          "never over the book's pages)")
    if any(r.name == name for r in plan):
        raise ConfigError(f"--as {name}: {name!r} is one of the book's runs (config/notebooks.yaml); choose another name")
    if len(runs) != 1:
        raise ConfigError(f"--as {name} names one run, but --only selects {len(runs)}; select exactly one")
    return [with_parameters(runs[0], overrides, name)]


# ---- notebooks ----------------------------------------------------------------------------------

def read_myst_notebook(source: str | Path):
    """A MyST-markdown notebook as an nbformat notebook; its front matter must name a kernel."""
    import jupytext

    source = Path(source)
    if not source.is_file():
        raise ConfigError(f"notebook not found: {source}")
    nb = jupytext.read(source, fmt="md:myst")
    kernel = nb.metadata.get("kernelspec", {}).get("name")
    if not kernel:
        raise ConfigError(f"{source}: the front matter has no kernelspec (papermill needs one)")
    return nb


def declared_parameters(nb, source: str | Path = "notebook") -> set[str]:
    """Names assigned in the cell tagged ``parameters`` (read, not executed)."""
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ConfigError(f"{source}: needs exactly one cell tagged 'parameters', found {len(cells)}")
    try:
        tree = ast.parse(cells[0].source)
    except SyntaxError as exc:
        raise ConfigError(f"{source}: the parameters cell does not parse (line {exc.lineno})") from None
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def check_parameters(run: NotebookRun) -> None:
    declared = declared_parameters(read_myst_notebook(run.source), run.source)
    unknown = sorted(set(run.parameters) - declared)
    if unknown:
        raise ConfigError(
            f"{run.name}: parameter {unknown[0]!r} is not in {run.source.name}'s parameters cell "
            f"(declared: {', '.join(sorted(declared))})"
        )


def missing_data(run: NotebookRun) -> str | None:
    """Why ``run`` cannot run here (a benchmark it reads is nowhere to be found), or None.

    A notebook naming its own benchmark folder in a parameter is given that folder.
    """
    from cube.protocol.items import find_benchmark_root, missing_benchmark_message

    explicit = run.parameters.get("benchmark_root")
    for benchmark in run.requires:
        if find_benchmark_root(benchmark, explicit) is None:
            return missing_benchmark_message(benchmark, explicit)
    return None


def base_heading(nb) -> str | None:
    """The notebook's first level-1 heading (its page title)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return None


def retitle(nb, run: NotebookRun):
    """A run under other parameters as a page of its own: its heading, summary and parameters.

    The notebook's first heading becomes ``run.title`` (two pages with one heading read as one
    page twice in navigation, prev/next and search), a summary sentence follows it, and the
    parameters are written as a cell of Python literals (papermill's own injection escapes every
    non-ASCII character, so ``Ⅰ`` would show as ``\\u2160``); papermill then injects nothing.
    """
    import nbformat

    if run.title:
        for cell in nb.cells:
            if cell.cell_type == "markdown" and any(line.startswith("# ") for line in cell.source.splitlines()):
                lines = cell.source.splitlines()
                at = next(i for i, line in enumerate(lines) if line.startswith("# "))
                base = lines[at][2:].strip()
                settings = "; ".join(f"`{k} = {v!r}`" for k, v in run.parameters.items())
                sentence = (f"*This page is “{base}” (`{run.source.name}`) executed again with {settings}.*"
                            if settings else "")
                extra = [s for s in (sentence, run.summary or "") if s]
                lines[at:at + 1] = [f"# {run.title}", "", *(x for s in extra for x in (s, ""))]
                cell.source = "\n".join(lines)
                break
    if run.parameters:
        index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", []))
        body = "\n".join(f"{k} = {v!r}" for k, v in run.parameters.items())
        cell = nbformat.v4.new_code_cell(f"# Parameters of this run\n{body}")
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(index + 1, cell)
    return nb


def glued_values(path: str | Path) -> dict[str, str]:
    """The values an executed notebook glued, as their plain text (strings unquoted).

    A page that reports another notebook's results (the paper beside the reproduction) reads
    them here rather than computing them a second time.
    """
    import nbformat

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} is missing: execute that notebook first (cube book execute)")
    out = {}
    for cell in nbformat.read(path, as_version=4).cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            meta = o.get("metadata", {}).get("scrapbook")
            if meta:
                text = o.get("data", {}).get(meta.get("mime_prefix", "") + "text/plain", "")
                try:
                    value = ast.literal_eval(text)
                    text = value if isinstance(value, str) else text
                except (ValueError, SyntaxError):
                    pass
                out[meta["name"]] = text
    return out


_GLUE_KEY = re.compile(r"""\bglue\(\s*["']([A-Za-z0-9_]+)["']""")
NOT_RUN = "not run here (no benchmark items)"
# A glued key named *_summary is the one sentence a page citing the notebook shows for it
# (``{glue}`` directive, HTML); a skipped notebook glues the notice there instead.
SUMMARY_SUFFIX = "_summary"
BENCHMARK_NAMES = {"cmmlu": "CMMLU", "ceval": "C-Eval"}


def portable(text: str) -> str:
    """``text`` with the folders of the machine that built the book written portably: the
    repository as ``.``, its parent as ``..``, a folder named by a cube environment variable as
    that variable, the home folder as ``~``. A page must not show the build machine's paths."""
    places = [(str(Path(os.environ[v])), f"${v}") for v in ("CUBE_BENCHMARKS", "CUBE_DATA", "CUBE_SHARED_BENCHMARKS",
                                                          "CUBE_CACHE") if os.environ.get(v)]
    places += [(str(REPO_ROOT), "."), (str(REPO_ROOT.parent), ".."),
               (str(Path.home()), "~")]
    for path, shown in sorted(places, key=lambda p: -len(p[0])):  # the longest (innermost) first
        if len(path) > 1:
            text = re.sub(re.escape(path) + r"(?=/|\b|$)", lambda _m, s=shown: s, text)
    return text


class NotRun:
    """What a skipped notebook glues under each key: the words "not run here" as text (what
    ``{glue:text}`` shows), and nothing as HTML, so that a table or chart pasted with ``{glue}``
    leaves no stray code block; under a ``*_summary`` key, ``sentence`` as HTML."""

    def __init__(self, sentence: str = "") -> None:
        self.sentence = sentence

    def __repr__(self) -> str:
        return NOT_RUN

    def _repr_html_(self) -> str:
        return f'<p class="cube-not-run">{self.sentence}</p>' if self.sentence else '<span class="cube-not-run"></span>'


def skipped_notebook(nb, run: NotebookRun, reason: str):
    """What the book shows for a claim that needs data this machine lacks.

    The notebook's opening text, a plain notice of what is missing and how to get it (no path
    of this machine: ``portable``), and every value the notebook would glue, set to "not run
    here" (``NotRun``), so that pages citing it still build and say so rather than show a stale
    or made-up number; a page citing its ``*_summary`` shows one sentence instead.
    """
    import nbformat

    keys = list(dict.fromkeys(k for c in nb.cells if c.cell_type == "code" for k in _GLUE_KEY.findall(c.source)))
    opening = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            break
        opening.append(cell)
    names = " and ".join(BENCHMARK_NAMES.get(b, b) for b in run.requires) or "benchmark"
    fetch = " and ".join(f"`cube data fetch {b}`" for b in run.requires)
    notice = nbformat.v4.new_markdown_cell(
        f"```{{warning}}\nThis claim was **not run here**: it reads the {names} items, not only the archived "
        f"records, and the machine that built this page had none. Get them with {fetch}, then run "
        f"`make book` again.\n```")
    sentence = (f"Not run here: this claim reads the {names} items, and the machine that built this book "
                f"had none (<code>{fetch.replace('`', '')}</code> gets them).")
    code = nbformat.v4.new_code_cell(
        "from myst_nb import glue\n\n"
        "from cube.paper.book import NotRun\n\n"
        f"print({('not run: ' + portable(reason))!r})\n"
        f"for key in {keys!r}:\n"
        f"    glue(key, NotRun({sentence!r} if key.endswith({SUMMARY_SUFFIX!r}) else ''), display=False)")
    out = nbformat.v4.new_notebook(cells=[*opening, notice, code], metadata=nb.metadata)
    return out


_KERNEL_MANAGER: type | None = None


def quiet_kernel_manager() -> type:
    """The kernel manager the book's own executions use: the same kernel, without two lines of
    noise per notebook that a newcomer reads as failure.

    - ``Kernel is running over TCP without encryption`` (a WARNING per kernel): the kernel talks
      to this process over Unix sockets (IPC) in the temp folder instead of localhost TCP, so the
      warning's cause is gone, not the warning hidden; nothing is listening on a port either.
    - ``KeyboardInterrupt caught in kernel`` (an ERROR on a run that succeeded): jupyter_client
      sends SIGINT before every shutdown, even to an idle kernel. This manager skips that interrupt
      while shutting down; a kernel that does not answer the shutdown request is still killed, and
      an interrupt on a cell timeout is untouched.

    A notebook's own errors are not the kernel's log: papermill re-raises them, and a dead kernel
    is nbclient's DeadKernelError, so both stay as loud as before.
    """
    global _KERNEL_MANAGER
    if _KERNEL_MANAGER is None:
        import uuid

        from jupyter_client.manager import AsyncKernelManager
        from traitlets import default

        class QuietKernelManager(AsyncKernelManager):
            @default("transport")
            def _ipc_transport(self) -> str:
                return "ipc"

            @default("ip")
            def _socket_prefix(self) -> str:  # jupyter_client's default is relative to the cwd (the repository)
                return os.path.join(tempfile.gettempdir(), f"cube-kernel-{uuid.uuid4().hex[:12]}")

            async def _async_interrupt_kernel(self) -> None:
                if not self.shutting_down:
                    await super()._async_interrupt_kernel()

        _KERNEL_MANAGER = QuietKernelManager
    return _KERNEL_MANAGER


def execute_notebook(run: NotebookRun, out_dir: str | Path = EXECUTED_DIR) -> Path:
    """Convert, execute with papermill, and publish ``<out_dir>/<name>.ipynb`` atomically.

    Papermill saves the output as it goes, so it writes into a temp file in ``out_dir`` that is
    renamed only after the last cell ran. On failure the stale output is removed (the book must
    not render a claim that no longer holds) and the partial run is kept as
    ``<out_dir>/failed/<name>.ipynb`` for the reader to inspect; papermill's error is re-raised.
    """
    import jupytext
    import papermill

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nb = retitle(read_myst_notebook(run.source), run)
    reason = missing_data(run)
    if reason is not None:
        nb = skipped_notebook(nb, run, reason)
    target = run.output(out_dir)
    failed = out_dir / "failed" / f"{run.name}.ipynb"
    with tempfile.TemporaryDirectory(prefix=".cube-book-") as tmp:
        converted = Path(tmp) / f"{run.name}.ipynb"
        jupytext.write(nb, converted, fmt="ipynb")
        fd, partial = tempfile.mkstemp(dir=out_dir, prefix=f".{run.name}.", suffix=".tmp.ipynb")
        os.close(fd)
        try:
            papermill.execute_notebook(
                str(converted), partial, parameters={}, cwd=str(REPO_ROOT),
                kernel_name=nb.metadata["kernelspec"]["name"], progress_bar=False, log_output=False,
                kernel_manager_class=quiet_kernel_manager(),
            )
            os.chmod(partial, 0o644)
            os.replace(partial, target)
        except BaseException:
            target.unlink(missing_ok=True)
            if os.path.exists(partial) and os.path.getsize(partial):
                failed.parent.mkdir(exist_ok=True)
                os.replace(partial, failed)
            raise
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    failed.unlink(missing_ok=True)
    return target


def missing_outputs(runs: list[NotebookRun], out_dir: str | Path = EXECUTED_DIR) -> list[Path]:
    return [r.output(out_dir) for r in runs if not r.output(out_dir).is_file()]


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


# ---- Sphinx extension (``sphinx: extra_extensions: [cube.paper.book]`` in _config.yml) ---------------

def _asset_key(asset: Any) -> tuple:
    # An inline script is registered once with filename None and once with "": the same script.
    filename = getattr(asset, "filename", str(asset)) or ""
    return (filename, tuple(sorted(getattr(asset, "attributes", {}).items())))


def _dedupe_page_assets(app, pagename, templatename, context, doctree) -> None:
    """Drop repeated script/stylesheet entries from a page.

    Under JB1 (Sphinx 7.4) sphinx-thebe's inline ``const THEBE_JS_URL = ...`` script lands in
    every page twice (once from the registry, with filename "", once from the builder, with
    None); the second copy is a SyntaxError in the console ("Identifier has already
    been declared"). Keeping the first of equal entries (same file, same attributes, whatever the
    priority) fixes that without touching the extensions.
    """
    for key in ("script_files", "css_files"):
        if key in context:
            seen: dict[tuple, Any] = {}
            for asset in context[key]:
                seen.setdefault(_asset_key(asset), asset)
            context[key] = list(seen.values())


SEARCH_SCRIPT = "cube-search.js"  # book/static: answers the search page's fetches over file://
SEARCH_PAGES = "cube-search-pages.js"  # written into the site's _static by write_search_pages
# Block elements end a line in a page's search text, so that words of adjacent blocks stay apart.
_BLOCKS = {"p", "div", "section", "li", "tr", "td", "th", "pre", "table", "ul", "ol", "dl", "dt", "dd",
           "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "figure", "figcaption", "br"}


def search_text(page_html: str) -> str:
    """A page's main content as Sphinx's search reads it for a snippet: its text, every element
    that carries an id kept (as a ``div`` of that id; a result's anchor selects one), and nothing
    else: no markup, script, style, chart, header link or notebook source (a code cell's input:
    a search for "McNemar" showed Python as its excerpt, issue 47; prose and outputs stay).
    Escaped HTML, in ``[role=main]``."""
    from bs4 import BeautifulSoup, NavigableString, Tag

    soup = BeautifulSoup(page_html, "html.parser")
    # the article, not the theme's header and contents list that share its [role=main]
    main = soup.select_one('[role="main"] article') or soup.select_one('[role="main"]')
    if main is None:
        return ""
    for junk in main.select("script, style, svg, .headerlink, div.cube-chart, div.cell_input, "
                            "details.above-input > summary"):
        junk.decompose()

    def walk(node) -> str:
        if isinstance(node, NavigableString):
            return html_escape(str(node))
        if not isinstance(node, Tag):
            return ""
        inner = "".join(walk(c) for c in node.children)
        if node.name in _BLOCKS:
            inner += "\n"
        ident = node.get("id")
        return f'<div id="{html_escape(ident)}">{inner}</div>' if ident else inner

    text = re.sub(r"\n\s*\n+", "\n", "".join(walk(c) for c in main.children))
    return f'<div role="main">{text.strip()}</div>'


def html_escape(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def write_search_pages(app, exception) -> None:
    """After an HTML build: every page's search text (``search_text``), keyed by its path in
    the site, as one script the search page loads over file:// (book/static/cube-search.js)."""
    if exception is not None or getattr(app.builder, "format", None) != "html":
        return
    from cube.atomic import atomic_write_text

    out = Path(app.outdir)
    pages = {}
    for page in sorted(out.rglob("*.html")):
        rel = page.relative_to(out).as_posix()
        if rel.startswith("_") or rel in ("search.html", "genindex.html"):
            continue
        text = search_text(page.read_text(encoding="utf-8"))
        if text:
            pages[rel] = text
    atomic_write_text(out / "_static" / SEARCH_PAGES,
                      "window.CUBE_SEARCH_PAGES = " + json.dumps(pages, ensure_ascii=False, sort_keys=True) + ";\n")


def setup(app) -> dict:
    app.connect("html-page-context", _dedupe_page_assets, priority=900)
    app.add_js_file(SEARCH_SCRIPT)
    app.connect("build-finished", write_search_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
