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
is refused (the importer refuses a log without the ``choice`` scorer, rather than import other
decisions under its name).

Log-likelihood samples: where the log carries log-probabilities (``inspect eval ... --logprobs
--top-logprobs K``: ``output.choices[0].logprobs.content[*]``, each generated token with its
``logprob`` and ``top_logprobs``), each sample also gets one scored record, ``M1-inspect``: the
log-probability of each label at the answer token, read from that token's top-K, decided by their
argmax (the scorer table's entry). The answer token is the one ``choice`` read its letter from:
inspect_ai's ``parse_answers`` takes the LAST ``ANSWER: X`` (a whole line first, else anywhere),
so it is the token holding that letter, a lone label (``"B"``, ``" B"``); each label's token is
that token's text with the letter replaced (``" A"`` ... ``" D"``). Where ``choice`` read no
answer and the generation opens with a lone label (small models answer ``"A) ..."`` without
``ANSWER:``), the first generated token is the answer token: the model's choice of label where it
started its answer. Otherwise there is no answer token and no scored record for the sample (a scored
record always has its scores); the report counts each of the three, and ``M1-inspect``'s accuracy
is over the samples with an answer token.

A label outside the top-K has no number in the log, only a bound: at most the K-th
log-probability. It is not invented: it scores that K-th log-probability (the floor), and two or
more labels outside the top-K form a tie group, so that the records say ``tied`` wherever the log
cannot order the top labels, and cube's degeneracy checks (``cube.records.degeneracy``) count
those ties and all-equal items like any other. A label inside the top-K is scored exactly, and a
decision for it over labels outside is exact (theirs are at most the floor). The report counts the
items with a label outside the top-K. A log without log-probabilities imports as before: its
generations only.
"""

from __future__ import annotations

import codecs
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cube.checksums import sha256_file
from cube.errors import HarnessImportError, shown_value
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
from cube.protocol.scorers import SCORERS, ScoreResult

INSPECT_SCORER = "M6-inspect"
LOGPROB_SCORER = "M1-inspect"
# inspect_ai 0.3.285's parse_answers (solver/_multiple_choice.py): an ``ANSWER: X`` line, the last
# one; else the last ``ANSWER: X`` anywhere. Group 1 holds the letters ``choice`` reads.
ANSWER_PATTERNS = (re.compile(r"(?i)^ANSWER\s*:\s*([A-Za-z\d ,]+)\s*(?:$|\n|\.)", re.MULTILINE),
                   re.compile(r"(?i)ANSWER\s*:\s*([A-Za-z\d ,]+)(?:[^\w]|\n|$|\.)"))
LONE_LABEL = re.compile(r"(\s*)([A-Za-z])")  # a token that is one letter, after any spaces
# How a sample's answer token was found (the report's counts)
AFTER_ANSWER, FIRST_TOKEN, NO_ANSWER_TOKEN = "after ANSWER:", "first token", "none"
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
    raise HarnessImportError(f"{where}: {what} {shown_value(value)} is not one of A-D")


@dataclass(frozen=True)
class GeneratedToken:
    """One generated token as the log's ``logprobs.content`` kept it."""

    text: str  # its ``token``
    decoded: str  # the generation's characters it completes (its bytes joined to the ones before)
    top: dict[str, float]  # its top-K: token text to log-probability


def generated_tokens(first: Mapping[str, Any], where: str) -> list[GeneratedToken] | None:
    """The generation's tokens with their top-K; None where the log has no top log-probabilities.

    Tokens are joined through their ``bytes`` where logged: a Chinese character's bytes may be
    split over tokens whose ``token`` text is empty or a replacement character."""
    logprobs = first.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not content:
        return None
    if not isinstance(content, list) or not all(isinstance(t, dict) and isinstance(t.get("token"), str)
                                                for t in content):
        raise HarnessImportError(f"{where}: output.choices[0].logprobs.content is not a list of tokens")
    if not any(t.get("top_logprobs") for t in content):
        return None  # --logprobs without --top-logprobs: the other labels' numbers are not there
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out = []
    for token in content:
        raw = token.get("bytes")
        decoded = decoder.decode(bytes(raw)) if isinstance(raw, list) else token["token"]
        top: dict[str, float] = {}
        for alt in token.get("top_logprobs") or []:
            value = alt.get("logprob") if isinstance(alt, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(alt.get("token"), str):
                raise HarnessImportError(f"{where}: a top_logprobs entry {str(alt)[:60]!r} is not a token and "
                                         "its logprob")
            top.setdefault(alt["token"], float(value))
        out.append(GeneratedToken(token["token"], decoded, top))
    return out


def _lone_label(text: str) -> str | None:
    """The letter of a token that is one letter after any spaces (``"B"``, ``" b"``), upper-cased."""
    found = LONE_LABEL.fullmatch(text)
    return found.group(2).upper() if found else None


def answer_token(tokens: Sequence[GeneratedToken], answered: str | None) -> tuple[int | None, str]:
    """The index of the token ``choice`` read its answer ``answered`` from, and how it was found
    (the module docstring's rule); None and ``NO_ANSWER_TOKEN`` where there is none."""
    if not answered:
        if tokens and _lone_label(tokens[0].text) is not None:
            return 0, FIRST_TOKEN
        return None, NO_ANSWER_TOKEN
    text = "".join(t.decoded for t in tokens)
    ends, end = [], 0
    for token in tokens:
        end += len(token.decoded)
        ends.append(end)
    for pattern in ANSWER_PATTERNS:
        matches = list(pattern.finditer(text))
        if matches:
            letters = matches[-1].group(1)
            offset = matches[-1].start(1) + len(letters) - len(letters.lstrip())
            index = next(i for i, e in enumerate(ends) if e > offset)
            if _lone_label(tokens[index].text) == answered.upper():
                return index, AFTER_ANSWER
            break  # the letter is inside a longer token ("B." as one token): no lone label to score
    return None, NO_ANSWER_TOKEN


def label_scores(token: GeneratedToken, labels: Sequence[str]) -> tuple[ScoreResult, int]:
    """The labels' decision at the answer token, and how many labels are outside its top-K."""
    found = LONE_LABEL.fullmatch(token.text)
    if found is None:
        raise ValueError(f"the answer token {token.text!r} is not a lone label")  # answer_token returns only those
    space, letter = found.groups()
    forms = [space + (label if letter.isupper() else label.lower()) for label in labels]
    logprobs = [token.top.get(form) for form in forms]
    result = SCORERS[LOGPROB_SCORER].score(logprobs, min(token.top.values()))
    return result, sum(lp is None for lp in logprobs)


@dataclass
class LogImport:
    """What the log contributed, for the report and the manifest."""

    n: int
    accuracy: float
    reported: float
    n_parse_failed: dict[str, int] = field(default_factory=dict)
    values: dict[str, int] = field(default_factory=dict)
    context: str = ""
    # log-likelihood samples (M1-inspect): None where the log has no top log-probabilities
    top_logprobs: int | None = None  # K, as the eval's generate config asked for it
    answer_tokens: dict[str, int] = field(default_factory=dict)  # how each answer token was found
    n_label_absent: int = 0  # items with a label outside the answer token's top-K
    n_absent_tied: int = 0  # ... whose decision is a tie among labels outside it (two or more at the top)
    logprob_accuracy: float | None = None  # M1-inspect's, over the samples with an answer token


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
    config = (log.header.get("eval") or {}).get("model_generate_config") or {}
    k = config.get("top_logprobs") if isinstance(config, dict) else None
    summary.top_logprobs = k if isinstance(k, int) and not isinstance(k, bool) else None
    decisions: list[Decision] = []
    logprob_correct = 0
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
            raise HarnessImportError(f"{where}: the target is {shown_value(target)} but item {item.uid} has answer "
                                     f"{LABELS[item.answer] if item.answer is not None else None}")
        score = (sample.get("scores") or {}).get(SCORE_NAME)
        if not isinstance(score, dict) or score.get("value") not in VALUES:
            raise HarnessImportError(f"{where}: no '{SCORE_NAME}' score of C, I or N")
        pred = SCORERS[INSPECT_SCORER].score(score.get("answer"), LABELS)
        _letter(score.get("answer"), where, "the logged answer")
        if (pred == gold) != (score["value"] == "C"):
            raise HarnessImportError(f"{where}: inspect_ai scored {score['value']} but its logged answer "
                                     f"{shown_value(score.get('answer'))} against target {shown_value(target)} says otherwise")
        total += VALUES[score["value"]]
        summary.values[score["value"]] = summary.values.get(score["value"], 0) + 1
        output = sample.get("output") or {}
        first = (output.get("choices") or [{}])[0] if isinstance(output, dict) else {}
        text = _text((first.get("message") or {}).get("content")) if isinstance(first, dict) else None
        if text is None:
            raise HarnessImportError(f"{where}: no output.choices[0].message.content (the generation)")
        decisions += generation_decisions(item, cell, gold, INSPECT_SCORER, pred, text, LABELS, leakage,
                                          summary.n_parse_failed)
        tokens = generated_tokens(first, where)
        if tokens is None:
            continue
        index, how = answer_token(tokens, score.get("answer"))
        summary.answer_tokens[how] = summary.answer_tokens.get(how, 0) + 1
        if index is None:  # no scores to record: a scored record always has them (the store's check)
            summary.n_parse_failed[LOGPROB_SCORER] = summary.n_parse_failed.get(LOGPROB_SCORER, 0) + 1
            continue
        result, absent = label_scores(tokens[index], LABELS[:len(item.options)])
        summary.n_label_absent += absent > 0
        summary.n_absent_tied += result.tied and any(result.pred in g for g in result.tie_groups)
        logprob_correct += result.pred == gold
        decisions.append(Decision(item, LOGPROB_SCORER, cell, gold, result))
    summary.accuracy = total / len(log.samples)
    if summary.answer_tokens:
        n_scored = sum(summary.answer_tokens.values())
        if n_scored != len(log.samples):
            raise HarnessImportError(f"{log.path}: {n_scored} of its {len(log.samples)} samples carry top "
                                     "log-probabilities; a log scores all its samples with --top-logprobs or none")
        with_token = n_scored - summary.answer_tokens.get(NO_ANSWER_TOKEN, 0)
        summary.logprob_accuracy = logprob_correct / with_token if with_token else None
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
    if summary.answer_tokens:
        metadata["inspect_ai"]["logprobs"] = {
            "scorer": LOGPROB_SCORER, "top_logprobs": summary.top_logprobs, "answer_tokens": summary.answer_tokens,
            "n_label_absent": summary.n_label_absent, "n_absent_tied": summary.n_absent_tied,
            "accuracy": summary.logprob_accuracy}
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
        f"M6-lenient {fails.get('M6-lenient', 0)}", *_logprob_report(meta)])


