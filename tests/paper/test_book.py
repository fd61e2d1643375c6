"""The plan of notebook runs (cube.paper.plan), their execution (cube.paper.execution), and the book's
wiring (cube.paper.book, cube.paper.sphinx_extension).

`make book-test` also runs `pytest --nbval-lax book/_executed/*.ipynb`, which re-executes the
executed notebooks and compares the outputs of the cells tagged ``nbval-check-output`` (the
claims); the tests here check that this tagging works and that the plan, the TOC and the
configuration agree.
"""

from __future__ import annotations

import re

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
import yaml
from papermill.exceptions import PapermillExecutionError

from cube.config import REPO_ROOT
from cube.errors import ChecksumError, ConfigError
from cube.paper import book, execution, sphinx_extension
from cube.paper.book import (
    EXTRA_DIR,
    MATHJAX_DIR,
    STATIC_DIR,
    fetch_mathjax,
)
from cube.paper.execution import execute_notebook
from cube.paper.plan import (
    EXECUTED_DIR,
    NotebookRun,
    base_heading,
    declared_parameters,
    load_plan,
    read_myst_notebook,
    reader_run,
    select_runs,
    with_parameters,
)
from cube.paper.charts import BUNDLE_NAME

CONFIG = yaml.safe_load((REPO_ROOT / "_config.yml").read_text(encoding="utf-8"))
TOC = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text(encoding="utf-8"))

# An invented notebook: one parameter, one claim about it.
INVENTED = textwrap.dedent('''\
    ---
    kernelspec:
      display_name: Python 3
      language: python
      name: python3
    ---
    # An invented claim

    ```{code-cell} ipython3
    :tags: [parameters]

    threshold = 3  # the claim holds below 10
    label = "x"
    ```

    ```{code-cell} ipython3
    :tags: [nbval-check-output]

    print(f"threshold {threshold} label {label}")
    assert threshold < 10, f"threshold {threshold} is too large"
    ```
    ''')


@pytest.fixture
def invented(tmp_path) -> Path:
    path = tmp_path / "invented.md"
    path.write_text(INVENTED, encoding="utf-8")
    return path


def write_plan(tmp_path: Path, entries: list) -> Path:
    path = tmp_path / "notebooks.yaml"
    path.write_text(yaml.safe_dump({"notebooks": entries}, allow_unicode=True), encoding="utf-8")
    return path


# ---- the real plan, TOC and configuration agree -------------------------------------------------

def toc_files() -> list[str]:
    return [ch["file"] for part in TOC["parts"] for ch in part["chapters"]]


def toc_path(run: NotebookRun) -> str:
    return run.output(EXECUTED_DIR).relative_to(REPO_ROOT).with_suffix("").as_posix()


def test_toc_lists_exactly_the_planned_executions():
    plan = load_plan()
    executed = [f for f in toc_files() if f.startswith("book/_executed/")]
    assert sorted(executed) == sorted(toc_path(r) for r in plan) and len(set(executed)) == len(executed)
    # the paper page reads every other run's results: it runs last and stands first
    assert plan[-1].name == "00_paper" and toc_files()[0] == "book/_executed/00_paper"
    assert executed[1:] == [toc_path(r) for r in plan[:-1]]
    assert len({r.name for r in plan}) == len(plan)


def test_every_run_has_a_heading_of_its_own():
    """Two pages with one heading read as one page twice in navigation, prev/next and search."""
    headings = []
    for run in load_plan():
        nb = execution.retitle(read_myst_notebook(run.source), run)
        headings.append(base_heading(nb))
        if run.parameters:
            assert run.title and run.summary, run.name
    assert len(set(headings)) == len(headings), headings


def test_every_prose_page_in_the_toc_exists():
    for f in [TOC["root"], *toc_files()]:
        if not f.startswith("book/_executed/"):
            assert (REPO_ROOT / f"{f}.md").is_file(), f


