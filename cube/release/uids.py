"""Released identifiers: every id and subject ``cube run`` accepts, in the form a bundle holds.

A bundle's identifier columns have fixed forms (``cube.records.leakage.tables.ID_FORMS``), so that
no text hides where the leakage audit only looks for long quotes. CMMLU's uids fit them; a user's
file may have string ids (``e1``) and Chinese subject names (``算术``), which ``cube run`` accepts
and ``cube release build`` refused. Such a component is released as ``x`` and the first 12 hex
digits of the sha256 of its UTF-8 text, in the uid and in the ``subject`` / ``benchmark`` columns
alike, and the bundle's manifest records the mapping back (``uid_escapes``, audited for leakage
with the rest of the manifest). A component already of its form is kept, so CMMLU's bundles are
unchanged; ``release verify --benchmark FILE`` releases the file's uids the same way to match them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from cube.records.leakage.tables import ID_FORMS

# The form of each uid component (benchmark/subject/split/id), as the uid's ID_FORM reads them
BENCHMARK_FORM = r"[a-z0-9_-]{1,32}"
SUBJECT_FORM = r"[A-Za-z0-9_-]{1,64}"
SPLIT_FORM = r"[a-z]{1,16}"
ESCAPED_FORM = r"x[0-9a-f]{12}"
ID_FORM = rf"(?:[0-9]{{1,9}}|{ESCAPED_FORM})"
UID_FORM = ID_FORMS["uid"]  # ^BENCHMARK_FORM/SUBJECT_FORM/SPLIT_FORM/ID_FORM$ (a test holds them equal)
ESCAPE_RULE = ("a uid component (benchmark, subject, id) not of its form is released as 'x' and the first 12 hex "
               "digits of the sha256 of its UTF-8 text, in the uid and the subject and benchmark columns alike; "
               "uid_escapes maps each back to the text the records were made with")


def escaped(text: str) -> str:
    """``x`` + the first 12 hex digits of the sha256 of ``text``'s UTF-8."""
    return "x" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def released_component(text: str, form: str) -> str:
    """``text`` where it is of ``form``, else its escaped form."""
    return text if re.fullmatch(form, text) else escaped(text)


def released_uid(uid: str) -> str:
    """A record's uid as a bundle holds it (unchanged where every component is of its form)."""
    parts = uid.split("/")
    if len(parts) != 4:
        return uid  # not a uid at all: the form check names it
    benchmark, subject, split, row = parts
    return "/".join((released_component(benchmark, BENCHMARK_FORM), released_component(subject, SUBJECT_FORM),
                     split, released_component(row, r"[0-9]{1,9}")))


def escapes_of(uids: Iterable[str]) -> dict[str, str]:
    """Escaped form -> original text, for every component of ``uids`` that is escaped."""
    mapping: dict[str, str] = {}
    for uid in uids:
        parts = uid.split("/")
        if len(parts) != 4:
            continue
        for text, form in zip(parts, (BENCHMARK_FORM, SUBJECT_FORM, SPLIT_FORM, r"[0-9]{1,9}")):
            if not re.fullmatch(form, text):
                mapping[escaped(text)] = text
    return dict(sorted(mapping.items()))


def release_ids(table: pa.Table) -> tuple[pa.Table, dict[str, str]]:
    """``table`` with its uid, subject and benchmark columns in their released form, and the
    mapping back (empty, and the table unchanged, where every id is already of its form)."""
    uids = pc.unique(table.column("uid")).to_pylist()
    mapping = escapes_of(uids)
    if not mapping:
        return table, {}
    back = {original: key for key, original in mapping.items()}

    def replaced(name: str, convert) -> None:
        nonlocal table
        if name not in table.column_names:
            return
        column = table.column(name)
        values = pc.unique(column).to_pylist()
        new = pa.array([convert(v) if v is not None else None for v in values], type=pa.string())
        index = pc.index_in(column, value_set=pa.array(values, type=column.type))
        position = table.column_names.index(name)
        table = table.set_column(position, table.schema.field(position), pc.take(new, index))

    replaced("uid", released_uid)
    replaced("subject", lambda v: back.get(v, v) if not re.fullmatch(SUBJECT_FORM, v) else v)
    replaced("benchmark", lambda v: back.get(v, v) if not re.fullmatch(BENCHMARK_FORM, v) else v)
    return table, mapping


__all__ = ["ESCAPE_RULE", "UID_FORM", "escaped", "escapes_of", "release_ids", "released_component",
           "released_uid"]
