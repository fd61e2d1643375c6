"""The per-item record schema shared by the harness (writer) and the analysis (reader).

One record = one (model, item, protocol cell, scorer) decision. Records carry the item's key
(``uid`` + ``qhash``) and never benchmark text; the only free text is a (scrubbed) generation.
Bump ``SCHEMA_VERSION`` on any change to the columns; readers refuse other versions.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "cube.records/1"
SCHEMA_METADATA_KEY = b"cube.schema"  # Parquet file metadata key holding SCHEMA_VERSION

# Scorer names as stored. M6 rows come in pairs from one generation, one per extractor.
# M4-char: log-likelihood per character of the choice, lm-evaluation-harness's acc_norm (only
# `cube import lm-eval` writes it; cube's own length normalisation is M4, per UTF-8 byte).
SCORER_NAMES = ("M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "M6-strict", "M6-lenient", "TF",
                "M4-char")

# The scorers a run asks for (run names), grouped by how the runner scores them; each writes
# records under the names in SCORER_NAMES (M6 and M6-cot as M6-strict and M6-lenient). Here, beside
# the record schema, so that the harness (writer) and provenance (reader) share them.
LABEL_SCORERS = ("M1-seq", "M1-strict")
CLOZE_SCORERS = ("M2", "M3", "M4", "M5")
GENERATION_SCORERS = ("M6", "M6-cot")  # each yields GENERATION_RECORD_SCORERS records
GENERATION_RECORD_SCORERS = ("M6-strict", "M6-lenient")  # the two extractors of one generation
JUDGEMENT_SCORERS = ("TF",)  # the item as four true/false statements (partial-credit groups)
ALL_SCORERS = LABEL_SCORERS + CLOZE_SCORERS + GENERATION_SCORERS + JUDGEMENT_SCORERS
CLOZE_CELL = ("-", "cloze", 0, "original")  # label_set, context, shots, order of cloze records
JUDGEMENT_CELL = ("-", "judgement", 0, "original")

RUNLOG_NAME = "runlog.jsonl"  # each model folder's run log: one JSON line per finished run


def cell_shard_file(cell: str, chunk: int) -> str:
    """The file of chunk ``chunk`` of a harness cell (``<kind>--<cell>``; prefixed by the model
    folder, a store's cell key gives the shard's manifest name). One definition, shared by the
    runner that writes shards and the store that checks a cell's shards are all there."""
    return f"{cell}--{chunk:05d}.parquet"

RECORD_SCHEMA = pa.schema([
    # --- keys -------------------------------------------------------------------------------
    pa.field("model", pa.string(), nullable=False),       # a name from config/models.yaml
    pa.field("uid", pa.string(), nullable=False),         # <benchmark>/<subject>/<split>/<row>
    pa.field("qhash", pa.string(), nullable=False),       # sha256(question UTF-8)[:16]
    pa.field("benchmark", pa.string(), nullable=False),
    pa.field("subject", pa.string(), nullable=False),
    pa.field("scorer", pa.string(), nullable=False),      # one of SCORER_NAMES
    pa.field("label_set", pa.string(), nullable=False),   # e.g. L1_halfwidth
    pa.field("context", pa.string(), nullable=False),     # answer context, e.g. zh_cue
    pa.field("shots", pa.int8(), nullable=False),         # 0 or 5
    pa.field("order", pa.string(), nullable=False),       # original | shift1 | shift2 | shift3
    # --- outcome ----------------------------------------------------------------------------
    pa.field("gold", pa.int8(), nullable=False),          # displayed position of the gold option
    pa.field("pred", pa.int8(), nullable=False),          # predicted position; -1 = parse failure
    pa.field("correct", pa.bool_(), nullable=False),
    pa.field("parse_failed", pa.bool_(), nullable=False),  # M6 only; never counted as wrong-by-choice
    # --- ties (M1-strict and any scorer whose options share scored tokens) ---------------------
    pa.field("tied", pa.bool_(), nullable=False),          # the top score is shared
    pa.field("tie_groups", pa.string(), nullable=False),   # e.g. "0=1=2=3" or "1=3;0=2"; "" if none
    # --- scores -----------------------------------------------------------------------------
    pa.field("scores", pa.list_(pa.float64()), nullable=False),      # one per option (higher = better)
    pa.field("probs", pa.list_(pa.float32()), nullable=False),       # softmax of scores (ECE)
    pa.field("first_token_ids", pa.list_(pa.int32()), nullable=True),  # per option, label scorers
    pa.field("n_tokens", pa.list_(pa.int16()), nullable=True),       # continuation tokens per option
    # --- free text (scrubbed before release) --------------------------------------------------
    pa.field("generation", pa.string(), nullable=True),    # M6 rows only
])

KEY_COLUMNS = ("model", "uid", "scorer", "label_set", "context", "shots", "order")
ID_COLUMNS = ("model", "uid", "qhash", "benchmark", "subject", "scorer", "label_set", "context", "order", "tie_groups")
FREE_TEXT_COLUMNS = ("generation",)
