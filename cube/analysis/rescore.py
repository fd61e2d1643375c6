"""Rescoring stored records: accuracy of any protocol slice, without a model.

A *cell* is one protocol on one model: (model, benchmark, scorer, label set, context, shots,
order). Every function groups by cell first, so a slice that spans several cells (say, all label
sets of one model) gives one accuracy per cell and never pools different protocols by accident.

Levels, each with a 95% interval:

* subject: pooled accuracy over the subject's items, Wilson interval;
* category (and the taxonomy's named subsets, e.g. C-Eval Hard): *micro* = pooled over the
  items of the category's subjects (Wilson), *macro* = the unweighted mean of its subjects'
  accuracies, with the stratified Wilson interval (``cube.analysis.stats.stratified_wilson_interval``:
  Wilson's interval at the effective size ``S**2 / sum(1/n_s)``), which keeps its width with one
  to five items per subject, where the plug-in normal interval collapses to zero width;
* overall: micro and macro over all subjects.

A parse failure (M6, no answer extracted) counts as not correct, and is also reported on its
own: a model that answers wrongly and one that answers unparseably are different findings.

Also here, because each is "accuracy of a slice, compared": the per-subject regression table
between two one-cell slices (deltas, McNemar, paired bootstrap), the expected calibration error
per cell, and the footrule between two protocols' model rankings in units of the noise floor.

All counting is ``np.bincount`` over group ids; nothing loops over records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.special import bdtr

from cube.analysis.chance import options_per_record
from cube.analysis.calibration import Binning, expected_calibration_error
from cube.analysis.footrule import (NoiseFloor, average_ranks, footrule, footrule_has_power, footrule_multiple,
                                    footrule_normalisation, footrule_verdict, paired_noise_floor)
from cube.analysis.paired_tests import mcnemar_exact, mcnemar_interval
from cube.analysis.stats import above_chance_p_per_item, holm_adjust, stratified_wilson_interval, wilson_interval
from cube.errors import ConfigError, PrecisionMismatch, RecordsError
from cube.protocol.benchmarks import taxonomy_of as registry_taxonomy
from cube.protocol.taxonomy import Taxonomy, load_taxonomy
from cube.protocol.thinking import THINKING_FAILURES, TRUNCATED_IN_THINKING
from cube.records.schema import GENERATION_RECORD_SCORERS

THINKING_TRUNCATION_WARNING = 0.5  # "most generations cut while thinking": one warning per cell above it
from cube.records.store import column_codes, group_ids, list_matrix
from cube.records.degeneracy import PARSE_FAILURE_WARNING, TIE_WARNING

SLICE_FIELDS = ("model", "scorer", "label_set", "shots", "order", "context")
CELL_COLUMNS = ("model", "benchmark", "scorer", "label_set", "context", "shots", "order")
LEVELS = ("subject", "category", "overall")


# --------------------------------------------------------------------------------------------
# Slicing
# --------------------------------------------------------------------------------------------


def select(table: pa.Table, **filters: Any) -> pa.Table:
    """Rows matching every filter; a filter is one value or a sequence of allowed values.

    ``None`` leaves a field free. Fields: model, scorer, label_set, shots, order, context.
    """
    mask = None
    for name, wanted in filters.items():
        if name not in SLICE_FIELDS:
            raise ConfigError(f"cannot slice on {name!r}; fields: {', '.join(SLICE_FIELDS)}")
        if wanted is None:
            continue
        values = [wanted] if isinstance(wanted, (str, int)) else list(wanted)
        if name == "shots":
            try:
                values = [int(v) for v in values]
            except ValueError:
                raise ConfigError(f"shots must be integers, got {values!r}") from None
        column = table.column(name)
        test = pc.is_in(column, value_set=pa.array(values, type=column.type))
        mask = test if mask is None else pc.and_(mask, test)
    return table if mask is None else table.filter(mask)


# --------------------------------------------------------------------------------------------
# Accuracy at each level
# --------------------------------------------------------------------------------------------

RESULT_COLUMNS = (
    *CELL_COLUMNS, "level", "group", "aggregation", "n_subjects", "n", "n_correct",
    "n_parse_failed", "accuracy", "ci_lo", "ci_hi", "parse_failure_rate", "n_tied", "tie_rate",
    "n_within_noise", "within_noise_rate", "chance", "p_above_chance",
    # generations of reasoning checkpoints (issue 49): no-answer records by why, a part of n_parse_failed;
    # None where the records do not say (scored records, and generations before schema 3)
    *(f"n_{o}" for o in THINKING_FAILURES), *(f"{o}_rate" for o in THINKING_FAILURES),
)


@dataclass(frozen=True)
class SubjectCounts:
    """Per (cell, subject) counts: the small table every higher level is computed from."""

    cells: list[tuple]  # one key tuple per cell, in CELL_COLUMNS order
    cell: np.ndarray  # cell index of each (cell, subject) row
    subject: list[str]
    n: np.ndarray
    n_correct: np.ndarray
    n_parse_failed: np.ndarray
    n_tied: np.ndarray  # decisions whose top score is shared: the prediction is the tie-break's
    # decisions a change of layout alone could flip (``cube.analysis.noise``), float: NaN where
    # unknown; None: not counted at all
    n_within_noise: np.ndarray | None = None
    # records per option count (column N: items of N options): a guesser's chance is 1/N per item,
    # so a slice of mixed option counts has chance mean(1/N) (``cube.analysis.chance``) and its
    # exact test against chance is the Poisson-binomial (``above_chance_p_per_item``)
    n_by_options: np.ndarray | None = None
    # thinking outcome -> per (cell, subject) count of THINKING_FAILURES, float: NaN where not recorded
    n_thinking: dict[str, np.ndarray] | None = None


def chance_and_p(by_options: np.ndarray, n_correct: np.ndarray) -> tuple[np.ndarray, list[float | None]]:
    """Each row's chance level (the mean of 1/N over its records) and the one-sided exact p-value
    of its correct count against it, from its records per option count."""
    width = by_options.shape[1]
    inverse = np.zeros(width)
    inverse[1:] = 1.0 / np.arange(1, width)
    n = by_options.sum(axis=1)
    chance = (by_options @ inverse) / np.maximum(n, 1)
    p_values: list[float | None] = []
    one_count = (by_options > 0).sum(axis=1) == 1  # the common case (CMMLU): one binomial test, vectorised
    n_int, k_int = np.rint(n).astype(np.int64), np.rint(np.asarray(n_correct, dtype=np.float64)).astype(np.int64)
    uniform = np.where(k_int > 0, bdtr(n_int - k_int, n_int, 1.0 - chance), 1.0)
    for row, (counts, k) in enumerate(zip(by_options.astype(np.int64), n_correct)):
        if counts.sum() == 0 or counts[:2].sum() > 0:  # a record of 0 or 1 options: no chance below 1, no test
            p_values.append(None)
        elif one_count[row]:
            p_values.append(float(uniform[row]))
        else:
            p_values.append(above_chance_p_per_item(int(k), np.repeat(inverse, counts)))
    return chance, p_values


def _thinking_counts(table: pa.Table, ids: np.ndarray, size: int) -> dict[str, np.ndarray] | None:
    """Per group, the records of each thinking failure (``cube.protocol.thinking``); a group with a
    record that does not say (null: a scored record, or a generation before schema 3) is NaN."""
    if "thinking" not in table.column_names:
        return None
    values = table.column("thinking").to_numpy(zero_copy_only=False)
    unknown = np.array([v is None for v in values], dtype=bool)
    out = {}
    for outcome in THINKING_FAILURES:
        weights = np.where(unknown, np.nan, (values == outcome).astype(np.float64))
        out[outcome] = np.bincount(ids, weights=weights, minlength=size)
    return out


def subject_counts(table: pa.Table) -> SubjectCounts:
    if table.num_rows == 0:
        raise ConfigError("no records in this slice")
    ids, keys = group_ids(table, (*CELL_COLUMNS, "subject"))
    n = np.bincount(ids, minlength=len(keys))
    correct = np.bincount(
        ids, weights=table.column("correct").to_numpy().astype(np.float64), minlength=len(keys)
    ).astype(np.int64)
    failed = np.bincount(
        ids, weights=table.column("parse_failed").to_numpy().astype(np.float64), minlength=len(keys)
    ).astype(np.int64)
    tied = np.bincount(
        ids, weights=table.column("tied").to_numpy(zero_copy_only=False).astype(np.float64), minlength=len(keys)
    ).astype(np.int64)
    within = None
    if "within_noise" in table.column_names:
        # a null (precision or margin unknown) makes its group's count NaN: shown as not known
        weights = pc.cast(table.column("within_noise"), pa.float64()).to_numpy(zero_copy_only=False)
        within = np.bincount(ids, weights=weights, minlength=len(keys))
    options = options_per_record(table)
    width = int(options.max()) + 1
    by_options = np.bincount(ids * width + options, minlength=len(keys) * width).reshape(len(keys), width)
    cell_of_key: dict[tuple, int] = {}
    cell = np.array([cell_of_key.setdefault(k[:-1], len(cell_of_key)) for k in keys], np.int64)
    return SubjectCounts(
        list(cell_of_key), cell, [k[-1] for k in keys], n, correct, failed, tied, within, by_options,
        _thinking_counts(table, ids, len(keys)),
    )


def _rows(
    counts: SubjectCounts,
    cell: np.ndarray,
    level: str,
    group: list[str],
    aggregation: str,
    n_subjects: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    failed: np.ndarray,
    accuracy: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    tied: np.ndarray,
    within: np.ndarray | None = None,
    chance: np.ndarray | None = None,
    p_above_chance: list[float | None] | None = None,
    thinking: dict[str, np.ndarray] | None = None,
) -> dict[str, list]:
    cell_keys = [counts.cells[int(c)] for c in cell]
    out: dict[str, list] = {
        name: [key[i] for key in cell_keys] for i, name in enumerate(CELL_COLUMNS)
    }
    out.update(
        level=[level] * len(cell), group=list(group), aggregation=[aggregation] * len(cell),
        n_subjects=n_subjects.tolist(), n=n.tolist(), n_correct=k.tolist(),
        n_parse_failed=failed.tolist(), accuracy=accuracy.tolist(), ci_lo=lo.tolist(),
        ci_hi=hi.tolist(), parse_failure_rate=(failed / n).tolist(), n_tied=tied.tolist(),
        tie_rate=(tied / n).tolist(),
        n_within_noise=[None if within is None or np.isnan(w) else int(w) for w in
                        (within if within is not None else n)],
        within_noise_rate=[None if within is None or np.isnan(w) else float(w / m) for w, m in
                           zip(within if within is not None else n, n)],
        chance=[None] * len(cell) if chance is None else chance.tolist(),
        p_above_chance=p_above_chance if p_above_chance is not None else [None] * len(cell),
    )
    for outcome in THINKING_FAILURES:
        counted = thinking[outcome] if thinking is not None else np.full(len(n), np.nan)
        out[f"n_{outcome}"] = [None if np.isnan(c) else int(c) for c in counted]
        out[f"{outcome}_rate"] = [None if np.isnan(c) else float(c / m) for c, m in zip(counted, n)]
    return out


def _subject_level(counts: SubjectCounts, level: float) -> dict[str, list]:
    lo, hi = wilson_interval(counts.n_correct, counts.n, level)
    return _rows(
        counts, counts.cell, "subject", counts.subject, "pooled", np.ones_like(counts.n),
        counts.n, counts.n_correct, counts.n_parse_failed, counts.n_correct / counts.n, lo, hi,
        counts.n_tied, counts.n_within_noise, *chance_and_p(counts.n_by_options, counts.n_correct),
        thinking=counts.n_thinking,
    )


def _aggregate(
    counts: SubjectCounts, member_row: np.ndarray, member_group: list[str], level_name: str,
    level: float,
) -> list[dict[str, list]]:
    """Micro and macro rows for each (cell, group) from (subject row, group) memberships."""
    if member_row.size == 0:
        return []
    group_names, group_index = np.unique(np.asarray(member_group, dtype=str), return_inverse=True)
    n_groups = len(group_names)
    key = counts.cell[member_row] * n_groups + group_index.reshape(-1)
    uniq, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.reshape(-1)
    cell, group = uniq // n_groups, [str(group_names[g]) for g in uniq % n_groups]
    size = len(uniq)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(inverse, weights=values[member_row].astype(np.float64), minlength=size)

    n, k, failed = total(counts.n), total(counts.n_correct), total(counts.n_parse_failed)
    tied = total(counts.n_tied).astype(np.int64)
    within = None if counts.n_within_noise is None else total(counts.n_within_noise)
    thinking = None if counts.n_thinking is None else {o: total(v) for o, v in counts.n_thinking.items()}
    subjects = np.bincount(inverse, minlength=size)
    lo, hi = wilson_interval(k, n, level)
    by_options = np.stack([np.bincount(inverse, weights=column[member_row].astype(np.float64), minlength=size)
                           for column in counts.n_by_options.T], axis=1)
    micro = _rows(counts, cell, level_name, group, "micro", subjects, n.astype(np.int64),
                  k.astype(np.int64), failed.astype(np.int64), k / n, lo, hi, tied, within,
                  *chance_and_p(by_options, k), thinking=thinking)
    subject_chance, _ = chance_and_p(counts.n_by_options, counts.n_correct)
    macro_chance = np.bincount(inverse, weights=subject_chance[member_row], minlength=size) / subjects

    p = counts.n_correct / counts.n
    mean = np.bincount(inverse, weights=p[member_row], minlength=size) / subjects
    inverse_n = np.bincount(inverse, weights=1.0 / counts.n[member_row], minlength=size)
    macro_lo, macro_hi = stratified_wilson_interval(mean, subjects**2 / inverse_n, level)
    macro = _rows(counts, cell, level_name, group, "macro", subjects, n.astype(np.int64),
                  k.astype(np.int64), failed.astype(np.int64), mean, macro_lo, macro_hi, tied, within,
                  macro_chance, thinking=thinking)  # a mean of subjects' rates: the chance it is held to is theirs, averaged
    return [micro, macro]


def _category_memberships(
    counts: SubjectCounts, taxonomy: Taxonomy | str | None
) -> tuple[np.ndarray, list[str], frozenset[str]]:
    """(subject row, category or named group) pairs; a two-category subject appears twice."""
    bench_index = CELL_COLUMNS.index("benchmark")
    loaded: dict[str, Taxonomy] = {}

    def taxonomy_of(benchmark: str) -> Taxonomy:
        if isinstance(taxonomy, Taxonomy):
            return taxonomy
        name = taxonomy or registry_taxonomy(benchmark)
        if name not in loaded:
            loaded[name] = load_taxonomy(name)
        return loaded[name]

    rows, groups = [], []
    # A loop over (cell, subject) rows, a few thousand at paper scale; never over records.
    for row, (cell, subject) in enumerate(zip(counts.cell, counts.subject)):
        tax = taxonomy_of(counts.cells[int(cell)][bench_index])
        for category in tax.categories_of(subject):
            rows.append(row)
            groups.append(category)
        for name, members in tax.groups.items():
            if subject in members:
                rows.append(row)
                groups.append(name)
    named = frozenset(name for tax in loaded.values() for name in tax.groups)
    if isinstance(taxonomy, Taxonomy):
        named = frozenset(taxonomy.groups)
    return np.asarray(rows, dtype=np.int64), groups, named


def _concat(parts: list[dict[str, list]], named_groups: frozenset[str] = frozenset()) -> pa.Table:
    """One table, rows ordered by cell, then categories before named subsets, then name."""
    columns = {name: [v for part in parts for v in part[name]] for name in RESULT_COLUMNS}
    columns["shots"] = pa.array(columns["shots"], type=pa.int8())
    for name in ("n_within_noise",):
        columns[name] = pa.array(columns[name], type=pa.int64())
    columns["within_noise_rate"] = pa.array(columns["within_noise_rate"], type=pa.float64())
    for name in ("chance", "p_above_chance"):
        columns[name] = pa.array(columns[name], type=pa.float64())
    for outcome in THINKING_FAILURES:
        columns[f"n_{outcome}"] = pa.array(columns[f"n_{outcome}"], type=pa.int64())
        columns[f"{outcome}_rate"] = pa.array(columns[f"{outcome}_rate"], type=pa.float64())
    named = [g in named_groups for g in columns["group"]]
    table = pa.table({**columns, "_named": named})
    order = [(c, "ascending") for c in (*CELL_COLUMNS, "_named", "group", "aggregation")]
    return table.sort_by(order).drop_columns(["_named"])


@dataclass(frozen=True)
class Rescored:
    """Accuracy rows (``RESULT_COLUMNS``) and the warnings a reader must see."""

    rows: pa.Table
    warnings: list[str]


def _cells_over(counts: SubjectCounts, part: np.ndarray, threshold: float) -> list[tuple[str, float, int, int]]:
    """(cell as text, share, count, n) of each cell whose summed ``part`` is more than ``threshold``
    of its records; a cell whose count is not known (NaN) is never over. The one loop of every
    per-cell warning below."""
    n = np.bincount(counts.cell, weights=counts.n, minlength=len(counts.cells))
    summed = np.bincount(counts.cell, weights=part, minlength=len(counts.cells))
    over = []
    for index, key in enumerate(counts.cells):
        rate = summed[index] / n[index]
        if np.isfinite(rate) and rate > threshold:
            cell = ", ".join(f"{name}={value}" for name, value in zip(CELL_COLUMNS, key))
            over.append((cell, float(rate), int(summed[index]), int(n[index])))
    return over


def parse_failure_warnings(
    counts: SubjectCounts, threshold: float = PARSE_FAILURE_WARNING
) -> list[str]:
    """One warning per generation cell whose parse-failure rate exceeds ``threshold``.

    Judged per cell (not per subject, where a single failure in 20 items would already trip it).
    """
    scorer_index = CELL_COLUMNS.index("scorer")
    generation = np.array([key[scorer_index] in GENERATION_RECORD_SCORERS for key in counts.cells], dtype=bool)
    failed = np.where(generation[counts.cell], counts.n_parse_failed, 0)  # scored cells fail no parse
    return [f"WARNING: parse failures {rate:.1%} ({k}/{n}) exceed {threshold:.0%} in {cell}; these are counted "
            "as not correct and reported separately" for cell, rate, k, n in _cells_over(counts, failed, threshold)]


def thinking_warnings(counts: SubjectCounts, threshold: float = THINKING_TRUNCATION_WARNING) -> list[str]:
    """One warning per generation cell where most generations (more than ``threshold``) ran out of
    tokens inside their thinking block: the budget measured, not the model, until it is raised."""
    if counts.n_thinking is None:
        return []
    return [f"WARNING: {rate:.1%} ({k}/{n}) of the generations in {cell} ran out of tokens inside their thinking "
            "block (truncated_in_thinking); raise the thinking budget (cube run --max-gen-tokens; the cell's "
            "max_new_tokens in its store's manifest)"
            for cell, rate, k, n in _cells_over(counts, counts.n_thinking[TRUNCATED_IN_THINKING], threshold)]


def tie_warnings(counts: SubjectCounts, threshold: float = TIE_WARNING) -> list[str]:
    """One warning per cell whose decisions are mostly tie-breaks (more than ``threshold`` tied).

    Such a cell's accuracy is the tie-break rule's (the first tied option wins), not the model's:
    the paper's degenerate first-token cells, where every label starts with the same token id.
    """
    return [f"WARNING: tie-breaks decide {rate:.1%} ({k}/{n}) of the decisions in {cell}; its accuracy measures "
            "the tie-break rule, not the model" for cell, rate, k, n in _cells_over(counts, counts.n_tied, threshold)]


# A cell more than half of whose decisions a change of layout alone could flip: warned, as ties are.
NOISE_WARNING = 0.5


def noise_warnings(counts: SubjectCounts, threshold: float = NOISE_WARNING) -> list[str]:
    """One warning per cell most of whose decisions are within its precision's noise (``in-noise``):
    a 135M model in bf16 had 60-87 % of them so and nothing said what to do (issue 45)."""
    if counts.n_within_noise is None:
        return []
    return [f"WARNING: {rate:.1%} ({k}/{n}) of the decisions in {cell} are within its precision's measured noise "
            "(a change of batch layout alone can flip them); score it again with --dtype float32, whose noise is "
            "10,000 times smaller" for cell, rate, k, n in _cells_over(counts, counts.n_within_noise, threshold)]


def rescore(
    table: pa.Table,
    level: str = "subject",
    taxonomy: Taxonomy | str | None = None,
    confidence: float = 0.95,
) -> Rescored:
    """Accuracy with its interval for every cell in ``table`` at ``level``.

    ``taxonomy`` (a loaded one, or ``"cmmlu"``/``"ceval"``) groups subjects into categories;
    by default each cell uses its benchmark's own taxonomy.
    """
    if level not in LEVELS:
        raise ConfigError(f"unknown level {level!r}; levels: {', '.join(LEVELS)}")
    counts = subject_counts(table)
    named: frozenset[str] = frozenset()
    if level == "subject":
        parts = [_subject_level(counts, confidence)]
    elif level == "category":
        rows, groups, named = _category_memberships(counts, taxonomy)
        parts = _aggregate(counts, rows, groups, "category", confidence)
    else:
        rows = np.arange(len(counts.subject), dtype=np.int64)
        parts = _aggregate(counts, rows, ["all"] * len(rows), "overall", confidence)
    return Rescored(_concat(parts, named),
                    parse_failure_warnings(counts) + thinking_warnings(counts) + tie_warnings(counts)
                    + noise_warnings(counts))


def calibration(
    table: pa.Table, n_bins: int = 10, binning: Binning = "width"
) -> pa.Table:
    """Expected calibration error of every scored (non-generation) cell, from ``probs``.

    Generation cells are left out: their ``probs`` are not an option distribution the model
    gave. One ``expected_calibration_error`` call per cell (a few hundred at paper scale).
    """
    if "probs" not in table.column_names:
        raise ConfigError("calibration needs the probs column; read the records with it")
    scored = table.filter(pc.invert(pc.is_in(table.column("scorer"),
                                             value_set=pa.array(GENERATION_RECORD_SCORERS))))
    if scored.num_rows == 0:
        raise ConfigError("no scored (non-generation) records in this slice")
    ids, keys = group_ids(scored, CELL_COLUMNS)
    probs = list_matrix(scored, "probs").astype(np.float64)
    gold = scored.column("gold").to_numpy().astype(np.int64)
    order = np.argsort(ids, kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(len(keys) + 1))
    out: dict[str, list] = {name: [] for name in (*CELL_COLUMNS, "n", "ece")}
    for g, key in enumerate(keys):
        rows = order[bounds[g]:bounds[g + 1]]
        p = probs[rows] / probs[rows].sum(axis=1, keepdims=True)  # float32 storage rounding
        for name, value in zip(CELL_COLUMNS, key):
            out[name].append(value)
        out["n"].append(int(rows.size))
        out["ece"].append(expected_calibration_error(p, gold[rows], n_bins, binning))
    out["shots"] = pa.array(out["shots"], type=pa.int8())
    return pa.table(out)


# --------------------------------------------------------------------------------------------
# Two slices on the same items
# --------------------------------------------------------------------------------------------


def _describe_cells(table: pa.Table) -> str:
    _, keys = group_ids(table, CELL_COLUMNS)
    shown = "; ".join(", ".join(f"{n}={v}" for n, v in zip(CELL_COLUMNS, k)) for k in keys[:3])
    return f"{len(keys)} cells ({shown}{'; ...' if len(keys) > 3 else ''})"


def one_per_item(table: pa.Table, name: str) -> pa.Table:
    """Check that a slice holds one record per item, i.e. exactly one protocol cell."""
    if table.num_rows == 0:
        raise ConfigError(f"slice {name} has no records")
    codes, uids = column_codes(table, "uid")
    if len(uids) != table.num_rows:
        raise ConfigError(
            f"slice {name} holds {table.num_rows} records for {len(uids)} items; it spans "
            f"{_describe_cells(table)}: narrow it to one cell"
        )
    return table


NOT_RECORDED = "not recorded"  # a precision of its own: records that do not say theirs


def slice_precision(table: pa.Table) -> str | None:
    """The one precision a slice's records were scored in; None where no record says (an import
    that did not record it). Several in one slice are named, joined by '+', records that say
    none among them as 'not recorded' (``bfloat16+not recorded``)."""
    if "dtype" not in table.column_names:
        return None
    values = pc.unique(table.column("dtype")).to_pylist()
    known = sorted(v for v in values if v is not None)
    if known and None in values:
        known.append(NOT_RECORDED)
    return "+".join(known) if known else None


MIXED_PRECISION = "mixed: "  # how check_one_precision opens a pair of two precisions compared anyway


def check_one_precision(table_a: pa.Table, table_b: pa.Table, allow_mixed_precision: bool = False) -> str:
    """What precision a paired comparison of the two slices compares, as a reader is told it:
    ``"bfloat16"``; ``"not recorded"``; ``"A bfloat16, B not recorded"`` where one side records
    none (it cannot be checked, and the pair says so); or, only with ``allow_mixed_precision``,
    ``"mixed: A bfloat16, B float32"``. Two slices whose recorded precisions differ are refused
    otherwise (:class:`PrecisionMismatch`), naming both and how to proceed: a paired test's
    discordant items are the ones a precision's rounding can flip."""
    a, b = slice_precision(table_a), slice_precision(table_b)
    if a is None and b is None:
        return NOT_RECORDED
    if a is None or b is None:  # one side cannot be checked: the pair says which, never one precision
        return f"A {a or NOT_RECORDED}, B {b or NOT_RECORDED}"
    if a == b and "+" not in a:
        return a
    if not allow_mixed_precision:
        raise PrecisionMismatch(
            f"slice A was scored in {a} and slice B in {b}: a paired comparison needs one precision; "
            "re-run one side with the other's --dtype, or pass allow_mixed_precision "
            "(--allow-mixed-precision) to compare them anyway, which the result then says")
    return f"{MIXED_PRECISION}A {a}, B {b}"


