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

from cube.records.store.layout import (
    ALLOW_INCOMPLETE_ENV,
    ESSENTIAL_COLUMNS,
    LOCK_FILES,
    MANIFEST_LOCK,
    MANIFEST_NAME,
    MODEL_NAME,
    QHASH_PATTERN,
    SHARD_FILE,
    SHARD_PATTERN,
    WRITER_LOCK,
)
from cube.records.store.grouping import PROTOCOL_COLUMNS, column_codes, group_ids, list_matrix, protocols
from cube.records.store.manifest import create_store, manifest_lock, read_manifest, writer_lock
from cube.records.store.checks import check_items
from cube.records.store.cells import (
    CellToRecord,
    check_cells,
    config_differences,
    promised_shards,
    record_cells,
    rows_per_item,
    shard_problem,
    unfinished_cells,
)
from cube.records.store.write import conform, from_columns, write_records, write_shard
from cube.records.store.read import read_records

__all__ = [
    "ALLOW_INCOMPLETE_ENV", "ESSENTIAL_COLUMNS", "LOCK_FILES", "MANIFEST_LOCK", "MANIFEST_NAME", "MODEL_NAME",
    "QHASH_PATTERN", "SHARD_FILE", "SHARD_PATTERN", "WRITER_LOCK", "PROTOCOL_COLUMNS", "column_codes",
    "group_ids", "list_matrix", "protocols", "create_store", "manifest_lock", "read_manifest", "writer_lock",
    "check_items", "CellToRecord", "check_cells", "config_differences", "promised_shards", "record_cells",
    "rows_per_item", "shard_problem", "unfinished_cells", "conform", "from_columns", "write_records",
    "write_shard", "read_records",
]
