"""A store's file names, lock files and name patterns, and the columns every read keeps."""

from __future__ import annotations

import re

from cube.records.schema import KEY_COLUMNS

MANIFEST_NAME = "MANIFEST.json"
MANIFEST_LOCK = ".manifest.lock"  # held for each manifest update (parallel shard writers)
WRITER_LOCK = ".writer.lock"  # the pid of the run holding the store's writer lock (a flock on the folder)
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
    "tied", "tie_groups", "scores", "dtype",
    "thinking",  # a no-answer generation's cause (schema 3): rescore's and explain's thinking shares
)
