"""cube report end to end on a store of a user's file (3 to 5 options, chat template none and
model), written by a real `cube run --report`: chance is the mean of 1/N, the chat template is a
dimension of its own, and the site is a finished offline Jupyter Book (every page, no external
URL), rebuilt in place by a second report and never over a user's folder."""

from __future__ import annotations

import csv
import re
from fractions import Fraction
from pathlib import Path

import pytest

from cube.cli import main
from cube.report.analysis import analyse
from cube.report.site import MARKER, PAGES

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "user_benchmark" / "zh.csv"
EXTERNAL = re.compile(r"""(?:src|href)=["'](?:https?:)?//""")


@pytest.fixture(scope="module")
def user_store(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("user")
    out, site = root / "records", root / "site"
    argv = ["run", "--model", "smollm2-135m-instruct", "--benchmark", str(FIXTURE), "--label-sets", "A10_halfwidth",
            "--scorers", "M1-seq,M1-strict", "--chat-template", "none,model", "--out", str(out), "--report", str(site)]
    assert main(argv) == 0
    return out, site


def _chance_from_the_file() -> float:
    with FIXTURE.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    counts = [sum(1 for k in "ABCDE" if row[k].strip()) for row in rows]
    assert {3, 4, 5} <= set(counts)
    return float(sum(Fraction(1, n) for n in counts) / len(counts))


def test_chance_is_the_mean_of_one_over_n_and_the_chat_template_is_compared(user_store):
    out, _ = user_store
    a = analyse([out], replicates=100)
    chance = _chance_from_the_file()
    assert a.cells and all(c.chance == pytest.approx(chance) for c in a.cells)
    assert all(r.chance == pytest.approx(chance) for r in a.ranges)
    dims = {c.dimension for c in a.comparisons}
    assert {"chat_template", "scorer"} <= dims
    chat = next(c for c in a.comparisons if c.dimension == "chat_template")
    assert (chat.reference_level, chat.level) == ("none", "model")
    assert f"(chance {chance:.2f})" in a.summaries[0]
    # the file's own category column is the taxonomy (STEM, Social Science, ... in the fixture)
    categories = {g.group for g in a.groups if g.level == "category"}
    with FIXTURE.open(encoding="utf-8") as f:
        assert categories >= {row["category"] for row in csv.DictReader(f)}


def test_run_report_builds_every_page_offline(user_store, capsys):
    _, site = user_store
    assert (site / "index.html").is_file() and (site / MARKER).is_file()
    for page in PAGES:
        text = (site / f"{page}.html").read_text(encoding="utf-8")
        assert not EXTERNAL.search(text), f"{page}.html loads an external URL"
        assert "Traceback" not in text
    assert (site / "_static" / "vega-bundle.js").is_file()
    sensitivity = (site / "sensitivity.html").read_text(encoding="utf-8")
    assert "cube-chart" in sensitivity and "chat template (and thinking): model" in sensitivity


def test_a_second_report_replaces_the_first_and_prints_its_summary(user_store, capsys, tmp_path):
    out, site = user_store
    capsys.readouterr()
    before = Path.cwd()
    assert main(["report", str(out), "--out", str(site), "--title", "Again"]) == 0
    assert Path.cwd() == before and before.is_dir()  # papermill's chdir stays in its worker processes
    printed = capsys.readouterr().out
    assert "smollm2-135m-instruct: across" in printed and f"report: {site.resolve() / 'index.html'}" in printed
    assert "Again" in (site / "index.html").read_text(encoding="utf-8")
    leftovers = [p for p in site.parent.iterdir() if p.name.startswith(".cube-report-")]
    assert not leftovers, "a finished build leaves no temporary folder"


def test_a_merge_of_two_shard_stores_reports_every_item(tmp_path, capsys):
    pytest.importorskip("torch")
    common = ["run", "--model", "smollm2-135m-instruct", "--benchmark", str(FIXTURE), "--label-sets",
              "A10_halfwidth", "--scorers", "M1-seq", "--shard-size", "4"]  # work for both processes
    shards = [tmp_path / f"shard{k}" for k in range(2)]
    for k, out in enumerate(shards):
        capsys.readouterr()
        assert main([*common, "--shard", f"{k}/2", "--out", str(out)]) == 0
        assert f"report: cube report {out} --out {out}-report" in capsys.readouterr().out
    merged = tmp_path / "merged"
    assert main(["merge", str(merged), *map(str, shards)]) == 0
    a = analyse([merged], replicates=50)
    with FIXTURE.open(encoding="utf-8") as f:
        n_items = len(list(csv.DictReader(f)))
    assert [c.n for c in a.cells] == [n_items]
    assert a.provenance[0].commands and "sensitivity" in a.missing


def test_show_items_quotes_the_flipped_items_from_the_local_file_and_says_so(user_store):
    out, _ = user_store
    a = analyse([out], replicates=50, show_items=str(FIXTURE))
    assert a.show_items and a.flips
    with FIXTURE.open(encoding="utf-8") as f:
        questions = {row["question"] for row in csv.DictReader(f)}
    texts = [x.text for f in a.flips for x in f.items]
    assert texts and all(t in questions for t in texts)
    from cube.report.render import banners

    assert "Do not publish it" in banners(a)
    plain = analyse([out], replicates=50)
    assert all(x.text is None for f in plain.flips for x in f.items)
