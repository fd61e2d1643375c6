"""The paper's method on a user's store: how much the score depends on the protocol.

Every number here comes from the functions ``cube rescore``, ``cube confirm`` and ``cube explain``
use (``cube.analysis``): per-cell accuracy and its Wilson interval from ``rescore``; paired
comparisons from ``regression_table`` (exact McNemar and its exact interval, one precision per
pair or refused); calibration from the ECE of ``cube.analysis.stats`` with its item-bootstrap
interval; the audit against observed ties from ``confirm``; rankings against the bootstrap noise
floor from ``ranking_shift``; harness gaps from ``explain_slices``. The report adds only the
choice of what to compare (each dimension's levels against the reference cell's, on one model)
and Holm's correction over every comparison it makes.

This module is the analysis as a whole (``analyse``): the stores read (``cube.report.stores``),
the cells and the reference chosen (``cube.report.cells``), each section computed by a module of
its own (``sensitivity``, ``audit``, ``calibration``, ``subjects``, ``rankings``, ``harnesses``,
``flips``, ``provenance``), and for each section the records cannot support, the one line naming
the ``cube run`` options that would produce it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from cube.report.audit import audit_section
from cube.report.calibration import calibration_section
from cube.report.cells import cell_scores, choose_reference, matches, parse_reference
from cube.report.flips import flip_section, item_texts
from cube.report.harnesses import harness_section
from cube.report.model import DIMENSION_OPTIONS, DIMENSIONS, REPORT_VERSION, CellScore, ReportAnalysis
from cube.report.provenance import code_digest, provenance_section
from cube.report.rankings import rank_section
from cube.report.sensitivity import compare, scorer_ranges, summary_sentence
from cube.report.stores import LoadedStore, check_stores, load_stores
from cube.report.subjects import group_section


def analyse(paths: Sequence[str | Path], *, title: str | None = None, reference: str | None = None,
            allow_incomplete: bool = False, show_items: str | None = None, replicates: int = 1000,
            seed: int = 0, progress: bool = False) -> ReportAnalysis:
    """The report's whole analysis of the stores (the pages only render it)."""
    given = parse_reference(reference)
    incomplete = check_stores(paths, allow_incomplete)
    stores = load_stores(paths, allow_incomplete, progress)
    cells: list[CellScore] = []
    rows: dict[tuple, tuple[LoadedStore, np.ndarray]] = {}
    for store in stores:
        mine, ids, keys = cell_scores(store)
        order = np.argsort(ids, kind="stable")
        bounds = np.searchsorted(ids[order], np.arange(len(keys) + 1))
        for i, cell in enumerate(mine):
            rows[(cell.store, cell.model, cell.name, cell.benchmark)] = (store, order[bounds[i]:bounds[i + 1]])
        cells += mine
    chosen = choose_reference(cells, given)

    cache: dict[tuple, pa.Table] = {}

    def slices(cell: CellScore) -> pa.Table:
        """A cell's records: a zero-copy slice where its rows lie together (a store's shards
        hold one cell each), else gathered; once per cell."""
        key = (cell.store, cell.model, cell.name, cell.benchmark)
        if key not in cache:
            store, index = rows[key]
            contiguous = index.size and index[-1] - index[0] + 1 == index.size and (np.diff(index) == 1).all()
            cache[key] = (store.table.slice(int(index[0]), int(index.size)) if contiguous
                          else store.table.take(pa.array(index)))
        return cache[key]

    cells_of: dict[str, list[CellScore]] = {}
    for c in cells:
        cells_of.setdefault(c.model, []).append(c)
    comparisons, refused = compare(cells_of, slices, chosen)
    ranges = scorer_ranges(cells_of, chosen)
    references = [next(c for c in cs if matches(c, chosen)) for cs in cells_of.values()
                  if any(matches(c, chosen) for c in cs)]
    missing: dict[str, str] = {}
    varying = [d for d in DIMENSIONS if len({str(c.value(d)) for c in cells}) > 1]
    if not comparisons:
        options = " ".join(DIMENSION_OPTIONS[d] for d in DIMENSIONS if d not in varying)
        missing["sensitivity"] = (f"no two cells of one model differ in one protocol dimension on the same items; "
                                  f"run with, e.g., {options}")
    audit, audit_source = audit_section(stores)
    if not audit:
        missing["audit"] = ("no M1-strict records, the first-token scorer whose ties the audit predicts; "
                            "run with --scorers M1-strict (or M1-seq,M1-strict)")
    calibration = calibration_section(cells, slices, replicates, seed)
    if not calibration:
        missing["calibration"] = ("no log-likelihood scorer's records; run with --scorers M1-seq "
                                  "(or M1-strict, M2, M3, M4, M5)")
    groups, note = group_section(references, slices)
    if note:
        missing["categories"] = note
    if not references:
        missing["subjects"] = "no model has the reference cell; choose one with --reference"
    ranks = rank_section(cells, slices, chosen, replicates, seed)
    if len(cells_of) < 2:
        missing["ranks"] = ("one model only; a ranking needs two or more: run another with cube run --model ... "
                            "into the same store, or give several stores")
    elif not ranks:
        missing["ranks"] = ("the models share no second protocol with the reference one; run them on the same "
                            "--label-sets/--scorers")
    gaps = harness_section(stores, cells_of, chosen, allow_incomplete) if len(stores) > 1 else []
    if not gaps:
        missing["harnesses"] = ("no two stores hold one model; give a store of another harness's run of the same "
                                "model (cube import lm-eval|opencompass|evalscope|inspect ...)")
    flips = flip_section(comparisons, cells_of, slices)
    if show_items:  # the text of the items listed, read once they are known
        from dataclasses import replace

        texts = item_texts(show_items, [f.uid for fl in flips for f in fl.items])
        flips = [replace(fl, items=[replace(x, text=texts.get(x.uid)) for x in fl.items]) for fl in flips]
    ranges_sorted = sorted(ranges, key=lambda r: (r.model, r.scorer))
    return ReportAnalysis(
        REPORT_VERSION, title or "Protocol sensitivity report", [str(p) for p in paths], incomplete, chosen, cells,
        ranges_sorted, summary_sentence(cells_of, ranges_sorted, comparisons, chosen), code_digest(), audit, audit_source,
        comparisons, refused, calibration, groups, ranks, gaps, flips, provenance_section(stores),
        show_items=bool(show_items), missing=missing)


__all__ = ["analyse"]
