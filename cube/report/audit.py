"""The audit section: the ties each run's audit predicted, held against the M1-strict ties observed.

The prediction is the audit each run made of its own tokenizer before the weights loaded (its
run log), else the study's frozen prediction by tokenizer family; ``cube confirm`` compares it
with the ties the records show.

Why a module of its own: the one section that reads the audit and the run logs rather than the
cells' scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from cube.errors import CubeError
from cube.report.model import AuditCell
from cube.report.stores import LoadedStore


def audit_section(stores: Sequence[LoadedStore]) -> tuple[list[AuditCell], str]:
    """The audit each run made of its own tokenizer before the weights loaded (its run log), else
    the study's frozen prediction by tokenizer family, held against the M1-strict ties observed."""
    from cube.analysis.confirm import confirm, model_families
    from cube.config import FROZEN_PREDICTION
    from cube.tokenizers.audit import read_prediction

    out, sources = [], set()
    for store in stores:
        strict = store.table.filter(pc.equal(store.table.column("scorer"), "M1-strict"))
        if strict.num_rows == 0:
            continue
        strict = strict.set_column(strict.column_names.index("model"), "model",
                                   pa.array([store.renamed[m] for m in strict.column("model").to_pylist()]))
        try:
            from cube.analysis.confirm import run_audit_prediction

            prediction, families = run_audit_prediction(store.path)
            sources.add("the audit each run made of its own tokenizer before the weights loaded (run log)")
        except CubeError:
            prediction = read_prediction(FROZEN_PREDICTION)
            families = model_families(store.manifest)
            sources.add("the study's frozen prediction, by tokenizer family (no run log carries an audit)")
        report = confirm(strict, prediction, families)
        back = {v: k for k, v in store.renamed.items()}
        for c in report.cells:
            o = c.observed
            out.append(AuditCell(back.get(o.model, o.model), o.label_set, o.context,
                                 c.predicted.verdict if c.predicted else "not audited", o.n, o.n_tied, c.status,
                                 c.explanation))
    return out, "; ".join(sorted(sources))


__all__ = ["audit_section"]