def _logprob_report(meta: Mapping[str, Any]) -> list[str]:
    """The log-likelihood records' lines; for a log without log-probabilities, one saying how to get them."""
    lp = meta.get("logprobs")
    if not lp:
        return ["  no log-probabilities in the log (run inspect eval with --logprobs --top-logprobs K for "
                f"{LOGPROB_SCORER} records)"]
    k = lp["top_logprobs"] or "K"
    tokens = lp["answer_tokens"]
    scored = tokens.get(AFTER_ANSWER, 0) + tokens.get(FIRST_TOKEN, 0)
    accuracy = "-" if lp["accuracy"] is None else f"{lp['accuracy']:g}"
    return [f"  log-likelihood {LOGPROB_SCORER} (labels at the answer token, top-{k}): accuracy {accuracy} over "
            f"{scored} records; answer token {AFTER_ANSWER} {tokens.get(AFTER_ANSWER, 0)}, {FIRST_TOKEN} "
            f"{tokens.get(FIRST_TOKEN, 0)}, none (no record) {tokens.get(NO_ANSWER_TOKEN, 0)}",
            f"  items with a label outside the top-{k}: {lp['n_label_absent']}/{meta['n']} (scored at the "
            f"top-{k} floor, tied among themselves; decided by such a tie: {lp['n_absent_tied']})"]


