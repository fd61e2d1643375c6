"""Cell configurations: what a resume must agree with, and which shards a cell promises."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cube.atomic import atomic_write_text
from cube.checksums import sha256_file
from cube.errors import ResumeMismatch
from cube.records.schema import GENERATION_RECORD_SCORERS, cell_shard_file
from cube.records.store.layout import MANIFEST_NAME
from cube.records.store.manifest import _empty_manifest, manifest_lock, read_manifest


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


# Settings a cell configuration may carry that do not change what its records mean beyond
# floating-point noise: the batch size (how many requests share one padded forward). Stores
# written before config hash version 3 record it; no comparison reads it, so they still resume
# under another batch size, and newer cells do not record it at all.
NOT_BINDING = ("batch_size",)
# The recorded settings a user sets with a `cube run` option of the same name (``--shard-size``
# for shard_size): a refused resume names the option and the value that resumes the cell.
RUN_OPTION_FIELDS = ("benchmark", "split", "sample", "within", "seed", "subjects", "dtype", "backend", "device",
                     "shard_size", "max_new_tokens")


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any],
                       fields: Iterable[str] | None = None) -> list[str]:
    """``field old -> new`` for every field (of ``fields``, default all) the two disagree on,
    except the settings that do not bind a record's meaning (``NOT_BINDING``)."""
    names = list(fields) if fields is not None else sorted(set(old) | set(new))
    return [f"{n} {_shown(old.get(n))} -> {_shown(new.get(n))}" for n in names
            if n not in NOT_BINDING and old.get(n) != new.get(n)]


