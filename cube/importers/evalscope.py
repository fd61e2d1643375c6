"""Importing EvalScope 1.x runs of C-Eval and CMMLU: its generations and its decisions as records.

EvalScope scores multiple choice by generation and answer extraction only (1.0 dropped
log-likelihood scoring), with protocols of its own: C-Eval 5-shot with exemplars that carry an
explanation (``解析：``) before ``答案：X``, CMMLU 0-shot, both asking for a last line ``答案：X``.
Imported, a run is compared and explained beside cube's, lm-eval's and OpenCompass's records.

What is read: one EvalScope output folder (``evalscope eval --work-dir DIR`` writes
``DIR/<timestamp>/``; give either): ``configs/task_config*.yaml`` (the run's configuration, each
benchmark's resolved protocol: templates, shots, splits, aggregation), ``predictions/<model>/
<benchmark>_<subset>.jsonl`` (the prompt messages and the model's output),
``reviews/<model>/<benchmark>_<subset>.jsonl`` (the target, EvalScope's extracted answer, its
score and status) and ``reports/<model>/<benchmark>.json`` (the accuracy it reports). Prompts are
benchmark text: read in memory only, to match each sample to its item by question hash and to
check it shows the item's own options in order. Generations are scrubbed of item text before they
are written, as cube's own are (``cube.records.leakage.scrub``).

Records per sample, all of one generation: ``M6-es`` (EvalScope's own extracted answer, as its
review logged it), and cube's ``M6-strict`` and ``M6-lenient`` on the same text. EvalScope's score
of each sample must be its extracted answer against the gold, and its reported accuracy the mean
of those scores, and each category's and the overall number (the one a user quotes), with its
macro score, what EvalScope's own weighting gives from them: a mismatch is refused, since the
records would then not be the run's decisions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cube.checksums import sha256_file
from cube.errors import HarnessImportError, shown_value
from cube.files import parse_json_lines, read_text
from cube.importers.contract import (
    CHAT_BY_SERVER,
    EXEMPLAR_SLOT,
    EXEMPLARS_ANSWER,
    EXEMPLARS_EXPLANATION,
    Decision,
    HarnessImporter,
    Imported,
    RunsRead,
    ScoringProtocol,
    exemplars_of,
    extractor_of,
    generation_decisions,
    items_by_hash,
    one_benchmark,
    one_model,
    plain_name,
    run_folders,
)
from cube.protocol.items import Item, qhash
from cube.protocol.scorers import SCORERS

ES_SCORER = "M6-es"
LABELS = ("A", "B", "C", "D")
KNOWN_BENCHMARKS = ("ceval", "cmmlu")  # EvalScope's benchmark names, which are cube's
# EvalScope's C-Eval and CMMLU prompts: "问题：<question>\n选项：\n<option lines>" (the test question
# is the last block; the few-shot exemplars come first).
_QUESTION = re.compile(r"问题：(.*?)\n选项：\n", re.S)
# How each benchmark's adapter writes an option line: C-Eval's own ``format_prompt_template``
# writes "A. <option>"; CMMLU's goes through the generic ``MultiChoiceAdapter``, whose
# ``answer_options`` writes "A) <option>" (EvalScope 1.14.1, both in the zero- and few-shot prompts).
OPTION_LINE = {"ceval": "{label}. {option}", "cmmlu": "{label}) {option}"}


# --------------------------------------------------------------------------------------------
# Reading the output folder
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubsetRun:
    """One subset (subject) of a benchmark in a run, and the two files EvalScope wrote for it."""

    benchmark: str
    subset: str
    split: str
    shots: int
    predictions: Path
    reviews: Path


@dataclass(frozen=True)
class EvalScopeRun:
    folder: Path
    config_path: Path
    config: dict[str, Any]
    model: str
    subsets: tuple[SubsetRun, ...]
    reports: dict[str, Path]  # benchmark -> its report file


def find_runs(folder: str | Path) -> list[Path]:
    """The run folders at or below ``folder``: each holds ``configs/`` and ``predictions/``."""
    return run_folders(folder, "**/predictions/*/*.jsonl", "an EvalScope",
                       "the --work-dir evalscope wrote, or one run in it")


def read_run(folder: str | Path) -> EvalScopeRun:
    """One run folder, checked for everything an import needs before any sample is read."""
    folder = Path(folder)
    configs = sorted((folder / "configs").glob("task_config*.yaml")) if (folder / "configs").is_dir() else []
    if not configs:
        raise HarnessImportError(f"{folder / 'configs'}: no task_config*.yaml; EvalScope writes one per run, and "
                                 "an import needs it to know how each benchmark was scored")
    config_path = configs[-1]
    try:
        config = yaml.safe_load(read_text(config_path, HarnessImportError, "EvalScope task config", within=folder))
    except yaml.YAMLError as exc:
        raise HarnessImportError(f"{config_path}: not YAML ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise HarnessImportError(f"{config_path}: YAML nesting too deep to parse; not an EvalScope task config") \
            from None
    resolved = config.get("resolved_benchmarks") if isinstance(config, dict) else None
    if not isinstance(resolved, dict) or not resolved:
        raise HarnessImportError(f"{config_path}: no 'resolved_benchmarks'; not an EvalScope 1.x task config")
    model = plain_name("model", config.get("model_id") or config.get("model"), config_path)
    subsets, reports = [], {}
    for name, bench in resolved.items():
        if name not in KNOWN_BENCHMARKS:
            raise HarnessImportError(f"{config_path}: benchmark {name!r} is not C-Eval or CMMLU "
                                     f"({', '.join(KNOWN_BENCHMARKS)}); only those two are imported")
        if not isinstance(bench, dict):
            raise HarnessImportError(f"{config_path}: benchmark {name}'s resolved configuration is not a mapping")
        if bench.get("shuffle_choices"):
            raise HarnessImportError(f"{config_path}: benchmark {name} shuffled the choices; the records would not "
                                     "show the items' options in their order")
        split = str(bench.get("eval_split") or "")
        shots = bench.get("few_shot_num") or 0
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 0:
            raise HarnessImportError(f"{config_path}: benchmark {name}'s few_shot_num {shots!r} is not a count")
        for subset in bench.get("subset_list") or []:
            plain_name("subset", subset, config_path)
            predictions = folder / "predictions" / model / f"{name}_{subset}.jsonl"
            reviews = folder / "reviews" / model / f"{name}_{subset}.jsonl"
            for path, what in ((predictions, "inference"), (reviews, "review")):
                if path.exists() and not path.is_file():  # a device, FIFO or folder: say so, never read it
                    raise HarnessImportError(f"{path}: not a regular file (a device, FIFO, socket or folder); "
                                             f"EvalScope's {what} file of this subset is a JSON-lines file")
                if not path.is_file():
                    raise HarnessImportError(f"{path}: missing; EvalScope's {what} of this subset did not finish")
            subsets.append(SubsetRun(name, subset, split, shots, predictions, reviews))
        reports[name] = folder / "reports" / model / f"{name}.json"
    return EvalScopeRun(folder, config_path, config, model, tuple(subsets), reports)


def read_jsonl(path: Path, what: str) -> dict[int, dict[str, Any]]:
    """The file's samples by index; a line that is not a JSON object with an index is an error."""
    out: dict[int, dict[str, Any]] = {}
    text = read_text(path, HarnessImportError, f"EvalScope {what} file", within=path.parents[2])
    for number, entry in parse_json_lines(text, HarnessImportError, lambda number: f"{path} line {number}"):
        index = entry.get("index") if isinstance(entry, dict) else None
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise HarnessImportError(f"{path} line {number}: no non-negative integer 'index'")
        if index in out:
            raise HarnessImportError(f"{path} line {number}: index {index} repeated")
        out[index] = entry
    if not out:
        raise HarnessImportError(f"{path}: no samples")
    return out


