"""Importing inspect_ai logs of multiple-choice tasks (``.eval``, also lighteval's ``eval`` output).

inspect_ai's ``multiple_choice`` solver asks for ``ANSWER: $LETTER`` and its ``choice`` scorer
reads the letters after it; a sample is correct (``C``), incorrect (``I``) or unanswered (``N``).
Imported, a log's decisions are compared and explained beside other harnesses'.

What is read: one log, ``FILE.eval`` (a zip of ``header.json`` and ``samples/*.json``) or a
``.json`` log (the same as one object with ``samples``). A sample's ``input`` and ``choices`` are
benchmark text: read in memory only, to match the sample to its item by question hash and to check
the choices are the item's options in order. Generations are scrubbed of item text before they are
written.

Records per sample, of one generation: ``M6-inspect`` (the answer inspect's ``choice`` scorer
logged), and cube's ``M6-strict`` and ``M6-lenient`` on the same text. Each sample's score must be
its logged answer against the target, and the log's accuracy the mean of those scores; a mismatch
is refused. Log-likelihood samples are not read (the importer refuses a log without the
``choice`` scorer, rather than import other decisions under its name).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cube.checksums import sha256_file
from cube.errors import HarnessImportError
from cube.files import MAX_FILE_BYTES, parse_json, read_bytes
from cube.importers.contract import (
    CHAT_BY_SERVER,
    Decision,
    HarnessImporter,
    Imported,
    RunsRead,
    ScoringProtocol,
    exemplars_of,
    extractor_of,
    generation_decisions,
    items_by_hash,
)
from cube.protocol.items import Item, qhash
from cube.protocol.scorers import SCORERS

INSPECT_SCORER = "M6-inspect"
LABELS = ("A", "B", "C", "D")
SCORE_NAME = "choice"  # inspect_ai's multiple-choice scorer
VALUES = {"C": 1.0, "I": 0.0, "N": 0.0}  # its accuracy metric's reading of a sample's value
ZIP_ZSTANDARD = 93  # the zip compression method of inspect_ai's .eval members (zstd)


@dataclass(frozen=True)
class InspectLog:
    path: Path
    header: dict[str, Any]
    samples: tuple[dict[str, Any], ...]

    @property
    def model(self) -> str:
        name = str((self.header.get("eval") or {}).get("model") or "")
        return name.rsplit("/", 1)[-1]


def _json(data: bytes, where: str) -> Any:
    return parse_json(data, HarnessImportError, where, "inspect_ai log")


def read_log(path: str | Path) -> InspectLog:
    """The log's header and samples; a log that did not finish, or is no inspect_ai log, is refused."""
    path = Path(path)
    if path.suffix == ".json":
        data = _json(read_bytes(path, HarnessImportError, "inspect_ai log"), str(path))
        if not isinstance(data, dict):
            raise HarnessImportError(f"{path}: not an inspect_ai log (a JSON object)")
        header, samples = {k: v for k, v in data.items() if k != "samples"}, data.get("samples") or []
    elif path.suffix == ".eval":
        read_bytes(path, HarnessImportError, "inspect_ai log")  # a regular file of a sane size
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                if "header.json" not in names:
                    raise HarnessImportError(f"{path}: no header.json; the eval did not finish (inspect_ai writes "
                                             "it last), or this is no inspect_ai log")
                if any(i.compress_type == ZIP_ZSTANDARD for i in archive.infolist()):
                    raise HarnessImportError(
                        f"{path}: compressed with zstd (inspect_ai's default), which this Python's zipfile cannot "
                        "read; convert it with `inspect log convert FILE.eval --to json --output-dir DIR` and "
                        "import the .json log")
                too_big = [i.filename for i in archive.infolist() if i.file_size > MAX_FILE_BYTES]
                if too_big:
                    raise HarnessImportError(f"{path}: {too_big[0]} unpacks to more than {MAX_FILE_BYTES} bytes")
                header = _json(archive.read("header.json"), f"{path}:header.json")
                samples = [_json(archive.read(n), f"{path}:{n}") for n in sorted(names)
                           if n.startswith("samples/") and n.endswith(".json")]
        except (zipfile.BadZipFile, OSError) as exc:
            raise HarnessImportError(f"{path}: not a readable .eval log ({exc})") from None
    else:
        raise HarnessImportError(f"{path}: an inspect_ai log is a .eval or .json file")
    if not isinstance(header, dict) or header.get("status") != "success":
        status = header.get("status") if isinstance(header, dict) else None
        raise HarnessImportError(f"{path}: the eval's status is {status!r}, not 'success'; import a finished log")
    if not samples or not all(isinstance(s, dict) for s in samples):
        raise HarnessImportError(f"{path}: no samples (was it run with --no-log-samples?)")
    return InspectLog(path, header, tuple(samples))