def resume_options(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What to do about a refused resume, in words: the options and values that resume the cell
    where every difference is one of ``RUN_OPTION_FIELDS``, else which settings differ beyond an
    option (the model's files, the items, the templates) and the options that are part of it."""
    differing = [n for n in sorted(set(old) | set(new)) if n not in NOT_BINDING and old.get(n) != new.get(n)]
    options = []
    for name in differing:
        if name not in RUN_OPTION_FIELDS:
            continue
        option, value = "--" + name.replace("_", "-"), old.get(name)
        if value is None:
            options.append(f"without {option}")
        else:
            options.append(f"{option} {','.join(map(str, value)) if isinstance(value, list) else value}")
    others = [n for n in differing if n not in RUN_OPTION_FIELDS]
    if options and not others:
        return f"resume it with {' '.join(options)}, or write to a new --out"
    said = f"; among them {' '.join(options)}" if options else ""
    return f"rerun with its original options{said}, or write to a new --out"


def _cell_of(name: str) -> str:
    """The cell key (``<model>/<kind>--<cell>``) of a harness shard's manifest name."""
    return name.rsplit("--", 1)[0]


def _cells_with_records(manifest: Mapping[str, Any]) -> dict[str, dict]:
    """The recorded cells that hold at least one listed shard: only these bind a later run.

    A configuration recorded without records (by a cube that recorded cells before writing, and
    then failed on a bad argument) promises nothing, so it must not refuse the corrected run.
    """
    holding = {_cell_of(name) for name in manifest.get("files") or {}}
    return {k: c for k, c in (manifest.get("cells") or {}).items() if k in holding}


def _cell_problem(manifest: Mapping[str, Any], configs: Mapping[str, Mapping],
                  shared: Sequence[str]) -> str | None:
    """Why these cells cannot be written into a store with this manifest, or None."""
    known = _cells_with_records(manifest)
    listed = manifest.get("files") or {}
    for key, config in configs.items():
        if key in known:
            differences = config_differences(known[key], config)
            if differences:
                return (f"cell {key} was written under another configuration: {'; '.join(differences)} "
                        f"({resume_options(known[key], config)})")
            continue
        if any(name.startswith(f"{key}--") for name in listed):
            return (f"cell {key} holds records written before cube recorded cell configurations, so a "
                    "resume cannot be checked against them (write to a new --out and `cube merge` it)")
        model = key.split("/", 1)[0]
        siblings = {k: c for k, c in known.items() if k.startswith(f"{model}/")}
        for other, recorded in siblings.items():
            differences = config_differences(recorded, config, shared)
            if differences:
                return (f"new cell {key} does not match cell {other} of the same model: "
                        f"{'; '.join(differences)} (write to a new --out)")
        unrecorded = [n for n in listed if n.startswith(f"{model}/") and n.rsplit("--", 1)[0] not in known]
        if unrecorded and not siblings:
            return (f"{model} holds records written before cube recorded cell configurations (e.g. "
                    f"{unrecorded[0]}), so new cells cannot be checked against them (write to a new "
                    "--out and `cube merge` it)")
    return None


def check_cells(directory: str | Path, configs: Mapping[str, Mapping], shared: Sequence[str]) -> None:
    """Refuse, in one line naming the differing fields, a run the store's records do not match."""
    directory = Path(directory)
    if not (directory / MANIFEST_NAME).exists():
        return
    problem = _cell_problem(read_manifest(directory), configs, shared)
    if problem:
        raise ResumeMismatch(f"{directory}: {problem}")


def record_cells(directory: str | Path, configs: Mapping[str, Mapping], shared: Sequence[str]) -> None:
    """Check and record the cells' configurations in the manifest, under its lock.

    For writers that record cells apart from their shards (tests, tools); the harness records
    each cell with its first shard (``write_shard(..., cell=...)``), so a run that fails before
    writing leaves no configuration behind.
    """
    directory = Path(directory)
    with manifest_lock(directory):
        path = directory / MANIFEST_NAME
        manifest = read_manifest(directory) if path.exists() else _empty_manifest()
        problem = _cell_problem(manifest, configs, shared)
        if problem:
            raise ResumeMismatch(f"{directory}: {problem}")
        new = {k: dict(v) for k, v in configs.items() if k not in manifest.get("cells", {})}
        if new or not path.exists():
            manifest.setdefault("cells", {}).update(new)
            atomic_write_text(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def rows_per_item(config: Mapping[str, Any]) -> int | None:
    """Records one item gives in a harness cell of this configuration, or None if it cannot say.

    One per scorer for label, cloze and judgement cells; a generation cell's one scorer (M6 or
    M6-cot) yields one record per extractor.
    """
    kind, scorers = config.get("kind"), config.get("scorers")
    if not isinstance(scorers, list) or not scorers:
        return None
    if kind in ("gen", "cot"):
        return len(GENERATION_RECORD_SCORERS) * len(scorers)
    return len(scorers) if kind in ("label", "cloze", "tf") else None


def promised_shards(cell: str, config: Mapping[str, Any]) -> dict[str, int] | None:
    """``<model>/<file>`` -> rows of every shard the cell's configuration promises (None: unknown).

    The harness cuts the cell's ``n_items`` into chunks of ``shard_size``, one shard each
    (``cube.harness.run_spec.plan_jobs``), so the last chunk may be short.
    """
    n, size, per = config.get("n_items"), config.get("shard_size"), rows_per_item(config)
    if not (isinstance(n, int) and isinstance(size, int) and n >= 0 and size >= 1 and per):
        return None
    return {cell_shard_file(cell, c): min(size, n - c * size) * per for c in range(math.ceil(n / size))}


def unfinished_cells(manifest: Mapping[str, Any]) -> list[str]:
    """One line per recorded cell whose listed shards are not what its configuration promises.

    A killed or still-running ``cube run``, or one process of a ``--shard K/N`` run not merged
    yet, leaves fewer shards than the cell's items need; its accuracy is then an accuracy on the
    items that happened to finish, and no reader may report it as the run's. Compared: the
    shard names and each shard's rows as the manifest lists them (``read_records`` checks the
    files hold those rows). Stores without recorded cells (the archive's older models) promise
    nothing and give no line. A store written from an incomplete one (a bundle built with
    ``--allow-incomplete``) carries the lines its source gave in ``incomplete``; they are
    repeated here first, so every reader of the copy says so as it would of the source.
    """
    lines = [f"marked incomplete when written: {line}" for line in manifest.get("incomplete") or []]
    files = manifest.get("files") or {}
    by_cell: dict[str, dict[str, Any]] = {}
    for name, entry in files.items():
        by_cell.setdefault(_cell_of(name), {})[name] = entry
    for cell, config in sorted((manifest.get("cells") or {}).items()):
        promised = promised_shards(cell, config)
        present = by_cell.get(cell, {})
        if promised is None:
            lines.append(f"{cell}: its configuration does not record n_items, shard_size, kind and scorers, "
                         "so its shards cannot be checked")
            continue
        missing = [name for name in promised if name not in present]
        extra = sorted(name for name in present if name not in promised)
        short = [(name, present[name].get("rows"), rows) for name, rows in promised.items()
                 if name in present and present[name].get("rows") != rows]
        if missing:
            per = rows_per_item(config) or 1
            have = sum(promised[name] for name in promised if name in present) // per
            lines.append(f"{cell}: {len(promised) - len(missing)} of {len(promised)} shards, {have} of "
                         f"{config['n_items']} items (missing e.g. {missing[0]})")
        elif short:
            name, listed, rows = short[0]
            lines.append(f"{cell}: {name} lists {listed} rows where the cell promises {rows}")
        elif extra:
            lines.append(f"{cell}: {extra[0]} is not a shard its configuration promises")
    return lines


def shard_problem(directory: str | Path, name: str, entry: Mapping[str, Any],
                  expected_rows: int | None = None, cell_dtype: str | None = None) -> str | None:
    """Why a listed shard cannot be counted as done on resume (None: it can).

    A resume that trusted every listed, present file would keep a truncated or edited shard for
    good ("0 shards to run") while every reader refuses it. Checked: the file's sha256 against
    the manifest, that Parquet can read its footer, its rows against the manifest's entry and
    against what its cell promises, and then every check a reader makes of one shard.
    """
    path = Path(directory) / name
    if not path.is_file():
        return "listed in the manifest but missing"
    digest = sha256_file(path)
    if digest != entry.get("sha256"):
        return f"sha256 {digest[:12]}... does not match the manifest's {str(entry.get('sha256'))[:12]}..."
    try:
        rows = pq.read_metadata(path).num_rows
    except (pa.ArrowException, OSError, ValueError):
        return "not a readable Parquet file"
    if entry.get("rows") is not None and rows != entry["rows"]:
        return f"{rows} rows where the manifest lists {entry['rows']}"
    if expected_rows is not None and rows != expected_rows:
        return f"{rows} rows where its cell promises {expected_rows}"
    return _reader_problem(path, name, cell_dtype)


def _reader_problem(path: Path, name: str, cell_dtype: str | None = None) -> str | None:
    """What a reader of the store would refuse in this one shard (schema, values, keys), or None.

    A shard rewritten with its manifest entry (a wrong schema version, a column of another type, a
    prediction its scores contradict, another model's records, a key twice) passed the sha256 and
    rows checks, so a resume said "0 shards to run" while every reader refused the store, and it
    never healed. So a resume makes the reader's own checks of each shard it would skip.
    """
    import numpy as np

    from cube.errors import RecordsError
    from cube.records.store.checks import _check_duplicates, _check_qhash_consistency, _check_values, _read_shard

    try:
        table = _read_shard(path, name, None, cell_dtype=cell_dtype)
        _check_values(table, name)
        rows = np.zeros(table.num_rows, dtype=np.int64)
        _check_duplicates(table, rows, [name])
        _check_qhash_consistency(table, rows, [name])
    except RecordsError as exc:
        return str(exc).removeprefix(f"{name}: ")
    return None

@dataclass(frozen=True)
class CellToRecord:
    """A harness cell's configuration, recorded with the cell's first shard.

    ``shared`` names the fields every cell of one model in a store must agree on.
    """

    key: str  # <model>/<kind>--<cell>
    config: Mapping[str, Any]
    shared: tuple[str, ...] = ()
