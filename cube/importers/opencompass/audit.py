"""cube's audit of OpenCompass's answer context on the run's tokenizer.

OpenCompass's CMMLU and C-Eval prompts, in both modes, end in ``答案是:`` and a space before the
label: that one label cell (``oc-answer``) is audited as cube audits its own, so a run whose
tokenizer gives the four labels one first token is named degenerate. Apart from the records
because it needs a tokenizer and no prediction; the report names the context by the constants
here.
"""

from __future__ import annotations

from typing import Any


# OpenCompass's CMMLU/C-Eval answer context, both modes: "答案是: " then the label.
OC_CUE, OC_LABEL_PREFIX = "答案是:", " "


def audit_labels(tokenizer: Any, family: str) -> dict[str, Any]:
    """cube's cell audit of OpenCompass's answer context (labels A-D after ``答案是:`` + space)."""
    from cube.protocol.label_sets import load_label_sets
    from cube.tokenizers.audit import Context, audit_cell, cells_to_json

    label_set = load_label_sets()["L1_halfwidth"]
    cell = audit_cell(tokenizer, family, label_set, Context("oc-answer", OC_CUE, OC_LABEL_PREFIX,
                                                            "OpenCompass CMMLU/C-Eval: 答案是: X"))
    return {"cell": cells_to_json([cell])[0], "degenerate": cell.degenerate}