def _reported_accuracy(log: InspectLog) -> float:
    for score in (log.header.get("results") or {}).get("scores") or []:
        if score.get("name") == SCORE_NAME:
            value = ((score.get("metrics") or {}).get("accuracy") or {}).get("value")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise HarnessImportError(f"{log.path}: the {SCORE_NAME} accuracy {value!r} is not from 0 to 1")
            return float(value)
    raise HarnessImportError(f"{log.path}: no '{SCORE_NAME}' score in its results; only inspect_ai's multiple_choice "
                             "solver with its choice scorer is imported")


def _text(content: Any) -> str | None:
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else None


def _letter(value: Any, where: str, what: str) -> int | None:
    if value in (None, ""):
        return None
    if value in LABELS:
        return LABELS.index(value)
    if isinstance(value, str) and all(p.strip() in LABELS for p in value.split(",")):
        return None  # several letters: not one answer
    raise HarnessImportError(f"{where}: {what} {str(value)[:12]!r} is not one of A-D")


@dataclass
class LogImport:
    """What the log contributed, for the report and the manifest."""

    n: int
    accuracy: float
    reported: float
    n_parse_failed: dict[str, int] = field(default_factory=dict)
    values: dict[str, int] = field(default_factory=dict)
    context: str = ""


def import_log(log: InspectLog, items: Sequence[Item], leakage: Any) -> tuple[list[Decision], LogImport]:
    """The decisions of every sample, each logged score checked against its logged answer."""
    by_hash = items_by_hash(items)
    solver = next((s for s in (log.header.get("plan") or {}).get("steps") or [] if s.get("solver") == "multiple_choice"),
                  None)
    if solver is None:
        raise HarnessImportError(f"{log.path}: its plan has no multiple_choice solver; only that solver's logs are imported")
    params = solver.get("params") or {}
    context = "inspect-mc" + ("-cot" if params.get("cot") else "")
    cell = ("L1_halfwidth", context, 0, "original")
    summary = LogImport(len(log.samples), 0.0, _reported_accuracy(log), context=context)
    decisions: list[Decision] = []
    seen: set[str] = set()
    total = 0.0
    for sample in log.samples:
        where = f"{log.path.name} sample {str(sample.get('id'))[:40]} epoch {sample.get('epoch')}"
        question, choices = sample.get("input"), sample.get("choices")
        if not isinstance(question, str) or not isinstance(choices, list):
            raise HarnessImportError(f"{where}: no text input and choices; not a multiple-choice sample")
        subject = (sample.get("metadata") or {}).get("subject")
        candidates = [c for c in by_hash.get(qhash(question), ()) if c.options == tuple(choices)
                      and (subject is None or c.subject == subject)]
        if len(candidates) != 1:
            raise HarnessImportError(f"{where}: its question and choices match {len(candidates)} items of the "
                                     "benchmark in use, not one (another copy of it, or options not the item's in "
                                     "order? pass the right one with --data)")
        item = candidates[0]
        if item.uid in seen:
            raise HarnessImportError(f"{where}: item {item.uid} is matched by two samples (several epochs are not "
                                     "imported)")
        seen.add(item.uid)
        target = sample.get("target")
        gold = _letter(target[0] if isinstance(target, list) and len(target) == 1 else target, where, "target")
        if gold != item.answer:
            raise HarnessImportError(f"{where}: the target is {target!r} but item {item.uid} has answer "
                                     f"{LABELS[item.answer] if item.answer is not None else None}")
        score = (sample.get("scores") or {}).get(SCORE_NAME)
        if not isinstance(score, dict) or score.get("value") not in VALUES:
            raise HarnessImportError(f"{where}: no '{SCORE_NAME}' score of C, I or N")
        pred = SCORERS[INSPECT_SCORER].score(score.get("answer"), LABELS)
        _letter(score.get("answer"), where, "the logged answer")
        if (pred == gold) != (score["value"] == "C"):
            raise HarnessImportError(f"{where}: inspect_ai scored {score['value']} but its logged answer "
                                     f"{score.get('answer')!r} against target {target!r} says otherwise")
        total += VALUES[score["value"]]
        summary.values[score["value"]] = summary.values.get(score["value"], 0) + 1
        output = sample.get("output") or {}
        first = (output.get("choices") or [{}])[0] if isinstance(output, dict) else {}
        text = _text((first.get("message") or {}).get("content")) if isinstance(first, dict) else None
        if text is None:
            raise HarnessImportError(f"{where}: no output.choices[0].message.content (the generation)")
        decisions += generation_decisions(item, cell, gold, INSPECT_SCORER, pred, text, LABELS, leakage,
                                          summary.n_parse_failed)
    summary.accuracy = total / len(log.samples)
    if abs(summary.accuracy - summary.reported) > 1e-9:
        raise HarnessImportError(f"{log.path}: the log reports accuracy {summary.reported:g} but its samples give "
                                 f"{summary.accuracy:g}; the results are not of these samples")
    return decisions, summary