def test_config_renders_pre_executed_notebooks_with_local_assets():
    sphinx = CONFIG["sphinx"]["config"]
    assert CONFIG["execute"]["execute_notebooks"] == "off"
    assert sphinx["html_static_path"][0] == STATIC_DIR.relative_to(REPO_ROOT).as_posix()
    assert sphinx["html_js_files"][0] == BUNDLE_NAME
    assert sphinx["html_extra_path"] == [EXTRA_DIR.relative_to(REPO_ROOT).as_posix()]
    # mathjax_path is relative to _static/ in the site; html_extra_path copies EXTRA_DIR to the root
    assert EXTRA_DIR / "_static" / sphinx["mathjax_path"] == MATHJAX_DIR / "tex-chtml.js"
    assert "cube.paper.sphinx_extension" in CONFIG["sphinx"]["extra_extensions"]
    assert "book/static" in sphinx["html_static_path"] and sphinx["html_css_files"] == ["cube.css"]
    assert "cube-nav.js" in sphinx["html_js_files"]
    assert not (REPO_ROOT / "_static").exists(), "JB1 would inject every script of a root _static/"


def test_claim_notebooks_have_a_kernel_parameters_and_checked_assertions():
    # every notebook source, planned or still waiting for its records, so none rots unexecuted
    sources = {run.source for run in load_plan()} | set((REPO_ROOT / "notebooks").glob("[0-9]*.md"))
    for source in sorted(sources):
        if source.parent.name == "guide":  # the Guide's pages hold examples, not claims (test_guide_pages_run_examples)
            continue
        nb = read_myst_notebook(source)
        assert declared_parameters(nb, source)
        claims = [c for c in nb.cells if "nbval-check-output" in c.metadata.get("tags", [])]
        assert claims and all("assert " in c.source for c in claims), source
        assert nb.cells[-1] in claims, f"{source}: the claims are not the last cell"


def test_guide_pages_run_examples():
    """Each Guide page shows commands it runs (cube.paper.guide.cube), or the reference it generates."""
    pages = sorted((REPO_ROOT / "notebooks" / "guide").glob("*.md"))
    planned = {run.source for run in load_plan()}
    assert pages and all(page in planned for page in pages)
    for page in pages:
        nb = read_myst_notebook(page)
        assert declared_parameters(nb, page)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert re.search(r'cube\(f?"cube ', code) or "command_reference()" in code, page


def test_record_notebooks_read_the_archive_by_default_and_take_another_store():
    """A reader re-executes a claim on other records (e.g. the smoke sample) with one parameter."""
    for source in sorted((REPO_ROOT / "notebooks").glob("0[2-68]_*.md")):
        nb = read_myst_notebook(source)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        assert 'records = "data/records"' in cell.source, source


# ---- loading the plan ---------------------------------------------------------------------------

def test_plan_reads_names_sources_and_parameters(tmp_path, invented):
    plan = load_plan(write_plan(tmp_path, [
        {"name": "one", "source": str(invented)},
        {"name": "two", "source": str(invented), "parameters": {"threshold": 5}, "title": "Two"},
    ]))
    assert [(r.name, r.source, r.parameters, r.title) for r in plan] == [
        ("one", invented, {}, None), ("two", invented, {"threshold": 5}, "Two")]


@pytest.mark.parametrize("entries, message", [
    ([{"name": "a", "source": "{nb}"}, {"name": "a", "source": "{nb}"}], "name 'a' is used twice"),
    ([{"name": "a", "source": "{nb}", "parameters": {"treshold": 1}, "title": "t"}], "parameter 'treshold' is not in invented.md"),
    ([{"name": "a/b", "source": "{nb}"}], "name 'a/b' must be"),
    ([{"name": "a", "source": "{nb}", "params": {}}], "unknown key(s) params"),
    ([{"name": "a", "source": "missing.md"}], "notebook not found"),
    ([{"name": "a"}], "needs a 'name' and a 'source'"),
    ([], "expected a non-empty list"),
])
def test_plan_errors_name_the_bad_value(tmp_path, invented, entries, message):
    entries = json.loads(json.dumps(entries).replace("{nb}", str(invented)))
    with pytest.raises(ConfigError) as exc:
        load_plan(write_plan(tmp_path, entries))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_select_runs_by_run_name_or_by_notebook():
    plan = load_plan()
    assert [r.name for r in select_runs(plan, ["07_partial_credit"])] == ["07_partial_credit"]
    assert [r.name for r in select_runs(plan, ["01_tokenizer_audit"])] == ["01_tokenizer_audit"]
    others = [r for r in plan if r.name != "01_tokenizer_audit"]  # no run of that name
    by_notebook = [r.name for r in select_runs(others, ["01_tokenizer_audit"])]
    assert by_notebook == [r.name for r in others if r.source.stem == "01_tokenizer_audit"] == ["01_tokenizer_audit_roman"]
    assert select_runs(plan, []) == plan
    with pytest.raises(ConfigError, match="unknown notebook 'nope'"):
        select_runs(plan, ["nope"])


