"""Why two protocol slices disagree, item by item: ``cube explain A B``.

Harness users ask why OpenCompass and lm-eval (or cube) give one model different scores, and are
answered in general terms: prompts, shots, parsing, micro against macro. The records hold the
answer per item, so this module computes it.

**Slices** are ``STORE[:SELECT]`` (:mod:`cube.analysis.explain_selectors`): one protocol cell
each, and how its score aggregates (``agg=micro|macro``, or ``harness``: its harness's own).

**The gap** is ``score(B) - score(A)``, each on its own items under its own aggregation, in
exact fractions. It is split into factors along a path that changes one thing at a time: the
item set (``sample``: A's items to B's), the aggregation, and the outcomes of the discordant
common items, each switched from A's to B's in a class of its own cause. The steps telescope,
so the factors sum to the gap exactly. The outcome classes are linear in a fixed item set and
aggregation, so their order does not matter among themselves; the three stages' order does,
and every factor's spread over the 6 orders is reported as its order effect.

**The cause** of each discordant common item, the class its outcome is switched in, is read off its
two records and the two sides' protocols (:mod:`cube.analysis.explain_causes`, which says in what
order); where the records cannot tell, the items are the ``remainder``, with the reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.explain_causes import (NOT_APPLICABLE, NOT_IDENTIFIABLE, OPTIONAL_FACTORS, PROTOCOL_FACTORS, Side,
                                         compare_protocols, item_causes)
from cube.analysis.explain_protocol import cell_verdict, describe, prompt_diff
from cube.analysis.explain_selectors import (
    AGGREGATIONS,
    HARNESS_AGGREGATION,
    SliceSpec,
    cell_of,
    first_cell,
    one_cell,
)
from cube.analysis.paired_slices import pair
from cube.analysis.paired_tests import clustered_bootstrap_ci, mcnemar_exact
from cube.errors import ConfigError
from cube.protocol.thinking import THINKING_OUTCOMES
from cube.records.store import list_matrix

STAGES = ("sample", "aggregation", "outcomes")
NO_LABEL_TOKENS = "not applicable (e.g. a generation scores no label tokens)"
FACTORS = ("sample", "aggregation", "thinking", "parse_failure", "tie_break", "precision_noise", *PROTOCOL_FACTORS,
           "remainder")
# The status of a factor one side recorded nothing of (a server's chat template, an import's
# precision): it said "no difference", which the records cannot show.
UNKNOWN = "unknown: a side did not record it"


# --------------------------------------------------------------------------------------------
# The decomposition
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Factor:
    name: str
    share: Fraction  # of the gap, along the fixed path (sample, aggregation, outcomes)
    low: Fraction  # the least and most this factor takes over the 6 orders of the stages
    high: Fraction
    items: int  # discordant common items whose cause it is (outcome factors)
    # "identified" | "no difference" | NOT_IDENTIFIABLE (its share is in the remainder) | "differs;
    # changes no item's outcome"; the remainder's is "unattributed" where it holds items
    status: str
    detail: str


@dataclass(frozen=True)
class Explanation:
    cell_a: dict[str, Any]
    cell_b: dict[str, Any]
    aggregation_a: str
    aggregation_b: str
    n_a: int
    n_b: int
    n_common: int
    score_a: Fraction
    score_b: Fraction
    gap: Fraction  # score_b - score_a
    table2x2: dict[str, int]  # both_right, only_a, only_b, both_wrong (common items)
    mcnemar_p: float
    bootstrap: dict[str, float]  # B - A on the common items (micro), item-clustered
    factors: list[Factor]
    protocol: dict[str, dict[str, Any]]  # per dimension: status, a, b
    prompt_diff: list[str]
    subjects: list[dict[str, Any]] = field(default_factory=list)
    # the largest |score A - score B| of one option on a common item, where both sides use one
    # scorer on byte-equal prompts (None otherwise): how far two harnesses' numbers are apart
    max_score_difference: float | None = None
    common_a: Fraction = Fraction(0)  # each side's accuracy on the common items alone (micro)
    common_b: Fraction = Fraction(0)
    # degenerate scores on either side (cube.records.degeneracy), one line each: a slice that is
    # mostly ties measures a tie-break, and its share of any gap is the tie-break's
    warnings: list[str] = field(default_factory=list)

    def factor(self, name: str) -> Factor:
        return next(f for f in self.factors if f.name == name)

    def carrying(self) -> list[tuple[Factor, Fraction]]:
        """The factors with a share, largest first, each as a fraction of the gap (0 where the gap
        is 0; factors of opposite sign can each exceed the whole gap)."""
        named = [f for f in self.factors if f.share != 0]
        named.sort(key=lambda f: (-abs(f.share), FACTORS.index(f.name)))
        return [(f, f.share / self.gap if self.gap else Fraction(0)) for f in named]


def _score(in_set: np.ndarray, outcome: np.ndarray, subject: np.ndarray, aggregation: str) -> Fraction:
    """Accuracy of the items in ``in_set``, pooled (micro) or as the mean of subjects (macro), exact."""
    n = int(in_set.sum())
    if n == 0:
        return Fraction(0)
    if aggregation == "micro":
        return Fraction(int(outcome[in_set].sum()), n)
    sizes = np.bincount(subject[in_set])
    hits = np.bincount(subject[in_set], weights=outcome[in_set]).round().astype(np.int64)
    present = np.flatnonzero(sizes)
    return sum((Fraction(int(hits[s]), int(sizes[s])) for s in present), Fraction(0)) / len(present)


def _not_applicable(name: str) -> str:
    return ("a generation scores no label tokens" if name == "label_tokenization"
            else "only two generations have extractors to compare")


def _thinking_detail(side: Side) -> str:
    """One side's thinking outcomes, counted over its records; 'not recorded' where it does not say."""
    if "thinking" not in side.table.column_names or side.table.column("thinking").null_count == side.table.num_rows:
        return "not recorded"
    values = side.table.column("thinking").to_pylist()
    return ", ".join(f"{o} {values.count(o)}" for o in THINKING_OUTCOMES if values.count(o)) or "not recorded"


