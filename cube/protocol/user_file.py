"""A user's own multiple-choice file: ``cube run --benchmark PATH``.

A researcher with an in-house set (a JSONL of questions, options and answers) gets every protocol
check cube makes for CMMLU. PATH is a ``.jsonl``, ``.csv`` or ``.parquet`` file, or a folder with
one such file per split (``dev``, ``val``, ``test``). One row is one item:

- ``question``: the question text;
- the options: a ``choices`` list, or columns ``A`` ... ``J`` (a row with fewer options leaves its
  last columns empty); 2 to 10 options;
- ``answer``: a letter (``A`` ... ``J``) or a 0-based index;
- optional ``id`` (default: the row, counted from 0), ``subject`` (default ``all``), ``category``,
  ``split`` (default: the file's name in a folder, else ``test``).

An optional card (``<file stem>.card.yaml`` or ``card.yaml`` beside the data, or ``--card``) names
the benchmark, its language and prompt format, the header and line formats, extra answer contexts,
subject display names, the licence and the source (``Card``).

Why it is strict: a bad row found after a model has loaded costs the load, and a silently skipped
or "cleaned" row changes the items a score is over. Every problem is one line naming the file, the
row and the field, raised before anything else happens. Text is kept verbatim (the question's
sha256 is the item's public fingerprint, as for CMMLU). Duplicate option texts within an item are
not an error (a real set may have two "None of the above"), but they tie every cloze scorer, so
``option_warnings`` names them.
"""

from __future__ import annotations

import csv
import io
import json
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cube.checksums import sha256_bytes
from cube.errors import ConfigError, ItemsError, shown_value
from cube.files import parse_json_lines
from cube.protocol.items import Item
from cube.protocol.label_sets import MAX_OPTIONS

SUFFIXES = (".jsonl", ".csv", ".parquet")
SPLITS = ("dev", "val", "test")
LETTERS = tuple("ABCDEFGHIJ")[:MAX_OPTIONS]
MIN_OPTIONS = 2
MAX_FIELD_CHARS = 100_000  # no real question or option comes near; a bigger field is a broken file
MAX_FILE_BYTES = 256 << 20
DEFAULT_SUBJECT = "all"
DEFAULT_SPLIT = "test"
CARD_KEYS = ("name", "title", "language", "format", "header", "question", "option", "contexts",
             "subject_names", "licence", "source", "thinking_markers")
LANGUAGE_FORMATS = {"en": "en_mcq", "zh": None}  # None: the exam format of CMMLU and C-Eval


@dataclass(frozen=True)
class Card:
    """What a user's file says about itself beside its rows (all optional).

    ``name``: the benchmark name records carry (default: the file's or folder's stem);
    ``language``: ``en`` (prompt format ``en_mcq``) or ``zh`` (the exam format); ``format``: a
    format of config/templates.yaml by name; ``header`` / ``question`` / ``option``: the line
    formats (``{subject}``, ``{question}``, ``{label}`` and ``{text}``); ``contexts``: extra answer
    contexts (name -> cue, label_prefix); ``subject_names``: subject -> the name the header shows;
    ``licence`` and ``source``: what a release manifest says about the items; ``thinking_markers``:
    ``[OPEN, CLOSE]``, where a reasoning model's thinking block ends in a generation on these items
    (``cube.protocol.thinking``; default ``<think>``/``</think>`` or the tokenizer's own pair).
    """

    name: str
    title: str = ""
    language: str | None = None
    format: str | None = None
    header: str | None = None
    question: str | None = None
    option: str | None = None
    contexts: dict[str, dict[str, str]] = field(default_factory=dict)
    subject_names: dict[str, str] = field(default_factory=dict)
    licence: str = "unknown (the card names none)"
    source: str = ""
    path: Path | None = None  # the card file read, if any
    thinking_markers: tuple[str, str] | None = None

    def prompt_format(self) -> str | None:
        if self.format is not None:
            return self.format
        if self.language is None:
            return None
        if self.language not in LANGUAGE_FORMATS:
            raise ConfigError(f"{self.path}: language {self.language!r} is not one of {', '.join(LANGUAGE_FORMATS)}; "
                              "set `format:` or the line formats instead")
        return LANGUAGE_FORMATS[self.language]

    def template_overrides(self) -> dict:
        out: dict = {k: v for k, v in (("header", self.header), ("question", self.question), ("option", self.option))
                     if v is not None}
        if self.thinking_markers is not None:  # merged into the templates' generation block
            out["generation"] = {"thinking_markers": list(self.thinking_markers)}
        return out


