"""The release bundle: scrubbed records, the frozen prediction, checksums and what a reader needs.

A bundle lets anyone re-score every protocol slice without a model and without us redistributing
C-Eval or CMMLU, whose licences (CC BY-NC-SA 4.0) forbid it. Records carry an item's ``uid`` and
``qhash`` only; the one free-text column (a generation) may quote the item, so it is scrubbed
against the record's own item, and the scrubbed records must then pass the leakage audit against
every item before anything is written (a model may quote another item, which the scrub cannot
know to remove). Scrub and audit apply their rules to the normal form and to the text as written
(the raw form: a LaTeX option the normal form shortens below its minimum is still an option;
``cube.records.leakage``). Layout of ``BUNDLE/``::

    records/                      scrubbed Parquet shards + their MANIFEST.json (cube.records.store)
    runs/<model>.runlog.jsonl     each model's run log (versions, run times) where present; kept
                                  outside records/ because the bundle repacks the shards, and a
                                  store's run log vouches for the shard names it wrote
    predictions/audit_frozen.json the pre-registered tokenizer audit
    MANIFEST.json                 schema, models + source hashes, protocols, item counts, licences
    CLAIMS.md                     each claim of the paper -> notebook + command
    CITATION.cff, README.md
    SHA256SUMS                    ``sha256sum`` format over every other file

The bundle is built in a temp folder beside the target and renamed into place, as is
``BUNDLE.tar.gz``, so an interrupted build leaves neither half-written. Folder and tarball are one
unit: the two renames run with SIGINT, SIGTERM and SIGHUP held back (a rename that fails puts the
previous pair back), so a signal leaves both new or both old; only SIGKILL can stop a build
between them, and then ``verify_bundle`` says that the folder and the tarball are not one build
(their SHA256SUMS differ) and which is the older, and the next build (under an exclusive lock on
the folder they live in) removes what the killed one left (``.BUNDLE.*.tmp``, ``.BUNDLE.*.old``).
``verify_bundle`` re-checks every checksum, the records' own manifest, the bundle manifest's
counts and flags against the records, the prediction's content hash and, given the items, the
leakage audit.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from cube import __version__
from cube.checksums import sha256_file
from cube.errors import CubeError, RecordsError, WriteError
from cube.files import read_json
from cube.protocol.items import Item
from cube.records import leakage
from cube.records.schema import (
    FREE_TEXT_COLUMNS,
    RUNLOG_NAME,  # the harness's per-model run log: versions, timings
    SCHEMA_VERSION,
    SCORER_NAMES,
)
from cube.records.store import PROTOCOL_COLUMNS, protocols  # noqa: F401 (PROTOCOL_COLUMNS: the bundle's manifest columns)

BUNDLE_SCHEMA = "cube.release/1"
RECORDS_DIR = "records"
RUNS_DIR = "runs"
PREDICTION_PATH = "predictions/audit_frozen.json"
SUMS_NAME = "SHA256SUMS"
MANIFEST_NAME = "MANIFEST.json"

# The study's benchmarks and the terms under which their items are published. Records name items
# by uid + qhash only, so a bundle redistributes none of their text.
BENCHMARK_LICENCES = {
    "cmmlu": {"name": "CMMLU", "licence": "CC BY-NC-SA 4.0",
              "source": "https://github.com/haonan-li/CMMLU"},
    "ceval": {"name": "C-Eval", "licence": "CC BY-NC-SA 4.0",
              "source": "https://github.com/hkust-nlp/ceval"},
}

# The leakage audit scans EVERY string and binary column, identifiers included: a writer (or an
# adversary) can put text in any of them, and tie_groups once carried planted text through audit,
# build and verify. Identifiers cost little: each batch audits a column's distinct values once.
_BATCH_ROWS = 65_536
# Identifier columns and the one form each may take. A value of another form is an error (text
# hidden where nobody scrubs, as tie_groups once allowed); a value of its form is still scanned,
# but only for question spans, near copies and options of NEAR_MIN_CHARS or more, because hex
# digits and model names share short options ("1949", "135m") by chance. tie_groups: groups of two
# or more option positions joined by "=", groups joined by ";", "" for no tie (cube.harness.runner writes
# it, cube.analysis.confirm parses it).
_NAME = r"^[A-Za-z0-9._+-]{1,64}$"
ID_FORMS = {
    "tie_groups": r"^(?:[0-9]{1,3}(?:=[0-9]{1,3})+(?:;[0-9]{1,3}(?:=[0-9]{1,3})+)*)?$",
    "qhash": r"^[0-9a-f]{16}$",
    "scorer": "^(?:" + "|".join(re.escape(name) for name in SCORER_NAMES) + ")$",
    "uid": r"^[a-z0-9_-]{1,32}/[A-Za-z0-9_-]{1,64}/[a-z]{1,16}/[0-9]{1,9}$",
    **{name: _NAME for name in ("model", "benchmark", "subject", "label_set", "context", "order")},
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
            result = leakage.scrub(texts[row], item.question, item.options)
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
    hit: leakage.TextHit


def audit_parquet(
    parquet: pq.ParquetFile, columns: Sequence[str], index: leakage.LeakageIndex,
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


def audit_table(table: pa.Table, index: leakage.LeakageIndex) -> list[RowHit]:
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
    both forms (``leakage.audit_texts``): the identifier floor holds for either form's phrases."""
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
        for hit in leakage.audit_texts(texts, index, min_phrase_chars=floor):
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
    return (f"uid={hit.uid} field={hit.column} offset={hit.hit.offset} chars={hit.hit.n_chars} "
            f"kind={hit.hit.kind} item={hit.hit.item_uid}")


