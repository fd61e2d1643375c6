"""Value checks: what a record can never be, tested in one vectorised pass per file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cube.errors import RecordsError
from cube.protocol.items import Item
from cube.records.schema import (
    KEY_COLUMNS,
    RECORD_SCHEMA,
    SCHEMA_METADATA_KEY,
    ADDED_COLUMNS,
    SCHEMA_VERSION,
    SCHEMAS,
    SCORER_NAMES,
    FINISH_REASONS,
    THINKING_OUTCOMES,
    migrate,
)
from cube.records.store.layout import QHASH_PATTERN
from cube.records.store.grouping import column_codes, group_ids


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Type equality that ignores the name Parquet gives a list's item field."""
    if pa.types.is_list(expected):
        return pa.types.is_list(actual) and actual.value_type == expected.value_type
    return actual == expected


def _check_schema(schema: pa.Schema, where: str) -> str:
    """The file's schema version (this one, or one a migration reads forward), its columns checked
    against that version's."""
    metadata = schema.metadata or {}
    version = metadata.get(SCHEMA_METADATA_KEY)
    if version is None:
        raise RecordsError(f"{where}: no {SCHEMA_METADATA_KEY.decode()} in the file metadata")
    text = version.decode("utf-8", "replace")
    if text not in SCHEMAS:
        older = " nor ".join(repr(v) for v in SCHEMAS if v != SCHEMA_VERSION)
        raise RecordsError(
            f"{where}: schema version {text!r} is not {SCHEMA_VERSION!r} (nor {older}, which are "
            "read forward)"
        )
    expected = SCHEMAS[text]
    present = {f.name: f for f in schema}
    for field in expected:
        if field.name not in present:
            raise RecordsError(f"{where}: column {field.name} is missing")
        if not _same_type(present[field.name].type, field.type):
            raise RecordsError(
                f"{where}: column {field.name} has type {present[field.name].type}, "
                f"expected {field.type}"
            )
    extra = [name for name in present if name not in expected.names]
    if extra:
        raise RecordsError(f"{where}: column {extra[0]} is not in schema {text}")
    return text


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _np(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy()


def _check_values(table: pa.Table, where: str) -> None:
    """Refuse records that cannot be right; the message names the column and the row."""
    for field in RECORD_SCHEMA:
        if field.name in table.column_names and not field.nullable:
            nulls = table.column(field.name).null_count
            if nulls:
                row = _first(table.column(field.name).is_null().to_numpy(zero_copy_only=False))
                raise RecordsError(f"{where}: column {field.name}, row {row}: null value")

    scorer_ok = pc.is_in(table.column("scorer"), value_set=pa.array(SCORER_NAMES))
    row = _first(~scorer_ok.to_numpy())
    if row is not None:
        raise RecordsError(
            f"{where}: column scorer, row {row}: {table.column('scorer')[row].as_py()!r} is not "
            f"one of {', '.join(SCORER_NAMES)}"
        )
    qhash_ok = pc.match_substring_regex(table.column("qhash"), QHASH_PATTERN)
    row = _first(~qhash_ok.to_numpy())
    if row is not None:
        raise RecordsError(
            f"{where}: column qhash, row {row}: {table.column('qhash')[row].as_py()!r} is not "
            "16 lowercase hex digits"
        )

    n_options = pc.list_value_length(table.column("scores")).to_numpy()
    for name in ("probs", "first_token_ids", "n_tokens"):
        if name not in table.column_names:
            continue
        lengths = pc.list_value_length(table.column(name)).to_numpy(zero_copy_only=False)
        present = ~table.column(name).is_null().to_numpy(zero_copy_only=False)
        row = _first(present & (lengths != n_options))
        if row is not None:
            raise RecordsError(
                f"{where}: column {name}, row {row}: {int(lengths[row])} entries for "
                f"{int(n_options[row])} options"
            )

    if "probs" in table.column_names:
        probs = table.column("probs").combine_chunks()
        values = pc.list_flatten(probs).to_numpy()
        bad = _first(~((values >= 0.0) & (values <= 1.0)))  # NaN fails both comparisons
        if bad is not None:
            offsets = probs.offsets.to_numpy()
            row = int(np.searchsorted(offsets, bad, side="right") - 1)
            raise RecordsError(
                f"{where}: column probs, row {row}: {float(values[bad])!r} is not a probability "
                "in [0, 1]"
            )

    if "finish_reason" in table.column_names:
        reason = table.column("finish_reason")
        known = ~reason.is_null().to_numpy(zero_copy_only=False)
        ok = pc.is_in(reason, value_set=pa.array(FINISH_REASONS)).to_numpy(zero_copy_only=False)
        row = _first(known & ~ok)
        if row is not None:
            raise RecordsError(f"{where}: column finish_reason, row {row}: {reason[row].as_py()!r} is not one of "
                               f"{', '.join(FINISH_REASONS)}")
    if "thinking" in table.column_names:
        outcome = table.column("thinking")
        known = ~outcome.is_null().to_numpy(zero_copy_only=False)
        ok = pc.is_in(outcome, value_set=pa.array(THINKING_OUTCOMES)).to_numpy(zero_copy_only=False)
        row = _first(known & ~ok)
        if row is not None:
            raise RecordsError(f"{where}: column thinking, row {row}: {outcome[row].as_py()!r} is not one of "
                               f"{', '.join(THINKING_OUTCOMES)}")
    for name in ("gen_tokens", "thinking_tokens"):
        if name in table.column_names:
            counts = table.column(name).to_numpy(zero_copy_only=False)
            row = _first(np.nan_to_num(counts.astype(np.float64), nan=0.0) < 0)
            if row is not None:
                raise RecordsError(f"{where}: column {name}, row {row}: {int(counts[row])} is not a token count")

    gold, pred = _np(table, "gold").astype(np.int64), _np(table, "pred").astype(np.int64)
    row = _first((gold < 0) | (gold >= n_options))
    if row is not None:
        raise RecordsError(
            f"{where}: column gold, row {row}: {gold[row]} is outside 0..{n_options[row] - 1}"
        )
    row = _first((pred < -1) | (pred >= n_options))
    if row is not None:
        raise RecordsError(
            f"{where}: column pred, row {row}: {pred[row]} is outside -1..{n_options[row] - 1}"
        )
    correct, parse_failed = _np(table, "correct"), _np(table, "parse_failed")
    row = _first(correct != (pred == gold))
    if row is not None:
        raise RecordsError(
            f"{where}: column correct, row {row}: {bool(correct[row])} but pred {pred[row]} "
            f"and gold {gold[row]}"
        )
    row = _first(parse_failed != (pred == -1))
    if row is not None:
        raise RecordsError(
            f"{where}: column parse_failed, row {row}: {bool(parse_failed[row])} but pred "
            f"{pred[row]} (-1 marks exactly the parse failures)"
        )
    _check_decisions(table, where, pred, n_options)


def _check_decisions(table: pa.Table, where: str, pred: np.ndarray, n_options: np.ndarray) -> None:
    """``pred`` and ``tied`` must be what the stored scores decide, so a forged answer is refused.

    Scored rows follow ``cube.harness.scorers.decide``: pred is the first maximum of ``scores`` and tied
    says the top score is shared. A generation (M6-*) has no scores (all NaN): its pred was
    extracted from text, and its ``probs`` are one-hot on pred (all zero for a parse failure);
    a simulated generation carries scores, and its pred is their argmax or -1.
    """
    scores = table.column("scores").combine_chunks()
    values = pc.list_flatten(scores).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    if values.size == 0:
        return
    parents = pc.list_parent_indices(scores).to_numpy(zero_copy_only=False)
    starts = np.concatenate([[0], np.cumsum(n_options)[:-1]]).astype(np.int64)  # every row has options
    generation = pc.starts_with(table.column("scorer"), "M6-").to_numpy(zero_copy_only=False)
    nan_count = np.add.reduceat(np.isnan(values).astype(np.int64), starts)
    all_nan = nan_count == n_options
    row = _first((nan_count > 0) & ~(generation & all_nan))
    if row is not None:
        raise RecordsError(
            f"{where}: column scores, row {row}: NaN score (only a generation's scores are all NaN)"
        )
    top = np.maximum.reduceat(values, starts)
    is_top = values == top[parents]
    position = np.arange(values.size) - starts[parents]
    argmax = np.minimum.reduceat(np.where(is_top, position, values.size), starts)
    at_top = np.add.reduceat(is_top.astype(np.int64), starts)
    shared = at_top > 1
    scored = ~all_nan
    row = _first(scored & (pred != argmax) & ~(generation & (pred == -1)))
    if row is not None:
        raise RecordsError(
            f"{where}: column pred, row {row}: {pred[row]} but the argmax of scores is "
            f"{argmax[row]} (the first maximum breaks ties)"
        )
    tied = _np(table, "tied")
    row = _first(tied != (scored & shared))
    if row is not None:
        raise RecordsError(
            f"{where}: column tied, row {row}: {bool(tied[row])} but "
            + (f"{at_top[row]} option(s) share the top score" if scored[row] else "a generation has no scores")
        )
    if "probs" in table.column_names:
        probs = pc.list_flatten(table.column("probs").combine_chunks()).to_numpy(zero_copy_only=False)
        one_hot = (position == pred[parents]).astype(probs.dtype)
        wrong = (all_nan[parents]) & (probs != one_hot)
        element = _first(wrong)
        if element is not None:
            row = int(parents[element])
            raise RecordsError(
                f"{where}: column pred, row {row}: {pred[row]} but probs put the generation's answer "
                f"elsewhere ({np.round(probs[starts[row]:starts[row] + n_options[row]], 3).tolist()})"
            )


def _describe_key(table: pa.Table, row: int) -> str:
    return ", ".join(f"{name}={table.column(name)[row].as_py()!r}" for name in KEY_COLUMNS)


def _coded(table: pa.Table, names: Sequence[str], cache: dict) -> list[tuple[np.ndarray, list]]:
    """Column codes, computed once per column for all whole-store checks."""
    for name in names:
        if name not in cache:
            cache[name] = column_codes(table, name)
    return [cache[name] for name in names]


def _check_duplicates(
    table: pa.Table, file_of_row: np.ndarray, files: list[str], cache: dict | None = None
) -> None:
    """Two records with the same key would be counted twice by every statistic."""
    if table.num_rows < 2:
        return
    coded = _coded(table, KEY_COLUMNS, {} if cache is None else cache)
    sizes = [max(len(values), 1) for _, values in coded]
    if float(np.prod(np.array(sizes, dtype=np.float64))) < 2.0**62:
        key = np.zeros(table.num_rows, dtype=np.int64)
        for (codes, _), size in zip(coded, sizes):
            key = key * size + codes
        ordered = np.sort(key)
        if not np.any(ordered[1:] == ordered[:-1]):
            return
    else:
        key, _ = group_ids(table, KEY_COLUMNS, with_keys=False)
    order = np.argsort(key, kind="stable")
    repeated = np.flatnonzero(key[order][1:] == key[order][:-1])
    if repeated.size:
        first, second = int(order[repeated[0]]), int(order[repeated[0] + 1])
        raise RecordsError(
            f"{files[file_of_row[second]]}: column uid: duplicate key "
            f"({_describe_key(table, second)}) also in {files[file_of_row[first]]}"
        )


def _check_qhash_consistency(
    table: pa.Table, file_of_row: np.ndarray, files: list[str], cache: dict | None = None
) -> None:
    """One uid, one question: a uid with two qhashes means two item sets were mixed."""
    if table.num_rows == 0:
        return
    cache = {} if cache is None else cache
    (uid_codes, uids), (qhash_codes, _) = _coded(table, ("uid", "qhash"), cache)
    # Any one row's qhash per uid serves as the reference: a uid whose rows disagree has a row
    # that differs from it, whichever row numpy's repeated-index assignment kept.
    reference = np.empty(len(uids), dtype=np.int64)
    reference[uid_codes] = qhash_codes
    row = _first(qhash_codes != reference[uid_codes])
    if row is not None:
        uid = table.column("uid")[row].as_py()
        raise RecordsError(
            f"{files[file_of_row[row]]}: column qhash, row of uid {uid!r}: "
            f"{table.column('qhash')[row].as_py()!r} differs from another record of the same uid"
        )


def check_items(
    table: pa.Table,
    items: Iterable[Item] | Mapping[str, str],
    where: str = "records",
) -> None:
    """Every record's (uid, qhash) must name an item of the set in use, with the same question.

    A mismatch means the records were made from a different copy or version of the benchmark,
    so their accuracy is not an accuracy on these items.
    """
    expected = items if isinstance(items, Mapping) else {i.uid: i.qhash for i in items}
    uid_codes, uids = column_codes(table, "uid")
    known = [expected.get(uid) for uid in uids]  # distinct uids only, not records
    missing = [uid for uid, q in zip(uids, known) if q is None]
    if missing:
        raise RecordsError(
            f"{where}: column uid: {missing[0]!r} is not in the item set in use "
            f"({len(missing)} unknown uids)"
        )
    want = pa.array(known, type=pa.string()).take(pa.array(uid_codes))
    same = pc.equal(table.column("qhash").combine_chunks(), want).to_numpy(zero_copy_only=False)
    row = _first(~same)
    if row is not None:
        uid = table.column("uid")[row].as_py()
        raise RecordsError(
            f"{where}: column qhash: uid {uid!r} has qhash {table.column('qhash')[row].as_py()!r} "
            f"but the item set in use has {expected[uid]!r} (different question text)"
        )


def _read_shard(path: Path, name: str, columns: list[str] | None, dtype: str | None = None,
                cell_dtype: str | None = None) -> pa.Table:
    """One shard as a reader reads it: the schema checked from the footer, the model against its folder
    (here beside the checks, so that a resume (``cells.shard_problem``) makes them too).

    A schema-1 or -2 shard is read forward (``migrate``), a schema-1 one with ``dtype``, the precision
    its store recorded for it (``store.read.recorded_dtypes``; None: not recorded).

    ``cell_dtype``: the precision the manifest's cell configuration records; a shard whose records
    say another (or none) is refused, so that the precision guard of a paired comparison is not told
    one thing by the records and another by the manifest."""
    try:
        parquet = pq.ParquetFile(path)
        version = _check_schema(parquet.schema_arrow, name)
        if version != SCHEMA_VERSION:
            old = None if columns is None else [c for c in columns if c not in ADDED_COLUMNS[version]]
            table = migrate(parquet.read(columns=old), version, dtype)
            if columns is not None:
                table = table.select(columns)
        else:
            table = parquet.read(columns=columns)
            if cell_dtype is not None:
                recorded = (table if "dtype" in table.column_names else parquet.read(columns=["dtype"])).column("dtype")
                other = [v for v in pc.unique(recorded).to_pylist() if v != cell_dtype]
                if other:
                    raise RecordsError(f"{name}: records in dtype {other[0] or 'not recorded'} where the manifest's cell "
                                       f"was run in {cell_dtype} (records or manifest edited after writing)")
    except RecordsError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RecordsError(
            f"{name}: not a readable Parquet file, truncated or corrupt ({reason})"
        ) from None
    models = pc.unique(table.column("model")).to_pylist() if "model" in table.column_names else []
    folder = name.split("/", 1)[0]
    if any(m != folder for m in models):
        other = next(m for m in models if m != folder)
        raise RecordsError(f"{name}: column model holds {other!r} in the folder of {folder!r}")
    return table
