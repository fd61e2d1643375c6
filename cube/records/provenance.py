"""Where archived records came from: the harness's run logs, the commands, the item sample.

``cube run`` appends one JSON line per finished invocation to ``<store>/<model>/runlog.jsonl``:
the spec (model, items, cells, scorers), the model's sha256, the library versions, the wall time
and, since the command was logged, the command line itself. A killed run writes no line (its
finished shards are kept, and the re-run that completes them logs the work it did), so summed wall
times are what the machine spent on the records that exist, not on the kills.

The book's provenance page is built from these functions, so what it lists is what produced the
records, not what a script says it would do.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cube.errors import RecordsError
from cube.files import read_json_lines
from cube.protocol.chat import NO_CHAT, record_context, split_context
from cube.protocol.scorers import PASSES, SCORERS
from cube.records.schema import RUNLOG_NAME


def read_run_logs(store: str | Path) -> list[dict[str, Any]]:
    """Every run log line of every model in ``store``, in file order (models sorted)."""
    store = Path(store)
    entries: list[dict[str, Any]] = []
    for path in sorted(store.glob(f"*/{RUNLOG_NAME}")):
        for number, entry in read_json_lines(path, RecordsError, "run log"):
            model = entry.get("model") if isinstance(entry, dict) else None
            if model != path.parent.name:
                raise RecordsError(f"{path}:{number}: logs model {model!r} in the folder of {path.parent.name!r}")
            entries.append(entry)
    return entries


def _cell_parts(cell: str, model: Any) -> tuple[str, str, int, str]:
    """(label_set, context, shots, order) of a logged cell key (``cube.protocol.prompts.Cell.key``)."""
    parts = str(cell).split("|")
    if len(parts) != 4 or not parts[2].removesuffix("shot").isdigit():
        raise RecordsError(f"run log of {model!r}: a cell is not label_set|context|Nshot|order")
    label_set, context, shots, order = parts
    return label_set, context, int(shots.removesuffix("shot")), order


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def run_command(entry: Mapping[str, Any], out: str = "data/records") -> str:
    """The ``cube run`` command of a run log line: as logged, else rebuilt from the logged spec.

    Older lines carry no command; their cells are a product of label sets x contexts x shots x
    orders (that is how ``cube run`` builds them), so the options are read back off the cells.
    """
    if entry.get("command"):
        return str(entry["command"])
    cells = [_cell_parts(c, entry.get("model")) for c in entry.get("cells", [])]
    label_sets, contexts, shots, orders = (_unique(c[k] for c in cells) for k in range(4))
    if len(cells) != len(label_sets) * len(contexts) * len(shots) * len(orders):
        raise RecordsError(f"run log of {entry.get('model')!r}: its cells are not one product of options")
    parts = ["cube", "run", "--model", str(entry["model"])]
    for flag, key in (("--benchmark", "benchmark"), ("--split", "split"), ("--sample", "sample"),
                      ("--seed", "seed")):
        if entry.get(key) is not None:
            parts += [flag, str(entry[key])]
    if cells:
        parts += ["--label-sets", ",".join(label_sets), "--scorers", ",".join(entry.get("scorers", [])),
                  "--shots", ",".join(map(str, shots)), "--cues", ",".join(contexts),
                  "--orders", ",".join(orders)]
    else:
        parts += ["--scorers", ",".join(entry.get("scorers", []))]
    for flag, key in (("--backend", "backend"), ("--dtype", "dtype")):
        if entry.get(key) is not None:
            parts += [flag, str(entry[key])]
    return shlex.join(parts + ["--out", out])


def run_rows(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per logged run that did work: what ran, how long it took, with which versions."""
    rows = []
    for e in entries:
        if not e.get("jobs_run"):
            continue
        versions = e.get("versions") or {}
        rows.append({
            "model": e["model"], "scorers": ",".join(e.get("scorers", [])),
            "cells": ", ".join(e.get("cells", [])) or "-", "items": e.get("n_items"),
            "shards run": e.get("jobs_run"), "records": e.get("records_written"),
            "wall s": float(e.get("wall_s") or 0.0), "items/s": e.get("items_per_s"),
            "dtype": e.get("dtype"), "torch": versions.get("torch"), "transformers": versions.get("transformers"),
        })
    return rows


