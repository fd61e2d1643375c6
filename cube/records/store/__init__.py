"""The records store: Parquet shards partitioned by model, and a manifest that pins every file.

Layout of a store ``DIR``::

    DIR/MANIFEST.json                 schema_version, synthetic flag, metadata, sha256 per file,
                                      and (harness stores) each cell's run configuration
    DIR/<model>/part-00000.parquet    records of one model (cube.records.schema.RECORD_SCHEMA)

Why this shape: every claim of the paper is re-derived from these files without a model, so a
reader must be able to trust them. The manifest's sha256 catches a file changed or truncated
after writing; the schema checks catch a writer that drifted from the schema; the value checks
catch records that cannot be right (a probability of 1.3, a correct flag that disagrees with the
prediction, two records for one key). Each problem is one line naming the file and the column.

Writing goes shard by shard (``write_shard``: one model's records under a name the writer
chooses; ``write_records``: the next ``part-NNNNN`` per model): each shard is written to a temp
file, listed in the manifest (rewritten atomically under a file lock, so parallel writers do not
lose each other's entries), then renamed into place. A file the manifest does not list, or a
listed file that is missing, is refused by name rather than silently read or skipped. A harness
cell's configuration enters the manifest in the same update as the cell's first shard, never
before: a run that fails before writing leaves nothing that binds a later one.

A harness store also says what it should hold: each cell's configuration records its item
count, shard size and scorers, so the shards it promises (names and rows) are known, and a
killed or unfinished run is told apart from a finished one (``unfinished_cells``). Readers refuse
an incomplete store unless asked to allow it (``read_records(allow_incomplete=True)``,
``--allow-incomplete``); ``cube rescore`` reads it and warns. A whole run holds the store's
writer lock (``writer_lock``), so two ``cube run`` never write one store at once.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

try:  # POSIX: lock the manifest while updating it; elsewhere one writer at a time
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

from cube.atomic import atomic_write_bytes, atomic_write_text
from cube.checksums import sha256_file
from cube.errors import RecordsError, ResumeMismatch, StoreBusy
from cube.files import read_json
from cube.protocol.items import Item
from cube.records.schema import (
    GENERATION_RECORD_SCORERS,
    KEY_COLUMNS,
    RECORD_SCHEMA,
    SCHEMA_METADATA_KEY,
    SCHEMA_VERSION,
    SCORER_NAMES,
    cell_shard_file,
)

MANIFEST_NAME = "MANIFEST.json"
MANIFEST_LOCK = ".manifest.lock"  # held for each manifest update (parallel shard writers)
WRITER_LOCK = ".writer.lock"  # held for a whole run: one writer per store; holds the writer's pid
LOCK_FILES = (MANIFEST_LOCK, WRITER_LOCK)
# Set to 1 (e.g. by `cube book execute --allow-incomplete`) to let read_records read a store whose
# cells are incomplete where the caller passes no allow_incomplete of its own (the notebooks).
ALLOW_INCOMPLETE_ENV = "CUBE_ALLOW_INCOMPLETE"
SHARD_PATTERN = "part-{:05d}.parquet"
# A model name becomes a folder name: keep it to characters every filesystem accepts.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
SHARD_FILE = re.compile(r"^[^/\\.\x00][^/\\\x00]*\.parquet$")  # no separators, not hidden
QHASH_PATTERN = r"^[0-9a-f]{16}$"
# Always read, whatever ``columns`` asks for: the keys (duplicate check) and the outcome columns
# the value checks and every analysis need. Only probs, token ids, lengths and text are optional.
ESSENTIAL_COLUMNS = (
    *KEY_COLUMNS, "qhash", "benchmark", "subject", "gold", "pred", "correct", "parse_failed",
    "tied", "tie_groups", "scores",
)


# --------------------------------------------------------------------------------------------
# Grouping helpers shared by the analysis modules
# --------------------------------------------------------------------------------------------


def column_codes(table: pa.Table, name: str) -> tuple[np.ndarray, list]:
    """Integer code per row and the distinct values, in first-appearance order.

    Grouping 2.5 M records by a string column is a dictionary encode (C++) plus integer work in
    numpy; no Python loop ever touches a record.
    """
    column = table.column(name)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    encoded = pc.dictionary_encode(column.combine_chunks())
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return codes, encoded.dictionary.to_pylist()


def group_ids(
    table: pa.Table, names: Sequence[str], with_keys: bool = True
) -> tuple[np.ndarray, list[tuple]]:
    """One group id per row for the combination of ``names``, and each group's key tuple.

    Groups are numbered in sorted order of their per-column codes; keys are the column values.
    ``with_keys=False`` skips building the key tuples (an empty list is returned): use it when
    groups are as many as records, e.g. for the duplicate check.
    """
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64), []
    coded = [column_codes(table, n) for n in names]
    sizes = [max(len(values), 1) for _, values in coded]
    if float(np.prod(np.array(sizes, dtype=np.float64))) < 2.0**62:
        combined = np.zeros(table.num_rows, dtype=np.int64)
        for (codes, _), size in zip(coded, sizes):
            combined = combined * size + codes
        uniq, inverse = np.unique(combined, return_inverse=True)
        parts = []
        for size in reversed(sizes):
            parts.append(uniq % size)
            uniq = uniq // size
        parts.reverse()
    else:  # too many combinations for one integer: sort rows lexicographically instead
        stacked = np.stack([codes for codes, _ in coded])
        uniq_rows, inverse = np.unique(stacked.T, axis=0, return_inverse=True)
        parts = list(uniq_rows.T)
    if not with_keys:
        return inverse.reshape(-1).astype(np.int64, copy=False), []
    keys = [
        tuple(values[int(code)] for (_, values), code in zip(coded, combo))
        for combo in zip(*parts)
    ]
    return inverse.reshape(-1).astype(np.int64, copy=False), keys


def list_matrix(table: pa.Table, name: str) -> np.ndarray:
    """A list column whose rows all have the same length, as a 2-D numpy array."""
    column = table.column(name).combine_chunks()
    if len(column) == 0:
        return np.zeros((0, 0))
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if lengths.min() != lengths.max():
        raise RecordsError(
            f"column {name}: rows have {int(lengths.min())} to {int(lengths.max())} entries; "
            "this analysis needs the same number of options in every record"
        )
    values = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return values.reshape(len(column), int(lengths[0]))


# --------------------------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------------------------


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The store's manifest, checked for shape and schema version."""
    if Path(directory).exists() and not Path(directory).is_dir():
        raise RecordsError(f"{directory} is not a folder; a records store is a folder holding {MANIFEST_NAME}")
    path = Path(directory) / MANIFEST_NAME
    if not path.exists():
        raise RecordsError(f"{path}: no manifest; not a records store")
    manifest = read_json(path, RecordsError, "manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise RecordsError(f"{path}: manifest has no 'files' object")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise RecordsError(
            f"{path}: schema_version {version!r} is not {SCHEMA_VERSION!r}; "
            "these records need the cube version that wrote them"
        )
    for name, entry in manifest["files"].items():
        _check_entry_name(name, path)
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise RecordsError(f"{path}: file entry {name!r} has no sha256")
    cells = manifest.get("cells", {})
    if not isinstance(cells, dict) or not all(isinstance(c, dict) for c in cells.values()):
        raise RecordsError(f"{path}: 'cells' must map each cell to its configuration object")
    return manifest


