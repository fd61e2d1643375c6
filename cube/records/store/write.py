"""Writing: each shard checked as a reader would, written to a temp file, listed, then renamed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cube.atomic import atomic_write_bytes, atomic_write_text
from cube.errors import RecordsError, ResumeMismatch
from cube.records.schema import RECORD_SCHEMA, SCHEMA_METADATA_KEY, SCHEMA_VERSION
from cube.records.store.layout import MANIFEST_NAME, MODEL_NAME, SHARD_FILE, SHARD_PATTERN
from cube.records.store.grouping import column_codes
from cube.records.store.manifest import _empty_manifest, manifest_lock, read_manifest
from cube.records.store.checks import _check_duplicates, _check_qhash_consistency, _check_values
from cube.records.store.cells import CellToRecord, _cell_of, _cell_problem, _cells_with_records


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

def _update_manifest(
    directory: Path, entries: Mapping[str, dict], synthetic: bool, metadata: Mapping | None,
    cell: CellToRecord | None = None, incomplete: Sequence[str] = (),
) -> None:
    path = directory / MANIFEST_NAME
    manifest = read_manifest(directory) if path.exists() else _empty_manifest()
    if cell is not None:  # checked here, under the lock, against what the store holds now
        problem = _cell_problem(manifest, {cell.key: cell.config}, cell.shared)
        if problem:
            raise ResumeMismatch(f"{directory}: {problem}")
        if cell.key not in _cells_with_records(manifest):
            manifest.setdefault("cells", {})[cell.key] = dict(cell.config)
    manifest["schema_version"] = SCHEMA_VERSION  # its shards: this version, or one read forward
    manifest["synthetic"] = bool(manifest.get("synthetic")) or synthetic
    manifest.setdefault("metadata", {}).update(dict(metadata or {}))
    manifest["files"].update(entries)
    if incomplete:  # like synthetic, never taken back: a copy of an incomplete store stays marked
        manifest["incomplete"] = sorted(set(manifest.get("incomplete") or []) | set(incomplete))
    atomic_write_text(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")

def _shard_name(name: str, model: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != model or not SHARD_FILE.match(parts[1]):
        raise RecordsError(
            f"shard name {name!r}: expected '{model}/<file>.parquet' for the records of {model!r}"
        )
    return name

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
    cell: CellToRecord | None = None, incomplete: Sequence[str] = (),
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
            _update_manifest(directory, {name: entry}, synthetic, metadata, cell, incomplete)

    atomic_write_bytes(path, data, before_rename=list_in_manifest)
    return path


def write_records(
    directory: str | Path,
    table: pa.Table,
    *,
    synthetic: bool = False,
    metadata: Mapping[str, Any] | None = None,
    incomplete: Sequence[str] = (),
) -> list[Path]:
    """Append ``table`` to the store at ``directory``: one new ``part-NNNNN`` shard per model.

    The table is checked exactly as a reader would check it before anything is written.
    ``synthetic`` marks the whole store as simulated (it never goes back to False);
    ``metadata`` is merged into the manifest's ``metadata`` object. ``incomplete``: the lines of
    ``unfinished_cells`` of the store these records were copied from (a bundle of an incomplete
    store): the copy has no cell configurations to tell it is short, so it keeps them, and every
    reader repeats them.
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
        written.append(_write_checked_shard(directory, name, part, synthetic, metadata, None, incomplete))
    return written