def import_runs(logs: Sequence[InspectLog], items: Sequence[Item], model: str | None = None,
                tokenizer: Any | None = None, family: str | None = None,
                tokenizer_source: str | None = None) -> Imported:
    """Records and report of one log, nothing written yet."""
    from cube.records.leakage import build_index

    (log,) = logs
    name = model or log.model
    decisions, summary = import_log(log, items, build_index(items))
    ev = log.header.get("eval") or {}
    keep = ("task", "task_version", "model", "model_generate_config", "model_args", "dataset", "config", "packages")
    metadata: dict[str, Any] = {
        "source": "inspect_ai",
        "inspect_ai": {"eval": {k: ev[k] for k in keep if k in ev}, "plan": log.header.get("plan"),
                       "file": {log.path.name: sha256_file(log.path)}, "n": summary.n,
                       "accuracy": summary.accuracy, "reported": summary.reported, "values": summary.values,
                       "n_parse_failed": summary.n_parse_failed, "context": summary.context},
    }
    if family:
        metadata["families"] = {name: family}
    return Imported(name, decisions, [summary], metadata)


def format_report(imported: Imported, out: Path | None = None) -> str:
    meta = imported.metadata["inspect_ai"]
    written = f" -> {out}" if out is not None else ""
    fails = meta["n_parse_failed"]
    return "\n".join([
        f"imported {meta['n']} samples of task {meta['eval'].get('task')}, model {imported.model}: "
        f"{len(imported.decisions)} records{written}",
        f"  accuracy {meta['reported']:g} (records: {meta['accuracy']:g}), values {meta['values']}; no answer found: "
        f"inspect_ai {fails.get(INSPECT_SCORER, 0)}/{meta['n']}, cube's M6-strict {fails.get('M6-strict', 0)}, "
        f"M6-lenient {fails.get('M6-lenient', 0)}"])


def report_json(imported: Imported, out: Path | None = None) -> dict[str, Any]:
    meta = imported.metadata["inspect_ai"]
    return {"model": imported.model, "out": str(out) if out else None, "records": len(imported.decisions),
            **{k: meta[k] for k in ("n", "accuracy", "reported", "values", "n_parse_failed")}}


def read(path: Path, benchmark: str | None) -> RunsRead:
    """The log; its benchmark is the user's --benchmark (a task's dataset may be any file)."""
    log = read_log(path)
    if not benchmark:
        raise HarnessImportError(f"{path}: an inspect_ai log does not say which benchmark its samples are from; "
                                 "give --benchmark cmmlu|ceval")
    return RunsRead((log,), benchmark, log.model or None, None, f"{path}: its eval.model")


AGGREGATION = "accuracy: the mean over samples (C 1, I and N 0)"


def describe(metadata: Mapping[str, Any], cell: Mapping[str, Any], contexts: Sequence[str],
             normalisation: str) -> ScoringProtocol:
    """The protocol of a stored cell: inspect_ai's multiple_choice template, where the plan logged one."""
    logged = metadata.get("inspect_ai") or {}
    steps = (logged.get("plan") or {}).get("steps") or []
    params = next((s.get("params") or {} for s in steps if s.get("solver") == "multiple_choice"), {})
    template = params.get("template")
    model = str(((logged.get("eval") or {}).get("model")) or "")
    # inspect's openai-compatible providers send chat messages: the server applies the chat template
    chat = CHAT_BY_SERVER if model.startswith(("openai-api/", "openai/", "vllm/")) else None
    return ScoringProtocol(IMPORTER_LABEL, template if isinstance(template, str) else None, None, None,
                           normalisation, None, extractor=extractor_of(cell["scorer"]), aggregation=AGGREGATION,
                           chat_template=chat, exemplars=exemplars_of(cell["shots"], None))


IMPORTER_LABEL = "inspect_ai"
IMPORTER = HarnessImporter(
    name="inspect", source="inspect_ai", label=IMPORTER_LABEL,
    help="an inspect_ai log (FILE.eval or .json) of its multiple_choice solver: generations as records",
    folder_help="the .eval (or .json) log inspect eval wrote",
    model_help="the records' model name (default: the log's model, after its provider)",
    read=read, run=import_runs, format_report=format_report, report_json=report_json, describe=describe,
    benchmark_option=True, audits=False,
)