def _check_entry_name(name: str, where: Path) -> None:
    """A listed file is ``<model>/<file>.parquet`` inside the store: never ``..``, absolute, hidden."""
    parts = name.split("/")
    if len(parts) != 2 or not MODEL_NAME.match(parts[0]) or not SHARD_FILE.match(parts[1]):
        raise RecordsError(
            f"{where}: file entry {name!r} is not '<model>/<file>.parquet' (it would point outside the store)"
        )


def _empty_manifest() -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "synthetic": False, "metadata": {}, "files": {}}


# --------------------------------------------------------------------------------------------
# Value checks (one pass of vectorised tests per file)
# --------------------------------------------------------------------------------------------


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Type equality that ignores the name Parquet gives a list's item field."""
    if pa.types.is_list(expected):
        return pa.types.is_list(actual) and actual.value_type == expected.value_type
    return actual == expected


def _check_schema(schema: pa.Schema, where: str) -> None:
    metadata = schema.metadata or {}
    version = metadata.get(SCHEMA_METADATA_KEY)
    if version is None:
        raise RecordsError(f"{where}: no {SCHEMA_METADATA_KEY.decode()} in the file metadata")
    if version.decode("utf-8", "replace") != SCHEMA_VERSION:
        raise RecordsError(
            f"{where}: schema version {version.decode('utf-8', 'replace')!r} is not "
            f"{SCHEMA_VERSION!r}"
        )
    present = {f.name: f for f in schema}
    for field in RECORD_SCHEMA:
        if field.name not in present:
            raise RecordsError(f"{where}: column {field.name} is missing")
        if not _same_type(present[field.name].type, field.type):
            raise RecordsError(
                f"{where}: column {field.name} has type {present[field.name].type}, "
                f"expected {field.type}"
            )
    extra = [name for name in present if name not in RECORD_SCHEMA.names]
    if extra:
        raise RecordsError(f"{where}: column {extra[0]} is not in schema {SCHEMA_VERSION}")


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


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def conform(table: pa.Table, where: str = "table") -> pa.Table:
    """Cast a writer's table to the record schema (e.g. int64 -> int8), naming a bad column."""
    missing = [f.name for f in RECORD_SCHEMA if f.name not in table.column_names]
    if missing:
        raise RecordsError(f"{where}: column {missing[0]} is missing")
    extra = [n for n in table.column_names if n not in RECORD_SCHEMA.names]
    if extra:
        raise RecordsError(f"{where}: column {extra[0]} is not in schema {SCHEMA_VERSION}")
    arrays = []
    for field in RECORD_SCHEMA:
        column = table.column(field.name)
        try:
            arrays.append(column if column.type == field.type else column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise RecordsError(
                f"{where}: column {field.name} of type {column.type} cannot be stored as "
                f"{field.type} ({str(exc).splitlines()[0]})"
            ) from None
    return pa.Table.from_arrays(arrays, schema=RECORD_SCHEMA).replace_schema_metadata(
        {SCHEMA_METADATA_KEY: SCHEMA_VERSION.encode()}
    )


def from_columns(columns: Mapping[str, Any], num_rows: int | None = None) -> pa.Table:
    """A record table from plain columns: lists, 1-D arrays, or 2-D arrays for list columns.

    A 2-D numpy array becomes a list column (one row per array row) without a Python loop; a
    nullable column left out is all null. Types are cast to the schema by :func:`conform`.
    """
    n = num_rows if num_rows is not None else len(next(iter(columns.values())))
    arrays = []
    for field in RECORD_SCHEMA:
        value = columns.get(field.name)
        if value is None:
            if not field.nullable:
                raise RecordsError(f"table to write: column {field.name} is missing")
            arrays.append(pa.nulls(n, field.type))
            continue
        if isinstance(value, np.ndarray) and value.ndim == 2:
            inner = pa.array(value.reshape(-1), type=field.type.value_type)
            offsets = pa.array(np.arange(0, value.size + 1, value.shape[1], dtype=np.int32))
            arrays.append(pa.ListArray.from_arrays(offsets, inner, type=field.type))
        elif isinstance(value, (pa.Array, pa.ChunkedArray)):
            arrays.append(value)
        else:
            try:
                arrays.append(pa.array(value, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
                raise RecordsError(
                    f"table to write: column {field.name}: {str(exc).splitlines()[0]}"
                ) from None
    return conform(pa.Table.from_arrays(arrays, names=RECORD_SCHEMA.names))


def _check_table(table: pa.Table, where: str) -> pa.Table:
    """Conform and check a table exactly as a reader would, before anything is written."""
    table = conform(table, where)
    _check_values(table, where)
    file_of_row = np.zeros(table.num_rows, dtype=np.int64)
    _check_duplicates(table, file_of_row, [where])
    _check_qhash_consistency(table, file_of_row, [where])
    return table


@contextmanager
def manifest_lock(directory: Path) -> Iterator[None]:
    """Serialise manifest updates between processes (e.g. harness shards run in parallel)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / MANIFEST_LOCK, "a+") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _update_manifest(
    directory: Path, entries: Mapping[str, dict], synthetic: bool, metadata: Mapping | None,
    cell: CellToRecord | None = None,
) -> None:
    path = directory / MANIFEST_NAME
    manifest = read_manifest(directory) if path.exists() else _empty_manifest()
    if cell is not None:  # checked here, under the lock, against what the store holds now
        problem = _cell_problem(manifest, {cell.key: cell.config}, cell.shared)
        if problem:
            raise ResumeMismatch(f"{directory}: {problem}")
        if cell.key not in _cells_with_records(manifest):
            manifest.setdefault("cells", {})[cell.key] = dict(cell.config)
    manifest["synthetic"] = bool(manifest.get("synthetic")) or synthetic
    manifest.setdefault("metadata", {}).update(dict(metadata or {}))
    manifest["files"].update(entries)
    atomic_write_text(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def create_store(directory: str | Path) -> None:
    """An empty store (a manifest listing nothing) where there is none yet, so that a run killed
    before its first shard leaves a folder ``cube run`` recognises as its own."""
    directory = Path(directory)
    with manifest_lock(directory):
        if not (directory / MANIFEST_NAME).exists():
            atomic_write_text(directory / MANIFEST_NAME, json.dumps(_empty_manifest(), indent=1, sort_keys=True) + "\n")


@contextmanager
def writer_lock(directory: str | Path) -> Iterator[None]:
    """Hold the store's writer lock: one writing run per store, for the whole run.

    Why: shard writes are atomic each, but two runs of one cell into one store interleave their
    manifest entries and renames (A lists, B lists and renames, A renames over B), and a second
    run's start-up cleanup would delete the first one's temp files in flight. An exclusive
    ``flock`` on ``DIR/.writer.lock``, taken without waiting, makes the second run refuse at once
    with the holder's pid (which the holder writes into the file). The kernel drops the lock when
    its holder dies, however it dies, so a killed run never leaves a store locked. Re-entrant
    within a process (``cube run`` holds it from its checks to its run log, and ``runner.run``
    takes it again). Parallel ``cube run --shard K/N`` processes write one store each and are
    joined by ``cube merge``.
    """
    directory = Path(directory)
    key = str(directory.resolve())
    if key in _WRITER_LOCKS:
        _WRITER_LOCKS[key] += 1
        try:
            yield
        finally:
            _WRITER_LOCKS[key] -= 1
        return
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                raise StoreBusy(
                    f"{directory}: another process (pid {holder if holder.isdigit() else 'unknown'}) is writing "
                    f"to this store (it holds {WRITER_LOCK}); wait for it to finish, or write to another --out"
                ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _WRITER_LOCKS[key] = 1
        try:
            yield
        finally:
            del _WRITER_LOCKS[key]
    finally:
        os.close(fd)  # closing the descriptor releases the flock


_WRITER_LOCKS: dict[str, int] = {}  # store -> depth of this process's writer_lock on it


# --------------------------------------------------------------------------------------------
# Cell configurations: what a resume must agree with
# --------------------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any],
                       fields: Iterable[str] | None = None) -> list[str]:
    """``field old -> new`` for every field (of ``fields``, default all) the two disagree on."""
    names = list(fields) if fields is not None else sorted(set(old) | set(new))
    return [f"{n} {_shown(old.get(n))} -> {_shown(new.get(n))}" for n in names if old.get(n) != new.get(n)]


def _cell_of(name: str) -> str:
    """The cell key (``<model>/<kind>--<cell>``) of a harness shard's manifest name."""
    return name.rsplit("--", 1)[0]


def _cells_with_records(manifest: Mapping[str, Any]) -> dict[str, dict]:
    """The recorded cells that hold at least one listed shard: only these bind a later run.

    A configuration recorded without records (by a cube that recorded cells before writing, and
    then failed on a bad argument) promises nothing, so it must not refuse the corrected run.
    """
    holding = {_cell_of(name) for name in manifest.get("files") or {}}
    return {k: c for k, c in (manifest.get("cells") or {}).items() if k in holding}


def _cell_problem(manifest: Mapping[str, Any], configs: Mapping[str, Mapping],
                  shared: Sequence[str]) -> str | None:
    """Why these cells cannot be written into a store with this manifest, or None."""
    known = _cells_with_records(manifest)
    listed = manifest.get("files") or {}
    for key, config in configs.items():
        if key in known:
            differences = config_differences(known[key], config)
            if differences:
                return (f"cell {key} was written under another configuration: {'; '.join(differences)} "
                        "(rerun with its original options, or write to a new --out)")
            continue
        if any(name.startswith(f"{key}--") for name in listed):
            return (f"cell {key} holds records written before cube recorded cell configurations, so a "
                    "resume cannot be checked against them (write to a new --out and `cube merge` it)")
        model = key.split("/", 1)[0]
        siblings = {k: c for k, c in known.items() if k.startswith(f"{model}/")}
        for other, recorded in siblings.items():
            differences = config_differences(recorded, config, shared)
            if differences:
                return (f"new cell {key} does not match cell {other} of the same model: "
                        f"{'; '.join(differences)} (write to a new --out)")
        unrecorded = [n for n in listed if n.startswith(f"{model}/") and n.rsplit("--", 1)[0] not in known]
        if unrecorded and not siblings:
            return (f"{model} holds records written before cube recorded cell configurations (e.g. "
                    f"{unrecorded[0]}), so new cells cannot be checked against them (write to a new "
                    "--out and `cube merge` it)")
    return None


def check_cells(directory: str | Path, configs: Mapping[str, Mapping], shared: Sequence[str]) -> None:
    """Refuse, in one line naming the differing fields, a run the store's records do not match."""
    directory = Path(directory)
    if not (directory / MANIFEST_NAME).exists():
        return
    problem = _cell_problem(read_manifest(directory), configs, shared)
    if problem:
        raise ResumeMismatch(f"{directory}: {problem}")


def record_cells(directory: str | Path, configs: Mapping[str, Mapping], shared: Sequence[str]) -> None:
    """Check and record the cells' configurations in the manifest, under its lock.

    For writers that record cells apart from their shards (tests, tools); the harness records
    each cell with its first shard (``write_shard(..., cell=...)``), so a run that fails before
    writing leaves no configuration behind.
    """
    directory = Path(directory)
    with manifest_lock(directory):
        path = directory / MANIFEST_NAME
        manifest = read_manifest(directory) if path.exists() else _empty_manifest()
        problem = _cell_problem(manifest, configs, shared)
        if problem:
            raise ResumeMismatch(f"{directory}: {problem}")
        new = {k: dict(v) for k, v in configs.items() if k not in manifest.get("cells", {})}
        if new or not path.exists():
            manifest.setdefault("cells", {}).update(new)
            atomic_write_text(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def rows_per_item(config: Mapping[str, Any]) -> int | None:
    """Records one item gives in a harness cell of this configuration, or None if it cannot say.

    One per scorer for label, cloze and judgement cells; a generation cell's one scorer (M6 or
    M6-cot) yields one record per extractor.
    """
    kind, scorers = config.get("kind"), config.get("scorers")
    if not isinstance(scorers, list) or not scorers:
        return None
    if kind in ("gen", "cot"):
        return len(GENERATION_RECORD_SCORERS) * len(scorers)
    return len(scorers) if kind in ("label", "cloze", "tf") else None


def promised_shards(cell: str, config: Mapping[str, Any]) -> dict[str, int] | None:
    """``<model>/<file>`` -> rows of every shard the cell's configuration promises (None: unknown).

    The harness cuts the cell's ``n_items`` into chunks of ``shard_size``, one shard each
    (``cube.harness.runner.plan_jobs``), so the last chunk may be short.
    """
    n, size, per = config.get("n_items"), config.get("shard_size"), rows_per_item(config)
    if not (isinstance(n, int) and isinstance(size, int) and n >= 0 and size >= 1 and per):
        return None
    return {cell_shard_file(cell, c): min(size, n - c * size) * per for c in range(math.ceil(n / size))}


def unfinished_cells(manifest: Mapping[str, Any]) -> list[str]:
    """One line per recorded cell whose listed shards are not what its configuration promises.

    A killed or still-running ``cube run``, or one process of a ``--shard K/N`` run not merged
    yet, leaves fewer shards than the cell's items need; its accuracy is then an accuracy on the
    items that happened to finish, and no reader may report it as the run's. Compared: the
    shard names and each shard's rows as the manifest lists them (``read_records`` checks the
    files hold those rows). Stores without recorded cells (the archive's older models) promise
    nothing and give no line.
    """
    files = manifest.get("files") or {}
    by_cell: dict[str, dict[str, Any]] = {}
    for name, entry in files.items():
        by_cell.setdefault(_cell_of(name), {})[name] = entry
    lines = []
    for cell, config in sorted((manifest.get("cells") or {}).items()):
        promised = promised_shards(cell, config)
        present = by_cell.get(cell, {})
        if promised is None:
            lines.append(f"{cell}: its configuration does not record n_items, shard_size, kind and scorers, "
                         "so its shards cannot be checked")
            continue
        missing = [name for name in promised if name not in present]
        extra = sorted(name for name in present if name not in promised)
        short = [(name, present[name].get("rows"), rows) for name, rows in promised.items()
                 if name in present and present[name].get("rows") != rows]
        if missing:
            per = rows_per_item(config) or 1
            have = sum(promised[name] for name in promised if name in present) // per
            lines.append(f"{cell}: {len(promised) - len(missing)} of {len(promised)} shards, {have} of "
                         f"{config['n_items']} items (missing e.g. {missing[0]})")
        elif short:
            name, listed, rows = short[0]
            lines.append(f"{cell}: {name} lists {listed} rows where the cell promises {rows}")
        elif extra:
            lines.append(f"{cell}: {extra[0]} is not a shard its configuration promises")
    return lines


def shard_problem(directory: str | Path, name: str, entry: Mapping[str, Any],
                  expected_rows: int | None = None) -> str | None:
    """Why a listed shard cannot be counted as done on resume (None: it can).

    A resume that trusted every listed, present file would keep a truncated or edited shard for
    good ("0 shards to run") while every reader refuses it. Checked: the file's sha256 against
    the manifest, that Parquet can read its footer, and its rows against the manifest's entry and
    against what its cell promises.
    """
    path = Path(directory) / name
    if not path.is_file():
        return "listed in the manifest but missing"
    digest = sha256_file(path)
    if digest != entry.get("sha256"):
        return f"sha256 {digest[:12]}... does not match the manifest's {str(entry.get('sha256'))[:12]}..."
    try:
        rows = pq.read_metadata(path).num_rows
    except (pa.ArrowException, OSError, ValueError):
        return "not a readable Parquet file"
    if entry.get("rows") is not None and rows != entry["rows"]:
        return f"{rows} rows where the manifest lists {entry['rows']}"
    if expected_rows is not None and rows != expected_rows:
        return f"{rows} rows where its cell promises {expected_rows}"
    return None


def _shard_name(name: str, model: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != model or not SHARD_FILE.match(parts[1]):
        raise RecordsError(
            f"shard name {name!r}: expected '{model}/<file>.parquet' for the records of {model!r}"
        )
    return name


@dataclass(frozen=True)
class CellToRecord:
    """A harness cell's configuration, recorded with the cell's first shard.

    ``shared`` names the fields every cell of one model in a store must agree on.
    """

    key: str  # <model>/<kind>--<cell>
    config: Mapping[str, Any]
    shared: tuple[str, ...] = ()


def write_shard(
    directory: str | Path,
    name: str,
    table: pa.Table,
    *,
    synthetic: bool = False,
    metadata: Mapping[str, Any] | None = None,
    cell: CellToRecord | None = None,
) -> Path:
    """Write one model's records as ``DIR/<model>/<file>.parquet`` and list it in the manifest.

    For writers that name their own shards, e.g. a resumable harness writing one shard per job
    (``<model>/label--<cell>--00003.parquet``). Writing the same name again replaces the shard
    and its manifest entry. Order of steps: temp file, manifest entry, rename. A crash before
    the rename leaves an entry whose file is missing: the reader refuses it by name, and a
    resumed job that rewrites the shard heals it. A stray shard never appears unlisted.
    ``cell``: the harness cell the shard belongs to; its configuration is checked against the
    store and recorded in the same manifest update as the shard's entry.
    """
    if cell is not None and _cell_of(name) != cell.key:
        raise RecordsError(f"shard {name}: not a shard of cell {cell.key}")
    return _write_checked_shard(
        Path(directory), name, _check_table(table, f"shard {name}"), synthetic, metadata, cell
    )


def _write_checked_shard(
    directory: Path, name: str, table: pa.Table, synthetic: bool, metadata: Mapping | None,
    cell: CellToRecord | None = None,
) -> Path:
    models = pc.unique(table.column("model")).to_pylist()
    if len(models) != 1:
        raise RecordsError(f"shard {name}: column model holds {len(models)} models; one per shard")
    if not MODEL_NAME.match(models[0]):
        raise RecordsError(f"shard {name}: column model: {models[0]!r} cannot name a folder")
    path = directory / _shard_name(name, models[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    entry = {"sha256": hashlib.sha256(data).hexdigest(), "rows": table.num_rows}

    def list_in_manifest() -> None:
        with manifest_lock(directory):
            _update_manifest(directory, {name: entry}, synthetic, metadata, cell)

    atomic_write_bytes(path, data, before_rename=list_in_manifest)
    return path


def write_records(
    directory: str | Path,
    table: pa.Table,
    *,
    synthetic: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Append ``table`` to the store at ``directory``: one new ``part-NNNNN`` shard per model.

    The table is checked exactly as a reader would check it before anything is written.
    ``synthetic`` marks the whole store as simulated (it never goes back to False);
    ``metadata`` is merged into the manifest's ``metadata`` object.
    """
    directory = Path(directory)
    table = _check_table(table, "table to write")
    listed = read_manifest(directory)["files"] if (directory / MANIFEST_NAME).exists() else {}
    written: list[Path] = []
    model_codes, models = column_codes(table, "model")
    for model in models:
        if not MODEL_NAME.match(model):
            raise RecordsError(f"table to write: column model: {model!r} cannot name a folder")
    for code, model in enumerate(models):
        taken = {name.split("/", 1)[1] for name in listed if name.startswith(f"{model}/")}
        taken |= {p.name for p in (directory / model).glob("part-*.parquet")}
        index = 0
        while SHARD_PATTERN.format(index) in taken:
            index += 1
        part = table.filter(pa.array(model_codes == code))
        name = f"{model}/{SHARD_PATTERN.format(index)}"
        written.append(_write_checked_shard(directory, name, part, synthetic, metadata))
    return written


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def _read_shard(path: Path, name: str, columns: list[str] | None) -> pa.Table:
    try:
        parquet = pq.ParquetFile(path)
        _check_schema(parquet.schema_arrow, name)
        table = parquet.read(columns=columns)
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


def read_records(
    directory: str | Path,
    verify: bool = True,
    items: Iterable[Item] | Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
    progress: bool = False,
    allow_incomplete: bool | None = None,
) -> pa.Table:
    """Every record of the store, validated; raises :class:`RecordsError` on the first problem.

    ``verify=False`` skips the sha256 of each file (never the schema and value checks).
    ``items`` (Items, or a uid -> qhash mapping) checks that the records belong to that item set.
    ``columns`` reads only those columns plus ``ESSENTIAL_COLUMNS`` (keys and outcomes); the
    schema of every column is still checked from the file metadata.
    A store with a cell short of what its configuration promises (``unfinished_cells``: a killed
    or unfinished run) is refused unless ``allow_incomplete`` is True; None (the default) reads
    ``$CUBE_ALLOW_INCOMPLETE`` (``1`` allows), which is how ``cube book execute
    --allow-incomplete`` reaches the notebooks. Each file's rows must equal its manifest entry's.
    """
    from cube.records.provenance import incomplete_cells

    directory = Path(directory)
    manifest = read_manifest(directory)
    listed = sorted(manifest["files"])
    incomplete = incomplete_cells(directory, listed)
    if incomplete:
        raise RecordsError(
            f"{directory}: cells incomplete: {'; '.join(incomplete)}: the run log says they were "
            "written, but the store no longer lists them"
        )
    if allow_incomplete is None:
        allow_incomplete = os.environ.get(ALLOW_INCOMPLETE_ENV, "") == "1"
    unfinished = unfinished_cells(manifest)
    if unfinished and not allow_incomplete:
        more = f" (and {len(unfinished) - 1} more)" if len(unfinished) > 1 else ""
        raise RecordsError(
            f"{directory}: incomplete store: {unfinished[0]}{more}; finish the run (re-run its command: it "
            "resumes) or pass --allow-incomplete to read the records present"
        )
    on_disk = sorted(p.relative_to(directory).as_posix() for p in directory.glob("*/*.parquet"))
    unlisted = [name for name in on_disk if name not in manifest["files"]]
    if unlisted:
        raise RecordsError(
            f"{directory / unlisted[0]}: not listed in {MANIFEST_NAME} (an interrupted write? "
            "remove it or rewrite the records)"
        )
    wanted = None
    if columns is not None:
        unknown = [c for c in columns if c not in RECORD_SCHEMA.names]
        if unknown:
            raise RecordsError(
                f"{directory}: column {unknown[0]} is not in schema {SCHEMA_VERSION}"
            )
        needed = set(columns) | set(ESSENTIAL_COLUMNS)
        wanted = [name for name in RECORD_SCHEMA.names if name in needed]

    tables: list[pa.Table] = []
    for name in tqdm(listed, desc="reading records", unit="file", disable=not progress):
        path = directory / name
        where = str(path)
        if not path.is_file():
            raise RecordsError(f"{where}: listed in {MANIFEST_NAME} but missing")
        if verify:
            digest = sha256_file(path)
            if digest != manifest["files"][name]["sha256"]:
                raise RecordsError(
                    f"{where}: sha256 {digest[:12]}... does not match the manifest's "
                    f"{manifest['files'][name]['sha256'][:12]}... (file changed after writing)"
                )
        table = _read_shard(path, name, wanted)
        listed_rows = manifest["files"][name].get("rows")
        if listed_rows is not None and table.num_rows != listed_rows:
            raise RecordsError(
                f"{where}: {table.num_rows} rows where {MANIFEST_NAME} lists {listed_rows} (file or manifest "
                "changed after writing)"
            )
        _check_values(table, where)
        tables.append(table)

    schema = RECORD_SCHEMA
    if wanted is not None:
        schema = pa.schema([RECORD_SCHEMA.field(n) for n in wanted])
    if not tables:
        return schema.empty_table()
    tables = [t.cast(schema) for t in tables]
    file_of_row = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
    combined = pa.concat_tables(tables)
    paths = [str(directory / name) for name in listed]
    cache: dict = {}
    _check_duplicates(combined, file_of_row, paths, cache)
    _check_qhash_consistency(combined, file_of_row, paths, cache)
    if items is not None:
        check_items(combined, items, str(directory))
    return combined


PROTOCOL_COLUMNS = ("scorer", "label_set", "context", "shots", "order")


def protocols(table: pa.Table) -> list[dict[str, Any]]:
    """Each (scorer, label set, context, shots, order) present, with its record count."""
    ids, keys = group_ids(table, PROTOCOL_COLUMNS)
    counts = np.bincount(ids, minlength=len(keys)) if keys else np.zeros(0, dtype=np.int64)
    rows = [dict(zip(PROTOCOL_COLUMNS, key), records=int(n)) for key, n in zip(keys, counts)]
    return sorted(rows, key=lambda r: tuple(str(r[c]) for c in PROTOCOL_COLUMNS))