def report_json(imported: Imported, out: Path | None = None) -> dict[str, Any]:
    meta = imported.metadata["inspect_ai"]
    return {"model": imported.model, "out": str(out) if out else None, "records": len(imported.decisions),
            **{k: meta[k] for k in ("n", "accuracy", "reported", "values", "n_parse_failed")},
            "logprobs": meta.get("logprobs")}


def read(path: Path, benchmark: str | None) -> RunsRead:
    """The log; its benchmark is the user's --benchmark (a task's dataset may be any file)."""
    log = read_log(path)
    if not benchmark:
        raise HarnessImportError(f"{path}: an inspect_ai log does not say which benchmark its samples are from; "
                                 "give --benchmark cmmlu|ceval")
    return RunsRead((log,), benchmark, log.model or None, None, f"{path}: its eval.model")


AGGREGATION = "accuracy: the mean over samples (C 1, I and N 0)"
# its headline: accuracy, the mean over all samples of the task
HEADLINE = "micro"


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
                           headline=HEADLINE, chat_template=chat, exemplars=exemplars_of(cell["shots"], None))


IMPORTER_LABEL = "inspect_ai"
IMPORTER = HarnessImporter(
    name="inspect", source="inspect_ai", label=IMPORTER_LABEL,
    help="an inspect_ai log (FILE.eval or .json) of its multiple_choice solver: generations as records, and the "
         "labels' log-probabilities at the answer token where it logged them (--logprobs --top-logprobs K)",
    folder_help="the .eval (or .json) log inspect eval wrote",
    model_help="the records' model name (default: the log's model, after its provider)",
    read=read, run=import_runs, format_report=format_report, report_json=report_json, describe=describe,
    benchmark_option=True, audits=False,
)