# --------------------------------------------------------------------------------------------
# What the manifest says
# --------------------------------------------------------------------------------------------


def item_counts(table: pa.Table) -> dict[str, dict[str, int]]:
    """Distinct items per benchmark and split, read from the uid (benchmark/subject/split/row)."""
    counts: dict[str, dict[str, int]] = {}
    for uid in pc.unique(table.column("uid")).to_pylist():
        parts = uid.split("/")
        if len(parts) != 4:
            raise RecordsError(f"column uid: {uid!r} is not benchmark/subject/split/row")
        split = counts.setdefault(parts[0], {})
        split[parts[2]] = split.get(parts[2], 0) + 1
    return {b: dict(sorted(s.items())) for b, s in sorted(counts.items())}


def model_sources(
    models: Iterable[str],
    models_config: Mapping[str, Any],
    prediction: Mapping[str, Any] | None = None,
    families: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each model with where its weights and tokenizer came from, pinned by sha256.

    The tokenizer source is the one the frozen prediction audited (else the config's offline
    source), so a reader can check that the audited tokenizer is the model's own.
    """
    fams = models_config.get("families") or {}
    audited = (prediction or {}).get("sources") or {}
    out: dict[str, dict[str, Any]] = {}
    for model in sorted(models):
        entry: dict[str, Any]
        demo = (models_config.get("demo_models") or {}).get(model)
        checkpoint = (models_config.get("checkpoints") or {}).get(model)
        if demo:
            entry = {"kind": "demo_model", **{k: demo[k] for k in (
                "family", "upstream", "quantisation", "licence", "provenance", "gguf_sha256",
                "parts") if k in demo}}
        elif checkpoint:
            entry = {"kind": "checkpoint", **{k: checkpoint[k] for k in (
                "family", "hf", "revision", "role") if k in checkpoint}}
        else:
            entry = {"kind": "unknown", "family": (families or {}).get(model),
                     "note": "not in config/models.yaml"}
        family = entry.get("family")
        tokenizer = audited.get(family) or ((fams.get(family) or {}).get("offline") or None)
        if tokenizer:
            entry["tokenizer"] = {"spec": tokenizer.get("spec"), "sha256": tokenizer.get("sha256")}
        out[model] = entry
    return out


# --------------------------------------------------------------------------------------------
# Claims checklist
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    number: int
    title: str
    statement: str
    notebook: str  # the notebook's name (its source is notebooks/<name>.md)
    commands: tuple[str, ...] = ()  # direct CLI reproductions, run inside the bundle


# The claims of the paper (issue 7, "Claim notebooks"), in the book's order.
CLAIMS = (
    Claim(1, "Tokenizer audit", "First-token scoring is degenerate exactly in the cells the "
          "tokenizer audit predicts, before any model runs.", "01_tokenizer_audit",
          (f"cube audit --check {PREDICTION_PATH}",)),
    Claim(2, "Pre-registered tests", "The frozen predictions hold on the observed records; in the "
          "flagged cells full-sequence scoring recovers accuracy (McNemar).",
          "02_preregistered_tests", (f"cube confirm {RECORDS_DIR} --prediction {PREDICTION_PATH}",)),
    Claim(3, "Rank instability", "The footrule between two defensible protocols, set against the "
          "within-protocol noise floor (mean, 95th percentile, multiple), for the strict and the "
          "lenient extractor.",
          "03_rank_instability"),
    Claim(4, "Partial collision", "Which labels tie and what the tie-break decides.",
          "04_partial_collision", (f"cube confirm {RECORDS_DIR} --prediction {PREDICTION_PATH}",)),
    Claim(5, "Leakage", "The released records carry no benchmark text; the scrub statistics.",
          "05_leakage", ("cube release verify . --items CMMLU_DIR",)),
    Claim(6, "Whitespace", "`Answer:` + ` A` against `Answer: ` + `A`: accuracy (McNemar), ECE "
          "and rank changes per model, with the label tokenized in context and apart.", "06_whitespace"),
    Claim(7, "Partial credit", "The ladder against additive scoring, random baselines, the best "
          "fixed answer string and a percentile placement.", "07_partial_credit"),
    Claim(8, "Benchmark practice", "Per-subject, per-category and Hard-subset accuracy, parse "
          "failures, answer-only against chain-of-thought, a regression table.",
          "08_benchmark_practice", (f"cube rescore {RECORDS_DIR} --level category",)),
)


def claims_checklist(plan: Sequence[Any], repo_root: Path) -> str:
    """CLAIMS.md: each claim -> its notebook and the commands that reproduce it.

    A claim whose notebook is not in ``config/notebooks.yaml`` (``plan``) or whose source file is
    missing is marked "not yet written", so the checklist never promises what cannot be run.
    """
    lines = [
        "# Claims checklist",
        "",
        "Each claim of the paper, the notebook that computes it from these records (and states it",
        "as an assertion), and the command that re-executes it. Notebook commands run in a",
        "checkout of the cube repository; the other commands run inside this bundle.",
        "",
        "| # | Claim | Notebook | Status | Reproduce |",
        "|---|-------|----------|--------|-----------|",
    ]
    for claim in CLAIMS:
        runs = [r for r in plan if Path(r.source).stem == claim.notebook]
        source = Path(runs[0].source) if runs else repo_root / "notebooks" / f"{claim.notebook}.md"
        present = bool(runs) and source.is_file()
        try:
            shown = source.relative_to(repo_root).as_posix()
        except ValueError:
            shown = source.as_posix()
        if present:
            status = "present"
            commands = [f"`cube book execute --only {claim.notebook}`"]
        else:
            status = "**not yet written**"
            commands = []
        commands += [f"`{c}`" for c in claim.commands]
        reproduce = "<br>".join(commands) if commands else "—"
        lines.append(f"| {claim.number} | **{claim.title}.** {claim.statement} | `{shown}` | "
                     f"{status} | {reproduce} |")
    n_present = sum("| present |" in line for line in lines)
    lines += ["", f"{n_present} of {len(CLAIMS)} claim notebooks present.", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Bundle text files
# --------------------------------------------------------------------------------------------


def citation_cff(version: str = __version__) -> str:
    return f"""cff-version: 1.2.0
message: "If you use these records, please cite them, and the benchmarks they were made on."
type: dataset
title: "cube: per-item records for trustworthy multiple-choice LLM evaluation"
version: "{version}"
authors:
  - name: "The cube authors"
keywords:
  - multiple-choice evaluation
  - tokenizer audit
  - CMMLU
  - C-Eval
references:
  - type: article
    title: "CMMLU: Measuring massive multitask language understanding in Chinese"
    authors:
      - family-names: Li
        given-names: Haonan
    year: 2023
    identifiers:
      - type: other
        value: "arXiv:2306.09212"
    license: CC-BY-NC-SA-4.0
  - type: article
    title: "C-Eval: A Multi-Level Multi-Discipline Chinese Evaluation Suite for Foundation Models"
    authors:
      - family-names: Huang
        given-names: Yuzhen
    year: 2023
    identifiers:
      - type: other
        value: "arXiv:2305.08322"
    license: CC-BY-NC-SA-4.0
"""


def bundle_readme(manifest: Mapping[str, Any]) -> str:
    models = ", ".join(manifest["models"]) or "none"
    items = "; ".join(f"{b}: " + ", ".join(f"{n} {s}" for s, n in splits.items())
                      for b, splits in manifest["items"].items()) or "none"
    scrub = manifest["scrub"]
    audit = manifest["leakage_audit"]
    licences = "\n".join(f"- {v['name']}: {v['licence']} ({v['source']})"
                         for v in manifest["benchmark_licences"].values())
    return f"""# cube release bundle

Per-item records of multiple-choice LLM evaluations: every protocol slice can be re-scored from
them without running a model. Made with cube {manifest["cube_version"]}.

- `records/`: {manifest["n_records"]:,} records (Parquet, schema `{manifest["records_schema"]}`,
  their own `MANIFEST.json` with a sha256 per shard). Models: {models}.
  Items: {items}.
- `predictions/audit_frozen.json`: the pre-registered tokenizer audit.
- `MANIFEST.json`: models and their source hashes, protocols, item counts, licences, scrub and
  leakage-audit figures.
- `CLAIMS.md`: each claim of the paper, its notebook and the command that reproduces it.
- `CITATION.cff`: how to cite this bundle and the benchmarks.
- `SHA256SUMS`: the sha256 of every other file.

## No benchmark text

Records name an item by `uid` (benchmark/subject/split/row) and `qhash` (sha256 of the question,
16 hex digits) only. The benchmarks are not redistributed; get them from their publishers:

{licences}

Free text (generations) was scrubbed against each record's own item: {scrub["n_changed"]:,} of
{scrub["n_texts"]:,} texts changed, {scrub["n_spans"]:,} spans ({scrub["n_chars"]:,} characters)
replaced by `{leakage.MARKER}`. The scrubbed records then passed the leakage audit against all
{audit["n_items"]:,} {audit["items"]} items ({audit["thresholds"]}): {audit["hits"]} hits.

## Verify and use

```bash
sha256sum -c SHA256SUMS                      # every file as published
cube release verify . --items path/to/cmmlu  # checksums, records, prediction, leakage audit
cube rescore records                         # accuracy of every protocol slice
cube confirm records --prediction predictions/audit_frozen.json
```
"""


# --------------------------------------------------------------------------------------------
# Checksums
# --------------------------------------------------------------------------------------------


def bundle_files(root: Path) -> list[str]:
    """Every file below ``root`` except SHA256SUMS, as sorted POSIX paths relative to it."""
    return sorted(p.relative_to(root).as_posix() for p in Path(root).rglob("*")
                  if p.is_file() and p.relative_to(root).as_posix() != SUMS_NAME)


def sha256sums(root: Path) -> str:
    """``sha256sum`` text format (hex, two spaces, path), so ``sha256sum -c`` checks it too."""
    return "".join(f"{sha256_file(root / name)}  {name}\n" for name in bundle_files(root))


_SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def parse_sha256sums(text: str) -> tuple[dict[str, str], list[str]]:
    """(path -> sha256, problems); a malformed or unsafe line is a problem, not an exception."""
    listed: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _SUM_LINE.match(line)
        if not match:
            problems.append(f"{SUMS_NAME} line {number}: not '<sha256>  <path>'")
            continue
        digest, name = match.groups()
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or "" in parts:
            problems.append(f"{SUMS_NAME} line {number}: path {name!r} is not inside the bundle")
        elif name in listed:
            problems.append(f"{SUMS_NAME} line {number}: {name} listed twice")
        else:
            listed[name] = digest
    return listed, problems


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    bundle: Path
    tarball: Path
    n_records: int
    n_files: int
    scrub: ScrubStats
    n_items_audited: int


def tarball_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + ".tar.gz")


def build_bundle(
    records: str | Path,
    out: str | Path,
    items: Sequence[Item],
    prediction: str | Path,
    *,
    force: bool = False,
    index: leakage.LeakageIndex | None = None,
    models_config: Mapping[str, Any] | None = None,
    plan: Sequence[Any] | None = None,
    allow_incomplete: bool = False,
) -> BuildResult:
    """Scrub, audit and package a records store as ``out/`` and ``out.tar.gz``.

    ``items`` are the benchmark items the records were made on (CMMLU dev + test): each record is
    scrubbed against its own item, then the scrubbed records are audited against all of them,
    and any hit refuses the build before a file is written (``index``: one already built from
    ``items``, to save its seconds). The bundle is assembled in a temp
    folder beside ``out`` and renamed into place; on any failure (or Ctrl-C) the temp folder and
    the temp tarball are removed, so no partial bundle is ever left behind. A store with a cell
    short of what its configuration promises (a killed run) is refused unless ``allow_incomplete``.
    """
    from cube.analysis.confirm import model_families
    from cube.config import REPO_ROOT, load_config
    from cube.paper.book import load_plan
    from cube.records.store import check_items, read_manifest, read_records, write_records
    from cube.tokenizers.audit import read_prediction

    records, out = Path(records), Path(out)
    tarball = tarball_path(out)
    for target in (out, tarball):
        if target.exists() and not force:
            raise CubeError(f"{target} already exists; remove it or pass --force to replace it")
    if out.resolve() == records.resolve() or records.resolve() in out.resolve().parents:
        raise CubeError(f"--out {out} is inside the records {records}; write the bundle elsewhere")

    doc = read_prediction(Path(prediction))
    records_manifest = read_manifest(records)
    table = read_records(records, verify=True, progress=sys.stderr.isatty(), allow_incomplete=allow_incomplete)
    by_uid = {item.uid: item for item in items}
    known = pc.is_in(table.column("uid"), value_set=pa.array(list(by_uid), type=pa.string()))
    check_items(table.filter(known), {u: i.qhash for u, i in by_uid.items()}, str(records))

    scrubbed, stats = scrub_records(table, by_uid)
    index = index if index is not None else leakage.build_index(items)
    hits = audit_table(scrubbed, index)
    if hits:
        raise RecordsError(
            f"{records}: refusing to build: the leakage audit finds {len(hits)} hit(s) in the "
            f"scrubbed records (first: {describe_hit(hits[0])}); they quote an item the own-item "
            "scrub does not remove; `cube release audit` lists them all"
        )

    models_config = models_config if models_config is not None else load_config("models")
    plan = plan if plan is not None else load_plan()
    metadata = records_manifest.get("metadata") or {}
    families = model_families(records_manifest)
    manifest = {
        "bundle_schema": BUNDLE_SCHEMA,
        "records_schema": SCHEMA_VERSION,
        "cube_version": __version__,
        "synthetic": bool(records_manifest.get("synthetic")),
        "n_records": table.num_rows,
        "models": model_sources(pc.unique(table.column("model")).to_pylist(), models_config,
                                doc, families),
        "protocols": protocols(table),
        "items": item_counts(table),
        "benchmark_licences": BENCHMARK_LICENCES,
        "records_carry": "uid + qhash only (sha256 of the question, 16 hex digits); "
                         "no question or option text",
        "prediction": {"path": PREDICTION_PATH, "content_sha256": doc["content_sha256"]},
        "scrub": asdict(stats) | {"marker": leakage.MARKER},
        "leakage_audit": {"items": " + ".join(sorted({f"{i.benchmark} {i.split}" for i in items})),
                          "n_items": index.n_items,
                          "thresholds": index.thresholds(), "hits": 0},
    }
    if metadata:
        manifest["records_metadata"] = metadata

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"cannot create {out.parent}: {exc.strerror or exc}") from None
    with _build_lock(out):
        _clean_leftovers(out)
        return _write_bundle(out, tarball, records, prediction, plan, records_manifest, metadata,
                             manifest, scrubbed, stats, table.num_rows, index.n_items)


def _write_bundle(out: Path, tarball: Path, records: Path, prediction: str | Path, plan: Sequence[Any],
                  records_manifest: Mapping[str, Any], metadata: Mapping[str, Any],
                  manifest: Mapping[str, Any], scrubbed: pa.Table, stats: ScrubStats, n_records: int,
                  n_items: int) -> BuildResult:
    """Stage every file, then swap folder and tarball into place as one unit (see the module)."""
    from cube.config import REPO_ROOT
    from cube.records.store import write_records

    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    tar_tmp: Path | None = None
    try:
        write_records(staging / RECORDS_DIR, scrubbed,
                      synthetic=bool(records_manifest.get("synthetic")), metadata=metadata)
        (staging / RECORDS_DIR / ".manifest.lock").unlink(missing_ok=True)
        for runlog in sorted(records.glob(f"*/{RUNLOG_NAME}")):  # how each model's run went
            _write(staging / RUNS_DIR / f"{runlog.parent.name}.{RUNLOG_NAME}", runlog.read_bytes())
        _write(staging / PREDICTION_PATH, Path(prediction).read_bytes())
        _write(staging / MANIFEST_NAME,
               (json.dumps(manifest, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode())
        _write(staging / "CLAIMS.md", claims_checklist(plan, REPO_ROOT).encode())
        _write(staging / "CITATION.cff", citation_cff().encode())
        # rendered from the manifest as MANIFEST.json holds it (sorted keys), so verify can re-render it
        _write(staging / "README.md", bundle_readme(json.loads(json.dumps(manifest, sort_keys=True))).encode())
        _write(staging / SUMS_NAME, sha256sums(staging).encode())
        n_files = len(bundle_files(staging)) + 1

        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{tarball.name}.", suffix=".tmp")
        tar_tmp = Path(name)
        with os.fdopen(fd, "wb") as fh:
            write_tarball(staging, out.name, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tar_tmp, 0o644)
        os.chmod(staging, 0o755)
        with _signals_held():
            _swap_into_place(staging, tar_tmp, out, tarball)
        staging = tar_tmp = None  # now the bundle itself: never cleaned up from here on
    except OSError as exc:  # a full disk above all: one line; the finally removes the temp files
        raise WriteError(f"cannot write the bundle {out}: {exc.strerror or exc}; nothing was replaced") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if tar_tmp is not None:
            tar_tmp.unlink(missing_ok=True)
    return BuildResult(out, tarball, n_records, n_files, stats, n_items)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _swap_into_place(staging: Path, tar_tmp: Path, out: Path, tarball: Path) -> None:
    """Rename ``staging`` to ``out`` and ``tar_tmp`` to ``tarball``: both, or (on an error) neither.

    An existing ``out`` (``--force``) is moved aside first, replaced rather than merged, and put
    back if either rename fails; the tarball's rename is the commit point.
    """
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
        os.rename(out, old / "bundle")
    try:
        os.rename(staging, out)
        try:
            os.replace(tar_tmp, tarball)
        except BaseException:
            os.rename(out, staging)  # the new folder back to its temp name, removed by the caller
            raise
    except BaseException:
        if old is not None:
            os.rename(old / "bundle", out)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then act on the first that came.

    The block is a few renames: a ``kill`` (or Ctrl-C) in it left ``bundle/`` new beside
    ``bundle.tar.gz`` old, each of which verified on its own. Only the main thread can set
    handlers; elsewhere the block runs unguarded (and verify still tells a mixed pair).
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    previous = {sig: signal.signal(sig, lambda number, frame: caught.append(number)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if caught:
            signal.raise_signal(caught[0])  # as if it came now: SIGTERM ends the process, SIGINT raises


@contextlib.contextmanager
def _build_lock(out: Path) -> Iterator[None]:
    """An exclusive lock on the folder that holds ``out``, for the whole write of a bundle.

    A build removes the temp files a killed build left beside ``out``; without the lock it could
    remove those of a build running now. The lock is on the folder itself (no lock file is left
    behind) and goes with the process, however it ends.
    """
    import fcntl

    fd = os.open(out.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CubeError(f"another `cube release build` is writing into {out.parent}; wait for it to "
                            "finish") from None
        yield
    finally:
        os.close(fd)


def leftovers(out: Path) -> list[Path]:
    """What killed builds of ``out`` left beside it: temp folders and tarballs, and moved-aside bundles."""
    import glob

    out = Path(out)
    prefix = glob.escape(f".{out.name}.")
    return sorted({*out.parent.glob(prefix + "*.tmp"), *out.parent.glob(prefix + "*.old")})


def _clean_leftovers(out: Path) -> None:
    """Remove what killed builds left; first put a moved-aside bundle back where none is in place.

    A build killed between moving the old folder aside and renaming the new one in leaves no
    ``out`` at all: the old folder (``.out.*.old/bundle``) is the one that matches the old tarball.
    """
    found = leftovers(out)
    if not out.exists():
        moved = [p / "bundle" for p in found if p.suffix == ".old" and (p / "bundle").is_dir()]
        if moved:
            os.rename(max(moved, key=lambda p: p.stat().st_mtime), out)
    for path in found:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def write_tarball(root: Path, arcname: str, fh) -> None:
    """A reproducible .tar.gz of ``root`` under ``arcname/``: sorted, zero mtimes and owners."""
    with gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = sorted(Path(root).rglob("*"), key=lambda p: p.relative_to(root).as_posix())
        for path in [Path(root), *paths]:
            rel = path.relative_to(root).as_posix()
            info = tarfile.TarInfo(arcname if rel == "." else f"{arcname}/{rel}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, path.stat().st_size
                with path.open("rb") as data:
                    tar.addfile(info, data)


# --------------------------------------------------------------------------------------------
# Verify
# --------------------------------------------------------------------------------------------


@dataclass
class VerifyReport:
    bundle: Path
    n_files: int = 0
    n_records: int | None = None
    n_items_audited: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_bundle(
    bundle: str | Path,
    items: Sequence[Item] | None = None,
    index: leakage.LeakageIndex | None = None,
) -> VerifyReport:
    """Re-check a bundle folder or ``.tar.gz``: every checksum, the records, the prediction and,
    given ``items``, the leakage audit. Each problem is one line naming the file."""
    bundle = Path(bundle)
    if bundle.is_file() and bundle.name.endswith((".tar.gz", ".tgz")):
        with tempfile.TemporaryDirectory(prefix="cube-verify-") as tmp:
            root = _extract(bundle, Path(tmp))
            report = _verify_folder(root, items, index)
            report.problems = [p.replace(str(root), str(bundle)) for p in report.problems]
            report.bundle = bundle
            folder = bundle.with_name(bundle.name.removesuffix(".tar.gz").removesuffix(".tgz"))
            if (folder / SUMS_NAME).is_file():
                report.problems += _pair_problems(folder, bundle, (root / SUMS_NAME).read_bytes())
            return report
    if not bundle.is_dir():
        raise CubeError(f"bundle not found: {bundle} (a bundle folder or its .tar.gz)")
    report = _verify_folder(bundle, items, index)
    tarball = tarball_path(bundle)
    if tarball.is_file() and (bundle / SUMS_NAME).is_file():
        report.problems += _pair_problems(bundle, tarball, _tarball_sums(tarball))
    return report


def _tarball_sums(tarball: Path) -> bytes | None:
    """The tarball's ``<top>/SHA256SUMS``, read as a stream (it is among the first members)."""
    try:
        with tarfile.open(tarball, "r|gz") as tar:
            for member in tar:
                parts = member.name.split("/")
                if len(parts) == 2 and parts[1] == SUMS_NAME and member.isfile():
                    fh = tar.extractfile(member)
                    return fh.read(64 << 20) if fh is not None else None
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile):
        return None
    return None