def explain(a: Side, b: Side, B: int = 10_000, seed: int = 0) -> Explanation:
    """The gap from slice A to slice B, decomposed; see the module docstring for the path."""
    paired = pair(a.table, b.table, allow_mixed_precision=True)  # explain names precision as a factor
    uid_a = a.table.column("uid").combine_chunks()
    uid_b = b.table.column("uid").combine_chunks()
    common = pa.array(paired.uid, type=pa.string())
    rows_a = pc.index_in(common, value_set=uid_a).to_numpy(zero_copy_only=False).astype(np.int64)
    rows_b = pc.index_in(common, value_set=uid_b).to_numpy(zero_copy_only=False).astype(np.int64)
    qa = np.asarray(a.table.column("qhash").to_pylist(), dtype=object)[rows_a]
    qb = np.asarray(b.table.column("qhash").to_pylist(), dtype=object)[rows_b]
    if (qa != qb).any():
        bad = paired.uid[int(np.flatnonzero(qa != qb)[0])]
        raise ConfigError(f"item {bad} has qhash {qa[qa != qb][0]} in A and {qb[qa != qb][0]} in B: "
                          "not the same question")
    ca, cb = paired.correct_a.astype(bool), paired.correct_b.astype(bool)
    discordant = ca != cb
    protocol = compare_protocols(a, b, rows_a, rows_b)
    cause, notes = item_causes(a, b, rows_a, rows_b, discordant, protocol)

    # One universe of items: the common ones (in pair's order), then A's own, then B's own.
    only_a = np.setdiff1d(np.arange(a.table.num_rows), rows_a)
    only_b = np.setdiff1d(np.arange(b.table.num_rows), rows_b)
    k = len(rows_a)
    subject_names = np.concatenate([paired.subject.astype(str),
                                    np.asarray(a.table.column("subject").to_pylist(), dtype=str)[only_a],
                                    np.asarray(b.table.column("subject").to_pylist(), dtype=str)[only_b]])
    names, subject = np.unique(subject_names, return_inverse=True)
    in_a = np.r_[np.ones(k + len(only_a), bool), np.zeros(len(only_b), bool)]
    in_b = np.r_[np.ones(k, bool), np.zeros(len(only_a), bool), np.ones(len(only_b), bool)]
    start = np.r_[ca, a.table.column("correct").to_numpy()[only_a],
                  b.table.column("correct").to_numpy()[only_b]].astype(np.int64)
    classes = [f for f in FACTORS if f in set(cause[discordant])]

    def walk(order: Sequence[str]) -> dict[str, Fraction]:
        in_set, aggregation, outcome = in_a, a.aggregation, start.copy()
        shares = {f: Fraction(0) for f in FACTORS}
        for stage in order:
            if stage == "sample":
                before = _score(in_set, outcome, subject, aggregation)
                in_set = in_b
                shares["sample"] += _score(in_set, outcome, subject, aggregation) - before
            elif stage == "aggregation":
                before = _score(in_set, outcome, subject, aggregation)
                aggregation = b.aggregation
                shares["aggregation"] += _score(in_set, outcome, subject, aggregation) - before
            else:
                for name in classes:
                    before = _score(in_set, outcome, subject, aggregation)
                    members = np.flatnonzero(cause == name)
                    outcome[members] = cb[members]
                    shares[name] += _score(in_set, outcome, subject, aggregation) - before
        return shares

    score_a = _score(in_a, start, subject, a.aggregation)
    end = start.copy()
    end[:k] = cb
    score_b = _score(in_b, end, subject, b.aggregation)
    gap = score_b - score_a
    fixed = walk(STAGES)
    spread = [walk(o) for o in itertools.permutations(STAGES)]
    factors = []
    for name in FACTORS:
        values = [s[name] for s in spread]
        low, high = min(values), max(values)
        n_items = int((cause == name).sum())
        status = "identified" if fixed[name] != 0 or low != 0 or high != 0 or n_items else "no difference"
        if name == "remainder" and status == "identified":
            status = "unattributed"  # the items no named factor can take, with the reason why
        detail = ""
        if name in protocol:
            # a side the factor does not apply to (a generation scores no label tokens) says so, not None
            shown_a, shown_b = (v if v is not None else NO_LABEL_TOKENS for v in (protocol[name]["a"], protocol[name]["b"]))
            detail = f"A {shown_a}; B {shown_b}"
            if protocol[name]["status"] == NOT_APPLICABLE:
                detail = f"{NOT_APPLICABLE}: {_not_applicable(name)}"
            if name == "extractor" and notes.get("same_generation"):
                detail += f"; {notes['same_generation']}"
            if protocol[name].get("records", "unknown") != "unknown":
                detail += f"; the label tokens in the records: {protocol[name]['records']}"
            if status == "no difference" and protocol[name].get("by_audit"):
                status = "same decisions, by its store's audit"
            elif name in OPTIONAL_FACTORS and protocol[name]["status"] == "unknown":
                detail = f"A {protocol[name]['a'] or 'not recorded'}; B {protocol[name]['b'] or 'not recorded'}"
                if status == "no difference":
                    status = UNKNOWN
            elif status == "no difference" and protocol[name]["status"] not in ("same", NOT_APPLICABLE):
                status = (NOT_IDENTIFIABLE if notes.get(name) == NOT_IDENTIFIABLE
                          else "differs; changes no item's outcome")
        elif name == "sample":
            detail = f"{len(only_a)} items only in A, {len(only_b)} only in B"
            if status == "no difference" and (len(only_a) or len(only_b)):
                status = "differs; changes no score here"
        elif name == "aggregation":
            reported = dict.fromkeys((p.harness, p.aggregation) for p in (a.protocol, b.protocol)
                                     if p.aggregation and p.harness != "cube")
            detail = f"A {a.aggregation}, B {b.aggregation}" + "".join(
                f"; {harness} reports {how}" for harness, how in reported)
            if status == "no difference" and a.aggregation != b.aggregation:
                status = "differs; changes no score here"  # e.g. one item per subject
        elif name == "remainder" and n_items:
            detail = notes.get("remainder", "")
        elif name == "precision_noise":
            from cube.analysis.noise import DECISION_NOISE

            detail = ", ".join(f"{side} {d}: margin <= {DECISION_NOISE[d]:.3g}" if d in DECISION_NOISE else
                               f"{side} precision not recorded" for side, d in (("A", a.dtype), ("B", b.dtype)))
            if status == "no difference" and not {a.dtype, b.dtype} <= set(DECISION_NOISE):
                status = UNKNOWN  # a side's close decisions cannot be told: not "no difference"
        elif name == "thinking":
            detail = f"A {_thinking_detail(a)}; B {_thinking_detail(b)}"
        elif name == "tie_break":
            detail = (f"audit: A {a.protocol.audit_verdict or 'not audited'}, "
                      f"B {b.protocol.audit_verdict or 'not audited'}")
        factors.append(Factor(name, fixed[name], low, high, n_items, status, detail))
    assert sum((f.share for f in factors), Fraction(0)) == gap  # the path telescopes

    test = mcnemar_exact(ca, cb)
    boot = clustered_bootstrap_ci(cb, ca, paired.uid, B=B, seed=seed)
    weights_end = _weights_of(in_b, subject, b.aggregation)
    subjects = []
    for s, name in enumerate(names):
        members = np.flatnonzero(subject[:k] == s)
        mask_a, mask_b = in_a & (subject == s), in_b & (subject == s)
        carried = sum((weights_end[i] * (int(cb[i]) - int(ca[i])) for i in members if cb[i] != ca[i]), Fraction(0))
        subjects.append({"subject": str(name), "n_a": int(mask_a.sum()), "n_b": int(mask_b.sum()),
                         "n_common": int(members.size),
                         "acc_a": float(start[mask_a].mean()) if mask_a.any() else None,
                         "acc_b": float(end[mask_b].mean()) if mask_b.any() else None,
                         "only_a_right": int((ca[members] & ~cb[members]).sum()),
                         "only_b_right": int((~ca[members] & cb[members]).sum()),
                         "carried": carried})
    subjects.sort(key=lambda r: (-abs(r["carried"]), r["subject"]))
    return Explanation(
        cell_of(a.table), cell_of(b.table), a.aggregation, b.aggregation, a.table.num_rows, b.table.num_rows,
        k, score_a, score_b, gap,
        {"both_right": int((ca & cb).sum()), "only_a": test.b, "only_b": test.c,
         "both_wrong": int((~ca & ~cb).sum())},
        test.p_value, {"delta": boot.delta, "lo": boot.lo, "hi": boot.hi, "B": B, "seed": seed},
        factors, protocol, prompt_diff(a.protocol, b.protocol), subjects,
        _max_score_difference(a, b, rows_a, rows_b, protocol), Fraction(int(ca.sum()), k), Fraction(int(cb.sum()), k),
        _degeneracy_warnings(a, b))


