"""The Sphinx extension the book's build loads (``sphinx: extra_extensions: [cube.paper.sphinx_extension]``
in ``_config.yml``, and in the example report's configuration, ``cube.report.site``).

Two hooks run inside Sphinx: one drops the scripts JB1 puts on a page twice, the other writes
every page's search text into one script that the offline search page loads over ``file://``.
It stands alone because Sphinx imports it into its own process, where it needs neither the plan,
nor the notebooks, nor the tools that start the build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


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
