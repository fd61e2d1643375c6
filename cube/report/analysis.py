"""The paper's method on a user's store: how much the score depends on the protocol.

Every number here comes from the functions ``cube rescore``, ``cube confirm`` and ``cube explain``
use (``cube.analysis``): per-cell accuracy and its Wilson interval from ``rescore``; paired
comparisons from ``regression_table`` (exact McNemar and its exact interval, one precision per
pair or refused); calibration from the ECE of ``cube.analysis.calibration`` with its item-bootstrap
interval; the audit against observed ties from ``confirm``; rankings against the bootstrap noise
floor from ``ranking_shift``; harness gaps from ``explain_slices``. The report adds only the
choice of what to compare (each dimension's levels against the reference cell's, on one model)
and Holm's correction over every comparison it makes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cube.analysis.chance import chance_per_record
from cube.analysis.paired_slices import regression_table
from cube.analysis.rescore import rescore
from cube.analysis.slices import CELL_COLUMNS
from cube.analysis.paired_tests import mcnemar_power
from cube.analysis.stats import holm_adjust
from cube.errors import ConfigError, CubeError, PrecisionMismatch
from cube.protocol.chat import record_context, split_context
from cube.records.schema import GENERATION_RECORD_SCORERS, JUDGEMENT_SCORERS, record_names
from cube.records.store import group_ids, list_matrix
from cube.report.model import (
    DIMENSION_NAMES,
    DIMENSION_OPTIONS,
    DIMENSIONS,
    REPORT_VERSION,
    AuditCell,
    CalibrationCell,
    CellScore,
    Comparison,
    Flip,
    Flips,
    GroupScore,
    HarnessGap,
    RankShift,
    RefusedComparison,
    ReportAnalysis,
    ScorerRange,
    StoreProvenance,
)

# The reference cell where the user names none: the paper's standard protocol where the store
# holds it, else the first value present (sorted), dimension by dimension.
PREFERRED = {"scorer": ("M1-seq", "M1-strict", "M2", "M6-strict"), "label_set": ("L1_halfwidth",),
             "cue": ("zh_cue", "en_label_space"), "shots": (0,), "order": ("original",), "chat_template": ("none",)}
JUDGED = set(record_names(JUDGEMENT_SCORERS))
POWER_TARGET = 0.80
ALPHA = 0.05
EXACT_POWER_MAX_N = 2000  # above this, the MDE's normal approximation alone (the exact sum is O(n^2))
MAX_FLIPS = 200  # items listed per flip table (the counts are always whole)


@dataclass(frozen=True)
class LoadedStore:
    """One store as the report reads it: its records (models renamed where two stores share one)."""

    path: Path
    harness: str
    manifest: dict[str, Any]
    table: pa.Table
    renamed: dict[str, str]  # the report's model name -> the store's


def harness_of(manifest: Mapping[str, Any]) -> str:
    """The harness that wrote a store: an importer's label, else cube."""
    from cube.importers.registry import importer_of

    importer = importer_of(manifest.get("metadata") or {})
    return importer.label if importer is not None else "cube"


def check_stores(paths: Sequence[str | Path], allow_incomplete: bool) -> list[str]:
    """Every store's manifest read, and one line per incomplete cell; refused without
    ``allow_incomplete`` before any record is read."""
    from cube.records.store import read_manifest, unfinished_cells

    if not paths:
        raise ConfigError("cube report needs at least one store (a folder holding MANIFEST.json)")
    incomplete = []
    seen = set()
    for path in paths:
        resolved = Path(path).resolve()
        if resolved in seen:
            raise ConfigError(f"{path}: given twice; give each store once")
        seen.add(resolved)
        if not Path(path).is_dir():
            raise ConfigError(f"{path}: no such store (a folder holding MANIFEST.json, written by cube run, "
                              "cube merge or cube import)")
        for line in unfinished_cells(read_manifest(path)):
            incomplete.append(f"{path}: {line}")
    if incomplete and not allow_incomplete:
        more = f" (and {len(incomplete) - 1} more)" if len(incomplete) > 1 else ""
        raise ConfigError(f"incomplete store: {incomplete[0]}{more}; finish the run (re-run its command: it resumes) "
                          "or pass --allow-incomplete for a report marked incomplete on every page")
    return incomplete