# ---- reading rows ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One row as read: its number (0-based among data rows), its physical line, its fields."""

    number: int
    line: int | None
    fields: dict[str, Any]

    def where(self, path: Path) -> str:
        line = f" (line {self.line})" if self.line is not None else ""
        return f"{path} row {self.number}{line}"


def _read_bytes(path: Path) -> bytes:
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):  # /dev/zero reads forever, a FIFO waits for a writer
            raise ItemsError(f"{path}: not a regular file (a device, FIFO or socket); give a .jsonl, .csv or "
                             ".parquet file")
        size = status.st_size
        if size > MAX_FILE_BYTES:
            raise ItemsError(f"{path}: {size:,} bytes, more than {MAX_FILE_BYTES >> 20} MiB; not a benchmark file")
        return path.read_bytes()
    except OSError as exc:
        raise ItemsError(f"{path}: cannot read ({exc.strerror})") from None


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ItemsError(f"{path} line {line}: not UTF-8 (byte 0x{data[exc.start]:02x}); save the file as "
                         "UTF-8") from None


def _jsonl_rows(path: Path, text: str) -> list[Row]:
    rows = []
    for line_no, value in parse_json_lines(text, ItemsError, lambda number: f"{path} line {number}"):
        if not isinstance(value, dict):
            raise ItemsError(f"{path} line {line_no}: expected an object with question, choices and answer")
        rows.append(Row(len(rows), line_no, value))
    return rows


def _csv_rows(path: Path, text: str) -> list[Row]:
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        header = next(reader, None)
        if header is None:
            raise ItemsError(f"{path}: empty file (no header)")
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:  # a dict of the row would keep the last column of the name: an option lost, the answer moved
            raise ItemsError(f"{path}: the header repeats column {', '.join(repr(n) for n in repeated)}; each column "
                             "name must appear once")
        rows = []
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                raise ItemsError(f"{path} row {len(rows)} (line {reader.line_num}): {len(cells)} columns, "
                                 f"the header has {len(header)}")
            rows.append(Row(len(rows), reader.line_num, dict(zip(header, cells))))
    except csv.Error as exc:
        raise ItemsError(f"{path}: malformed CSV ({exc})") from None
    if "choices" in header:
        for row in rows:  # a choices column in a CSV holds a JSON list
            cell = row.fields["choices"]
            try:
                row.fields["choices"] = json.loads(cell)
            except json.JSONDecodeError:
                raise ItemsError(f"{row.where(path)}: field choices is not a JSON list "
                                 "(use columns A, B, ... in a CSV)") from None
    return rows