@dataclass(frozen=True)
class Paired:
    """Outcomes of two slices on their common items, aligned by uid."""

    uid: list[str]
    subject: np.ndarray  # object array of subject names
    correct_a: np.ndarray
    correct_b: np.ndarray
    only_a: int  # items slice A has and B lacks
    only_b: int
    precision: str = "not recorded"  # check_one_precision: what the pair compares


def pair(table_a: pa.Table, table_b: pa.Table, allow_mixed_precision: bool = False) -> Paired:
    """Align two one-cell slices by uid; items only one slice has are counted, then dropped.
    Slices of two recorded precisions are refused unless ``allow_mixed_precision``
    (``check_one_precision``); ``Paired.precision`` says what was compared."""
    one_per_item(table_a, "A")
    one_per_item(table_b, "B")
    precision = check_one_precision(table_a, table_b, allow_mixed_precision)
    uid_a = table_a.column("uid").combine_chunks()
    where_b = pc.index_in(uid_a, value_set=table_b.column("uid").combine_chunks())
    found = where_b.is_valid().to_numpy(zero_copy_only=False)
    if not found.any():
        raise ConfigError("slices A and B share no items (uid)")
    index_b = where_b.to_numpy(zero_copy_only=False)[found].astype(np.int64)
    correct_a = table_a.column("correct").to_numpy()[found]
    correct_b = table_b.column("correct").to_numpy()[index_b]
    subject = np.asarray(table_a.column("subject").to_pylist(), dtype=object)[found]
    uids = uid_a.filter(pa.array(found)).to_pylist()
    return Paired(uids, subject, correct_a, correct_b, int((~found).sum()),
                  table_b.num_rows - int(found.sum()), precision)


