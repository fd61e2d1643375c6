"""The per-item record schema shared by the harness (writer) and the analysis (reader).

One record = one (model, item, protocol cell, scorer) decision. Records carry the item's key
(``uid`` + ``qhash``) and never benchmark text; the only free text is a (scrubbed) generation.
Bump ``SCHEMA_VERSION`` on any change to the columns; readers refuse other versions, except the
ones a migration here reads forward (``MIGRATIONS``).

Version 2 (issue 33) added ``dtype`` (the precision a record was scored in: a paired comparison
must not mix two, since bf16 against fp32 moves log-likelihoods enough to flip the few discordant
items a McNemar test rests on), and, for generations, ``gen_tokens`` and ``finish_reason`` (stop or
length: whether a parse failure is a truncation, the practice guide's §4.2 cause, or a format
failure). Version 1 shards are read through :func:`migrate_v1`: their precision from what the
store recorded of their run (the manifest's cell, else the run log line that wrote them), their
generation lengths as not recorded (null), never guessed.

Version 3 (issue 49) added, for generations, ``thinking`` (what a reasoning checkpoint's thinking
block did: ``cube.protocol.thinking.THINKING_OUTCOMES``; the answer is read after the block) and
``thinking_tokens`` (the tokens the block took). Version 1 and 2 shards are read forward through
:func:`migrate` (``migrate_v1``, then ``migrate_v2``): both columns null, not recorded, never
guessed from the stored text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from cube.protocol.thinking import THINKING_OUTCOMES
from cube.protocol.scorers import PASSES, SCORERS, ScoreResult, option_distribution, pass_scorers, run_scorers

if TYPE_CHECKING:
    from cube.protocol.items import Item

SCHEMA_VERSION = "cube.records/3"
SCHEMA_V2 = "cube.records/2"  # read through migrate_v2
SCHEMA_V1 = "cube.records/1"  # read through migrate_v1, then migrate_v2
SCHEMA_METADATA_KEY = b"cube.schema"  # Parquet file metadata key holding SCHEMA_VERSION

# The scorer groups, derived from the one scorer table (cube.protocol.scorers.SCORERS), here beside
# the record schema so that the harness (writer), the store and provenance (readers) share them.
# A run asks for a scorer by its name; its records carry the entry's record names (M6 and M6-cot
# as M6-strict and M6-lenient, the two extractors of one generation). M4-char (lm-eval's acc_norm,
# per character) has no pass: only `cube import lm-eval` writes it; cube's own is M4, per byte.
SCORER_NAMES = tuple(dict.fromkeys(r for s in SCORERS.values() for r in s.records))  # as stored
LABEL_SCORERS = pass_scorers("label")
CLOZE_SCORERS = pass_scorers("cloze")
GENERATION_SCORERS = tuple(s.name for s in SCORERS.values() if s.reads == "generation")
GENERATION_RECORD_SCORERS = tuple(dict.fromkeys(r for s in GENERATION_SCORERS for r in SCORERS[s].records))
JUDGEMENT_SCORERS = tuple(s.name for s in SCORERS.values() if s.reads == "judgement")
ALL_SCORERS = run_scorers()  # what a run can ask for
CLOZE_CELL = PASSES["cloze"].fixed_cell  # label_set, context, shots, order of cloze records
JUDGEMENT_CELL = PASSES["tf"].fixed_cell


def record_names(scorers: Iterable[str]) -> tuple[str, ...]:
    """The scorer names the records of these run scorers carry, in table order."""
    wanted = set(scorers)
    return tuple(dict.fromkeys(r for s in SCORERS.values() if s.name in wanted for r in s.records))

RUNLOG_NAME = "runlog.jsonl"  # each model folder's run log: one JSON line per finished run


def cell_shard_file(cell: str, chunk: int) -> str:
    """The file of chunk ``chunk`` of a harness cell (``<kind>--<cell>``; prefixed by the model
    folder, a store's cell key gives the shard's manifest name). One definition, shared by the
    runner that writes shards and the store that checks a cell's shards are all there."""
    return f"{cell}--{chunk:05d}.parquet"

def tie_text(groups: Sequence[Sequence[int]]) -> str:
    """Tie groups as the ``tie_groups`` column keeps them: ``"0=1=2=3"``, ``"1=3;0=2"``, ``""``."""
    return ";".join("=".join(str(i) for i in g) for g in groups)


