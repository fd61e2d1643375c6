"""Checking the frozen audit prediction against what the records show.

The tokenizer audit (``cube audit --freeze``) predicted, before any model ran, in which
(tokenizer family, label set, context) cells first-token scoring (M1-strict) is degenerate: the
labels share their first token, so their first-token scores are the same number and the
tie-break, not the model, picks the answer. This module measures the same thing from the
records, with no tokenizer in the loop, and says for each cell whether the prediction held.

Observed degeneracy of an item = two or more labels with *equal first-token scores* (from the
``scores`` column). The harness also declares the groups it tied by construction (same first
token id) in ``tie_groups``; both are reported, and a disagreement between them is explained.

A prediction is confirmed only if the cell's tie rate is 100% with exactly the predicted labels
tied (DEGEN) or 0% (a defined verdict such as ``max1tok``). Anything else is a mismatch, and
every mismatch gets a sentence saying what was seen instead and what it points to.

Shots and option order do not change which tokens the labels start with, so a cell pools them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.chance import options_per_record
from cube.analysis.paired_tests import mcnemar_exact
from cube.errors import RecordsError
from cube.records.store import column_codes, group_ids, list_matrix

STRICT = "M1-strict"
SEQUENCE = "M1-seq"
CELL = ("model", "label_set", "context")


# --------------------------------------------------------------------------------------------
# Tie patterns: which options share a score, as one small integer per item
# --------------------------------------------------------------------------------------------
#
# A pattern is, for each option j, the first option with the same score ("representative").
# Encoded as sum(rep[j] * k**j) it is one integer, so millions of items are grouped by
# np.unique instead of by string. No tie at all is rep = (0, 1, ..., k-1).


def pattern_codes(reps: np.ndarray) -> np.ndarray:
    k = reps.shape[1]
    return reps.astype(np.int64) @ (k ** np.arange(k, dtype=np.int64))


def score_representatives(scores: np.ndarray, n_options: np.ndarray | None = None) -> np.ndarray:
    """For each item and option, the first option whose score is exactly equal.

    ``n_options``: each item's option count, where items of fewer options are padded to the widest
    (``list_matrix``'s -inf): a padded column is its own representative, never tied to another
    padded one, since it is no option at all (a 3-option item under a 10-label set read "D=E")."""
    equal = scores[:, :, None] == scores[:, None, :]
    if n_options is not None:
        shown = np.arange(scores.shape[1])[None, :] < np.asarray(n_options)[:, None]
        equal &= shown[:, :, None] & shown[:, None, :]
        equal |= np.eye(scores.shape[1], dtype=bool)[None, :, :]
    return np.argmax(equal, axis=2)


def reps_of_code(code: int, k: int) -> np.ndarray:
    return np.array([(code // k**j) % k for j in range(k)], dtype=np.int64)


def groups_of_reps(reps: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    groups: dict[int, list[int]] = {}
    for option, rep in enumerate(reps):
        groups.setdefault(int(rep), []).append(option)
    return tuple(tuple(g) for g in groups.values() if len(g) > 1)


def reps_of_groups(groups: Sequence[Sequence[int]], k: int, where: str) -> np.ndarray:
    reps = np.arange(k, dtype=np.int64)
    for group in groups:
        members = sorted(int(i) for i in group)
        if len(members) < 2 or members[0] < 0 or members[-1] >= k:
            raise RecordsError(f"{where}: tie group {list(group)} is not 2+ options of 0..{k - 1}")
        if any(reps[m] != m for m in members):
            raise RecordsError(f"{where}: option in two tie groups ({list(group)})")
        reps[members] = members[0]
    return reps


def parse_tie_groups(text: str, k: int) -> np.ndarray:
    """``"0=1;2=3"`` -> representatives; ``""`` -> no tie."""
    where = f"column tie_groups: {text!r}"
    if text == "":
        return np.arange(k, dtype=np.int64)
    try:
        groups = [[int(x) for x in part.split("=")] for part in text.split(";")]
    except ValueError:
        raise RecordsError(f"{where} is not groups like '0=1' joined by ';'") from None
    return reps_of_groups(groups, k, where)


def describe_groups(groups: Sequence[Sequence[int]], labels: Sequence[str] | None = None) -> str:
    """Readable tie groups: ``甲=丁`` with labels, ``0=3`` without; ``none`` for no tie."""
    if not groups:
        return "none"
    named = bool(labels) and all(i < len(labels) for g in groups for i in g)
    return "; ".join("=".join(labels[i] if named else str(i) for i in g) for g in groups)


# --------------------------------------------------------------------------------------------
# Observation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObservedCell:
    """What the M1-strict records of one (model, label set, context) show."""

    model: str
    label_set: str
    context: str
    n_options: int
    n: int  # M1-strict records (items x shots x orders)
    n_tied: int  # items with two or more equal first-token scores
    n_declared: int  # items the harness marked with tie groups (same first-token id)
    n_declared_unequal: int  # declared groups whose scores nevertheless differ
    n_coincidental: int  # equal scores outside any declared group
    n_top_shared: int  # the top score is shared: the tie-break picks the answer
    n_tied_flag: int  # rows with the harness's ``tied`` flag
    n_outcome_decided: int  # gold is in the shared top group: the tie-break decides correctness
    patterns: dict[tuple[tuple[int, ...], ...], int]  # observed tie groups -> items

    @property
    def tie_rate(self) -> float:
        return self.n_tied / self.n

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.model, self.label_set, self.context)


def observe_ties(table: pa.Table) -> list[ObservedCell]:
    """Tie statistics of every (model, label set, context) in the M1-strict records."""
    strict = table.filter(pc.equal(table.column("scorer"), STRICT))
    if strict.num_rows == 0:
        return []
    scores = list_matrix(strict, "scores")
    n, k = scores.shape
    rows = np.arange(n)
    reps = score_representatives(scores, options_per_record(strict))
    code = pattern_codes(reps)
    no_tie = int(pattern_codes(np.arange(k)[None, :])[0])

    text_codes, texts = column_codes(strict, "tie_groups")
    declared_table = np.stack([parse_tie_groups(t, k) for t in texts])  # distinct strings only
    declared_reps = declared_table[text_codes]
    declared_code = pattern_codes(declared_reps)
    declared = declared_code != no_tie
    unequal = ~np.all(scores[rows[:, None], declared_reps] == scores, axis=1)
    tied = code != no_tie
    coincidental = tied & ~unequal & (code != declared_code)

    top = scores.max(axis=1)
    at_top = scores == top[:, None]
    top_shared = at_top.sum(axis=1) > 1
    gold = strict.column("gold").to_numpy().astype(np.int64)
    outcome_decided = top_shared & at_top[rows, gold]
    tied_flag = strict.column("tied").to_numpy()

    ids, keys = group_ids(strict, CELL)
    size = len(keys)

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(ids, weights=mask.astype(np.float64), minlength=size).astype(np.int64)

    totals = np.bincount(ids, minlength=size)
    counts = {name: count(mask) for name, mask in (
        ("tied", tied), ("declared", declared), ("unequal", declared & unequal),
        ("coincidental", coincidental), ("top", top_shared), ("flag", tied_flag),
        ("decided", outcome_decided))}
    pattern_keys, pattern_n = np.unique(ids[tied] * (k**k) + code[tied], return_counts=True)
    patterns: list[dict] = [{} for _ in range(size)]
    for key, number in zip(pattern_keys, pattern_n):  # distinct patterns only
        groups = groups_of_reps(reps_of_code(int(key % (k**k)), k))
        patterns[int(key // (k**k))][groups] = int(number)
    return [
        ObservedCell(
            *keys[i], k, int(totals[i]), int(counts["tied"][i]), int(counts["declared"][i]),
            int(counts["unequal"][i]), int(counts["coincidental"][i]), int(counts["top"][i]),
            int(counts["flag"][i]), int(counts["decided"][i]), patterns[i],
        )
        for i in range(size)
    ]


# --------------------------------------------------------------------------------------------
# Prediction and confirmation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PredictedCell:
    family: str
    label_set: str
    context: str
    verdict: str  # "DEGEN" or "max<N>tok"
    groups: tuple[tuple[int, ...], ...]  # predicted tied options (DEGEN only)
    labels: tuple[str, ...]

    @property
    def degenerate(self) -> bool:
        return self.verdict == "DEGEN"


def predicted_cells(prediction: Mapping[str, Any]) -> dict[tuple[str, str, str], PredictedCell]:
    """(family, label set, context) -> verdict and tied options, from a frozen prediction."""
    label_sets = prediction.get("label_sets", {})
    cells = {}
    for cell in prediction.get("cells", []):
        labels = tuple(label_sets.get(cell["label_set"], ()))
        groups = []
        for group in cell.get("collision_groups") or []:
            try:
                groups.append(tuple(sorted(labels.index(label) for label in group)))
            except ValueError:
                raise RecordsError(
                    f"prediction cell {cell['family']}/{cell['label_set']}/{cell['context']}: "
                    f"tied labels {group} are not all in label set {cell['label_set']}"
                ) from None
        key = (cell["family"], cell["label_set"], cell["context"])
        cells[key] = PredictedCell(*key, cell["verdict"], tuple(sorted(groups)), labels)
    return cells


@dataclass(frozen=True)
class Confirmation:
    observed: ObservedCell
    family: str | None
    predicted: PredictedCell | None
    status: str  # "confirmed", "mismatch" or "unpredicted"
    explanation: str


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.1%})"


def _patterns_text(cell: ObservedCell, labels: Sequence[str] | None, top: int = 3) -> str:
    ranked = sorted(cell.patterns.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{describe_groups(g, labels)} on {n}" for g, n in ranked)


def _harness_note(cell: ObservedCell) -> str:
    notes = []
    if cell.n_declared_unequal:
        notes.append(
            f"{cell.n_declared_unequal} items have declared tie groups whose scores differ "
            "(the harness did not equalise tied options)"
        )
    if cell.n_coincidental:
        notes.append(
            f"{cell.n_coincidental} items have equal scores for labels with distinct first "
            "tokens (a numerical coincidence, e.g. low-precision logits, not a collision)"
        )
    return ("; " + "; ".join(notes)) if notes else ""


def judge(cell: ObservedCell, family: str | None, predicted: PredictedCell | None,
          skipped: Mapping[str, str]) -> Confirmation:
    """Confirmed, mismatch (with a sentence saying why) or unpredicted, for one cell."""
    if family is None:
        return Confirmation(cell, None, None, "unpredicted",
                            f"model {cell.model!r} has no tokenizer family in the mapping")
    if predicted is None:
        why = (f"family {family} was skipped by the audit ({skipped[family]})" if family in skipped
               else f"the audit has no cell {family}/{cell.label_set}/{cell.context}")
        return Confirmation(cell, family, None, "unpredicted", why)
    labels = predicted.labels
    tied_groups = describe_groups(predicted.groups, labels)
    if predicted.degenerate:
        exact = cell.patterns.get(predicted.groups, 0)
        if cell.n_tied == cell.n and exact == cell.n:
            return Confirmation(cell, family, predicted, "confirmed",
                                f"all {cell.n} items tie {tied_groups}, as predicted")
        if cell.n_tied < cell.n:
            why = (f"predicted DEGEN ({tied_groups}) but only {_share(cell.n_tied, cell.n)} items "
                   f"tie; the harness declared tie groups on {cell.n_declared}: the model's "
                   f"tokenizer or the records' context differs from the audited {family} one")
        else:
            why = (f"every item ties, but as {_patterns_text(cell, labels)} instead of the "
                   f"predicted {tied_groups}: a different collision than the audit found")
        return Confirmation(cell, family, predicted, "mismatch", why + _harness_note(cell))
    if cell.n_tied == 0:
        return Confirmation(cell, family, predicted, "confirmed",
                            f"no item ties, as predicted ({predicted.verdict})")
    why = (f"predicted {predicted.verdict} (no shared first token) but "
           f"{_share(cell.n_tied, cell.n)} items tie: {_patterns_text(cell, labels)}")
    if cell.n_declared:
        why += (f"; {cell.n_declared} carry harness tie groups (same first-token id): the "
                f"model's tokenizer collides where the audited {family} tokenizer did not")
    return Confirmation(cell, family, predicted, "mismatch", why + _harness_note(cell))


@dataclass(frozen=True)
class ConfirmationReport:
    cells: list[Confirmation]
    matrix: dict[str, dict[str, tuple[int, int]]]  # model -> label set -> (confirmed, predicted)
    label_sets: list[str]

    @property
    def confirmed(self) -> int:
        return sum(c.status == "confirmed" for c in self.cells)

    @property
    def predicted(self) -> int:
        return sum(c.status != "unpredicted" for c in self.cells)

    @property
    def mismatches(self) -> list[Confirmation]:
        return [c for c in self.cells if c.status == "mismatch"]


def confirm(
    table: pa.Table, prediction: Mapping[str, Any], families: Mapping[str, str]
) -> ConfirmationReport:
    """Judge every observed (model, label set, context) against the frozen prediction.

    ``families`` maps a model name to its tokenizer family (the prediction is per family).
    """
    predicted = predicted_cells(prediction)
    skipped = prediction.get("skipped", {})
    cells = []
    for observed in observe_ties(table):
        family = families.get(observed.model)
        pred = predicted.get((family, observed.label_set, observed.context)) if family else None
        cells.append(judge(observed, family, pred, skipped))
    matrix: dict[str, dict[str, tuple[int, int]]] = {}
    for c in cells:
        if c.status == "unpredicted":
            continue
        ok, total = matrix.setdefault(c.observed.model, {}).get(c.observed.label_set, (0, 0))
        matrix[c.observed.model][c.observed.label_set] = (ok + (c.status == "confirmed"), total + 1)
    label_sets = sorted({c.observed.label_set for c in cells})
    return ConfirmationReport(cells, matrix, label_sets)


def format_report(report: ConfirmationReport) -> str:
    """The model x label set matrix ("N/N confirmed" per entry), then every mismatch."""
    width = max([len(m) for m in report.matrix] + [5])
    header = f"{'model':<{width}}  " + "  ".join(f"{ls:>14}" for ls in report.label_sets)
    lines = ["confirmation matrix (M1-strict ties vs the frozen audit; entries pool contexts)",
             header]
    for model in sorted(report.matrix):
        entries = []
        for ls in report.label_sets:
            ok, total = report.matrix[model].get(ls, (0, 0))
            entries.append(f"{f'{ok}/{total}' if total else '-':>14}")
        lines.append(f"{model:<{width}}  " + "  ".join(entries))
    lines.append(f"{report.confirmed}/{report.predicted} confirmed")
    if report.mismatches:
        lines.append("mismatches:")
        for c in report.mismatches:
            o = c.observed
            lines.append(f"  {o.model} / {o.label_set} / {o.context}: {c.explanation}")
    unpredicted = [c for c in report.cells if c.status == "unpredicted"]
    if unpredicted:
        lines.append(f"not predicted ({len(unpredicted)} cells):")
        seen = set()
        for c in unpredicted:
            if (c.observed.model, c.explanation) not in seen:
                seen.add((c.observed.model, c.explanation))
                lines.append(f"  {c.observed.model}: {c.explanation}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Partial collisions: when the tie-break decides, and what that costs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TieBreakEffect:
    model: str
    label_set: str
    context: str
    groups: tuple[tuple[int, ...], ...]
    n: int
    n_top_shared: int  # the tie-break chose the prediction
    n_outcome_decided: int  # ... and gold was among the tied options, so it chose right or wrong
    n_paired: int  # items with an M1-seq record of the same cell, shots and order
    acc_strict: float | None
    acc_seq: float | None
    delta: float | None  # acc_strict - acc_seq
    p_value: float | None  # exact McNemar, M1-strict vs M1-seq


def is_partial(groups: tuple[tuple[int, ...], ...], k: int) -> bool:
    """Some labels tie, but not all of them in one group."""
    return bool(groups) and not (len(groups) == 1 and len(groups[0]) == k)


def partial_cells(report: ConfirmationReport) -> list[Confirmation]:
    """Cells with a partial collision, predicted or declared by the harness."""
    out = []
    for c in report.cells:
        k = c.observed.n_options
        predicted_partial = c.predicted is not None and is_partial(c.predicted.groups, k)
        observed_partial = c.observed.n_declared > 0 and any(
            is_partial(g, k) for g in c.observed.patterns
        )
        if predicted_partial or observed_partial:
            out.append(c)
    return out


def tiebreak_effects(table: pa.Table, cells: Sequence[ObservedCell]) -> list[TieBreakEffect]:
    """For each cell: how often the tie-break decides, and M1-strict's accuracy against M1-seq.

    M1-seq scores each label's full token sequence, so it separates labels that only share a
    first token; the accuracy gap on the same items is what the collision costs.
    """
    effects = []
    for cell in cells:
        mask = pc.and_(
            pc.and_(pc.equal(table.column("model"), cell.model),
                    pc.equal(table.column("label_set"), cell.label_set)),
            pc.equal(table.column("context"), cell.context),
        )
        sub = table.filter(mask)
        sub = sub.filter(pc.is_in(sub.column("scorer"), value_set=pa.array([STRICT, SEQUENCE])))
        ids, _ = group_ids(sub, ("shots", "order", "uid"), with_keys=False)
        is_strict = pc.equal(sub.column("scorer"), STRICT).to_numpy(zero_copy_only=False)
        correct = sub.column("correct").to_numpy()
        seq_row = np.full(int(ids.max()) + 1 if ids.size else 0, -1, dtype=np.int64)
        seq_row[ids[~is_strict]] = np.flatnonzero(~is_strict)
        strict_rows = np.flatnonzero(is_strict)
        partner = seq_row[ids[strict_rows]]
        found = partner >= 0
        acc_strict = acc_seq = delta = p = None
        if found.any():
            a, b = correct[strict_rows[found]], correct[partner[found]]
            acc_strict, acc_seq = float(a.mean()), float(b.mean())
            delta, p = acc_strict - acc_seq, mcnemar_exact(a, b).p_value
        main = max(cell.patterns.items(), key=lambda kv: kv[1])[0] if cell.patterns else ()
        effects.append(TieBreakEffect(
            cell.model, cell.label_set, cell.context, main, cell.n, cell.n_top_shared,
            cell.n_outcome_decided, int(found.sum()), acc_strict, acc_seq, delta, p,
        ))
    return effects


def format_effects(effects: Sequence[TieBreakEffect]) -> str:
    if not effects:
        return "partial collisions: none"
    lines = ["partial collisions (M1-strict; tie-break = first option):"]
    for e in effects:
        line = (f"  {e.model} / {e.label_set} / {e.context}: ties {describe_groups(e.groups)}; "
                f"tie-break picks the answer on {_share(e.n_top_shared, e.n)}, "
                f"decides right/wrong on {_share(e.n_outcome_decided, e.n)}")
        if e.delta is None:
            line += "; no M1-seq records to compare"
        else:
            line += (f"; accuracy M1-strict {e.acc_strict:.3f} vs M1-seq {e.acc_seq:.3f} "
                     f"(delta {e.delta:+.3f}, McNemar p={e.p_value:.3g}, {e.n_paired} items)")
        lines.append(line)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Which family is a model?
# --------------------------------------------------------------------------------------------


def model_families(
    manifest: Mapping[str, Any] | None = None,
    extra: Mapping[str, str] | None = None,
    config_dir: Path | None = None,
) -> dict[str, str]:
    """Model -> tokenizer family, from config (checkpoints, demo models), the manifest, ``extra``.

    Later sources win: a store's own manifest (``metadata.families``, which ``cube simulate``
    writes) overrides config, and ``extra`` (the CLI's ``--family``) overrides both.
    """
    from cube.config import config_dir as default_config_dir
    from cube.models_config import models_config

    folder = Path(config_dir) if config_dir is not None else default_config_dir()
    families = models_config(folder).model_families() if (folder / "models.yaml").is_file() else {}
    if manifest:
        families.update((manifest.get("metadata") or {}).get("families") or {})
    families.update(extra or {})
    return families


def report_json(report: ConfirmationReport, effects: Sequence[TieBreakEffect]) -> dict[str, Any]:
    def cell_json(c: Confirmation) -> dict[str, Any]:
        o = c.observed
        labels = c.predicted.labels if c.predicted else None
        return {
            "model": o.model, "label_set": o.label_set, "context": o.context,
            "family": c.family, "predicted": c.predicted.verdict if c.predicted else None,
            "status": c.status, "explanation": c.explanation, "n": o.n, "n_tied": o.n_tied,
            "tie_rate": o.tie_rate, "n_declared": o.n_declared,
            "n_coincidental": o.n_coincidental, "n_declared_unequal": o.n_declared_unequal,
            "observed_groups": {describe_groups(g, labels): n for g, n in o.patterns.items()},
        }

    return {
        "confirmed": report.confirmed,
        "predicted": report.predicted,
        "matrix": {m: {ls: f"{ok}/{t}" for ls, (ok, t) in row.items()}
                   for m, row in report.matrix.items()},
        "cells": [cell_json(c) for c in report.cells],
        "partial_collisions": [
            {**{k: v for k, v in e.__dict__.items() if k != "groups"},
             "groups": describe_groups(e.groups)} for e in effects
        ],
    }


def run_audit_prediction(records: str | Path) -> tuple[dict, dict[str, str]]:
    """(prediction, model -> family) from the audits the store's run logs carry: each model is its
    own family, predicted by the audit ``cube run`` made before it loaded the weights."""
    from cube.errors import ConfigError
    from cube.harness.run_config import RunSettings
    from cube.records.provenance import read_run_logs
    from cube.tokenizers.audit import run_prediction

    logged: dict[str, list[dict]] = {}
    for entry in read_run_logs(records):
        audit = RunSettings.from_log(entry).audit  # older lines, from before runs audited, have none
        if audit:
            logged.setdefault(entry["model"], []).extend(audit)
    if not logged:
        raise ConfigError(f"{records}: no run log carries an audit (runs before cube audited them); "
                          "use --prediction with a frozen audit")
    return run_prediction(logged), {model: model for model in logged}