def load_stores(paths: Sequence[str | Path], allow_incomplete: bool, progress: bool = False) -> list[LoadedStore]:
    """Each store's records (with ``probs`` and the within-noise marks ``cube rescore`` makes).

    A model name two stores share (cube's run and an import of the same model) is kept by the
    first store and suffixed with the harness in the others, so that each cell stays one store's."""
    from cube.analysis.noise import cell_dtypes, mark_within_noise
    from cube.records.store import read_manifest, read_records

    loaded: list[LoadedStore] = []
    taken: set[str] = set()
    for path in paths:
        manifest = read_manifest(path)
        harness = harness_of(manifest)
        table = read_records(path, verify=True, columns=("probs",), allow_incomplete=allow_incomplete,
                             progress=progress)
        table = mark_within_noise(table, cell_dtypes(manifest))
        models = sorted(set(pc.unique(table.column("model")).to_pylist()))
        renamed = {}
        for model in models:
            name = model if model not in taken else f"{model} ({harness}, {Path(path).name})"
            renamed[name] = model
            taken.add(name)
        if any(k != v for k, v in renamed.items()):
            back = {v: k for k, v in renamed.items()}
            column = pa.array([back[m] for m in table.column("model").to_pylist()], pa.string())
            table = table.set_column(table.column_names.index("model"), "model", column)
        loaded.append(LoadedStore(Path(path), harness, manifest, table, renamed))
    return loaded


# ---- cells -------------------------------------------------------------------------------------


def _cell_scores(store: LoadedStore) -> tuple[list[CellScore], np.ndarray, list[tuple]]:
    """Every cell of a store with its accuracy (``rescore``'s overall micro row), and each record's
    cell index (for slicing the cell's records later)."""
    table = store.table
    ids, keys = group_ids(table, CELL_COLUMNS)
    n = np.bincount(ids, minlength=len(keys))
    chance = np.bincount(ids, weights=chance_per_record(table), minlength=len(keys)) / n
    rows = {tuple(r[c] for c in CELL_COLUMNS): r
            for r in rescore(table, level="overall").rows.to_pylist() if r["aggregation"] == "micro"}
    dtype_keys = []
    if "dtype" in table.column_names:  # null: not recorded (an import that does not say)
        dtype = pc.fill_null(table.column("dtype"), "not recorded")
        _, dtype_keys = group_ids(pa.table({"cell": pa.array(ids), "dtype": dtype}), ("cell", "dtype"))
    dtypes: dict[int, set[str]] = {}
    for cell, value in dtype_keys:
        dtypes.setdefault(int(cell), set()).add(value if value is not None else "not recorded")
    cells = []
    for i, key in enumerate(keys):
        r = rows[tuple(key)]
        cue, chat = split_context(str(r["context"]))
        cells.append(CellScore(
            str(store.path), r["model"], r["benchmark"], r["scorer"], r["label_set"], cue, chat, int(r["shots"]),
            r["order"], int(r["n"]), int(r["n_correct"]), float(r["accuracy"]), float(r["ci_lo"]), float(r["ci_hi"]),
            float(chance[i]), float(r["tie_rate"]), float(r["parse_failure_rate"]), r["within_noise_rate"],
            "+".join(sorted(dtypes.get(i, {"not recorded"})))))
    return cells, ids, [tuple(k) for k in keys]


def parse_reference(text: str | None) -> dict[str, str]:
    """``--reference scorer=M1-seq,label_set=L1_halfwidth,...``: the fields it fixes."""
    out: dict[str, str] = {}
    for term in filter(None, (text or "").split(",")):
        name, eq, value = term.partition("=")
        name = name.strip().replace("-", "_")
        if name == "context":
            name = "cue"
        if not eq or not value.strip() or name not in DIMENSIONS:
            raise ConfigError(f"--reference {term!r}: expected FIELD=VALUE with FIELD one of {', '.join(DIMENSIONS)}")
        out[name] = value.strip()
    return out


def choose_reference(cells: Sequence[CellScore], given: Mapping[str, str]) -> dict[str, str]:
    """The reference value of each dimension: the user's, else the preferred one present, else the
    commonest (ties: the first sorted). A value the user gives that no cell holds is refused."""
    reference = {}
    for dim in DIMENSIONS:
        values = [str(c.value(dim)) for c in cells]
        if dim in given:
            if given[dim] not in values:
                held = ", ".join(sorted(set(values), key=str))
                raise ConfigError(f"--reference {dim}={given[dim]}: no cell of these stores has it; they hold {held}")
            reference[dim] = given[dim]
            continue
        preferred = [str(v) for v in PREFERRED.get(dim, ()) if str(v) in values]
        if preferred:
            reference[dim] = preferred[0]
        else:
            counts = {v: values.count(v) for v in sorted(set(values))}
            reference[dim] = max(counts, key=lambda v: counts[v])
    return reference


