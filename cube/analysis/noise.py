"""Decisions within the precision's own noise: which predictions a change of layout alone can flip.

Why: in bf16 the same items scored with only the layout changed (``--shard-size``, packed rows
against node by node) give different scores, and a decision whose margin (top score minus the
runner-up) is smaller than that difference can flip (issue 32 §1: 3 of 96 M1-seq decisions flipped
with ``--shard-size 50`` against 1). Two stores of one protocol then disagree on such items for no
reason of the protocol's, so each cell reports how many of its decisions are that close, beside its
ties and parse failures.

The bound is measured, not assumed: ``scripts/measure_decision_noise.py`` scores the same requests
on a demo model in each precision twice, packed rows in batches of 16 and node by node one request
at a time, and takes the largest change of any request's margin. A decision is within noise when
its margin is at most that bound. The numbers below are its output (see the script's docstring for
the run); they hold for that model and those scorers (label sums, cloze sums) and are a measured
floor, not a proof, for others.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from cube.protocol.chat import NO_CHAT, chat_form, record_context
from cube.records.schema import GENERATION_RECORD_SCORERS
from cube.records.store import list_matrix

# Largest |change of a decision's margin| between two layouts, in score units (nats for the sums).
DECISION_NOISE: dict[str, float] = {
    # scripts/measure_decision_noise.py, 2026-12-02, smollm2-135m-instruct, 24 requests: a measured
    # floor (the maximum over more requests can only grow; issue 32 saw bf16 scores move by 0.93)
    "bfloat16": 0.454,
    "float32": 3.3e-5,
}
CELL_KEY = ("model", "scorer", "label_set", "context", "shots", "order")
# the records' label_set and context of the kinds whose manifest cell names neither
_KIND_DEFAULTS = {"cloze": ("-", "cloze"), "tf": ("-", "judgement")}


def margins(table: pa.Table) -> np.ndarray:
    """Top score minus the runner-up per record; NaN for generations (their scores are not the
    model's option scores) and for records with fewer than two finite scores."""
    scores = list_matrix(table, "scores").astype(np.float64)
    out = np.full(table.num_rows, np.nan)
    if scores.shape[1] < 2:
        return out
    top2 = -np.sort(-np.where(np.isfinite(scores), scores, -np.inf), axis=1)[:, :2]
    ok = np.isfinite(top2).all(axis=1)
    generation = np.isin(table.column("scorer").to_numpy(zero_copy_only=False), list(GENERATION_RECORD_SCORERS))
    ok &= ~generation
    out[ok] = top2[ok, 0] - top2[ok, 1]
    return out


def cell_dtypes(manifest: Mapping) -> dict[tuple, str]:
    """(model, scorer, label_set, context, shots, order) -> the precision that cell was scored in."""
    out: dict[tuple, str] = {}
    for cell in manifest.get("cells", {}).values():
        label_set, context = _KIND_DEFAULTS.get(cell.get("kind"), ("-", "-"))
        for scorer in cell.get("scorers") or ():
            # a chat cell's records carry its context marked (zh_cue@chat, cloze@chat; cube.protocol.chat)
            shown = record_context(cell.get("context") or context,
                                   chat_form(cell.get("chat_template") or NO_CHAT, cell.get("thinking")))
            key = (cell.get("model"), scorer, cell.get("label_set") or label_set, shown,
                   int(cell.get("shots") or 0), cell.get("order") or "original")
            out[key] = str(cell.get("dtype"))
    return out


def mark_within_noise(table: pa.Table, dtypes: Mapping[tuple, str]) -> pa.Table:
    """``table`` with a ``within_noise`` column: a non-tied decision whose margin is at most its
    precision's measured bound (a tie counts as a tie, not twice). Null where the cell's precision
    is not recorded or not measured, and for generations: readers then show the count as not known
    ("-"), never as zero."""
    columns = [table.column(c).to_pylist() for c in CELL_KEY]
    bound = np.array([DECISION_NOISE.get(dtypes.get(key), np.nan) for key in zip(*columns)], dtype=np.float64)
    margin = margins(table)
    tied = table.column("tied").to_numpy(zero_copy_only=False)
    within = (margin <= bound) & ~tied
    known = np.isfinite(bound) & np.isfinite(margin)
    return table.append_column("within_noise", pa.array(within, mask=~known))


__all__ = ["DECISION_NOISE", "cell_dtypes", "margins", "mark_within_noise"]
