"""Leakage in record tables and Parquet files: the scrub against each record's own item, and the
audit of every string column against every item, read in row batches.

This is the release's use of the engine (``cube.records.leakage``): ``cube release build`` scrubs
and audits before it writes anything, ``cube release audit`` and ``verify`` scan the shards, and
``cube import lm-eval`` checks identifier forms. A hit, like the engine's, never holds the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from cube.errors import CubeError, RecordsError
from cube.protocol.chat import CHAT_MARK, THINKING_MARKS
from cube.protocol.items import Item
from cube.records.leakage.audit import TextHit, audit_texts
from cube.records.leakage.index import LeakageIndex
from cube.records.leakage.scrubbing import scrub
from cube.records.schema import FINISH_REASONS, FREE_TEXT_COLUMNS, SCORER_NAMES, THINKING_OUTCOMES

# The leakage audit scans EVERY string and binary column, identifiers included: a writer (or an
# adversary) can put text in any of them, and tie_groups once carried planted text through audit,
# build and verify. Identifiers cost little: each batch audits a column's distinct values once.
_BATCH_ROWS = 65_536
# Identifier columns and the one form each may take. A value of another form is an error (text
# hidden where nobody scrubs, as tie_groups once allowed); a value of its form is still scanned,
# but only for question spans, near copies and options of NEAR_MIN_CHARS or more, because hex
# digits and model names share short options ("1949", "135m") by chance. tie_groups: groups of two
# or more option positions joined by "=", groups joined by ";", "" for no tie (cube.harness.passes writes
# it, cube.analysis.confirm parses it).
_NAME = r"^[A-Za-z0-9._+-]{1,64}$"
ID_FORMS = {
    "tie_groups": r"^(?:[0-9]{1,3}(?:=[0-9]{1,3})+(?:;[0-9]{1,3}(?:=[0-9]{1,3})+)*)?$",
    "qhash": r"^[0-9a-f]{16}$",
    "scorer": "^(?:" + "|".join(re.escape(name) for name in SCORER_NAMES) + ")$",
    # an id (or subject, benchmark) not of its form is released escaped, x + 12 hex (cube.release.uids)
    "uid": r"^[a-z0-9_-]{1,32}/[A-Za-z0-9_-]{1,64}/[a-z]{1,16}/(?:[0-9]{1,9}|x[0-9a-f]{12})$",
    **{name: _NAME for name in ("model", "benchmark", "subject", "label_set", "order")},
    # a chat cell's context carries its chat form (cube.protocol.chat.record_context): zh_cue@chat,
    # zh_cue@chat+nothink, zh_cue@chat+think; the name part as any other name
    "context": r"^[A-Za-z0-9._+-]{1,64}(?:" + re.escape(CHAT_MARK) + "(?:" + "|".join(
        re.escape(mark) for mark in THINKING_MARKS.values()) + ")?)?$",
    # schema 2 (issue 33): the precision a record was scored in, and why a generation ended
    "dtype": r"^(?:bfloat16|float16|float32)$",
    "finish_reason": "^(?:" + "|".join(FINISH_REASONS) + ")$",
    # schema 3 (issue 49): what a reasoning checkpoint's thinking block did
    "thinking": "^(?:" + "|".join(THINKING_OUTCOMES) + ")$",
}


# --------------------------------------------------------------------------------------------
# Scrub
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScrubStats:
    """What the scrub removed; published in the bundle's manifest (claim 5 reports it)."""

    columns: tuple[str, ...]
    n_texts: int  # non-null free-text fields seen
    n_changed: int  # fields from which something was removed
    n_spans: int  # removed spans (each became one marker)
    n_chars: int  # original characters removed


