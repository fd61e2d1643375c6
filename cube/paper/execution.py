"""Executing the claim notebooks: each run of the plan into ``book/_executed/<name>.ipynb``.

Each execution (:class:`cube.paper.plan.NotebookRun`) is converted with jupytext, run by
papermill with its parameters, and written to ``book/_executed/<name>.ipynb`` only once it has
run to the end: a claim (an ``assert``) that no longer holds fails the run, and then no executed
copy is left for the book to render stale. A run whose benchmark items are not on this machine
is executed as a notice instead (:func:`skipped_notebook`), so that the pages citing its values
still build and say so. It stands alone because it is the only part of the book that runs the
notebooks: the plan is read without it, and the site is built from what it wrote.
"""

from __future__ import annotations

import ast
import os
import re
import tempfile
from pathlib import Path

from cube.config import REPO_ROOT
from cube.errors import ConfigError
from cube.paper.plan import EXECUTED_DIR, NotebookRun, read_myst_notebook


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
        "from cube.paper.execution import NotRun\n\n"
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