@dataclass(frozen=True)
class Regression:
    """Per-subject change from slice A to slice B, worst first, and the pooled line."""

    rows: pa.Table  # subject, n, acc_a, acc_b, delta, delta_lo, delta_hi, a/b_only_right, p_value, p_holm
    overall: dict[str, Any]
    only_a: int
    only_b: int
    precision: str = "not recorded"  # what the pair compares (``check_one_precision``)


def regression_table(table_a: pa.Table, table_b: pa.Table, mid_p: bool = False,
                     allow_mixed_precision: bool = False) -> Regression:
    """Per-subject accuracy deltas ``B - A`` with exact McNemar p-values, worst first.

    Sorted by delta ascending (largest drop on top), then by p-value, then by subject, so the
    subjects that got worse, and most surely so, are what a reader sees first. Each delta gets
    the exact interval of the same McNemar test (``cube.analysis.paired_tests.mcnemar_interval``: it
    excludes 0 exactly when p < 0.05), which stays valid with the 5-21 items a sampled subject
    has, where a bootstrap of a handful of pairs does not; and ``p_holm``, the p-value
    Holm-adjusted over the subjects: with 67 subjects about 3 unadjusted p-values fall below
    0.05 by chance alone, so only ``p_holm`` supports saying that a given subject changed.
    Slices of two precisions are refused unless ``allow_mixed_precision`` (``pair``).
    """
    paired = pair(table_a, table_b, allow_mixed_precision)
    subjects, inverse = np.unique(paired.subject.astype(str), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(subjects) + 1))
    rows: dict[str, list] = {k: [] for k in (
        "subject", "n", "acc_a", "acc_b", "delta", "delta_lo", "delta_hi", "a_only_right",
        "b_only_right", "p_value")}
    for s, name in enumerate(subjects):  # one McNemar per subject
        members = order[bounds[s]:bounds[s + 1]]
        a, b = paired.correct_a[members], paired.correct_b[members]
        test = mcnemar_exact(a, b, mid_p=mid_p)
        interval = mcnemar_interval(b, a)
        rows["subject"].append(str(name))
        rows["n"].append(int(members.size))
        rows["acc_a"].append(float(a.mean()))
        rows["acc_b"].append(float(b.mean()))
        rows["delta"].append(interval.delta)
        rows["delta_lo"].append(interval.lo)
        rows["delta_hi"].append(interval.hi)
        rows["a_only_right"].append(test.b)
        rows["b_only_right"].append(test.c)
        rows["p_value"].append(test.p_value)
    rows["p_holm"] = [float(x) for x in holm_adjust(rows["p_value"])]
    ranking = sorted(
        range(len(subjects)),
        key=lambda i: (rows["delta"][i], rows["p_value"][i], rows["subject"][i]),
    )
    table = pa.table({k: [v[i] for i in ranking] for k, v in rows.items()})
    test = mcnemar_exact(paired.correct_a, paired.correct_b, mid_p=mid_p)
    interval = mcnemar_interval(paired.correct_b, paired.correct_a)
    overall = {
        "n": len(paired.uid),
        "acc_a": float(paired.correct_a.mean()),
        "acc_b": float(paired.correct_b.mean()),
        "delta": interval.delta,
        "delta_lo": interval.lo,
        "delta_hi": interval.hi,
        "a_only_right": test.b,
        "b_only_right": test.c,
        "p_value": test.p_value,
    }
    return Regression(table, overall, paired.only_a, paired.only_b, paired.precision)