def _matches(cell: CellScore, reference: Mapping[str, str], skip: str | None = None) -> bool:
    return all(str(cell.value(d)) == reference[d] for d in DIMENSIONS if d != skip)


# ---- paired comparisons ---------------------------------------------------------------------------


def minimum_detectable_effect(n: int, discordant_rate: float, alpha: float = ALPHA,
                              power: float = POWER_TARGET) -> float | None:
    """The smallest |accuracy difference| McNemar's test detects with ``power`` at this n and
    discordant rate, from the normal approximation (Connor 1987:
    ``n = (z_a sqrt(psi) + z_b sqrt(psi - d^2))^2 / d^2``) solved for d by bisection; None where
    no difference up to the discordant rate itself is detectable."""
    from scipy.stats import norm

    if n < 1 or not 0 < discordant_rate <= 1:
        return None
    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(power)

    def needed(d: float) -> float:
        return (za * math.sqrt(discordant_rate) + zb * math.sqrt(max(discordant_rate - d * d, 0.0))) ** 2 / (d * d)

    lo, hi = 1e-9, discordant_rate
    if needed(hi) > n:
        return None
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if needed(mid) > n else (lo, mid)
    return hi


def _power(n: int, a_only: int, b_only: int, delta: float) -> float | None:
    rate = (a_only + b_only) / n if n else 0.0
    if rate == 0 or delta == 0 or n > EXACT_POWER_MAX_N:
        return None
    return mcnemar_power(n, rate, min(abs(delta), rate), ALPHA)


def _level_cell(cells: Sequence[CellScore], reference: Mapping[str, str], dim: str, level: str
                ) -> tuple[CellScore | None, tuple[str, ...]]:
    """The model's cell at ``level`` of ``dim`` with every other field at the reference; for the
    scorer dimension a scorer whose records fix other fields (cloze: label set ``cloze``) is
    matched on the fields it has, and the fields it differs in are named."""
    candidates = [c for c in cells if str(c.value(dim)) == level]
    exact = [c for c in candidates if _matches(c, reference, skip=dim)]
    if exact:
        return exact[0], ()
    if dim != "scorer" or not candidates:
        return None, ()
    relaxed = []
    for other in DIMENSIONS:
        if other == dim:
            continue
        keep = [c for c in candidates if str(c.value(other)) == reference[other]]
        if keep:
            candidates = keep
        else:
            relaxed.append(other)
    return (candidates[0], tuple(relaxed)) if len(candidates) == 1 else (None, ())


def compare(cells_of: Mapping[str, list[CellScore]], slices: Callable[[CellScore], pa.Table],
            reference: Mapping[str, str]
            ) -> tuple[list[Comparison], list[RefusedComparison]]:
    """Every dimension's levels against the reference level, per model, paired on the items; p
    Holm-adjusted over all of them (the report's whole family of tests)."""
    raw, refused = [], []
    for model, cells in cells_of.items():
        ref = next((c for c in cells if _matches(c, reference)), None)
        if ref is None:
            continue
        for dim in DIMENSIONS:
            # a judgement scorer (TF) answers another question of the item: not a scoring of the same choice
            levels = sorted({str(c.value(dim)) for c in cells} - {reference[dim]} - (JUDGED if dim == "scorer" else set()),
                            key=str)
            for level in levels:
                other, relaxed = _level_cell(cells, reference, dim, level)
                if other is None:
                    continue
                try:
                    reg = regression_table(slices(ref), slices(other))
                except PrecisionMismatch as exc:
                    refused.append(RefusedComparison(model, dim, level, f"refused: {exc}".split(";")[0]))
                    continue
                except CubeError as exc:
                    refused.append(RefusedComparison(model, dim, level, str(exc)))
                    continue
                o = reg.overall
                raw.append((model, dim, level, ref, other, o, reg.precision, relaxed))
    p_holm = holm_adjust([o["p_value"] for *_, o, _, _ in raw]) if raw else []
    out = []
    for (model, dim, level, ref, other, o, precision, relaxed), adjusted in zip(raw, p_holm):
        n, b, c = int(o["n"]), int(o["a_only_right"]), int(o["b_only_right"])
        out.append(Comparison(
            model, dim, reference[dim], level, ref.name, other.name, n, o["acc_a"], o["acc_b"], o["delta"],
            o["delta_lo"], o["delta_hi"], b, c, float(o["p_value"]), float(adjusted),
            _power(n, b, c, o["delta"]), minimum_detectable_effect(n, (b + c) / n if n else 0.0), precision, relaxed))
    return out, refused