def _degeneracy_warnings(a: Side, b: Side) -> list[str]:
    """Each side's degenerate-score findings (the checks every import reports), named by side."""
    from cube.records.degeneracy import degenerate_cells

    columns = ("model", "scorer", "label_set", "context", "shots", "order", "scores", "tied", "pred", "parse_failed")
    out = []
    for name, side in (("A", a), ("B", b)):
        rows = side.table.select(list(columns)).to_pylist()
        out += [f"WARNING: {name} ({cell.name}): {finding}" for cell in degenerate_cells(rows)
                for finding in cell.findings()]
    return out


def _max_score_difference(a: Side, b: Side, rows_a: np.ndarray, rows_b: np.ndarray,
                          protocol: Mapping[str, Mapping[str, Any]]) -> float | None:
    if cell_of(a.table)["scorer"] != cell_of(b.table)["scorer"] or len(rows_a) == 0 \
            or protocol["prompt_bytes"]["status"] != "same" or protocol["chat_template"]["status"] == "differs":
        return None
    scores_a = list_matrix(a.table.take(pa.array(rows_a)), "scores")
    scores_b = list_matrix(b.table.take(pa.array(rows_b)), "scores")
    if scores_a.shape != scores_b.shape or np.isnan(scores_a).any() or np.isnan(scores_b).any():
        return None
    # both padded (-inf: an item of fewer options than the widest) is no difference, not NaN
    return float(np.where(scores_a == scores_b, 0.0, np.abs(scores_a - scores_b)).max())