# --------------------------------------------------------------------------------------------
# Model rankings under two protocols
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorrectMatrix:
    models: list[str]
    uids: list[str]
    correct: np.ndarray  # (models, items) bool


def correct_matrix(table: pa.Table, models: Sequence[str] | None = None) -> CorrectMatrix:
    """Models x items outcomes of one protocol, on the items every model answered.

    The slice must hold one record per (model, item), i.e. one protocol cell per model.
    """
    if table.num_rows == 0:
        raise ConfigError("no records in this slice")
    model_codes, model_names = column_codes(table, "model")
    uid_codes, uids = column_codes(table, "uid")
    n_models, n_items = len(model_names), len(uids)
    flat = model_codes * n_items + uid_codes
    seen = np.bincount(flat, minlength=n_models * n_items).reshape(n_models, n_items)
    if seen.max() > 1:
        raise ConfigError(
            f"slice holds several records per (model, item); it spans {_describe_cells(table)}: "
            "narrow it to one protocol"
        )
    hits = np.zeros(n_models * n_items, dtype=bool)
    hits[flat] = table.column("correct").to_numpy()
    hits = hits.reshape(n_models, n_items)
    wanted = list(models) if models is not None else sorted(model_names)
    missing = [m for m in wanted if m not in model_names]
    if missing:
        raise ConfigError(f"model {missing[0]!r} has no records in this slice")
    rows = np.array([model_names.index(m) for m in wanted], dtype=np.int64)
    complete = seen[rows].all(axis=0)
    keep = np.flatnonzero(complete)
    return CorrectMatrix(wanted, [uids[i] for i in keep], hits[np.ix_(rows, keep)])