def scrub_records(
    table: pa.Table, items: Iterable[Item] | Mapping[str, Item]
) -> tuple[pa.Table, ScrubStats]:
    """Scrub every free-text column of ``table`` against each record's OWN item.

    Removing the item's options and its question spans is :func:`cube.records.leakage.scrub`; a record
    whose text cannot be scrubbed (its uid is not among ``items``, or its qhash says the item's
    question differs) is refused rather than published unscrubbed.
    """
    by_uid = items if isinstance(items, Mapping) else {item.uid: item for item in items}
    columns = tuple(c for c in FREE_TEXT_COLUMNS if c in table.column_names)
    n_texts = n_changed = n_spans = n_chars = 0
    uids = table.column("uid")
    qhashes = table.column("qhash")
    for column in columns:
        values = table.column(column)
        rows = np.flatnonzero(~values.is_null().to_numpy(zero_copy_only=False))
        if rows.size == 0:
            continue
        texts = values.to_pylist()
        for row in tqdm(rows.tolist(), desc=f"scrub {column}", unit="text", disable=None):
            uid = uids[row].as_py()
            item = by_uid.get(uid)
            if item is None:
                raise RecordsError(
                    f"column uid, row {row}: {uid!r} is not in the item set, so its {column} "
                    "cannot be scrubbed against its own item"
                )
            if item.qhash != qhashes[row].as_py():
                raise RecordsError(
                    f"column qhash, row {row}: uid {uid!r} has qhash {qhashes[row].as_py()!r} but "
                    f"the item set has {item.qhash!r} (different question text)"
                )
            result = scrub(texts[row], item.question, item.options)
            n_texts += 1
            if result.n_removed_spans:
                texts[row] = result.text
                n_changed += 1
                n_spans += result.n_removed_spans
                n_chars += result.n_removed_chars
        position = table.column_names.index(column)
        table = table.set_column(
            position, table.schema.field(position), pa.array(texts, type=values.type)
        )
    return table, ScrubStats(columns, n_texts, n_changed, n_spans, n_chars)


# --------------------------------------------------------------------------------------------
# Leakage audit of tables and Parquet files
# --------------------------------------------------------------------------------------------


def _is_string(type_: pa.DataType) -> bool:
    """A string or binary type: binary can carry text as well (the audit reads it as UTF-8)."""
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    return any(check(type_) for check in (
        pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view, pa.types.is_binary,
        pa.types.is_large_binary, pa.types.is_binary_view, pa.types.is_fixed_size_binary))


def _holds_strings(type_: pa.DataType) -> bool:
    """Whether a nested type (list, struct, map) has a string or binary anywhere inside."""
    if _is_string(type_):
        return True
    return any(_holds_strings(type_.field(k).type) for k in range(getattr(type_, "num_fields", 0)))


def text_columns(schema: pa.Schema, where: str) -> list[str]:
    """Every string and binary column, which the audit scans; refuses text it could not see."""
    if "uid" not in schema.names:
        raise CubeError(f"{where} has no 'uid' column to name the records by")
    columns = []
    for field_ in schema:
        if _is_string(field_.type):
            columns.append(field_.name)
        elif _holds_strings(field_.type):
            raise CubeError(
                f"{where} column {field_.name!r} is {field_.type}: the audit scans top-level "
                "string and binary columns only; store that text as one string column per field"
            )
    return columns


def check_id_forms(batch: pa.RecordBatch | pa.Table, where: str, first_row: int = 0) -> None:
    """Refuse an identifier (``ID_FORMS``) that is not of its form, e.g. text in tie_groups.

    The message gives the row and the length, never the value, which may quote an item.
    """
    for name, form in ID_FORMS.items():
        if name not in batch.schema.names:
            continue
        column = batch.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise RecordsError(f"{where}: column {name} is {column.type}, not a string column")
        valid = pc.fill_null(pc.match_substring_regex(column, form), True)
        bad = np.flatnonzero(~valid.to_numpy(zero_copy_only=False).astype(bool))
        if bad.size:
            row = int(bad[0])
            raise RecordsError(
                f"{where}: column {name}, row {first_row + row}: a {len(column[row].as_py())}-"
                f"character value not of the form {form} ({bad.size} such rows in this batch; "
                "the value is not shown, it may quote an item)"
            )