def _pair_problems(folder: Path, tarball: Path, tar_sums: bytes | None) -> list[str]:
    """One problem if the folder and the tarball beside it are not one build.

    Each build's SHA256SUMS covers all of its files, so equal SHA256SUMS mean equal contents; a
    killed ``release build --force`` left the new folder beside the old tarball, each valid.
    Which is older comes from the files' modification times (the folder's SHA256SUMS is written
    just before its tarball), so it is a hint, not proof.
    """
    from cube.checksums import sha256_bytes

    if tar_sums is None:
        return [f"{tarball}: not a readable bundle tarball, although it lies beside the bundle {folder}"]
    folder_sums = (folder / SUMS_NAME).read_bytes()
    if folder_sums == tar_sums:
        return []
    stale = tarball if tarball.stat().st_mtime < (folder / SUMS_NAME).stat().st_mtime else folder
    return [f"{folder} and {tarball} are not one build: their {SUMS_NAME} differ (sha256 "
            f"{sha256_bytes(folder_sums)[:12]}… and {sha256_bytes(tar_sums)[:12]}…); {stale} is the older "
            "(a killed `cube release build --force`?); build both again with --force"]


def _extract(tarball: Path, dest: Path) -> Path:
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            tops = {name.split("/", 1)[0] for name in tar.getnames()}
            if len(tops) != 1:
                raise CubeError(f"{tarball}: expected one top-level folder, found {len(tops)}")
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CubeError(f"{tarball}: not a readable .tar.gz ({exc})") from None
    return dest / tops.pop()