def record_row(model: str, item: Item, scorer: str, cell: tuple[str, str, int, str], gold: int,
               result: ScoreResult | None, *, pred: int | None = None, generation: str | None = None,
               first_token_ids: Sequence[int] | None = None, n_tokens: Sequence[int] | None = None,
               dtype: str | None = None, gen_tokens: int | None = None, finish_reason: str | None = None,
               thinking: str | None = None, thinking_tokens: int | None = None) -> dict:
    """One record as a dict of RECORD_SCHEMA's columns: the one builder of the harness and the imports,
    so that a record means the same whoever wrote it.

    ``result``: a scored decision (its scores, their softmax, ties); None for a generation, whose
    ``pred`` (None: a parse failure) gets no scores and a one-hot distribution.
    ``dtype``: the precision the model ran in (None: not known, e.g. an import that does not say);
    ``gen_tokens`` and ``finish_reason`` (one of ``FINISH_REASONS``): a generation's length and why
    it ended, None for scored records; ``thinking`` (one of ``THINKING_OUTCOMES``) and
    ``thinking_tokens``: what a thinking block did in a generation and the tokens it took (None: not
    recorded).
    """
    if finish_reason is not None and finish_reason not in FINISH_REASONS:
        raise ValueError(f"finish_reason {finish_reason!r} is not one of {', '.join(FINISH_REASONS)}")
    if thinking is not None and thinking not in THINKING_OUTCOMES:
        raise ValueError(f"thinking {thinking!r} is not one of {', '.join(THINKING_OUTCOMES)}")
    label_set, context, shots, order = cell
    if result is not None:
        pred_i = int(result.pred)
        scores = np.asarray(result.scores, dtype=np.float64)
        probs = option_distribution(scores)
        tied, groups = bool(result.tied), tie_text(result.tie_groups)
    else:
        pred_i = -1 if pred is None else int(pred)
        scores = np.full(len(item.options), np.nan)
        probs = np.zeros(len(item.options))
        if pred is not None:
            probs[pred] = 1.0
        tied, groups = False, ""
    return {
        "model": model, "uid": item.uid, "qhash": item.qhash, "benchmark": item.benchmark,
        "subject": item.subject, "scorer": scorer, "label_set": label_set, "context": context,
        "shots": int(shots), "order": order, "gold": int(gold), "pred": pred_i,
        "correct": pred_i == gold, "parse_failed": pred_i < 0, "tied": tied, "tie_groups": groups,
        "scores": scores.tolist(), "probs": probs.astype(np.float32).tolist(),
        "first_token_ids": list(first_token_ids) if first_token_ids is not None else None,
        "n_tokens": list(n_tokens) if n_tokens is not None else None,
        "generation": generation,
        "dtype": dtype, "gen_tokens": None if gen_tokens is None else int(gen_tokens), "finish_reason": finish_reason,
        "thinking": thinking, "thinking_tokens": None if thinking_tokens is None else int(thinking_tokens),
    }


# Why a generation ended: "stop", the model wrote its end token; "length", it reached max_new_tokens.
FINISH_REASONS = ("stop", "length")


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
    # --- how it was computed (schema 2) -------------------------------------------------------
    pa.field("dtype", pa.string(), nullable=True),          # bfloat16 | float32 | ...; null: not recorded
    pa.field("gen_tokens", pa.int32(), nullable=True),      # generated tokens (end token excluded); M6 rows
    pa.field("finish_reason", pa.string(), nullable=True),  # stop | length (FINISH_REASONS); M6 rows
    # --- reasoning checkpoints (schema 3) -----------------------------------------------------
    pa.field("thinking", pa.string(), nullable=True),        # THINKING_OUTCOMES; M6 rows; null: not recorded
    pa.field("thinking_tokens", pa.int32(), nullable=True),  # tokens of the thinking block(s); null: not counted
])
V2_COLUMNS = ("dtype", "gen_tokens", "finish_reason")  # what schema 2 added to schema 1
V3_COLUMNS = ("thinking", "thinking_tokens")  # what schema 3 added to schema 2
V2_SCHEMA = pa.schema([f for f in RECORD_SCHEMA if f.name not in V3_COLUMNS])
V1_SCHEMA = pa.schema([f for f in V2_SCHEMA if f.name not in V2_COLUMNS])


def migrate_v1(table: pa.Table, dtype: str | None) -> pa.Table:
    """A schema-1 table (or a selection of its columns) as schema 2: ``dtype`` the precision its
    run recorded (None where nothing recorded it), ``gen_tokens`` and ``finish_reason`` null (not
    recorded: a count re-tokenized from the stored text would be an estimate, and a scrubbed
    generation is not the text the model wrote)."""
    n = table.num_rows
    out = table
    for field in V2_SCHEMA:
        if field.name in V2_COLUMNS and field.name not in out.column_names:
            value = dtype if field.name == "dtype" else None
            out = out.append_column(field, pa.array([value] * n, type=field.type))
    return out


def migrate_v2(table: pa.Table) -> pa.Table:
    """A schema-2 table (or a selection of its columns) as schema 3: ``thinking`` and
    ``thinking_tokens`` null, not recorded. Read again from the stored text they would be guesses:
    the text is scrubbed, and whether the limit was hit inside a block is not in it."""
    out = table
    for field in RECORD_SCHEMA:
        if field.name in V3_COLUMNS and field.name not in out.column_names:
            out = out.append_column(field, pa.nulls(table.num_rows, type=field.type))
    return out


def migrate(table: pa.Table, version: str, dtype: str | None) -> pa.Table:
    """A table of an older schema ``version`` read forward to this one, migration by migration."""
    if version == SCHEMA_V1:
        table = migrate_v1(table, dtype)
    if version in (SCHEMA_V1, SCHEMA_V2):
        table = migrate_v2(table)
    return table

KEY_COLUMNS = ("model", "uid", "scorer", "label_set", "context", "shots", "order")
ID_COLUMNS = ("model", "uid", "qhash", "benchmark", "subject", "scorer", "label_set", "context", "order", "tie_groups")
FREE_TEXT_COLUMNS = ("generation",)
MIGRATIONS = {SCHEMA_V1: migrate_v1, SCHEMA_V2: migrate_v2}  # older versions a reader reads forward (``migrate``)
SCHEMAS = {SCHEMA_VERSION: RECORD_SCHEMA, SCHEMA_V2: V2_SCHEMA, SCHEMA_V1: V1_SCHEMA}  # each version's columns
ADDED_COLUMNS = {SCHEMA_V1: V2_COLUMNS + V3_COLUMNS, SCHEMA_V2: V3_COLUMNS}  # columns an old version lacks
