"""The report of an lm-eval import: what a user holding the folder wants from "check my run".

One finding per line (the cells, the audit's verdicts, ties, tokenization differences), or the
same as JSON; it reads an :class:`cube.importers.contract.Imported` and nothing else, so it stands
apart from how the import was built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cube.importers.contract import Imported
from cube.tokenizers.audit import CellAudit


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "0/0"


def _cell_text(cell: CellAudit) -> str:
    if cell.degenerate:
        groups = " | ".join("=".join(g) for g in cell.collision_groups)
        return f"DEGEN ({cell.collision}: {groups})"
    return cell.verdict


def format_report(imported: Imported, out: Path | None = None) -> str:
    """What a user holding the folder wants from "check my run", one finding per line."""
    lines = []
    n = sum(t.n_docs for t in imported.units)
    written = f" -> {out}" if out is not None else ""
    lines.append(f"imported {n} docs of {len(imported.units)} task(s), model {imported.model}: "
                 f"{len(imported.decisions)} records{written}")
    for t in imported.units:
        p = t.protocol
        what = ("labels " + ",".join(p.labels)) if p.labels is not None else "option texts"
        lines.append(f"  {p.task}: {what} after {p.cue[-8:]!r} + target_delimiter {p.target_delimiter!r}, "
                     f"{p.shots}-shot -> label_set {p.label_set}, context {p.context}, "
                     f"scorers {', '.join(t.scorers)}")
    lines.append("audit of the run:")
    degenerate = [t for t in imported.units if t.audit is not None and t.audit.degenerate]
    audited = [t for t in imported.units if t.audit is not None]
    if not audited:
        lines.append("  no label cell audited (no tokenizer, or the choices are option texts)")
    for t in audited:
        a = t.audit
        line = f"  {t.protocol.task}: lm-eval's cell {_cell_text(a.lm_eval)}"
        if a.degenerate:
            line += (f"; the labels share a first token, so a first-token scorer ties on every item "
                     f"(lm-eval summed up to {t.max_tokens} tokens per label instead)")
        lines.append(line)
        if a.lm_eval.boundary_merge:
            lines.append(f"    ! label(s) {', '.join(a.lm_eval.boundary_merge)} merge with the prompt's "
                         "end: lm-eval's cut at len(tokens(context)) scores shifted tokens")
        if a.tokenization_differs:
            lines.append(f"    whitespace/tokenization differs from cube in context: lm-eval "
                         f"{[list(lt.tokens) for lt in a.lm_eval.labels]} vs cube "
                         f"{[list(lt.tokens) for lt in a.in_context.labels]} ({_cell_text(a.in_context)})")
        else:
            lines.append("    tokenization: lm-eval's label tokens equal cube's in-context ones")
    lines.append("  degenerate cells: " + (", ".join(t.protocol.task for t in degenerate) or "none"))
    for t in imported.units:
        if t.n_tied:
            lines.append(f"  exact ties: {t.protocol.task}: {_share(t.n_tied, t.n_docs)} docs have tied "
                         "top log-likelihoods; lm-eval's tie-break (the first choice) answered them")
        if t.n_identical:
            lines.append(f"  identical tokens: {t.protocol.task}: {_share(t.n_identical, t.n_docs)} docs "
                         "score two choices on the very same tokens")
        if t.n_differs_from_cube:
            lines.append(f"  tokenization: {t.protocol.task}: on {_share(t.n_differs_from_cube, t.n_docs)} "
                         "docs lm-eval's continuation tokens differ from cube's in-context ones")
        if t.n_first_token_shared and not (t.audit and t.audit.degenerate):
            lines.append(f"  first tokens: {t.protocol.task}: on {_share(t.n_first_token_shared, t.n_docs)} "
                         "docs two choices start with the same token")
    if not any(t.n_tied for t in imported.units):
        lines.append("  exact ties: none")
    return "\n".join(lines)


def report_json(imported: Imported, out: Path | None = None) -> dict[str, Any]:
    return {"model": imported.model, "out": str(out) if out else None, "records": len(imported.decisions),
            "tasks": imported.metadata["lm_eval"]["tasks"],
            "degenerate": [t.protocol.task for t in imported.units if t.audit and t.audit.degenerate]}