def _verify_folder(root: Path, items: Sequence[Item] | None, index) -> VerifyReport:
    from cube.records.store import check_items, read_records
    from cube.tokenizers.audit import read_prediction

    report = VerifyReport(root)
    sums = root / SUMS_NAME
    if not sums.is_file():
        raise CubeError(f"{root}: no {SUMS_NAME}; not a release bundle")
    listed, report.problems = parse_sha256sums(sums.read_text(encoding="utf-8", errors="replace"))
    on_disk = set(bundle_files(root))
    for name, digest in tqdm(sorted(listed.items()), desc="sha256", unit="file", disable=None):
        path = root / name
        if name not in on_disk:
            report.problems.append(f"{path}: listed in {SUMS_NAME} but missing")
        elif sha256_file(path) != digest:
            report.problems.append(f"{path}: sha256 does not match {SUMS_NAME} (file changed)")
    for name in sorted(on_disk - set(listed)):
        report.problems.append(f"{root / name}: not listed in {SUMS_NAME}")
    report.n_files = len(listed)
    if report.problems:  # the deeper checks would only restate a changed file
        return report

    for check in (lambda: _check_manifest(root / MANIFEST_NAME),
                  lambda: read_prediction(root / PREDICTION_PATH)):
        try:
            check()
        except CubeError as exc:
            report.problems.append(str(exc))
    try:
        table = read_records(root / RECORDS_DIR, verify=True)
        report.n_records = table.num_rows
    except CubeError as exc:
        report.problems.append(str(exc))
        return report
    report.problems += manifest_problems(root, table)
    if items is None:
        return report

    by_uid = {item.uid: item.qhash for item in items}
    known = pc.is_in(table.column("uid"), value_set=pa.array(list(by_uid), type=pa.string()))
    try:
        check_items(table.filter(known), by_uid, str(root / RECORDS_DIR))
    except CubeError as exc:
        report.problems.append(str(exc))
    index = index if index is not None else leakage.build_index(items)
    report.n_items_audited = index.n_items
    for path in parquet_files(root / RECORDS_DIR):
        parquet, columns = open_parquet(path)
        for hit in audit_parquet(parquet, columns, index, str(path)):
            report.problems.append(f"{path}:{hit.row}: leak {describe_hit(hit)}")
    return report