@dataclass(frozen=True)
class ReportedTotal:
    """One aggregate EvalScope's report states: a category of subsets, or the whole benchmark
    (``name`` "overall"). EvalScope 1.x computes a category's ``score`` as the mean of its subsets
    weighted by their sample counts (micro) and its ``macro_score`` as their plain mean; the
    benchmark's ``score`` as the categories' weighted mean and its ``macro_score`` as the plain mean
    of the categories' scores, each rounded to 4 places (``evalscope.report.report``)."""

    name: str
    subsets: tuple[str, ...]  # the subsets it is over (for "overall": every subset of the report)
    num: int
    score: float
    macro_score: float | None


@dataclass(frozen=True)
class EvalScopeReport:
    path: Path
    subsets: dict[str, float]  # each subset's reported score, 0..1
    totals: tuple[ReportedTotal, ...]  # its categories, then "overall"


def _unit_score(value: Any, path: Path, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise HarnessImportError(f"{path}: {what}: score {value!r} is not from 0 to 1")
    return float(value)


def _count(value: Any, path: Path, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HarnessImportError(f"{path}: {what}: num {value!r} is not a count")
    return value


def read_report(path: Path) -> EvalScopeReport:
    """EvalScope's reported scores (0..1) from ``reports/<model>/<benchmark>.json``: per subset, per
    category and for the benchmark, with the sample counts it states."""
    text = read_text(path, HarnessImportError, "EvalScope report", within=path.parents[2])
    try:
        report = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise HarnessImportError(f"{path}: not valid JSON (a truncated report?)") from None
    out: dict[str, float] = {}
    totals: list[ReportedTotal] = []
    for metric in (report.get("metrics") or []) if isinstance(report, dict) else []:
        every: list[str] = []
        for category in metric.get("categories") or []:
            names = []
            for subset in category.get("subsets") or []:
                if subset.get("is_aggregate"):
                    continue  # a summary row of other subsets: EvalScope leaves it out of its totals too
                name = str(subset.get("name"))
                out[name] = _unit_score(subset.get("score"), path, f"subset {name!r}")
                names.append(name)
            label = "/".join(map(str, category.get("name") or [])) or "category"
            macro = category.get("macro_score")
            totals.append(ReportedTotal(
                f"category {label}", tuple(names), _count(category.get("num"), path, f"category {label}"),
                _unit_score(category.get("score"), path, f"category {label}"),
                None if macro is None else _unit_score(macro, path, f"category {label} macro")))
            every += names
        macro = metric.get("macro_score")
        totals.append(ReportedTotal("overall", tuple(every), _count(metric.get("num"), path, "overall"),
                                    _unit_score(metric.get("score"), path, "overall"),
                                    None if macro is None else _unit_score(macro, path, "overall macro")))
    if not out:
        raise HarnessImportError(f"{path}: no subset scores (metrics -> categories -> subsets)")
    return EvalScopeReport(path, out, tuple(totals))


# EvalScope rounds each level to 4 places, and each level from the rounded one below: 3 roundings at most.
_TOTAL_TOLERANCE = 2e-4


def check_totals(report: EvalScopeReport, subsets: Mapping[str, "SubsetImport"]) -> dict[str, Any]:
    """Each category's and the benchmark's reported score, sample count and macro score against the
    ones the records give (exact per-subset accuracies, weighted as EvalScope weights them); a
    mismatch is refused. Returns what the manifest keeps: each total, reported and reproduced."""
    kept: dict[str, Any] = {}
    micro_of: dict[str, float] = {}
    for total in report.totals:
        missing = [name for name in total.subsets if name not in subsets]
        if missing:
            raise HarnessImportError(f"{report.path}: the report scores subset {missing[0]!r}, which the run has no "
                                     "reviews of; the report is not of these reviews")
        members = [subsets[name] for name in total.subsets]
        n = sum(m.n for m in members)
        micro = sum(m.score * m.n for m in members) / n if n else 0.0
        if total.name == "overall":
            categories = [micro_of[t.name] for t in report.totals if t.name != "overall" and t.num > 0]
            macro = sum(categories) / len(categories) if categories else 0.0
        else:
            macro = sum(m.score for m in members) / len(members) if members else 0.0
            micro_of[total.name] = micro
        for what, stated, reproduced, close in (
                ("sample count", total.num, n, total.num == n),
                ("score", total.score, micro, abs(total.score - micro) <= _TOTAL_TOLERANCE),
                ("macro score", total.macro_score, macro,
                 total.macro_score is None or abs(total.macro_score - macro) <= _TOTAL_TOLERANCE)):
            if not close:
                raise HarnessImportError(f"{report.path}: EvalScope reports {total.name} {what} {stated:g} but its own "
                                         f"reviews give {reproduced:.4f}; the report is not of these reviews")
        kept[total.name] = {"num": total.num, "score": total.score, "records_score": round(micro, 6),
                            "macro_score": total.macro_score, "records_macro_score": round(macro, 6)}
    return kept


# --------------------------------------------------------------------------------------------
# One sample
# --------------------------------------------------------------------------------------------


def _prompt(entry: Mapping[str, Any], where: str) -> str:
    messages = entry.get("messages")
    users = [m.get("content") for m in messages or [] if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not all(isinstance(u, str) for u in users):
        raise HarnessImportError(f"{where}: no user message (text) to read the question from")
    return "\n".join(users)


def _generation(entry: Mapping[str, Any], where: str) -> str:
    output = entry.get("model_output")
    choices = output.get("choices") if isinstance(output, dict) else None
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: the text ones, in order
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str):
        raise HarnessImportError(f"{where}: no model_output.choices[0].message.content (the generation)")
    return content


def match_item(prompt: str, subset: SubsetRun, by_hash: Mapping[str, Sequence[Item]], where: str) -> Item:
    """The sample's item: the last question block's hash, in the subset's subject and split, and the
    prompt showing the item's own options in their order."""
    found = _QUESTION.findall(prompt)
    if not found:
        raise HarnessImportError(f"{where}: the prompt has no 问题：...选项： block to read the question from")
    h = qhash(found[-1])
    candidates = [c for c in by_hash.get(h, ()) if c.subject == subset.subset and c.split == subset.split]
    if not candidates:
        raise HarnessImportError(f"{where}: question hash {h} matches no {subset.benchmark} {subset.subset} "
                                 f"{subset.split} item (another copy of the benchmark? pass it with --data)")
    last = prompt[prompt.rfind("问题："):]
    for item in candidates:
        block = f"问题：{item.question}\n选项：\n" + "\n".join(
            OPTION_LINE[subset.benchmark].format(label=l, option=o) for l, o in zip(LABELS, item.options))
        if last == block or last.startswith(block + "\n"):
            return item
    raise HarnessImportError(f"{where}: the prompt's options are not item {candidates[0].uid}'s, in its order "
                             "(swapped, or another item's); the decision is not one on this item")


def _label(value: Any, where: str, what: str) -> int | None:
    """A single label A-D as its index; '' or None (nothing extracted) as None; anything else refused."""
    if value is None or value == "":
        return None
    if value in LABELS:
        return LABELS.index(value)
    if isinstance(value, str) and len(value) > 1 and set(value) <= set(LABELS):
        return None  # several letters: not one answer, a parse failure for a single-answer item
    raise HarnessImportError(f"{where}: {what} {str(value)[:12]!r} is not one of A-D")


@dataclass
class SubsetImport:
    """What one subset contributed, for the report and the manifest."""

    key: str  # <benchmark>_<subset>
    n: int
    score: float  # EvalScope's mean of its per-sample scores
    reported: float | None  # the report's score of the subset
    n_parse_failed: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    context: str = ""
    # the exemplar blocks of the subset's prompts (read in memory), and how many carry a 解析 explanation
    n_exemplars: int = 0
    n_explained: int = 0

    @property
    def exemplar_content(self) -> str | None:
        """What the prompts' exemplars show: all with an explanation, none with one, else None."""
        if not self.n_exemplars:
            return None
        if self.n_explained == self.n_exemplars:
            return EXEMPLARS_EXPLANATION
        return EXEMPLARS_ANSWER if self.n_explained == 0 else None


def context_name(benchmark: Mapping[str, Any]) -> str:
    """The records' answer context: EvalScope's templates of the benchmark, named by their hash."""
    from cube.checksums import sha256_bytes

    templates = json.dumps([benchmark.get("prompt_template"), benchmark.get("few_shot_prompt_template"),
                            benchmark.get("system_prompt")], ensure_ascii=False)
    return f"es-gen-{sha256_bytes(templates.encode('utf-8'))[:8]}"


def import_subset(subset: SubsetRun, bench: Mapping[str, Any], by_hash: Mapping[str, Sequence[Item]],
                  leakage: Any) -> tuple[list[Decision], SubsetImport]:
    """The decisions of one subset, EvalScope's score of each checked against its extracted answer."""
    predictions = read_jsonl(subset.predictions, "predictions")
    reviews = read_jsonl(subset.reviews, "reviews")
    if set(predictions) != set(reviews):
        missing = sorted(set(predictions) ^ set(reviews))[0]
        raise HarnessImportError(f"{subset.reviews}: index {missing} is in only one of predictions and reviews")
    context = context_name(bench)
    cell = ("L1_halfwidth", context, subset.shots, "original")
    summary = SubsetImport(f"{subset.benchmark}_{subset.subset}", len(reviews), 0.0, None, context=context)
    decisions: list[Decision] = []
    seen: set[str] = set()
    total = 0.0
    for index in sorted(reviews):
        where = f"{subset.reviews.name} index {index}"
        entry, review = predictions[index], reviews[index]
        prompt = _prompt(entry, where)
        item = match_item(prompt, subset, by_hash, where)
        shown = prompt[:prompt.rfind("问题：")]  # the exemplars, before the sample's own question block
        summary.n_exemplars += len(re.findall(r"(?:^|\n)问题：", shown))  # a block opens a line ("示例问题：" does not)
        summary.n_explained += len(re.findall(r"\n解析：", shown))
        if item.uid in seen:
            raise HarnessImportError(f"{where}: item {item.uid} is matched by two samples")
        seen.add(item.uid)
        target = review.get("target")
        target = target[0] if isinstance(target, list) and len(target) == 1 else target
        gold = _label(target, where, "target")
        if gold != item.answer:
            raise HarnessImportError(f"{where}: EvalScope's target is {target!r} but item {item.uid} has answer "
                                     f"{LABELS[item.answer] if item.answer is not None else None} (another copy of "
                                     "the benchmark?)")
        score = (review.get("sample_score") or {}).get("score") or {}
        values = score.get("value") if isinstance(score, dict) else None
        value = next(iter(values.values()), None) if isinstance(values, dict) and len(values) == 1 else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in (0, 1):
            raise HarnessImportError(f"{where}: its score {values!r} is not one accuracy of 0 or 1")
        es_pred = SCORERS[ES_SCORER].score(score.get("extracted_prediction"), LABELS)
        if (es_pred == gold) != bool(value):
            raise HarnessImportError(f"{where}: EvalScope scored {value:g} but its extracted answer "
                                     f"{shown_value(score.get('extracted_prediction'))} against target {shown_value(target)} gives "
                                     f"{float(es_pred == gold):g}; the review is not of this extraction")
        total += float(value)
        status = str(score.get("status") or "")
        summary.statuses[status] = summary.statuses.get(status, 0) + 1
        decisions += generation_decisions(item, cell, gold, ES_SCORER, es_pred, _generation(entry, where), LABELS,
                                          leakage, summary.n_parse_failed)
    summary.score = total / len(reviews)
    return decisions, summary


# --------------------------------------------------------------------------------------------
# The whole import
# --------------------------------------------------------------------------------------------


def import_runs(runs: Sequence[EvalScopeRun], items: Sequence[Item], model: str | None = None,
                tokenizer: Any | None = None, family: str | None = None,
                tokenizer_source: str | None = None) -> Imported:
    """Records and report of every subset of ``runs`` (one model), nothing written yet. No tokenizer
    is needed: EvalScope's decisions are read off text."""
    from cube.records.leakage import build_index

    name = one_model({run.model for run in runs}, model)
    by_hash = items_by_hash(items)
    leakage = build_index(items)
    decisions: list[Decision] = []
    units: list[SubsetImport] = []
    subsets: dict[str, Any] = {}
    totals: dict[str, Any] = {}  # benchmark -> its reported categories and overall, each reproduced
    logged: dict[str, Any] = {}
    for run in runs:
        files: dict[str, Any] = {"config": {run.config_path.name: sha256_file(run.config_path)},
                                 "predictions": {}, "reviews": {}, "reports": {}}
        resolved = run.config["resolved_benchmarks"]
        for subset in run.subsets:
            key = f"{subset.benchmark}_{subset.subset}"
            if key in subsets:
                raise HarnessImportError(f"subset {key} appears in two runs; import one run of it at a time")
            found, summary = import_subset(subset, resolved[subset.benchmark], by_hash, leakage)
            decisions += found
            units.append(summary)
            files["predictions"][key] = sha256_file(subset.predictions)
            files["reviews"][key] = sha256_file(subset.reviews)
            subsets[key] = summary
        for benchmark, path in run.reports.items():
            if not path.is_file():
                raise HarnessImportError(f"{path}: missing; EvalScope's report of {benchmark} did not finish")
            report = read_report(path)
            reported = report.subsets
            files["reports"][benchmark] = sha256_file(path)
            for subset in (s for s in run.subsets if s.benchmark == benchmark):
                summary = subsets[f"{benchmark}_{subset.subset}"]
                if subset.subset not in reported:
                    raise HarnessImportError(f"{path}: no score for subset {subset.subset}")
                summary.reported = reported[subset.subset]
                if abs(summary.reported - summary.score) > 5e-5:  # EvalScope rounds its report to 4 places
                    raise HarnessImportError(
                        f"{path}: EvalScope reports {subset.subset} {summary.reported:g} but its own reviews give "
                        f"{summary.score:.4f} ({summary.n} samples); the report is not of these reviews")
            # its categories' and its overall numbers too: the figure a user quotes is the overall one
            totals[benchmark] = check_totals(report, {s.subset: subsets[f"{benchmark}_{s.subset}"]
                                                      for s in run.subsets if s.benchmark == benchmark})
        logged[run.folder.name] = {
            "evalscope_version": run.config.get("evalscope_version"), "model": run.model,
            "eval_type": run.config.get("eval_type"), "generation_config": run.config.get("generation_config"),
            "chat_template": run.config.get("chat_template"), "seed": run.config.get("seed"),
            "benchmarks": {k: {x: v for x, v in b.items() if x not in ("dataset_id", "description")}
                           for k, b in resolved.items()},
            "files": files, "config_file": run.config_path.name,
        }
    metadata: dict[str, Any] = {
        "source": "evalscope",
        "evalscope": {"runs": logged, "subsets": {k: _subset_json(s, runs) for k, s in subsets.items()},
                      "reported_totals": totals},
    }
    if family:
        metadata["families"] = {name: family}
    return Imported(name, decisions, units, metadata)


def _subset_json(s: SubsetImport, runs: Sequence[EvalScopeRun]) -> dict[str, Any]:
    subset = next(x for run in runs for x in run.subsets if f"{x.benchmark}_{x.subset}" == s.key)
    return {"benchmark": subset.benchmark, "subject": subset.subset, "split": subset.split, "shots": subset.shots,
            "n": s.n, "score": s.score, "reported": s.reported, "scorers": [ES_SCORER, *SCORERS["M6"].records],
            "context": s.context, "n_parse_failed": s.n_parse_failed, "statuses": s.statuses,
            "exemplars": {"blocks": s.n_exemplars, "explained": s.n_explained, "content": s.exemplar_content}}


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------


def format_report(imported: Imported, out: Path | None = None) -> str:
    """What a user holding the folder wants from "check my run", one finding per line."""
    meta = imported.metadata["evalscope"]
    written = f" -> {out}" if out is not None else ""
    lines = [f"imported {sum(s.n for s in imported.units)} samples of {len(imported.units)} subset(s), model "
             f"{imported.model}: {len(imported.decisions)} records{written}"]
    for key, d in meta["subsets"].items():
        fails = d["n_parse_failed"]
        lines.append(f"  {key}: {d['benchmark']} {d['subject']} {d['split']}, {d['shots']}-shot, EvalScope "
                     f"{d['reported']:.4f} (records: {d['score']:.4f}) -> context {d['context']}; no answer found: "
                     f"EvalScope {fails.get(ES_SCORER, 0)}/{d['n']}, cube's M6-strict {fails.get('M6-strict', 0)}, "
                     f"M6-lenient {fails.get('M6-lenient', 0)}")
    for benchmark, totals in (meta.get("reported_totals") or {}).items():
        overall = totals.get("overall") or {}
        if overall:
            lines.append(f"  {benchmark} overall: EvalScope {overall['score']:.4f} over {overall['num']} samples (records: "
                         f"{overall['records_score']:.4f}); its macro score {overall['macro_score'] or 0:.4f}, the mean of "
                         f"its categories (records: {overall['records_macro_score']:.4f})")
    return "\n".join(lines)


def report_json(imported: Imported, out: Path | None = None) -> dict[str, Any]:
    meta = imported.metadata["evalscope"]
    return {"model": imported.model, "out": str(out) if out else None, "records": len(imported.decisions),
            "subsets": meta["subsets"], "reported_totals": meta.get("reported_totals") or {}}


# --------------------------------------------------------------------------------------------
# The importer's contract (cube.importers.contract)
# --------------------------------------------------------------------------------------------


def read(folder: Path, benchmark: str | None = None) -> RunsRead:
    """Every run at or below ``folder``; the benchmark is the config's (C-Eval or CMMLU)."""
    runs = tuple(read_run(path) for path in find_runs(folder))
    chosen = one_benchmark({s.benchmark for run in runs for s in run.subsets})
    return RunsRead(runs, chosen, runs[0].model, None, f"{runs[0].config_path}: its model")


AGGREGATION = "per subset: the mean of its samples' accuracy; a benchmark's as its report weights subsets"
# its headline: the report's "score" weights each subset by its samples, the records' mean (its
# "macro_score", also reported, is the mean of its categories' scores; both reproduced at import)
HEADLINE = "micro"
_FIELD = re.compile(r"(?<!\{)\{(question|subject|choices|letters)\}(?!\})")


def describe(metadata: Mapping[str, Any], cell: Mapping[str, Any], contexts: Sequence[str],
             normalisation: str) -> ScoringProtocol:
    """The protocol of one stored cell: EvalScope's prompt template (the few-shot exemplars named,
    with their explanations where C-Eval's carry them), its extractor and aggregation."""
    logged = metadata.get("evalscope") or {}
    prompt = None
    for run in (logged.get("runs") or {}).values():
        for name, bench in (run.get("benchmarks") or {}).items():
            if context_name(bench) == cell["context"]:
                template = bench.get("prompt_template")
                if isinstance(template, str) and name in OPTION_LINE:
                    choices = "\n".join(OPTION_LINE[name].format(label=label, option="{{" + label + "}}")
                                         for label in LABELS)  # the benchmark's own layout (CMMLU 'A) ')
                    fields = {"question": "{{Question}}", "subject": "{{subject_zh}}", "choices": choices,
                              "letters": "{{letters}}"}
                    prompt = _FIELD.sub(lambda m: fields[m.group(1)], template)
                    if int(bench.get("few_shot_num") or 0):
                        prompt = EXEMPLAR_SLOT + prompt
    # what the exemplars showed, as the import read them off the prompts: one content for the slice
    contents = {(s.get("exemplars") or {}).get("content") for s in (logged.get("subsets") or {}).values()
                if s.get("context") in (set(contexts) or {cell["context"]})}
    content = next(iter(contents)) if len(contents) == 1 else None
    return ScoringProtocol(IMPORTER_LABEL, prompt, None, None, normalisation, None,
                           extractor=extractor_of(cell["scorer"]), aggregation=AGGREGATION, headline=HEADLINE,
                           chat_template=_chat_form(logged), exemplars=exemplars_of(cell["shots"], content))


def _chat_form(logged: Mapping[str, Any]) -> str | None:
    """EvalScope's API mode sends chat messages: the server applies the model's chat template."""
    kinds = {run.get("eval_type") for run in (logged.get("runs") or {}).values()}
    return CHAT_BY_SERVER if kinds == {"openai_api"} else None


IMPORTER_LABEL = "EvalScope"
IMPORTER = HarnessImporter(
    name="evalscope", source="evalscope", label=IMPORTER_LABEL,
    help="an `evalscope eval --work-dir DIR` output folder (C-Eval, CMMLU): generations as records",
    folder_help="the work dir evalscope wrote (or one <timestamp> run in it)",
    model_help="the records' model name (default: the config's model_id)",
    read=read, run=import_runs, format_report=format_report, report_json=report_json, describe=describe,
    audits=False,
)
