"""The claim list agrees wherever it is written: the plan and the notebooks' headings (which the
bundle's CLAIMS.md and, through tests/paper/test_book.py, _toc.yml follow), config/paper.yaml and
the Results page's headings."""

from __future__ import annotations

import re

from cube.config import REPO_ROOT
from cube.paper.plan import base_heading, load_plan, read_myst_notebook
from cube.paper.citations import load_paper
from cube.release.claims import CLAIM_DETAILS, claims


def test_one_claim_per_numbered_notebook_titled_as_its_heading():
    plan = load_plan()
    listed = claims(plan)
    numbered = sorted(r.name for r in plan if re.match(r"^(0[1-9]|[1-9]\d)_", r.name) and r.name == r.source.stem)
    assert sorted(c.notebook for c in listed) == numbered
    assert [c.number for c in listed] == sorted(int(name[:2]) for name in numbered)
    for claim in listed:
        heading = base_heading(read_myst_notebook(REPO_ROOT / "notebooks" / f"{claim.notebook}.md"))
        assert heading.lower() == f"claim {claim.number}: {claim.title}".lower(), claim.notebook


def test_bundle_details_name_only_planned_claim_notebooks():
    assert set(CLAIM_DETAILS) <= {c.notebook for c in claims(load_plan())}


def test_paper_results_name_planned_claims():
    numbers = {str(c.number) for c in claims(load_plan())}
    named = {r.claim for r in load_paper().results}
    assert named - {"artifact"} <= numbers, sorted(named - numbers)


def test_results_page_headings_are_planned_claims_in_order_with_their_numbers():
    listed = {c.number for c in claims(load_plan())}
    text = (REPO_ROOT / "book" / "results.md").read_text(encoding="utf-8")
    shown = [int(n) for n in re.findall(r"^## Claim (\d+):", text, flags=re.M)]
    assert shown == sorted(shown) and len(set(shown)) == len(shown)
    assert set(shown) <= listed and shown, shown