@dataclass(frozen=True)
class RankingShift:
    """Observed between-protocol footrule in units of the comparison's noise floor.

    ``floor`` is the paired floor of both protocols (``cube.analysis.footrule.paired_noise_floor``: per
    replicate the noisier protocol's footrule, on the same resamples); ``floor_a`` and
    ``floor_b`` are each protocol's own, kept to show how far the verdict would depend on
    which protocol's floor were used.
    """

    models: list[str]
    n_items: int
    accuracy_a: np.ndarray
    accuracy_b: np.ndarray
    observed: float
    floor: NoiseFloor
    floor_a: NoiseFloor
    floor_b: NoiseFloor
    multiple_of_mean: float
    multiple_of_p95: float

    @property
    def normalisation(self) -> str:
        return footrule_normalisation(len(self.models))

    @property
    def has_power(self) -> bool:
        return footrule_has_power(self.floor)

    def verdict(self, floor: NoiseFloor | None = None, effect: float | None = None) -> str:
        """Against the paired floor, or against ``floor`` (e.g. ``floor_a``) to compare; ``effect``
        is the source's footrule, named when the floor could not have shown it."""
        return footrule_verdict(self.observed, self.floor if floor is None else floor,
                                len(self.models), effect)


def ranking_shift(
    table_a: pa.Table,
    table_b: pa.Table,
    B: int = 10_000,
    seed: int = 0,
    progress: bool = False,
) -> RankingShift:
    """How far protocol B reorders the models of protocol A, against both protocols' noise.

    Both rankings use the same items (those every model answered under both protocols) and
    integer hit counts, so tied models tie exactly (average ranks, see cube.analysis.footrule). The floor
    is paired: each replicate resamples the common items once and ranks the models under both
    protocols on that draw, so each comparison has its own floor and the verdict does not
    depend on which protocol is called A.
    """
    models_a = set(column_codes(table_a, "model")[1])
    models_b = set(column_codes(table_b, "model")[1])
    models = sorted(models_a & models_b)
    if len(models) < 2:
        raise ConfigError(f"the two protocols share {len(models)} model(s); a ranking needs 2")
    a, b = correct_matrix(table_a, models), correct_matrix(table_b, models)
    in_b = set(b.uids)
    # sorted by uid: the resamples index items by position, so the floor must not depend on the
    # order the records were read in
    common = sorted(uid for uid in a.uids if uid in in_b)
    if not common:
        raise RecordsError("the two protocols share no item answered by every model")
    ia = pc.index_in(pa.array(common), value_set=pa.array(a.uids)).to_numpy().astype(np.int64)
    ib = pc.index_in(pa.array(common), value_set=pa.array(b.uids)).to_numpy().astype(np.int64)
    ca, cb = a.correct[:, ia], b.correct[:, ib]
    observed = footrule(average_ranks(ca.sum(axis=1)), average_ranks(cb.sum(axis=1)))
    floors = paired_noise_floor(ca, cb, B=B, seed=seed, progress=progress)
    of_mean, of_p95 = footrule_multiple(observed, floors.joint)
    return RankingShift(models, len(common), ca.mean(axis=1), cb.mean(axis=1), observed,
                        floors.joint, floors.a, floors.b, of_mean, of_p95)


def filters_from(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Keep only the slice fields of a mapping (e.g. argparse's namespace as a dict)."""
    return {k: mapping[k] for k in SLICE_FIELDS if mapping.get(k) is not None}