# ---- the sections ------------------------------------------------------------------------------


def scorer_ranges(cells_of: Mapping[str, list[CellScore]], reference: Mapping[str, str]) -> list[ScorerRange]:
    out = []
    for model, cells in cells_of.items():
        for scorer in sorted({c.scorer for c in cells}):
            mine = [c for c in cells if c.scorer == scorer]
            ref = next((c for c in mine if _matches(c, reference, skip="scorer")), None)
            low = min(mine, key=lambda c: (c.accuracy, c.name))
            high = max(mine, key=lambda c: (c.accuracy, c.name))
            out.append(ScorerRange(model, scorer, len(mine), ref, low, high,
                                   float(np.mean([c.chance for c in mine]))))
    return out


def summary_sentence(cells_of: Mapping[str, list[CellScore]], ranges: Sequence[ScorerRange],
                     comparisons: Sequence[Comparison], reference: Mapping[str, str]) -> list[str]:
    """One sentence a reader can quote, per model: the reference scorer's range over its cells,
    and the change that moves the score most among those significant after Holm (over every
    comparison of the report), or that none is, with the largest difference seen."""
    parts = []
    for model, cells in cells_of.items():
        mine = [r for r in ranges if r.model == model]
        rng = next((r for r in mine if r.scorer == reference["scorer"]), None) or max(mine, key=lambda r: r.n_cells)
        text = (f"{model}: across {rng.n_cells} cells, {rng.scorer} ranges "
                f"{rng.low.accuracy:.2f}–{rng.high.accuracy:.2f} (chance {rng.chance:.2f})")
        moved = [c for c in comparisons if c.model == model]
        significant = [c for c in moved if c.p_holm < ALPHA]
        if significant:
            top = max(significant, key=lambda c: (abs(c.delta), -c.p_holm))
            text += (f"; the {DIMENSION_NAMES[top.dimension]} moves it most: {top.level} against {top.reference_level}, "
                     f"{top.delta * 100:+.1f} pp (Holm p = {top.p_holm:.2g}, {len(comparisons)} comparisons)")
        elif moved:
            top = max(moved, key=lambda c: (abs(c.delta), -c.p_holm))
            text += (f"; no protocol change is significant after Holm over {len(comparisons)} comparisons (largest: "
                     f"{DIMENSION_NAMES[top.dimension]} {top.level}, {top.delta * 100:+.1f} pp on {top.n} items)")
        else:
            text += "; no protocol dimension varies on the same items, so none can be compared"
        parts.append(text + ".")
    return parts


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


def calibration_section(cells: Sequence[CellScore], slices: Callable[[CellScore], pa.Table],
                        replicates: int, seed: int) -> list[CalibrationCell]:
    from cube.analysis.calibration import ece_interval, reliability_table

    out = []
    for cell in cells:
        if cell.scorer in GENERATION_RECORD_SCORERS:
            continue
        table = slices(cell)
        if "probs" not in table.column_names or table.num_rows < 2:
            continue
        if np.isnan(list_matrix(table, "scores")).any():  # a generation (an import's too): no option scores
            continue
        probs = list_matrix(table, "probs").astype(np.float64)
        probs = probs / probs.sum(axis=1, keepdims=True)  # float32 storage rounding, as rescore's calibration
        gold = table.column("gold").to_numpy().astype(np.int64)
        interval = ece_interval(probs, gold, replicates=replicates, seed=seed)
        bins = reliability_table(probs, gold)
        filled = bins["count"] > 0
        out.append(CalibrationCell(cell.model, cell.name, cell.n, interval.ece, interval.lo, interval.hi,
                                   bins["confidence"][filled].tolist(), bins["accuracy"][filled].tolist(),
                                   bins["count"][filled].astype(int).tolist()))
    return out


def group_section(references: Sequence[CellScore], slices: Callable[[CellScore], pa.Table]) -> tuple[list[GroupScore], str | None]:
    """Per subject and per category of each model's reference cell (micro, Wilson), with the
    benchmark's own taxonomy; one line where there is none."""
    from cube.analysis.store_file import store_taxonomy

    out, note = [], None
    for cell in references:
        table = slices(cell)
        # a user's file: its own category column, as `cube rescore --level category` takes it
        taxonomy = store_taxonomy(cell.store) or None
        for level in ("subject", "category"):
            try:
                rows = rescore(table, level=level, taxonomy=taxonomy).rows.to_pylist()
            except CubeError as exc:
                note = f"per category: {exc}"
                continue
            out += [GroupScore(cell.model, level, str(r["group"]), int(r["n"]), float(r["accuracy"]),
                               float(r["ci_lo"]), float(r["ci_hi"]))
                    for r in rows if r["aggregation"] in ("pooled", "micro")]
    return out, note


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


