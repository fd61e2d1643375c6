"""The harnesses section: ``cube explain`` between every two stores that hold one model.

Each side's cell nearest the reference is explained on the shared items
(``cube.analysis.explain.explain_slices``): the gap, its McNemar p and the factors that carry it.

Why a module of its own: the one section that compares stores, each store's cell by its own
harness's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cube.errors import CubeError
from cube.protocol.chat import record_context
from cube.report.model import DIMENSIONS, CellScore, HarnessGap
from cube.report.stores import LoadedStore


def harness_section(stores: Sequence[LoadedStore], cells_of: Mapping[str, list[CellScore]],
                    reference: Mapping[str, str], allow_incomplete: bool) -> list[HarnessGap]:
    """``cube explain`` between every two stores that hold one model (by the store's own name):
    each side's cell nearest the reference."""
    from cube.analysis.explain import explain_slices
    from cube.analysis.explain_selectors import SliceSpec

    def nearest(store: LoadedStore, model: str) -> CellScore | None:
        name = next((k for k, v in store.renamed.items() if v == model), None)
        mine = cells_of.get(name or "", [])
        return max(mine, key=lambda c: (sum(str(c.value(d)) == reference[d] for d in DIMENSIONS), c.n), default=None)

    out = []
    for i, a in enumerate(stores):
        for b in stores[i + 1:]:
            for model in sorted(set(a.renamed.values()) & set(b.renamed.values())):
                ca, cb = nearest(a, model), nearest(b, model)
                if ca is None or cb is None:
                    continue
                specs = [SliceSpec(f"{s.path}:{c.name}", s.path, {
                    "model": model, "scorer": c.scorer, "label_set": c.label_set,
                    "context": record_context(c.cue, c.chat_template), "shots": c.shots,
                    "order": c.order}, "micro") for s, c in ((a, ca), (b, cb))]
                try:
                    e = explain_slices(specs[0], specs[1], allow_incomplete=allow_incomplete, B=2000)
                except CubeError:
                    continue
                carried = [(f.name, float(share), f.status) for f, share in e.carrying()]
                out.append(HarnessGap(model, f"{a.harness}: {ca.name}", f"{b.harness}: {cb.name}", float(e.score_a),
                                      float(e.score_b), e.n_common, float(e.gap), float(e.mcnemar_p), carried))
    return out


__all__ = ["harness_section"]