def logged_protocols(entries: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str, str, int, str]]:
    """Every (model, scorer, label_set, context, shots, order) the logged runs produced records for.

    A run's scorers map to record protocols as the scorer table (``cube.protocol.scorers``) says
    the runner writes them: each scorer's record names (M6 and M6-cot as their two extractors),
    under its pass's fixed cell (cloze, TF), else in each logged cell, under the pass's own
    context where it has one (M6-cot: ``cot``); in a chat cell's form, marked ``@chat``.
    """
    out: set[tuple[str, str, str, str, int, str]] = set()
    for e in entries:
        model, cells = e["model"], [_cell_parts(c, e["model"]) for c in e.get("cells", [])]
        for scorer in e.get("scorers", []):
            entry = SCORERS.get(scorer)
            step = PASSES.get(entry.pass_kind) if entry is not None else None
            names = entry.records if entry is not None else (scorer,)
            if step is not None and step.fixed_cell is not None:  # once per item, per chat form of the cells
                ls, ctx, shots, order = step.fixed_cell
                chats = {split_context(c[1])[1] for c in cells} or {NO_CHAT}
                out |= {(model, name, ls, record_context(ctx, chat), shots, order) for name in names for chat in chats}
            else:
                context = step.context if step is not None else None
                out |= {(model, name, ls, record_context(context, split_context(ctx)[1]) if context else ctx, shots, order)
                        for name in names for ls, ctx, shots, order in cells}
    return out


def logged_files(entry: Mapping[str, Any]) -> list[str]:
    """The shard files (``<model>/<file>.parquet``) a finished run left in its store.

    A finished run had every shard of its plan on disk, written or found, so this is its plan, as
    logged. A harness run's line from before plans were logged (an item count and scorers, no
    ``files``) is refused: ``scripts/migrate_run_logs.py`` gives it its list once (it re-plans as
    the runner does, which ``records`` must not import). A line of no harness run vouches for nothing.
    """
    if "files" in entry:
        files = entry["files"]
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise RecordsError(f"run log of {entry.get('model')!r}: a line's 'files' is "
                               f"{type(files).__name__} {str(files)[:40]}, not a list of shard names "
                               "(the log was edited or damaged; restore it from the run's own copy)")
        return list(files)
    if isinstance(entry.get("n_items"), int) and entry.get("scorers"):
        raise RecordsError(f"run log of {entry.get('model')!r}: a line lists no files (it predates them); "
                           "give it its list once with scripts/migrate_run_logs.py STORE")
    return []  # not a harness run's line (e.g. hand-written): it vouches for no shard


def incomplete_cells(store: str | Path, listed: Iterable[str]) -> list[str]:
    """One line per cell whose run log says it wrote shards the store no longer lists."""
    listed = set(listed)
    missing: dict[str, list[str]] = {}
    expected: dict[str, set[str]] = {}
    for entry in read_run_logs(store):
        for name in logged_files(entry):
            cell = name.rsplit("--", 1)[0]
            expected.setdefault(cell, set()).add(name)
            if name not in listed and name not in missing.get(cell, []):
                missing.setdefault(cell, []).append(name)
    return [f"{cell} ({len(names)} of {len(expected[cell])} shards gone, e.g. {names[0]})"
            for cell, names in sorted(missing.items())]


def sample_by_subject(table: pa.Table) -> list[dict[str, Any]]:
    """The item sample by uid: per benchmark, split and subject, the row numbers used."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for uid in pc.unique(table.column("uid")).to_pylist():
        parts = uid.split("/")
        if len(parts) != 4 or not parts[3].isdigit():
            raise RecordsError(f"column uid: {uid!r} is not benchmark/subject/split/row")
        benchmark, subject, split, row = parts
        groups.setdefault((benchmark, split, subject), []).append(int(row))
    return [{"benchmark": b, "split": sp, "subject": su, "items": len(rows), "rows": sorted(rows)}
            for (b, sp, su), rows in sorted(groups.items())]


def zero_shot_sample_size(table: pa.Table) -> int:
    """Items with a 0-shot M1-seq record: the sample every label set, cue and answer-only run
    scores, and which the 5-shot and chain-of-thought subsets are drawn from (``--within``).

    Not every item in the records: the judgement (TF) runs draw one item per subject of their own.
    """
    zero_shot = pc.and_(pc.equal(table.column("scorer"), "M1-seq"), pc.equal(table.column("shots"), 0))
    return len(pc.unique(table.filter(zero_shot).column("uid")))


__all__ = ["incomplete_cells", "logged_files", "logged_protocols", "read_run_logs", "run_command", "run_rows",
           "sample_by_subject", "zero_shot_sample_size"]