def test_parameter_overrides_are_checked_against_the_notebook(invented):
    run = NotebookRun("x", invented, {"threshold": 1})
    assert with_parameters(run, {"label": "y"}).parameters == {"threshold": 1, "label": "y"}
    with pytest.raises(ConfigError, match="parameter 'labels' is not in invented.md"):
        with_parameters(run, {"labels": "y"})


def test_a_notebook_without_kernelspec_or_with_two_parameter_cells_is_refused(tmp_path, invented):
    bare = tmp_path / "bare.md"
    bare.write_text(INVENTED.split("---\n", 2)[2], encoding="utf-8")
    with pytest.raises(ConfigError, match="no kernelspec"):
        read_myst_notebook(bare)
    twice = tmp_path / "twice.md"
    twice.write_text(INVENTED.replace("[nbval-check-output]", "[parameters]"), encoding="utf-8")
    with pytest.raises(ConfigError, match="exactly one cell tagged 'parameters', found 2"):
        declared_parameters(read_myst_notebook(twice), twice)


# ---- execution ----------------------------------------------------------------------------------

def stdout_of(nb_path: Path) -> str:
    nb = nbformat.read(nb_path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_execute_injects_parameters_and_publishes_the_output(tmp_path, invented):
    out = execute_notebook(NotebookRun("inv", invented, {"threshold": 7, "label": "Ⅳ"}, title="Invented, again"),
                           tmp_path / "out")
    assert out == tmp_path / "out" / "inv.ipynb"
    assert "threshold 7 label Ⅳ" in stdout_of(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["inv.ipynb"]  # no temp file left
    nb = nbformat.read(out, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "label = 'Ⅳ'" in injected[0].source and "\\u" not in injected[0].source
    assert nb.cells[0].source.startswith("# Invented, again\n") and "“An invented claim”" in nb.cells[0].source


def test_a_readers_run_is_named_and_never_replaces_a_book_page():
    plan = load_plan()
    audit = select_runs(plan, ["01_tokenizer_audit"])
    mine = reader_run(plan, audit, {"extra_label_sets": ["greek=α,β,γ,δ"]}, "greek")
    assert [(r.name, r.parameters["extra_label_sets"]) for r in mine] == [("greek", ["greek=α,β,γ,δ"])]
    assert mine[0].title == "Claim 1: the tokenizer audit: a reader's run (greek)"
    assert reader_run(plan, audit, {}, None) == audit
    for name, runs, message in [
        (None, audit, "name it with --as NAME"),
        ("01_tokenizer_audit_roman", audit, "is one of the book's runs"),
        ("greek", plan, "--only selects"),
        ("a/b", audit, "must be letters"),
    ]:
        with pytest.raises(ConfigError, match=message):
            reader_run(plan, runs, {"extra_label_sets": []}, name)
    with pytest.raises(ConfigError, match="a reader's run is one with --param"):
        reader_run(plan, audit, {}, "greek")


def test_a_planned_run_with_parameters_needs_a_title(tmp_path, invented):
    with pytest.raises(ConfigError, match="needs its own 'title'"):
        load_plan(write_plan(tmp_path, [{"name": "a", "source": str(invented), "parameters": {"threshold": 1}}]))


def test_glued_values_read_back_what_a_notebook_glued(tmp_path, invented):
    source = tmp_path / "glued.md"
    source.write_text(INVENTED.replace('print(f"threshold', 'from myst_nb import glue\nglue("t", threshold, display=False)\n'
                                       'glue("s", "4,000", display=False)\nprint(f"threshold'), encoding="utf-8")
    out = execute_notebook(NotebookRun("nb", source), tmp_path)
    assert execution.glued_values(out) == {"t": "3", "s": "4,000"}
    with pytest.raises(ConfigError, match="is missing: execute that notebook first"):
        execution.glued_values(tmp_path / "none.ipynb")


def test_a_clean_execution_prints_no_kernel_warning_or_error_and_a_failure_stays_loud(tmp_path, invented, capfd):
    """Issue 23 §3: make paper printed the kernel's TCP-encryption WARNING per notebook and an ERROR
    (KeyboardInterrupt caught in kernel: the SIGINT sent before each shutdown), on runs that succeeded."""
    execute_notebook(NotebookRun("inv", invented), tmp_path / "out")
    err = capfd.readouterr().err  # the kernel's own stderr: a subprocess writing to this fd 2
    assert "IPKernelApp" not in err and "ERROR" not in err and "WARNING" not in err, err
    with pytest.raises(PapermillExecutionError, match="threshold 12 is too large"):
        execute_notebook(NotebookRun("inv", invented, {"threshold": 12}), tmp_path / "out")
    assert "IPKernelApp" not in capfd.readouterr().err


def test_a_failing_claim_fails_the_run_and_leaves_no_stale_output(tmp_path, invented):
    out_dir = tmp_path / "out"
    execute_notebook(NotebookRun("inv", invented), out_dir)
    assert (out_dir / "inv.ipynb").is_file()
    with pytest.raises(PapermillExecutionError) as exc:
        execute_notebook(NotebookRun("inv", invented, {"threshold": 12}), out_dir)
    assert exc.value.ename == "AssertionError" and "threshold 12 is too large" in exc.value.evalue
    assert not (out_dir / "inv.ipynb").exists()  # the book cannot render the old claim
    assert "threshold 12" in stdout_of(out_dir / "failed" / "inv.ipynb")
    assert sorted(p.name for p in out_dir.iterdir()) == ["failed"]


def test_the_leakage_claim_without_benchmark_items_says_so_and_keeps_every_glue_key(
        tmp_path, monkeypatch, benchmarks_root):
    """A user's machine with records but no CMMLU: the claim is not run, and its page says why."""
    monkeypatch.setenv("CUBE_DATA", str(tmp_path / "empty-home"))
    monkeypatch.setenv("CUBE_SHARED_BENCHMARKS", str(tmp_path / "no-shared"))
    monkeypatch.delenv("CUBE_BENCHMARKS", raising=False)
    run = select_runs(load_plan(), ["05_leakage"])[0]
    assert run.requires == ("cmmlu",)
    reason = execution.missing_data(run)
    assert "cube data fetch cmmlu" in reason
    out = execute_notebook(run, tmp_path / "out")
    nb = nbformat.read(out, as_version=4)
    text = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "not run here" in text and "cube data fetch cmmlu" in text
    source = run.source.read_text(encoding="utf-8")
    glued = {o["metadata"]["scrapbook"]["name"] for c in nb.cells if c.cell_type == "code"
             for o in c.outputs if "scrapbook" in o.get("metadata", {})}
    assert glued and glued == set(execution._GLUE_KEY.findall(source))
    # what the pages show: no folder of this machine, one sentence under the summary key, and
    # nothing (not a code block of "not run here") where a table is pasted
    shown = json.dumps([(c.source, c.get("outputs", [])) for c in nb.cells])
    assert str(tmp_path) not in shown and str(REPO_ROOT.parent) not in shown, "a path of the build machine"
    html = {o["metadata"]["scrapbook"]["name"]: o["data"]["application/papermill.record/text/html"]
            for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if "scrapbook" in o.get("metadata", {})}
    assert "Not run here" in html["leak_summary"] and "cube data fetch cmmlu" in html["leak_summary"]
    assert all("not run" not in v.lower() for k, v in html.items() if k != "leak_summary")
    assert execution.glued_values(out)["leak_hits"] == execution.NOT_RUN
    monkeypatch.setenv("CUBE_SHARED_BENCHMARKS", str(benchmarks_root))  # wherever the items are here
    assert execution.missing_data(run) is None  # with the items there, the claim runs


def test_portable_hides_the_folders_of_the_build_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("CUBE_DATA", str(tmp_path / "home"))
    monkeypatch.delenv("CUBE_BENCHMARKS", raising=False)
    text = (f"looked in {tmp_path}/home/cmmlu (data home), {REPO_ROOT.parent}/shared/benchmarks/cmmlu, "
            f"{REPO_ROOT}/data/records and {Path.home()}/x")
    assert execution.portable(text) == ("looked in $CUBE_DATA/cmmlu (data home), ../shared/benchmarks/cmmlu, "
                                             "./data/records and ~/x")


def test_requires_names_a_known_benchmark(tmp_path, invented):
    with pytest.raises(ConfigError, match="'requires' must list benchmarks"):
        load_plan(write_plan(tmp_path, [{"name": "a", "source": str(invented), "requires": ["mmlu"]}]))


@pytest.fixture(scope="module")
def partial_credit(tmp_path_factory) -> Path:
    """The real claim notebook 7, executed as the book executes it."""
    run = select_runs(load_plan(), ["07_partial_credit"])[0]
    return execute_notebook(run, tmp_path_factory.mktemp("executed"))


def test_partial_credit_notebook_states_its_claims(partial_credit):
    text = stdout_of(partial_credit)
    assert "ladder: closed form 49/160 = 0.30625, enumeration 49/160 = 0.30625" in text
    assert "thpt2025_standard: baseline 2.725 (ladder) < 3.5 (additive)" in text


def nbval(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider", str(path)],
        capture_output=True, text=True, cwd=path.parent, check=False,
    )


def test_nbval_checks_the_claim_cells_output(partial_credit, tmp_path):
    assert nbval(partial_credit).returncode == 0
    nb = nbformat.read(partial_credit, as_version=4)
    claim = nb.cells[-1]
    assert "nbval-check-output" in claim.metadata.tags
    claim.outputs[0]["text"] = claim.outputs[0]["text"].replace("2.725", "2.750")
    tampered = tmp_path / "tampered.ipynb"
    nbformat.write(nb, tampered)
    proc = nbval(tampered)
    assert proc.returncode != 0 and "2.750" in proc.stdout


# ---- helpers and the Sphinx hook ----------------------------------------------------------------

def test_page_assets_are_deduplicated_keeping_the_first():
    from sphinx.builders.html._assets import _JavaScript

    inline = 'const THEBE_JS_URL = "x"'
    scripts = [_JavaScript("", body=inline), _JavaScript("_static/a.js"), _JavaScript(None, body=inline, priority=600),
               _JavaScript("_static/a.js", defer="defer"), _JavaScript("_static/a.js")]
    context = {"script_files": scripts}
    sphinx_extension._dedupe_page_assets(None, "page", "page.html", context, None)
    assert context["script_files"] == [scripts[0], scripts[1], scripts[3]]


@pytest.mark.registry
def test_mathjax_is_fetched_from_npm_once(tmp_path):
    dest = fetch_mathjax(tmp_path / "mathjax")
    stamp = json.loads((dest / ".npm-pack.json").read_text())
    assert stamp["name"] == "mathjax" and stamp["version"].startswith("3.") and stamp["integrity"].startswith("sha512-")
    assert (dest / "tex-chtml.js").is_file() and (dest / "output" / "chtml" / "fonts" / "woff-v2").is_dir()
    before = (dest / "tex-chtml.js").stat().st_mtime_ns
    assert fetch_mathjax(dest) == dest and (dest / "tex-chtml.js").stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir()] == ["mathjax"]  # no temp folder left behind
    assert stamp["version"] == "3.2.2" and stamp["integrity"] == book.MATHJAX_INTEGRITY


def test_mathjax_whose_integrity_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(book, "MATHJAX_INTEGRITY", "sha512-" + "A" * 86 + "==")
    with pytest.raises(ChecksumError, match="is not the pinned"):
        fetch_mathjax(tmp_path / "mathjax")
    assert list(tmp_path.iterdir()) == []  # nothing installed


def test_a_number_missing_from_the_notebooks_fails_the_strict_build(tmp_path, invented):
    """Prose pastes numbers by glue key; a key no notebook produces must not build silently."""
    source = tmp_path / "glued.md"
    source.write_text(INVENTED.replace('print(f"threshold', 'from myst_nb import glue\nglue("t", threshold, display=False)\nprint(f"threshold'),
                      encoding="utf-8")
    execute_notebook(NotebookRun("nb", source, {"threshold": 4}), tmp_path)
    (tmp_path / "_config.yml").write_text('title: t\nonly_build_toc_files: true\nexecute:\n  execute_notebooks: "off"\n')
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: nb\n")
    intro = tmp_path / "intro.md"
    intro.write_text("# Intro\n\nThe threshold is {glue:text}`nb.ipynb::t:s`.\n")
    assert book.build_book(tmp_path).returncode == 0
    assert '<span class="pasted-text">4</span>' in (tmp_path / "_build" / "html" / "intro.html").read_text()
    intro.write_text("# Intro\n\nThe threshold is {glue:text}`nb.ipynb::missing:s`.\n")
    assert book.build_book(tmp_path).returncode != 0


def test_search_text_is_the_article_with_its_anchors_and_nothing_else():
    page = ('<main role="main"><div class="header">Contents</div><article class="bd-article">'
            '<section id="claim-3"><h2>Claim 3<a class="headerlink" href="#claim-3">#</a></h2>'
            '<p>footrule &lt; 0.5</p><div class="cube-chart" id="c"></div><script>var spec = 1;</script>'
            '<p>next</p></section></article></main>')
    text = sphinx_extension.search_text(page)
    assert text == '<div role="main"><div id="claim-3">Claim 3\nfootrule &lt; 0.5\nnext\n</div></div>'
    assert sphinx_extension.search_text("<p>no main</p>") == ""


def test_search_text_leaves_out_a_notebook_cells_source_and_keeps_its_output():
    """Issue 47: searching "McNemar" showed Python source as the excerpt (a code cell's input)."""
    page = ('<main role="main"><article><p>The exact McNemar test.</p>'
            '<div class="cell docutils container"><details class="hide above-input"><summary>Show code cell source</summary>'
            '<div class="cell_input docutils container"><div class="highlight-ipython3"><pre>p = mcnemar_exact(a, b)</pre>'
            '</div></div></details><div class="cell_output docutils container"><pre>McNemar p = 0.12</pre></div></div>'
            '</article></main>')
    text = sphinx_extension.search_text(page)
    assert "mcnemar_exact" not in text and "Show code" not in text
    assert "The exact McNemar test." in text and "McNemar p = 0.12" in text


def test_a_readers_run_becomes_a_page_without_editing_the_toc(tmp_path):
    """Issue 36 §6: `cube book build` included a reader's run (`--as NAME`) only after an edit
    of _toc.yml; the build now adds the unlisted executed runs as a part of their own."""
    import shutil

    import yaml

    from cube.config import REPO_ROOT
    from cube.paper.book import READERS_CAPTION, reader_pages, toc_with_readers

    shutil.copy(REPO_ROOT / "_toc.yml", tmp_path / "_toc.yml")
    executed = tmp_path / "book" / "_executed"
    executed.mkdir(parents=True)
    assert reader_pages(tmp_path) == []
    for name in ("01_tokenizer_audit", "02_preregistered_tests", "my_labels"):
        (executed / f"{name}.ipynb").write_text("{}", encoding="utf-8")
    (executed / "failed").mkdir()
    (executed / "failed" / "broken.ipynb").write_text("{}", encoding="utf-8")
    assert reader_pages(tmp_path) == ["book/_executed/my_labels"]
    before = (tmp_path / "_toc.yml").read_text(encoding="utf-8")
    toc = yaml.safe_load(toc_with_readers(tmp_path, ["book/_executed/my_labels"]).read_text(encoding="utf-8"))
    assert (tmp_path / "_toc.yml").read_text(encoding="utf-8") == before  # the committed contents untouched
    assert toc["parts"][-1] == {"caption": READERS_CAPTION, "chapters": [{"file": "book/_executed/my_labels"}]}
    assert toc["parts"][:-1] == yaml.safe_load(before)["parts"] and toc["root"] == yaml.safe_load(before)["root"]
