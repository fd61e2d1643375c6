"""The report of an OpenCompass import: what a user holding the folder wants from "check my run".

One finding per line (each dataset's accuracy against the records', the label cell's audit, PPL's
normalisation, gen mode's parse failures, ties), or the same as JSON; it reads an
:class:`cube.importers.contract.Imported` and nothing else, so it stands apart from how the import
was built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cube.importers.contract import Imported
from cube.importers.opencompass.audit import OC_CUE, OC_LABEL_PREFIX
from cube.importers.opencompass.records import GEN_SCORER


def format_report(imported: Imported, out: Path | None = None) -> str:
    """What a user holding the folder wants from "check my run", one finding per line."""
    meta = imported.metadata["opencompass"]
    written = f" -> {out}" if out is not None else ""
    summaries = imported.units
    lines = [f"imported {sum(s.n for s in summaries)} predictions of {len(summaries)} dataset(s), model "
             f"{imported.model}: {len(imported.decisions)} records{written}"]
    for key, d in meta["datasets"].items():
        lines.append(f"  {key}: {d['benchmark']} {d['subject']} {d['split']}{d['test_range']}, {d['shots']}-shot, "
                     f"accuracy {d['accuracy']:g} (records: {d['reproduced_accuracy']:g}) -> scorers "
                     f"{', '.join(d['scorers'])}, context {d['context']}")
    lines.append("audit of the run:")
    audit = meta.get("audit")
    label_scored = any(d["mode"] == "ppl" for d in meta["datasets"].values())
    if not label_scored:  # a generation's answer is read from its text: no label cell to audit
        lines.append("  no label cell: a generation run's answers are read from the text it wrote, "
                     "so no first-token decision can tie")
    elif audit is None:
        lines.append("  not run (no tokenizer)")
    else:
        cell = audit["cell"]
        tokens = [lt["tokens"] for lt in cell.get("labels", [])]
        lines.append(f"  label cell ({OC_CUE!r} + {OC_LABEL_PREFIX!r} + A-D): {cell['verdict']}"
                     + (f" ({cell['collision']})" if audit["degenerate"] else "") + f"; label tokens {tokens}")
        lines.append("  degenerate cells: " + ("oc-answer" if audit["degenerate"] else "none"))
    for key, d in meta["datasets"].items():
        if d["mode"] == "ppl" and "audit" in d:
            a = d["audit"]
            lines.append(f"  {key}: PPL over the whole prompt (tokens 2..n summed, / n); label prompts "
                         f"{'of equal' if a['equal_token_counts'] else 'of UNEQUAL'} length, label tokens "
                         f"{a['label_token_counts']}; decisions differing from the summed label "
                         f"log-likelihood: {a['n_decision_differs_from_summed_loglik']}")
        if d["mode"] == "gen":
            fails = d["n_parse_failed"]
            lines.append(f"  {key}: parse failures (generations no answer was read from): OpenCompass's "
                         f"first_capital_postprocess {fails.get(GEN_SCORER, 0)}/{d['n']}, cube's M6-strict "
                         f"{fails.get('M6-strict', 0)}/{d['n']}, M6-lenient {fails.get('M6-lenient', 0)}/{d['n']}")
            if d["n"] and fails.get("M6-strict", 0) == d["n"]:
                lines.append("    M6-strict reads only the strict answer form its own prompts ask for, `答案：X`; "
                             "OpenCompass's gen prompt asks for none, so a bare ` A` fails it by design (not a "
                             "cube defect): M6-lenient and M6-oc read such answers")
        if d["n_tied"]:
            lines.append(f"  exact ties: {key}: {d['n_tied']}/{d['n']} (OpenCompass took the first label)")
    return "\n".join(lines)


def report_json(imported: Imported, out: Path | None = None) -> dict[str, Any]:
    meta = imported.metadata["opencompass"]
    return {"model": imported.model, "out": str(out) if out else None, "records": len(imported.decisions),
            "datasets": {k: {x: v for x, v in d.items() if x != "config"} for k, d in meta["datasets"].items()},
            "audit": meta.get("audit")}
