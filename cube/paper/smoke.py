"""The seconds-long end-to-end check of the headline story, on a small committed sample.

The story, in the order a reader meets it: (1) our archived records are intact; (2) the tokenizer
audit, recomputed now from the offline tokenizers, still says what was frozen before any model
ran; (3) in the records, first-token scoring (M1-strict) ties on every item of exactly the cells
the audit flags DEGEN, and on no item elsewhere; (4) where it ties, the full-label-sequence
scorer (M1-seq) does not: it separates the labels and its answers vary with the item. Each step
is one verdict line; a failed step does not stop the others (a reader wants the whole picture),
but any failure makes the run fail.

``data/sample`` holds real records of a small demo model (see ``data/README.md``), so this runs
with no model, no GPU and no benchmark text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.config import FROZEN_PREDICTION, SAMPLE_RECORDS
from cube.errors import CubeError

DEFAULT_RECORDS = SAMPLE_RECORDS  # shipped in the package: an installed cube smokes the same sample
DEFAULT_PREDICTION = FROZEN_PREDICTION
# "(Almost) no ties": whole-sequence log-probabilities of different labels can coincide in
# low precision now and then; a scorer that separates the labels does so on nearly every item.
MAX_SEQUENCE_TIE_RATE = 0.02


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class SmokeResult:
    checks: list[Check]
    seconds: float

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole}"


# --------------------------------------------------------------------------------------------
# The four steps; each returns its verdict line, or raises a CubeError that becomes a FAIL line
# --------------------------------------------------------------------------------------------


def check_records(records: Path) -> tuple[Check, pa.Table]:
    from cube.records.store import read_manifest, read_records

    table = read_records(records, verify=True)
    manifest = read_manifest(records)
    if table.num_rows == 0:
        raise CubeError(f"{records}: the store holds no records")
    n_models = len(pc.unique(table.column("model")))
    n_cells = len(pc.unique(pc.binary_join_element_wise(
        table.column("label_set"), table.column("context"), table.column("scorer"), "/")))
    size = sum((records / name).stat().st_size for name in manifest["files"])
    detail = (f"{table.num_rows:,} records, {len(manifest['files'])} shards ({size / 1024:.0f} KiB) "
              f"sha256 + schema + values OK; {n_models} model(s), {n_cells} protocol cells")
    return Check("records materialise", True, detail), table


def check_audit(prediction: Mapping[str, Any]) -> Check:
    """Recompute the frozen audit from the frozen sources (cached tokenizers) and diff it."""
    from cube.protocol.label_sets import LabelSet
    from cube.tokenizers.audit import diff_predictions, load_contexts, prediction_document, run_audit
    from cube.tokenizers.sources import resolve_tokenizer

    tokenizers = {family: resolve_tokenizer(src["spec"], src.get("sha256"))
                  for family, src in prediction["sources"].items()}
    label_sets = [LabelSet(name, tuple(labels)) for name, labels in prediction["label_sets"].items()]
    contexts = load_contexts(list(prediction["contexts"]))
    cells = run_audit(tokenizers, label_sets, contexts)
    now = prediction_document(cells, label_sets, contexts, dict(prediction["sources"]),
                              dict(prediction["skipped"]))
    diffs = diff_predictions(dict(prediction), now)
    n_degen = sum(c.degenerate for c in cells)
    if diffs:
        return Check("audit = frozen prediction", False,
                     f"{len(diffs)} difference(s); first: {diffs[0]}")
    return Check("audit = frozen prediction", True,
                 f"{len(cells)} cells of {len(tokenizers)} tokenizers recomputed, {n_degen} DEGEN, "
                 f"identical to the frozen prediction ({prediction['content_sha256'][:12]}…)")


def check_confirmation(table: pa.Table, prediction: Mapping[str, Any],
                       families: Mapping[str, str]) -> tuple[list[Check], list]:
    """Two verdicts: every DEGEN cell ties on every item as predicted; no other cell ties."""
    from cube.analysis.confirm import confirm

    report = confirm(table, prediction, families)
    if not report.cells:
        raise CubeError("no M1-strict records in the sample: nothing to confirm")
    unpredicted = [c for c in report.cells if c.status == "unpredicted"]
    degen = [c for c in report.cells if c.predicted is not None and c.predicted.degenerate]
    other = [c for c in report.cells if c.predicted is not None and not c.predicted.degenerate]
    checks = []
    for name, cells, what in (("DEGEN cells tie", degen, "tie on every item as predicted"),
                              ("other cells never tie", other, "have no tied item")):
        ok = [c for c in cells if c.status == "confirmed"]
        bad = [c for c in cells if c.status != "confirmed"]
        n_items = sum(c.observed.n for c in cells)
        n_tied = sum(c.observed.n_tied for c in cells)
        names = ", ".join(f"{c.observed.label_set}/{c.observed.context}" for c in cells) or "none"
        detail = f"{_share(len(ok), len(cells))} cells {what} ({n_tied}/{n_items} items tied; {names})"
        if bad:
            detail += f"; {bad[0].observed.label_set}: {bad[0].explanation}"
        if not cells:
            detail = "no such cell in the sample: the story is not tested"
        checks.append(Check(name, bool(cells) and not bad, detail))
    if unpredicted:
        c = unpredicted[0]
        checks.append(Check("every cell predicted", False,
                            f"{len(unpredicted)} cell(s) without a prediction; first "
                            f"{c.observed.model}/{c.observed.label_set}: {c.explanation}"))
    return checks, degen


def top_shared(scores: np.ndarray) -> np.ndarray:
    """Rows whose highest score is held by two or more options (argmax is then a tie-break)."""
    return (scores == scores.max(axis=1, keepdims=True)).sum(axis=1) > 1


def check_separation(table: pa.Table, degen_cells: list) -> Check:
    """In the DEGEN cells, M1-seq has (almost) no ties and answers that vary with the item."""
    from cube.analysis.confirm import SEQUENCE, STRICT
    from cube.records.store import list_matrix

    name = "M1-seq separates labels"
    if not degen_cells:
        return Check(name, False, "no DEGEN cell to test")
    parts, ok = [], True
    for cell in degen_cells:
        o = cell.observed
        mask = pc.and_(pc.and_(pc.equal(table.column("model"), o.model),
                               pc.equal(table.column("label_set"), o.label_set)),
                       pc.equal(table.column("context"), o.context))
        sub = table.filter(mask)
        by_scorer = {}
        for scorer in (STRICT, SEQUENCE):
            rows = sub.filter(pc.equal(sub.column("scorer"), scorer))
            scores = list_matrix(rows, "scores") if rows.num_rows else np.zeros((0, 0))
            by_scorer[scorer] = (rows, scores)
        seq_rows, seq_scores = by_scorer[SEQUENCE]
        strict_rows, strict_scores = by_scorer[STRICT]
        if seq_rows.num_rows == 0:
            ok = False
            parts.append(f"{o.label_set}: no M1-seq records")
            continue
        seq_ties = int(top_shared(seq_scores).sum())
        seq_answers = len(np.unique(seq_rows.column("pred").to_numpy()))
        strict_ties = int(top_shared(strict_scores).sum()) if strict_rows.num_rows else 0
        strict_answers = len(np.unique(strict_rows.column("pred").to_numpy()))
        acc_seq = float(np.mean(seq_rows.column("correct").to_numpy()))
        acc_strict = float(np.mean(strict_rows.column("correct").to_numpy())) if strict_rows.num_rows else float("nan")
        cell_ok = seq_ties <= MAX_SEQUENCE_TIE_RATE * seq_rows.num_rows and seq_answers >= 2
        ok &= cell_ok
        parts.append(
            f"{o.label_set}: strict top-tie {strict_ties}/{strict_rows.num_rows}, "
            f"{strict_answers} distinct answer(s), acc {acc_strict:.2f} -> seq top-tie "
            f"{seq_ties}/{seq_rows.num_rows}, {seq_answers} distinct, acc {acc_seq:.2f}"
            + ("" if cell_ok else " [FAIL]")
        )
    return Check(name, ok, "; ".join(parts))


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def _guarded(name: str, step: Callable[[], Any]) -> tuple[Check | None, Any]:
    """Run a step; a CubeError becomes a FAIL line instead of ending the run."""
    try:
        return None, step()
    except CubeError as exc:
        return Check(name, False, str(exc)), None


def run_smoke(records: str | Path = DEFAULT_RECORDS,
              prediction: str | Path = DEFAULT_PREDICTION) -> SmokeResult:
    """Every step of the story on ``records`` against the frozen ``prediction``."""
    from cube.analysis.confirm import model_families
    from cube.records.store import read_manifest
    from cube.tokenizers.audit import read_prediction

    start = time.perf_counter()
    records = Path(records)
    checks: list[Check] = []

    failed, loaded = _guarded("records materialise", lambda: check_records(records))
    table = None
    if failed:
        checks.append(failed)
    else:
        checks.append(loaded[0])
        table = loaded[1]

    failed, doc = _guarded("frozen prediction", lambda: read_prediction(Path(prediction)))
    if failed:
        checks.append(failed)
    else:
        failed, audit = _guarded("audit = frozen prediction", lambda: check_audit(doc))
        checks.append(failed or audit)

    if table is None or doc is None:
        checks.append(Check("records vs prediction", False, "skipped: records or prediction missing"))
        return SmokeResult(checks, time.perf_counter() - start)
    failed, confirmed = _guarded("DEGEN cells tie", lambda: check_confirmation(
        table, doc, model_families(read_manifest(records))))
    if failed:
        checks.append(failed)
        return SmokeResult(checks, time.perf_counter() - start)
    confirmation, degen = confirmed
    checks += confirmation
    failed, separation = _guarded("M1-seq separates labels", lambda: check_separation(table, degen))
    checks.append(failed or separation)
    return SmokeResult(checks, time.perf_counter() - start)


def format_verdicts(result: SmokeResult) -> str:
    """One line per check (PASS/FAIL, name, numbers), then the overall verdict and wall time."""
    width = max(len(c.name) for c in result.checks)
    lines = [f"{'PASS' if c.passed else 'FAIL'}  {c.name:<{width}}  {c.detail}" for c in result.checks]
    verdict = "PASS" if result.passed else "FAIL"
    n_failed = sum(not c.passed for c in result.checks)
    lines.append(f"smoke test {verdict}: {len(result.checks) - n_failed}/{len(result.checks)} "
                 f"checks passed in {result.seconds:.1f} s")
    return "\n".join(lines)