def parquet_files(records: Path) -> list[Path]:
    """RECORDS as a list of files: the file itself, or every ``*.parquet`` below the folder."""
    records = Path(records)
    if records.is_file():
        return [records]
    if records.is_dir():
        files = sorted(records.rglob("*.parquet"))
        if not files:
            raise CubeError(f"no *.parquet files in {records}")
        return files
    raise CubeError(f"records not found: {records}")


def open_parquet(path: Path) -> tuple[pq.ParquetFile, list[str]]:
    """(opened file, its free-text columns), each failure one line naming the file."""
    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
    except (OSError, pa.ArrowException) as exc:
        raise CubeError(f"cannot read Parquet file {path}: {str(exc).splitlines()[0]}") from None
    return parquet, text_columns(schema, str(path))


@dataclass(frozen=True)
class RowHit:
    """A leak in one field of one row; like every hit, never holds the leaked text."""

    row: int
    uid: str
    column: str
    hit: TextHit


def audit_parquet(
    parquet: pq.ParquetFile, columns: Sequence[str], index: LeakageIndex,
    where: str = "Parquet file",
) -> Iterator[RowHit]:
    """Every hit in one file, read in row batches so that a large file never sits in memory."""
    if not columns:
        return
    first_row = 0
    read = list(dict.fromkeys(["uid", *columns]))
    with tqdm(total=parquet.metadata.num_rows, unit="rec", desc="audit", disable=None) as progress:
        for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=read):
            yield from _audit_batch(batch, columns, index, first_row, where)
            first_row += batch.num_rows
            progress.update(batch.num_rows)


def audit_table(table: pa.Table, index: LeakageIndex) -> list[RowHit]:
    """Every hit in an in-memory table (the scrubbed records, before anything is written)."""
    columns = text_columns(table.schema, "records")
    hits: list[RowHit] = []
    first_row = 0
    for batch in table.select(columns).to_batches(max_chunksize=_BATCH_ROWS):
        hits += _audit_batch(batch, columns, index, first_row, "records")
        first_row += batch.num_rows
    return hits


def _audit_batch(
    batch: pa.RecordBatch, columns: Sequence[str], index, first_row: int, where: str
) -> list[RowHit]:
    """Audit each column's distinct values once and report every row holding a leaking one, in
    both forms (``audit_texts``): the identifier floor holds for either form's phrases."""
    check_id_forms(batch, where, first_row)
    uids = batch.column("uid").to_pylist()
    hits = []
    for floor, group in ((index.near_min_chars, [c for c in columns if c in ID_FORMS]),
                         (0, [c for c in columns if c not in ID_FORMS])):
        texts, owner = [], []  # one audit call per group: the distinct values of its columns
        for column in group:
            values = batch.column(column)
            if pa.types.is_dictionary(values.type):
                values = values.cast(values.type.value_type)
            encoded = pc.dictionary_encode(values)
            rows_of = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
            distinct = encoded.dictionary.to_pylist()
            owner += [(column, rows_of, k) for k in range(len(distinct))]
            texts += [_as_text(v) for v in distinct]
        for hit in audit_texts(texts, index, min_phrase_chars=floor):
            column, rows_of, k = owner[hit.text]
            for row in np.flatnonzero(rows_of == k).tolist():
                hits.append(RowHit(first_row + row, uids[row], column, replace(hit, text=row)))
    return sorted(hits, key=lambda h: (h.row, h.column, h.hit.offset))


def _as_text(value: str | bytes | None) -> str:
    """A binary value is read as UTF-8; bytes that are not become U+FFFD, which matches nothing."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else value


def describe_hit(hit: RowHit) -> str:
    """One shareable line: where the leak is and whose text it is, never the text itself."""
    encoded = f" encoding={hit.hit.encoding}" if hit.hit.encoding else ""
    return (f"uid={hit.uid} field={hit.column} offset={hit.hit.offset} chars={hit.hit.n_chars} "
            f"kind={hit.hit.kind}{encoded} item={hit.hit.item_uid}")
