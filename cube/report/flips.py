"""The flips section: the items whose correctness flips between the reference cell and the cell
that moves the score most, per model.

Each flip lists the item's uid, subject, gold and both predictions (at most ``MAX_FLIPS``; the
counts are always whole). Their question texts are read only with ``--show-items``, from the
user's local benchmark, and never written into any store (``item_texts``).

Why a module of its own: the one section that lists items, and the one place the report reads
benchmark text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.report.model import CellScore, Comparison, Flip, Flips

MAX_FLIPS = 200  # items listed per flip table (the counts are always whole)


def flip_section(comparisons: Sequence[Comparison], cells_of: Mapping[str, list[CellScore]],
                 slices: Callable[[CellScore], pa.Table]) -> list[Flips]:
    """Per model, the items that flip between the reference cell and the cell that moves the score
    most: uid, gold, both predictions (their text is added by ``analyse`` with ``--show-items``)."""
    out = []
    for model, cells in cells_of.items():
        mine = [c for c in comparisons if c.model == model]
        if not mine:
            continue
        top = max(mine, key=lambda c: (abs(c.delta), -c.p_holm))
        a = next(c for c in cells if c.name == top.cell_a)
        b = next(c for c in cells if c.name == top.cell_b)
        ta, tb = slices(a), slices(b)
        where = pc.index_in(ta.column("uid"), value_set=tb.column("uid")).to_numpy(zero_copy_only=False)
        found = ~np.isnan(where.astype(np.float64))
        index_b = where[found].astype(np.int64)
        ca = ta.column("correct").to_numpy()[found]
        cb = tb.column("correct").to_numpy()[index_b]
        flip = np.flatnonzero(ca != cb)
        uid = np.asarray(ta.column("uid").to_pylist(), dtype=object)[found]
        subject = np.asarray(ta.column("subject").to_pylist(), dtype=object)[found]
        gold = ta.column("gold").to_numpy()[found]
        pa_, pb_ = ta.column("pred").to_numpy()[found], tb.column("pred").to_numpy()[index_b]
        items = [Flip(str(uid[i]), str(subject[i]), int(gold[i]), int(pa_[i]), int(pb_[i]))
                 for i in sorted(flip, key=lambda i: str(uid[i]))[:MAX_FLIPS]]
        out.append(Flips(model, a.name, b.name, int((ca & ~cb).sum()), int((~ca & cb).sum()), items))
    return out


def item_texts(benchmark: str, uids: Sequence[str]) -> dict[str, str]:
    """The question text of each flipped item, read now from the user's local benchmark (for
    ``--show-items``); never stored in any store."""
    from cube.protocol.benchmarks import load_items

    wanted = set(uids)
    return {item.uid: item.question for item in load_items(benchmark, splits=("test", "dev", "val"))
            if item.uid in wanted}


__all__ = ["MAX_FLIPS", "flip_section", "item_texts"]
