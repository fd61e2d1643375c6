"""cube.paper.charts: the offline chart renderer the book relies on (stable ids, exact specs, no CDN)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import altair as alt
import pytest

from cube.paper.charts import BUNDLE_NAME, chart_html, chart_id, chart_spec, write_vega_bundle


def bar_chart(values: list[int], label: str = "a") -> alt.Chart:
    data = alt.Data(values=[{"label": f"{label}{i}", "value": v} for i, v in enumerate(values)])
    return alt.Chart(data).mark_bar().encode(x="label:N", y="value:Q")


def embedded_spec(html: str) -> dict:
    match = re.search(r"var spec = (\{.*\});\n", html)
    assert match, html[:200]
    return json.loads(match.group(1))


def test_same_chart_gives_byte_identical_html_and_a_different_chart_a_different_id():
    assert chart_html(bar_chart([1, 2, 3])) == chart_html(bar_chart([1, 2, 3]))
    ids = {chart_id(chart_spec(bar_chart(v))) for v in ([1, 2, 3], [1, 2, 4], [3, 2, 1])}
    assert len(ids) == 3
    assert all(re.fullmatch(r"cube-chart-[0-9a-f]{16}", i) for i in ids)


def test_html_embeds_the_exact_spec_into_its_own_div():
    chart = bar_chart([5, 7])
    html = chart_html(chart)
    div = chart_id(chart.to_dict())
    assert html.startswith(f'<div id="{div}" class="cube-chart"></div>')
    assert f'vegaEmbed("#{div}", spec,' in html
    assert embedded_spec(html) == chart.to_dict()


def test_nothing_is_loaded_from_a_cdn():
    html = chart_html(bar_chart([1]))
    spec_text = re.search(r"var spec = (\{.*\});\n", html).group(1)
    outside_spec = html.replace(spec_text, "")
    assert "://" not in outside_spec  # no <script src=...>, no require() of a remote vega
    # the only URL inside is the spec's $schema, which vega-embed reads as a version string
    assert re.findall(r"https?://[^\"]+", spec_text) == [bar_chart([1]).to_dict()["$schema"]]


def test_markup_in_the_data_cannot_close_the_script_early():
    html = chart_html(bar_chart([1], label="</script><b>"))
    assert html.count("</script>") == 1
    assert embedded_spec(html)["data"]["values"][0]["label"] == "</script><b>0"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return write_vega_bundle(tmp_path_factory.mktemp("static"))


def test_bundle_is_an_iife_that_publishes_vega_embed(bundle):
    text = bundle.read_text(encoding="utf-8")
    assert bundle.name == BUNDLE_NAME
    lines = text.splitlines()
    assert lines[0].startswith("/* vega + vega-lite + vega-embed from vl-convert-python ")
    assert lines[1] == "(function () {" and lines[-1] == "})();"
    assert "window.vegaEmbed=" in text and "window.vega=" in text


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_bundle_parses_as_a_classic_script(bundle):
    """A wrapping mistake (unbalanced brace, stray export) would break every chart in the book."""
    proc = subprocess.run(["node", "--check", str(bundle)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-500:]


def test_an_up_to_date_bundle_is_not_rewritten_and_a_stale_one_is(bundle):
    before = bundle.stat().st_mtime_ns
    assert write_vega_bundle(bundle.parent) == bundle
    assert bundle.stat().st_mtime_ns == before
    bundle.write_text("/* vega bundle from some older vl-convert */\n", encoding="utf-8")
    write_vega_bundle(bundle.parent)
    assert "window.vegaEmbed=" in bundle.read_text(encoding="utf-8")
