"""Offline, deterministic rendering of Altair charts for the book.

Altair's default renderer loads vega from a CDN, and its inline HTML template clashes with the
JavaScript Sphinx puts on every page. The book therefore ships vega, vega-lite and vega-embed
once, as one static file (``vega-bundle.js``), and every chart is a ``<div>`` plus one
``vegaEmbed`` call. The div's id is derived from the hash of the chart's spec, so re-executing a
notebook gives byte-identical output (quiet diffs, stable nbval comparisons) and two different
charts on one page never share an id.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from cube.atomic import atomic_write_text

BUNDLE_NAME = "vega-bundle.js"
CHART_CLASS = "cube-chart"
# a chart as wide as the page's column (width "container"): its div must be a full-width block,
# not vega-embed's inline-block, which would shrink it to nothing (book/static/cube.css)
FLUID_CLASS = "cube-chart-fluid"
# SVG so that a test (and a reader's "save as") sees real vector output; no "open in editor"
# action, which would link to an external site.
EMBED_OPTIONS = {
    "renderer": "svg",
    "actions": {"export": True, "source": False, "compiled": False, "editor": False},
}


def chart_spec(chart: Any) -> dict:
    """The Vega-Lite spec of an Altair chart (or an already plain spec dict)."""
    return chart if isinstance(chart, dict) else chart.to_dict()


def spec_json(spec: dict) -> str:
    """Canonical JSON, safe to place inside a ``<script>`` element.

    Escaping ``<``, ``>`` and ``&`` keeps a label such as ``</script>`` in the data from closing
    the element early; JSON parsers read the escapes back as the same characters.
    """
    text = json.dumps(spec, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def chart_id(spec: dict) -> str:
    """A stable element id: the same spec always gets the same id, different specs differ."""
    return f"{CHART_CLASS}-{hashlib.sha256(spec_json(spec).encode('utf-8')).hexdigest()[:16]}"


def chart_html(chart: Any) -> str:
    """A div and the script that embeds the chart into it once the vega bundle is loaded.

    The bundle is a plain ``<script>`` in the page head, so it normally runs first; waiting for
    ``load`` covers a page that loads it later. If it never loads, ``vegaEmbed`` is undefined
    and the error shows in the console, where the browser test looks for it.
    """
    spec = chart_spec(chart)
    div = chart_id(spec)
    options = json.dumps(EMBED_OPTIONS, sort_keys=True, separators=(",", ":"))
    classes = CHART_CLASS + (f" {FLUID_CLASS}" if spec.get("width") == "container" else "")
    return (
        f'<div id="{div}" class="{classes}"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"  var spec = {spec_json(spec)};\n"
        f'  function embed() {{ vegaEmbed("#{div}", spec, {options}).catch(console.error); }}\n'
        '  if (window.vegaEmbed) { embed(); } else { window.addEventListener("load", embed); }\n'
        "})();\n"
        "</script>"
    )


def display_chart(chart: Any):
    """An ``IPython.display.HTML`` of the chart, for a notebook cell or ``myst_nb.glue``."""
    from IPython.display import HTML

    return HTML(chart_html(chart))


def vega_bundle() -> str:
    """vega, vega-lite and vega-embed as one classic script, wrapped in an IIFE.

    ``vl_convert.javascript_bundle()`` declares its helpers at top level (``const n``,
    ``function t``...); loaded as-is they would become page globals and clobber Sphinx's. Inside
    a function they stay local; the bundle itself assigns ``window.vegaEmbed``, ``window.vega``
    and ``window.vegaLite``.
    """
    import vl_convert

    return "/* vega + vega-lite + vega-embed from vl-convert-python " + vl_convert.__version__ + \
        " */\n(function () {\n" + vl_convert.javascript_bundle() + "\n})();\n"


def write_vega_bundle(static_dir: str | Path) -> Path:
    """Write ``vega-bundle.js`` into ``static_dir`` unless it is already there and current.

    The bundle's first line names the vl-convert version it came from; building it takes
    seconds, so an up-to-date file is kept as is.
    """
    import vl_convert

    path = Path(static_dir) / BUNDLE_NAME
    stamp = f"vl-convert-python {vl_convert.__version__} "
    if path.is_file():
        with path.open(encoding="utf-8") as fh:
            if stamp in fh.readline():
                return path
    atomic_write_text(path, vega_bundle())
    return path
