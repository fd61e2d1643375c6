"""Reading: every listed shard, checked against the manifest's sha256 and the value checks."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from cube.checksums import sha256_file
from cube.errors import RecordsError
from cube.protocol.items import Item
from cube.records.schema import RECORD_SCHEMA, SCHEMA_VERSION
from cube.records.store.layout import ALLOW_INCOMPLETE_ENV, ESSENTIAL_COLUMNS, MANIFEST_NAME
from cube.records.store.manifest import read_manifest
from cube.records.store.checks import (
    _check_duplicates,
    _check_qhash_consistency,
    _check_schema,
    _check_values,
    _read_shard,
    check_items,
)
from cube.records.store.cells import unfinished_cells


def recorded_dtypes(directory: str | Path, manifest: Mapping) -> dict[str, str]:
    """Shard file -> the precision its store recorded for it: the manifest's cell configuration,
    else the run log line that lists the file (runs from before cells were recorded). What a
    schema-1 shard, which has no ``dtype`` column, is read forward with (``migrate``)."""
    from cube.records.provenance import logged_files, read_run_logs

    by_cell = {key: str(cell["dtype"]) for key, cell in manifest.get("cells", {}).items() if cell.get("dtype")}
    out: dict[str, str] = {}
    try:
        entries = read_run_logs(directory)
    except RecordsError:
        entries = []  # a damaged log is reported by the readers that check it, not here
    for entry in entries:
        if not entry.get("dtype"):
            continue
        try:
            names = logged_files(entry)
        except RecordsError:
            continue
        for name in names:
            out[name] = str(entry["dtype"])
    for name in manifest.get("files", {}):
        cell = name.rsplit("--", 1)[0]
        if cell in by_cell:
            out[name] = by_cell[cell]
    return out


CHECKED_COLUMNS = ("probs", "first_token_ids", "n_tokens", "finish_reason", "gen_tokens")  # _check_values


def cell_dtypes(manifest: Mapping) -> dict[str, str]:
    """Shard file -> the precision its manifest's cell configuration records (cells that record none
    are left out): what a schema-2 shard's own ``dtype`` column must say (``_read_shard``)."""
    by_cell = {key: str(cell["dtype"]) for key, cell in manifest.get("cells", {}).items() if cell.get("dtype")}
    return {name: by_cell[name.rsplit("--", 1)[0]] for name in manifest.get("files", {})
            if name.rsplit("--", 1)[0] in by_cell}


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
            "written, but the store no longer lists them; if a `cube merge` into it was killed, run the "
            "same merge again (it completes it), else re-run the run's command on this store (it resumes "
            "and writes them again)"
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

    dtypes = recorded_dtypes(directory, manifest)
    by_cell = cell_dtypes(manifest)
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
        # the columns a reader checks are read even where not asked for: a bogus finish_reason or a
        # negative gen_tokens passed rescore and confirm (which read a subset) while resume refused it
        checked = None if wanted is None else wanted + [c for c in CHECKED_COLUMNS if c not in wanted]
        table = _read_shard(path, name, checked, dtypes.get(name), by_cell.get(name))
        listed_rows = manifest["files"][name].get("rows")
        if listed_rows is not None and table.num_rows != listed_rows:
            raise RecordsError(
                f"{where}: {table.num_rows} rows where {MANIFEST_NAME} lists {listed_rows} (file or manifest "
                "changed after writing)"
            )
        _check_values(table, where)
        tables.append(table if wanted is None else table.select(wanted))

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
