"""Hand-made record tables for the analysis tests: every field defaulted, any field overridden.

Only invented values here: uids name real CMMLU subjects, but no benchmark text is involved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from cube.records.store import from_columns


def fake_qhash(uid: str) -> str:
    return hashlib.sha256(f"test:{uid}".encode()).hexdigest()[:16]


def record(**fields) -> dict:
    """One record; ``correct``/``parse_failed``/``tied``/``probs`` follow from the rest."""
    rec = {
        "model": "m1", "uid": "cmmlu/agronomy/test/0", "benchmark": "cmmlu",
        "scorer": "M1-seq", "label_set": "L1_halfwidth", "context": "zh_cue", "shots": 0,
        "order": "original", "gold": 0, "pred": 0, "tie_groups": "",
        "scores": [-0.5, -1.5, -2.5, -3.5], "first_token_ids": None, "n_tokens": None,
        "generation": None,
    }
    rec.update(fields)
    rec.setdefault("subject", rec["uid"].split("/")[1])
    rec.setdefault("qhash", fake_qhash(rec["uid"]))
    rec.setdefault("correct", rec["pred"] == rec["gold"])
    rec.setdefault("parse_failed", rec["pred"] == -1)
    scores = np.asarray(rec["scores"], dtype=np.float64)
    rec.setdefault("tied", bool((scores == scores.max()).sum() > 1))
    if "probs" not in rec:
        e = np.exp(scores - scores.max())
        rec["probs"] = (e / e.sum()).tolist()
    return rec


def scores_for(pred: int, k: int = 4, top: float = -0.2) -> list[float]:
    """Distinct scores whose argmax is ``pred``."""
    return [top if i == pred else -1.0 - i for i in range(k)]


def table(records: Iterable[dict]) -> pa.Table:
    rows = list(records)
    return from_columns({name: [r[name] for r in rows] for name in rows[0]})


def slice_in(dtype: str, context: str, flips=()) -> pa.Table:
    """Eight items of one cell in one precision; ``flips``: the items this slice gets wrong."""
    return table(record(uid=f"cmmlu/agronomy/test/{i}", context=context, dtype=dtype, gold=0,
                        pred=1 if i in flips else 0, scores=scores_for(1 if i in flips else 0))
                 for i in range(8))