def _weights_of(in_set: np.ndarray, subject: np.ndarray, aggregation: str) -> list[Fraction]:
    """Each item's weight in the score of ``in_set`` (0 outside it): the score is linear in them."""
    n = int(in_set.sum())
    sizes = np.bincount(subject[in_set], minlength=int(subject.max()) + 1)
    n_subjects = int((sizes > 0).sum())
    if aggregation == "micro":
        return [Fraction(1, n) if inside else Fraction(0) for inside in in_set]
    return [Fraction(1, n_subjects * int(sizes[s])) if inside else Fraction(0)
            for inside, s in zip(in_set, subject)]


# --------------------------------------------------------------------------------------------
# From slice specs to an explanation, and its JSON
# --------------------------------------------------------------------------------------------

def _records_dtype(table: pa.Table) -> str | None:
    """The precision the records themselves carry (schema 2; a schema-1 shard's from its run log):
    what a cell scored before manifests recorded cells is known by."""
    from cube.analysis.paired_slices import slice_precision

    return slice_precision(table)


def _cell_dtype(manifest: Mapping[str, Any], cell: Mapping[str, Any]) -> str | None:
    """The precision the manifest records for this cell (``cube.analysis.noise.cell_dtypes``)."""
    from cube.analysis.noise import CELL_KEY, cell_dtypes

    return cell_dtypes(manifest).get(tuple(cell.get(k) for k in CELL_KEY))