def flip_section(comparisons: Sequence[Comparison], cells_of: Mapping[str, list[CellScore]],
                 slices: Callable[[CellScore], pa.Table]) -> list[Flips]:
    """Per model, the items that flip between the reference cell and the cell that moves the score
    most: uid, gold, both predictions (their text is added by ``analyse`` with ``--show-items``)."""
    out = []
    for model, cells in cells_of.items():
        mine = [c for c in comparisons if c.model == model]
        if not mine:
            continue
        top = max(mine, key=lambda c: (abs(c.delta), -c.p_holm))
        a = next(c for c in cells if c.name == top.cell_a)
        b = next(c for c in cells if c.name == top.cell_b)
        ta, tb = slices(a), slices(b)
        where = pc.index_in(ta.column("uid"), value_set=tb.column("uid")).to_numpy(zero_copy_only=False)
        found = ~np.isnan(where.astype(np.float64))
        index_b = where[found].astype(np.int64)
        ca = ta.column("correct").to_numpy()[found]
        cb = tb.column("correct").to_numpy()[index_b]
        flip = np.flatnonzero(ca != cb)
        uid = np.asarray(ta.column("uid").to_pylist(), dtype=object)[found]
        subject = np.asarray(ta.column("subject").to_pylist(), dtype=object)[found]
        gold = ta.column("gold").to_numpy()[found]
        pa_, pb_ = ta.column("pred").to_numpy()[found], tb.column("pred").to_numpy()[index_b]
        items = [Flip(str(uid[i]), str(subject[i]), int(gold[i]), int(pa_[i]), int(pb_[i]))
                 for i in sorted(flip, key=lambda i: str(uid[i]))[:MAX_FLIPS]]
        out.append(Flips(model, a.name, b.name, int((ca & ~cb).sum()), int((~ca & cb).sum()), items))
    return out


def provenance_section(stores: Sequence[LoadedStore]) -> list[StoreProvenance]:
    from cube.records.provenance import read_run_logs, run_command

    out = []
    for store in stores:
        models, commands = [], []
        for entry in read_run_logs(store.path):
            chat = entry.get("chat_template") if isinstance(entry.get("chat_template"), dict) else {}
            models.append({k: str(v) for k, v in {
                "model": entry.get("model"), "identity (sha256)": entry.get("model_sha256"),
                "source": entry.get("model_source"), "backend": entry.get("backend"),
                "server": entry.get("server_url"), "dtype": entry.get("dtype"), "device": entry.get("device"),
                "chat template sha256": chat.get("sha256"), "cube": (entry.get("versions") or {}).get("cube"),
                "configuration": entry.get("config_hash")}.items() if v is not None})
            commands.append(run_command(entry, out=str(store.path)))
        if not models:  # an import: the records' models, and what its manifest says of the run
            meta = store.manifest.get("metadata") or {}
            models = [{"model": m, "imported from": store.harness, "source": str(meta.get("source"))}
                      for m in sorted(set(store.renamed.values()))]
        out.append(StoreProvenance(str(store.path), store.harness, str(store.manifest.get("schema_version")),
                                   models, list(dict.fromkeys(commands))))
    return out