def _parquet_rows(path: Path, data: bytes) -> list[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise ItemsError(f"{path}: not a readable Parquet file ({exc})") from None
    return [Row(n, None, values) for n, values in enumerate(table.to_pylist())]


def read_rows(path: Path) -> tuple[list[Row], str]:
    """The rows of one file, and its sha256 (what a run records: a changed file refuses a resume)."""
    data = _read_bytes(path)
    digest = sha256_bytes(data)
    if path.suffix == ".parquet":
        return _parquet_rows(path, data), digest
    text = _decode(path, data)
    return (_jsonl_rows(path, text) if path.suffix == ".jsonl" else _csv_rows(path, text)), digest


# ---- one row into one item ------------------------------------------------------------------------

def _text(value: Any, where: str, name: str, required: bool = True) -> str | None:
    if value is None or (isinstance(value, float) and value != value):  # a Parquet null, a pandas NaN
        if required:
            raise ItemsError(f"{where}: field {name} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ItemsError(f"{where}: field {name} is a {type(value).__name__}, not text")
    text = value if isinstance(value, str) else str(value)
    if len(text) > MAX_FIELD_CHARS:
        raise ItemsError(f"{where}: field {name} has {len(text):,} characters, more than {MAX_FIELD_CHARS:,}; "
                         "not a question or an option")
    return text


def _options(fields: dict, where: str) -> tuple[str, ...]:
    if "choices" in fields and fields["choices"] is not None:
        raw = fields["choices"]
        if not isinstance(raw, (list, tuple)):
            raise ItemsError(f"{where}: field choices is a {type(raw).__name__}, not a list of option texts")
        options = [_text(v, where, f"choices[{i}]") for i, v in enumerate(raw)]
        names = [f"choices[{i}]" for i in range(len(options))]
    else:
        columns = [c for c in LETTERS if c in fields]
        if not columns:
            raise ItemsError(f"{where}: field choices is missing (give a choices list or columns A, B, ...)")
        if "K" in fields:
            raise ItemsError(f"{where}: field K: more than {MAX_OPTIONS} option columns (A to J at most)")
        values = [_text(fields.get(c), where, c, required=False) or "" for c in columns]
        while values and values[-1] == "":  # fewer options than columns: the last cells are empty
            values.pop()
        options, names = values, list(columns[: len(values)])
    if len(options) < MIN_OPTIONS or len(options) > MAX_OPTIONS:
        raise ItemsError(f"{where}: field {'choices' if 'choices' in fields else 'A..J'} has {len(options)} "
                         f"option(s); an item needs {MIN_OPTIONS} to {MAX_OPTIONS}")
    for name, text in zip(names, options):
        if not text.strip():
            raise ItemsError(f"{where}: field {name}: empty option")
    return tuple(options)


def _answer(value: Any, n_options: int, where: str) -> int:
    if value is None or value == "":
        raise ItemsError(f"{where}: field answer is missing")
    if isinstance(value, bool):
        raise ItemsError(f"{where}: field answer {shown_value(value)} is not a letter or a 0-based index")
    if isinstance(value, int):
        index = value
    elif isinstance(value, str) and value.strip() in LETTERS:
        index = LETTERS.index(value.strip())
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():  # "²".isdigit()
        index = int(value.strip())
    else:
        raise ItemsError(f"{where}: field answer {shown_value(value)} is not a letter A..J or a 0-based index")
    if not 0 <= index < n_options:
        raise ItemsError(f"{where}: field answer {shown_value(value)} is out of range: the item has {n_options} options "
                         f"({LETTERS[0]}..{LETTERS[n_options - 1]}, or 0..{n_options - 1})")
    return index


def _row_id(fields: dict, row: Row, where: str) -> int | str:
    value = fields.get("id")
    if value is None or value == "":
        return row.number
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = _text(value, where, "id")
    if text.strip().isascii() and text.strip().isdigit():  # "²".isdigit() is True, int("²") fails
        return int(text.strip())
    if "/" in text or not text.strip() or text != text.strip():
        raise ItemsError(f"{where}: field id {text!r} must be non-empty, without '/' or surrounding spaces")
    return text


def _name_field(fields: dict, name: str, default: str | None, where: str) -> str | None:
    value = _text(fields.get(name), where, name, required=False)
    if value is None or value == "":
        return default
    if "/" in value or value != value.strip():
        raise ItemsError(f"{where}: field {name} {value!r} must have no '/' or surrounding spaces")
    return value


@dataclass(frozen=True)
class FileItems:
    """The items of one user file, with what the taxonomy and the warnings need."""

    items: list[Item]
    categories: dict[str, str]  # subject -> category, where rows give one


def items_of_file(path: Path, benchmark: str, card: Card, file_split: str | None) -> tuple[FileItems, str]:
    """Every row of ``path`` as an Item (one ItemsError line for the first bad one), and the sha256."""
    rows, digest = read_rows(path)
    if not rows:
        raise ItemsError(f"{path}: no rows")
    present = set().union(*(r.fields for r in rows))
    for required in ("question", "answer"):
        if required not in present:
            raise ItemsError(f"{path} row 0: field {required} is missing (no such column)")
    items, categories, seen = [], {}, {}
    for row in rows:
        where = row.where(path)
        fields = row.fields
        question = _text(fields.get("question"), where, "question")
        if not question.strip():
            raise ItemsError(f"{where}: field question is empty")
        options = _options(fields, where)
        answer = _answer(fields.get("answer"), len(options), where)
        subject = _name_field(fields, "subject", DEFAULT_SUBJECT, where)
        split = _name_field(fields, "split", file_split or DEFAULT_SPLIT, where)
        if split not in SPLITS:
            raise ItemsError(f"{where}: field split {split!r} is not one of {', '.join(SPLITS)}")
        row_id = _row_id(fields, row, where)
        key = (subject, split, row_id)  # the uid: benchmark/subject/split/id
        if key in seen:
            raise ItemsError(f"{where}: field id {row_id!r} duplicates row {seen[key]} (subject {subject}, split "
                             f"{split}); ids must be unique within a subject and split")
        seen[key] = row.number
        category = _name_field(fields, "category", None, where)
        if category is not None:
            if categories.setdefault(subject, category) != category:
                raise ItemsError(f"{where}: field category {category!r}: subject {subject!r} is already in "
                                 f"category {categories[subject]!r}")
        items.append(Item(benchmark, subject, split, row_id, question, options, answer,
                          card.subject_names.get(subject, subject)))
    return FileItems(items, categories), digest


# ---- the card ------------------------------------------------------------------------------------

def card_path(path: Path) -> Path | None:
    """The card beside the data: ``<stem>.card.yaml`` for a file, ``card.yaml`` in a folder."""
    candidate = path / "card.yaml" if path.is_dir() else path.with_name(path.stem + ".card.yaml")
    return candidate if candidate.is_file() else None


LINE_FIELDS = {"header": ("subject",), "question": ("question",), "option": ("label", "text")}


def _check_line_format(path: Path, key: str, text: str, allowed: tuple[str, ...]) -> None:
    """A card's line format names only its own fields (``{nope}``, ``{0}`` or ``{text.upper}`` raised
    a traceback at the first prompt)."""
    import string

    try:
        fields = [name for _, name, spec, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise ConfigError(f"{path}: card key {key} {text!r} is not a line format ({exc}); write literal braces "
                          "as {{ and }}") from None
    bad = [name for name in fields if name not in allowed]
    if bad:
        raise ConfigError(f"{path}: card key {key} names {{{bad[0]}}}; its line format takes "
                          f"{', '.join('{' + a + '}' for a in allowed)} only (literal braces as {{{{ and }}}})")


def read_card(path: Path | None, default_name: str) -> tuple[Card, bytes]:
    """The card at ``path`` (or the defaults where there is none), and its bytes (hashed with the data)."""
    if path is None:
        return Card(name=default_name), b""
    import yaml

    data = _read_bytes(Path(path))
    try:
        raw = yaml.safe_load(_decode(Path(path), data)) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise ConfigError(f"{path}: YAML nesting too deep to parse; a card is a flat mapping") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a card is a mapping of {', '.join(CARD_KEYS)}")
    unknown = [k for k in raw if k not in CARD_KEYS]
    if unknown:
        raise ConfigError(f"{path}: unknown card key {unknown[0]!r}; known: {', '.join(CARD_KEYS)}")
    for key in ("name", "title", "language", "format", "header", "question", "option", "licence", "source"):
        if key in raw and not isinstance(raw[key], str):
            raise ConfigError(f"{path}: card key {key} must be text, got {raw[key]!r}")
    for key, allowed in LINE_FIELDS.items():
        if key in raw:
            _check_line_format(path, key, raw[key], allowed)
    name = raw.get("name", default_name)
    if not name or "/" in name or name != name.strip():
        raise ConfigError(f"{path}: card name {name!r} must be non-empty, without '/' or surrounding spaces")
    contexts = raw.get("contexts") or {}
    if not isinstance(contexts, dict) or not all(isinstance(v, dict) and isinstance(v.get("cue"), str)
                                                 for v in contexts.values()):
        raise ConfigError(f"{path}: card contexts must map names to {{cue: ..., label_prefix: ...}}")
    names = raw.get("subject_names") or {}
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise ConfigError(f"{path}: card subject_names must map subjects to names")
    markers = None
    if raw.get("thinking_markers") is not None:
        from cube.protocol.thinking import markers_of_card

        found = markers_of_card(raw["thinking_markers"], f"{path}: card key")
        markers = (found.open, found.close)
    card = Card(name=name, title=raw.get("title", ""), language=raw.get("language"), format=raw.get("format"),
                thinking_markers=markers,
                header=raw.get("header"), question=raw.get("question"), option=raw.get("option"),
                contexts={str(k): {kk: str(vv) for kk, vv in v.items()} for k, v in contexts.items()},
                subject_names={str(k): v for k, v in names.items()},
                licence=raw.get("licence", Card.licence), source=raw.get("source", ""), path=Path(path))
    card.prompt_format()  # an unknown language fails here
    return card, data


# ---- a file or a folder ------------------------------------------------------------------------

def looks_like_user_benchmark(spec: str) -> bool:
    """Whether ``--benchmark`` names a path rather than a registered benchmark."""
    return spec.endswith(SUFFIXES) or "/" in spec or Path(spec).exists()


def split_files(path: Path) -> dict[str | None, Path]:
    """Split (None: given per row or ``test``) -> file, for a file or a folder of split files."""
    if path.is_file():
        if path.suffix not in SUFFIXES:
            raise ItemsError(f"{path}: not a {', '.join(SUFFIXES)} file")
        return {None: path}
    if path.exists() and not path.is_dir():  # a device (/dev/zero), a FIFO, a socket: never read
        raise ItemsError(f"--benchmark {path}: not a regular file or folder (a device, FIFO or socket); give a "
                         ".jsonl, .csv or .parquet file")
    if not path.is_dir():
        raise ItemsError(f"--benchmark {path}: no such file or folder (a .jsonl, .csv or .parquet file, or a "
                         "folder with dev/val/test files)")
    found: dict[str | None, Path] = {}
    for candidate in sorted(path.iterdir()):
        if candidate.suffix in SUFFIXES and candidate.stem in SPLITS:
            if candidate.stem in found:
                raise ItemsError(f"{path}: two files for split {candidate.stem} ({found[candidate.stem].name}, "
                                 f"{candidate.name})")
            found[candidate.stem] = candidate
    if not found:
        raise ItemsError(f"{path}: no dev/val/test file ({', '.join(SUFFIXES)}) in this folder")
    return found


@dataclass(frozen=True)
class UserBenchmark:
    """A user's file or folder, read and checked whole once: its items, card and identity."""

    path: Path
    card: Card
    items: tuple[Item, ...]
    categories: dict[str, str]
    sha256: str  # the data file's (and card's) sha256: what a run records (``RunSettings.benchmark_sha256``)

    @classmethod
    def read(cls, path: str | Path, card: str | Path | None = None) -> UserBenchmark:
        path = Path(path)
        files = split_files(path)
        card_file = Path(card) if card is not None else card_path(path)
        if card is not None and not Path(card).is_file():
            raise ConfigError(f"--card {card}: no such file")
        stem = path.name if path.is_dir() else path.stem
        the_card, card_bytes = read_card(card_file, stem)
        items, categories, digests = [], {}, []
        for split, file in files.items():
            read, digest = items_of_file(file, the_card.name, the_card, split)
            items.extend(read.items)
            for subject, category in read.categories.items():
                if categories.setdefault(subject, category) != category:
                    raise ItemsError(f"{file}: subject {subject!r} is in category {category!r} here and "
                                     f"{categories[subject]!r} in another split's file")
            digests.append((file.name, digest))
        if len(digests) == 1 and not card_bytes:
            sha = digests[0][1]  # a lone file: its own sha256, what `sha256sum` prints
        else:
            listing = "".join(f"{d}  {n}\n" for n, d in digests)
            if card_bytes:
                listing += f"{sha256_bytes(card_bytes)}  {card_file.name}\n"
            sha = sha256_bytes(listing.encode("utf-8"))
        return cls(path, the_card, tuple(items), categories, sha)

    def load(self, splits: Sequence[str], subjects: Iterable[str] | None = None) -> list[Item]:
        """The items of ``splits`` (and ``subjects``), ordered by split, subject, then file order."""
        chosen = [i for i in self.items if i.split in splits]
        if not chosen:
            present = sorted({i.split for i in self.items})
            raise ItemsError(f"{self.path}: no items of split {', '.join(splits)} (it has {', '.join(present)})")
        if subjects is not None:
            wanted = set(subjects)
            missing = sorted(wanted - {i.subject for i in self.items})
            if missing:
                raise ItemsError(f"{self.path}: no items of subject(s) {', '.join(missing)}")
            chosen = [i for i in chosen if i.subject in wanted]
        order = {s: n for n, s in enumerate(splits)}
        return sorted(chosen, key=lambda i: (order[i.split], i.subject))  # stable: file order within


def option_warnings(items: Sequence[Item], limit: int = 3) -> list[str]:
    """Items whose option texts repeat: every cloze scorer ties them (same text, same score)."""
    dup = [i for i in items if len(set(i.options)) < len(i.options)]
    if not dup:
        return []
    shown = ", ".join(i.uid for i in dup[:limit]) + (f" and {len(dup) - limit} more" if len(dup) > limit else "")
    return [f"{len(dup)} item(s) have two options with the same text ({shown}): the cloze scorers (M2-M5) and TF "
            "tie between them"]


__all__ = ["Card", "FileItems", "MAX_FIELD_CHARS", "SUFFIXES", "UserBenchmark", "card_path", "items_of_file",
           "looks_like_user_benchmark", "option_warnings", "read_card", "read_rows", "split_files"]