def _run_audit(store: Path) -> dict | None:
    """The audit a cube store's run logs carry, as a prediction whose families are its models; None
    for a store without one (an import, or runs from before cube audited them)."""
    from cube.analysis.confirm import run_audit_prediction

    try:
        return run_audit_prediction(store)[0]
    except ConfigError:
        return None


def explain_slices(spec_a: SliceSpec, spec_b: SliceSpec, allow_incomplete: bool = False,
                   verify: bool = True, B: int = 10_000, seed: int = 0) -> Explanation:
    """Read both stores (once where they are one), select one cell each, and explain the gap.

    cube's own cells are judged against the audit their run logged before it loaded the weights
    (``cube confirm --run-audit``'s), else the frozen tokenizer audit (made before any record); an
    imported store carries its own audit in its manifest.
    """
    from cube.analysis.chance import options_per_record
    from cube.analysis.confirm import model_families
    from cube.analysis.store_file import store_benchmark
    from cube.config import FROZEN_PREDICTION
    from cube.records.store import read_manifest, read_records
    from cube.tokenizers.audit import read_prediction

    frozen_path = FROZEN_PREDICTION
    frozen = read_prediction(frozen_path) if frozen_path.is_file() else None
    tables: dict[Path, pa.Table] = {}
    run_audits: dict[Path, dict | None] = {}
    sides = []
    for name, spec in (("A", spec_a), ("B", spec_b)):
        key = spec.store.resolve()
        manifest = read_manifest(spec.store)
        if key not in tables:
            tables[key] = read_records(spec.store, verify=verify, allow_incomplete=allow_incomplete)
        table = one_cell(tables[key], spec)
        cell = first_cell(table)
        family = model_families(manifest).get(cell["model"])
        if key not in run_audits:
            run_audits[key] = _run_audit(spec.store)
        audit, audit_family = frozen, family
        if run_audits[key] is not None and cell_verdict(run_audits[key], cell["model"], cell) is not None:
            audit, audit_family = run_audits[key], cell["model"]  # the run's own audit of this very cell
        contexts = pc.unique(table.column("context")).to_pylist()
        bench = store_benchmark(spec.store, cell["benchmark"])  # a user's file: the templates its run read
        templates = bench.templates() if bench is not None and bench.user is not None else None
        protocol = describe(manifest, cell, audit, audit_family, contexts, templates,
                            int(options_per_record(table).max()) if table.num_rows else None)
        aggregation = spec.aggregation
        if aggregation == HARNESS_AGGREGATION:
            aggregation = protocol.headline
            if aggregation not in AGGREGATIONS:
                raise ConfigError(f"slice {spec.text!r}: agg=harness, but its store does not say how "
                                  f"{protocol.harness} averages a benchmark's subjects; give agg=micro or agg=macro")
        sides.append(Side(spec.text, table, aggregation, protocol,
                          _cell_dtype(manifest, cell) or _records_dtype(table) or protocol.dtype))
    return explain(sides[0], sides[1], B=B, seed=seed)


def _exact(value: Fraction) -> dict[str, Any]:
    return {"value": float(value), "exact": f"{value.numerator}/{value.denominator}"}


def explanation_json(e: Explanation) -> dict[str, Any]:
    """The explanation as JSON: every share as a float and as the exact fraction it is."""
    return {
        "a": {"cell": e.cell_a, "aggregation": e.aggregation_a, "items": e.n_a, "score": _exact(e.score_a)},
        "b": {"cell": e.cell_b, "aggregation": e.aggregation_b, "items": e.n_b, "score": _exact(e.score_b)},
        "items": {"both": e.n_common, "only_a": e.n_a - e.n_common, "only_b": e.n_b - e.n_common,
                  "a_on_both": _exact(e.common_a), "b_on_both": _exact(e.common_b)},
        "gap": _exact(e.gap),
        "paired": {**e.table2x2, "mcnemar_p": e.mcnemar_p, "bootstrap_b_minus_a": e.bootstrap},
        "factors": [{"name": f.name, "share": _exact(f.share), "order_low": _exact(f.low),
                     "order_high": _exact(f.high), "items": f.items, "status": f.status, "detail": f.detail}
                    for f in e.factors],
        "protocol": e.protocol,
        "prompt_diff": e.prompt_diff,
        "max_score_difference": e.max_score_difference,
        "subjects": [{**s, "carried": _exact(s["carried"])} for s in e.subjects],
        "warnings": e.warnings,
    }
