"""Model rankings under two protocols: how far protocol B reorders protocol A's models, against the noise floor.

The records-level side of claim 3: the models x items outcomes of each protocol on the items every
model answered under both, the footrule between the two rankings, and the paired noise floor it is
read against (the statistics themselves are :mod:`cube.analysis.footrule`'s). It stands apart from
rescoring because its unit is a ranking of several models, not one cell's accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.footrule import (NoiseFloor, average_ranks, footrule, footrule_has_power, footrule_multiple,
                                    footrule_normalisation, footrule_verdict, paired_noise_floor)
from cube.analysis.slices import describe_cells
from cube.errors import ConfigError, RecordsError
from cube.records.store import column_codes


@dataclass(frozen=True)
class CorrectMatrix:
    models: list[str]
    uids: list[str]
    correct: np.ndarray  # (models, items) bool


def correct_matrix(table: pa.Table, models: Sequence[str] | None = None) -> CorrectMatrix:
    """Models x items outcomes of one protocol, on the items every model answered.

    The slice must hold one record per (model, item), i.e. one protocol cell per model.
    """
    if table.num_rows == 0:
        raise ConfigError("no records in this slice")
    model_codes, model_names = column_codes(table, "model")
    uid_codes, uids = column_codes(table, "uid")
    n_models, n_items = len(model_names), len(uids)
    flat = model_codes * n_items + uid_codes
    seen = np.bincount(flat, minlength=n_models * n_items).reshape(n_models, n_items)
    if seen.max() > 1:
        raise ConfigError(
            f"slice holds several records per (model, item); it spans {describe_cells(table)}: "
            "narrow it to one protocol"
        )
    hits = np.zeros(n_models * n_items, dtype=bool)
    hits[flat] = table.column("correct").to_numpy()
    hits = hits.reshape(n_models, n_items)
    wanted = list(models) if models is not None else sorted(model_names)
    missing = [m for m in wanted if m not in model_names]
    if missing:
        raise ConfigError(f"model {missing[0]!r} has no records in this slice")
    rows = np.array([model_names.index(m) for m in wanted], dtype=np.int64)
    complete = seen[rows].all(axis=0)
    keep = np.flatnonzero(complete)
    return CorrectMatrix(wanted, [uids[i] for i in keep], hits[np.ix_(rows, keep)])


@dataclass(frozen=True)
class RankingShift:
    """Observed between-protocol footrule in units of the comparison's noise floor.

    ``floor`` is the paired floor of both protocols (``cube.analysis.footrule.paired_noise_floor``: per
    replicate the noisier protocol's footrule, on the same resamples); ``floor_a`` and
    ``floor_b`` are each protocol's own, kept to show how far the verdict would depend on
    which protocol's floor were used.
    """

    models: list[str]
    n_items: int
    accuracy_a: np.ndarray
    accuracy_b: np.ndarray
    observed: float
    floor: NoiseFloor
    floor_a: NoiseFloor
    floor_b: NoiseFloor
    multiple_of_mean: float
    multiple_of_p95: float

    @property
    def normalisation(self) -> str:
        return footrule_normalisation(len(self.models))

    @property
    def has_power(self) -> bool:
        return footrule_has_power(self.floor)

    def verdict(self, floor: NoiseFloor | None = None, effect: float | None = None) -> str:
        """Against the paired floor, or against ``floor`` (e.g. ``floor_a``) to compare; ``effect``
        is the source's footrule, named when the floor could not have shown it."""
        return footrule_verdict(self.observed, self.floor if floor is None else floor,
                                len(self.models), effect)


def ranking_shift(
    table_a: pa.Table,
    table_b: pa.Table,
    B: int = 10_000,
    seed: int = 0,
    progress: bool = False,
) -> RankingShift:
    """How far protocol B reorders the models of protocol A, against both protocols' noise.

    Both rankings use the same items (those every model answered under both protocols) and
    integer hit counts, so tied models tie exactly (average ranks, see cube.analysis.footrule). The floor
    is paired: each replicate resamples the common items once and ranks the models under both
    protocols on that draw, so each comparison has its own floor and the verdict does not
    depend on which protocol is called A.
    """
    models_a = set(column_codes(table_a, "model")[1])
    models_b = set(column_codes(table_b, "model")[1])
    models = sorted(models_a & models_b)
    if len(models) < 2:
        raise ConfigError(f"the two protocols share {len(models)} model(s); a ranking needs 2")
    a, b = correct_matrix(table_a, models), correct_matrix(table_b, models)
    in_b = set(b.uids)
    # sorted by uid: the resamples index items by position, so the floor must not depend on the
    # order the records were read in
    common = sorted(uid for uid in a.uids if uid in in_b)
    if not common:
        raise RecordsError("the two protocols share no item answered by every model")
    ia = pc.index_in(pa.array(common), value_set=pa.array(a.uids)).to_numpy().astype(np.int64)
    ib = pc.index_in(pa.array(common), value_set=pa.array(b.uids)).to_numpy().astype(np.int64)
    ca, cb = a.correct[:, ia], b.correct[:, ib]
    observed = footrule(average_ranks(ca.sum(axis=1)), average_ranks(cb.sum(axis=1)))
    floors = paired_noise_floor(ca, cb, B=B, seed=seed, progress=progress)
    of_mean, of_p95 = footrule_multiple(observed, floors.joint)
    return RankingShift(models, len(common), ca.mean(axis=1), cb.mean(axis=1), observed,
                        floors.joint, floors.a, floors.b, of_mean, of_p95)
