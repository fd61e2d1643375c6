"""The rankings section: claim 3's test on the user's models.

Each protocol shared by two or more models is set against the reference protocol: the
normalised Spearman footrule between the two rankings against the paired bootstrap noise floor
(``cube.analysis.rescore.ranking_shift``).

Why a module of its own: the one section that compares models rather than cells of one model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa

from cube.errors import CubeError
from cube.report.model import DIMENSIONS, CellScore, RankShift


def rank_section(cells: Sequence[CellScore], slices: Callable[[CellScore], pa.Table],
                 reference: Mapping[str, str], replicates: int, seed: int) -> list[RankShift]:
    """Claim 3's test on the user's models: each protocol shared by two or more models against the
    reference protocol, the footrule set against the paired bootstrap noise floor."""
    from cube.analysis.ranking_shift import ranking_shift

    protocols: dict[tuple, list[CellScore]] = {}
    for c in cells:
        protocols.setdefault((c.benchmark, *(str(c.value(d)) for d in DIMENSIONS)), []).append(c)
    ref_key = next((k for k in protocols if all(k[1 + i] == reference[d] for i, d in enumerate(DIMENSIONS))), None)
    if ref_key is None or len(protocols[ref_key]) < 2:
        return []
    ref_table = pa.concat_tables([slices(c) for c in protocols[ref_key]])
    out = []
    for key, members in protocols.items():
        if key == ref_key or len({c.model for c in members} & {c.model for c in protocols[ref_key]}) < 2:
            continue
        try:
            shift = ranking_shift(ref_table, pa.concat_tables([slices(c) for c in members]), B=replicates, seed=seed)
        except CubeError:
            continue
        out.append(RankShift(members[0].name, shift.models, shift.n_items, shift.accuracy_a.tolist(),
                             shift.accuracy_b.tolist(), float(shift.observed), float(shift.floor.p95),
                             float(shift.multiple_of_p95), shift.verdict()))
    return out


__all__ = ["rank_section"]
