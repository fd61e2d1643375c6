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

Each cell's warnings are computed here too (parse failures, thinking truncation, tie-breaks,
precision noise), from the same per-(cell, subject) counts. What selects a slice and names a cell
is :mod:`cube.analysis.slices`; the other figures of a slice live beside this module, one concern
each: two slices compared on the same items in :mod:`cube.analysis.paired_slices`, the expected
calibration error per cell in :mod:`cube.analysis.calibration`, and the footrule between two
protocols' model rankings in :mod:`cube.analysis.ranking_shift`.

All counting is ``np.bincount`` over group ids; nothing loops over records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.special import bdtr

from cube.analysis.chance import options_per_record
from cube.analysis.slices import CELL_COLUMNS
from cube.analysis.stats import above_chance_p_per_item, stratified_wilson_interval, wilson_interval
from cube.errors import ConfigError
from cube.protocol.benchmarks import taxonomy_of as registry_taxonomy
from cube.protocol.taxonomy import Taxonomy, load_taxonomy
from cube.protocol.thinking import THINKING_FAILURES, TRUNCATED_IN_THINKING
from cube.records.schema import GENERATION_RECORD_SCORERS

THINKING_TRUNCATION_WARNING = 0.5  # "most generations cut while thinking": one warning per cell above it
from cube.records.store import group_ids
from cube.records.degeneracy import PARSE_FAILURE_WARNING, TIE_WARNING

LEVELS = ("subject", "category", "overall")


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
