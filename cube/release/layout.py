"""Where each file lies in a release bundle (the layout ``cube.release.bundle`` documents)."""

from __future__ import annotations

from cube.checksums import SUMS_FILE
from cube.records.store import MANIFEST_NAME  # the bundle's manifest is named as a store's

BUNDLE_SCHEMA = "cube.release/1"
RECORDS_DIR = "records"
RUNS_DIR = "runs"
PREDICTION_PATH = "predictions/audit_frozen.json"
SUMS_NAME = SUMS_FILE

__all__ = ["BUNDLE_SCHEMA", "MANIFEST_NAME", "PREDICTION_PATH", "RECORDS_DIR", "RUNS_DIR", "SUMS_NAME"]