def manifest_problems(root: Path, table: pa.Table) -> list[str]:
    """What the bundle's MANIFEST.json (and the README made from it) claims, against the records.

    SHA256SUMS only says that no file changed since it was written; a MANIFEST.json edited with
    its sum updated (``n_records: 99999, synthetic: true``) passed verify. Everything the manifest
    derives from the records is recomputed from them here: the count, the synthetic flag of the
    records' own manifest, the models, the protocols and the item counts, and the prediction's
    content hash. The README is re-rendered from the manifest. This catches an edit to one file
    that its neighbours contradict; a forger who rewrites records, manifest and sums together
    passes (see the README's "What the checks guarantee").
    """
    from cube.records.store import read_manifest
    from cube.tokenizers.audit import read_prediction

    path = root / MANIFEST_NAME
    try:
        manifest = read_json(path, CubeError, "bundle manifest")
        records_manifest = read_manifest(root / RECORDS_DIR)
        doc = read_prediction(root / PREDICTION_PATH)
    except CubeError as exc:
        return [str(exc)]
    if not isinstance(manifest, dict):
        return [f"{path}: not a JSON object"]

    def canonical(value: Any) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    derived = {
        "n_records": table.num_rows,
        "synthetic": bool(records_manifest.get("synthetic")),
        "protocols": protocols(table),
        "items": item_counts(table),
        "prediction": {"path": PREDICTION_PATH, "content_sha256": doc.get("content_sha256")},
    }
    problems = []
    for key, value in derived.items():
        if canonical(manifest.get(key)) != canonical(value):
            shown = canonical(manifest.get(key))
            problems.append(f"{path}: {key} {shown[:60]} does not match the records and prediction "
                            f"it describes ({canonical(value)[:60]})")
    models = sorted(pc.unique(table.column("model")).to_pylist())
    if not isinstance(manifest.get("models"), dict) or sorted(manifest["models"]) != models:
        listed = sorted(manifest["models"]) if isinstance(manifest.get("models"), dict) else manifest.get("models")
        problems.append(f"{path}: models {listed!r} are not the records' models {models!r}")
    readme = root / "README.md"  # re-rendered only by the cube version that wrote it (its wording may change)
    if not problems and readme.is_file() and manifest.get("cube_version") == __version__:
        try:
            written = readme.read_text(encoding="utf-8")
            expected = bundle_readme(manifest)
        except (UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError):
            written, expected = "", None
        if written != expected:
            problems.append(f"{readme}: does not say what {MANIFEST_NAME} says (re-rendered from it, it differs)")
    return problems


def _check_manifest(path: Path) -> None:
    manifest = read_json(path, CubeError, "bundle manifest")
    if not isinstance(manifest, dict) or manifest.get("bundle_schema") != BUNDLE_SCHEMA:
        found = manifest.get("bundle_schema") if isinstance(manifest, dict) else None
        raise CubeError(f"{path}: bundle_schema {found!r} is not {BUNDLE_SCHEMA!r}")