def code_digest() -> str:
    """sha256 over cube's own Python sources (path and bytes, sorted): the code that built the report."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def item_texts(benchmark: str, uids: Sequence[str]) -> dict[str, str]:
    """The question text of each flipped item, read now from the user's local benchmark (for
    ``--show-items``); never stored in any store."""
    from cube.protocol.benchmarks import load_items

    wanted = set(uids)
    return {item.uid: item.question for item in load_items(benchmark, splits=("test", "dev", "val"))
            if item.uid in wanted}


def analyse(paths: Sequence[str | Path], *, title: str | None = None, reference: str | None = None,
            allow_incomplete: bool = False, show_items: str | None = None, replicates: int = 1000,
            seed: int = 0, progress: bool = False) -> ReportAnalysis:
    """The report's whole analysis of the stores (the pages only render it)."""
    given = parse_reference(reference)
    incomplete = check_stores(paths, allow_incomplete)
    stores = load_stores(paths, allow_incomplete, progress)
    cells: list[CellScore] = []
    rows: dict[tuple, tuple[LoadedStore, np.ndarray]] = {}
    for store in stores:
        mine, ids, keys = _cell_scores(store)
        order = np.argsort(ids, kind="stable")
        bounds = np.searchsorted(ids[order], np.arange(len(keys) + 1))
        for i, cell in enumerate(mine):
            rows[(cell.store, cell.model, cell.name, cell.benchmark)] = (store, order[bounds[i]:bounds[i + 1]])
        cells += mine
    chosen = choose_reference(cells, given)

    cache: dict[tuple, pa.Table] = {}

    def slices(cell: CellScore) -> pa.Table:
        """A cell's records: a zero-copy slice where its rows lie together (a store's shards
        hold one cell each), else gathered; once per cell."""
        key = (cell.store, cell.model, cell.name, cell.benchmark)
        if key not in cache:
            store, index = rows[key]
            contiguous = index.size and index[-1] - index[0] + 1 == index.size and (np.diff(index) == 1).all()
            cache[key] = (store.table.slice(int(index[0]), int(index.size)) if contiguous
                          else store.table.take(pa.array(index)))
        return cache[key]

    cells_of: dict[str, list[CellScore]] = {}
    for c in cells:
        cells_of.setdefault(c.model, []).append(c)
    comparisons, refused = compare(cells_of, slices, chosen)
    ranges = scorer_ranges(cells_of, chosen)
    references = [next(c for c in cs if _matches(c, chosen)) for cs in cells_of.values()
                  if any(_matches(c, chosen) for c in cs)]
    missing: dict[str, str] = {}
    varying = [d for d in DIMENSIONS if len({str(c.value(d)) for c in cells}) > 1]
    if not comparisons:
        options = " ".join(DIMENSION_OPTIONS[d] for d in DIMENSIONS if d not in varying)
        missing["sensitivity"] = (f"no two cells of one model differ in one protocol dimension on the same items; "
                                  f"run with, e.g., {options}")
    audit, audit_source = audit_section(stores)
    if not audit:
        missing["audit"] = ("no M1-strict records, the first-token scorer whose ties the audit predicts; "
                            "run with --scorers M1-strict (or M1-seq,M1-strict)")
    calibration = calibration_section(cells, slices, replicates, seed)
    if not calibration:
        missing["calibration"] = ("no log-likelihood scorer's records; run with --scorers M1-seq "
                                  "(or M1-strict, M2, M3, M4, M5)")
    groups, note = group_section(references, slices)
    if note:
        missing["categories"] = note
    if not references:
        missing["subjects"] = "no model has the reference cell; choose one with --reference"
    ranks = rank_section(cells, slices, chosen, replicates, seed)
    if len(cells_of) < 2:
        missing["ranks"] = ("one model only; a ranking needs two or more: run another with cube run --model ... "
                            "into the same store, or give several stores")
    elif not ranks:
        missing["ranks"] = ("the models share no second protocol with the reference one; run them on the same "
                            "--label-sets/--scorers")
    gaps = harness_section(stores, cells_of, chosen, allow_incomplete) if len(stores) > 1 else []
    if not gaps:
        missing["harnesses"] = ("no two stores hold one model; give a store of another harness's run of the same "
                                "model (cube import lm-eval|opencompass|evalscope|inspect ...)")
    flips = flip_section(comparisons, cells_of, slices)
    if show_items:  # the text of the items listed, read once they are known
        from dataclasses import replace

        texts = item_texts(show_items, [f.uid for fl in flips for f in fl.items])
        flips = [replace(fl, items=[replace(x, text=texts.get(x.uid)) for x in fl.items]) for fl in flips]
    ranges_sorted = sorted(ranges, key=lambda r: (r.model, r.scorer))
    return ReportAnalysis(
        REPORT_VERSION, title or "Protocol sensitivity report", [str(p) for p in paths], incomplete, chosen, cells,
        ranges_sorted, summary_sentence(cells_of, ranges_sorted, comparisons, chosen), code_digest(), audit, audit_source,
        comparisons, refused, calibration, groups, ranks, gaps, flips, provenance_section(stores),
        show_items=bool(show_items), missing=missing)


__all__ = ["LoadedStore", "analyse", "check_stores", "choose_reference", "code_digest", "harness_of",
           "load_stores", "minimum_detectable_effect", "parse_reference"]
