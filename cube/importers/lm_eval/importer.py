"""The lm-eval importer's contract (``cube.importers.contract``): ``cube import lm-eval`` and
``cube explain`` call it.

``read`` finds the runs of a folder and what they say of the benchmark, model and tokenizer;
``describe`` tells the protocol of one stored cell from the manifest metadata an import wrote
(its template, delimiter, tokenization, audit verdict, chat template and precision); ``IMPORTER``
is the entry ``cube.importers.registry`` lists. Apart from the import's steps because it is the
one face the rest of cube sees: the commands know this module, never the steps behind it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cube.errors import HarnessImportError
from cube.importers.contract import (
    EXEMPLAR_SLOT,
    EXEMPLARS_ANSWER,
    HarnessImporter,
    RunsRead,
    ScoringProtocol,
    dtype_name,
    exemplars_of,
    extractor_of,
    one_benchmark,
)
from cube.importers.lm_eval.matching import benchmark_of
from cube.importers.lm_eval.reading import find_results, model_name, read_run, tokenizer_spec
from cube.importers.lm_eval.records import import_runs
from cube.importers.lm_eval.report import format_report, report_json


def read(folder: Path, benchmark: str | None) -> RunsRead:
    """Every run below ``folder``, its benchmark (``benchmark``, else each task's dataset), and
    the model and tokenizer its model args name."""
    runs = tuple(read_run(path) for path in find_results(folder))
    chosen = one_benchmark({benchmark_of(task, benchmark) for run in runs for task in run.tasks})
    args = runs[0].model_args
    named = args.get("pretrained") or args.get("model")
    try:
        spec = tokenizer_spec(runs[0])
    except HarnessImportError:
        spec = None
    return RunsRead(runs, chosen, model_name(runs[0]) if named else None, spec,
                    f"{runs[0].results_path}: model_args")


# How lm-eval cuts a label's tokens from the prompt's, as ``cube explain`` names it.
LABEL_TOKENS = "whole text, label past len(tokens(prompt)) (lm-eval)"
AGGREGATION = "per task: acc averaged over its docs"
# its headline for a benchmark of subjects: its cmmlu and ceval groups take the mean of acc
# with weight_by_size (aggregate_metric_list), the records' mean
HEADLINE = "micro"


def describe(metadata: Mapping[str, Any], cell: Mapping[str, Any], contexts: Sequence[str],
             normalisation: str) -> ScoringProtocol:
    """The protocol of one stored cell: the logged task whose protocol it is (its doc_to_text,
    target_delimiter and audit verdict); Nones where no task of the store is this cell."""
    logged = metadata.get("lm_eval") or {}
    for task in (logged.get("tasks") or {}).values():
        p = task.get("protocol") or {}
        if (p.get("label_set"), p.get("context"), int(p.get("shots", -1))) == \
                (cell["label_set"], cell["context"], int(cell["shots"])):
            text = (task.get("config") or {}).get("doc_to_text")
            verdict = ((task.get("audit") or {}).get("lm_eval") or {}).get("verdict")
            if int(cell["shots"]) > 0 and isinstance(text, str):
                text = EXEMPLAR_SLOT + text
            return ScoringProtocol(IMPORTER_LABEL, text if isinstance(text, str) else None,
                                   str(p.get("target_delimiter", " ")), LABEL_TOKENS, normalisation, verdict,
                                   extractor=extractor_of(cell["scorer"]), aggregation=AGGREGATION, headline=HEADLINE,
                                   chat_template=_chat_form(logged), chat_template_sha256=_chat_sha256(logged),
                                   dtype=_dtype(logged),
                                   # lm-eval's fewshot: each exemplar's doc_to_text, delimiter and target
                                   exemplars=exemplars_of(cell["shots"], EXEMPLARS_ANSWER))
    return ScoringProtocol(IMPORTER_LABEL, None, None, None, normalisation, None,
                           extractor=extractor_of(cell["scorer"]), aggregation=AGGREGATION, headline=HEADLINE,
                           chat_template=_chat_form(logged), chat_template_sha256=_chat_sha256(logged),
                           exemplars=exemplars_of(cell["shots"], None),
                           dtype=_dtype(logged))


def _dtype(logged: Mapping[str, Any]) -> str | None:
    """The precision every run of the store logged (its config's model_dtype, else model_args'
    dtype); None where they disagree or do not say."""
    names = {dtype_name((run.get("config") or {}).get("model_dtype")
                        or ((run.get("config") or {}).get("model_args") or {}).get("dtype"))
             for run in (logged.get("runs") or {}).values()}
    return next(iter(names)) if len(names) == 1 else None


def _chat_form(logged: Mapping[str, Any]) -> str | None:
    """The chat-template axis of the store's runs, as lm-eval logged it (``chat_template`` in its
    results: None where no template was applied); None where the runs disagree or do not say."""
    used = {run.get("chat_template_used") for run in (logged.get("runs") or {}).values()}
    if used == {False}:
        return "none"
    if used == {True}:
        sha = _chat_sha256(logged)
        return f"model (template sha256 {sha[:12]}...)" if sha else "model"
    return None


def _chat_sha256(logged: Mapping[str, Any]) -> str | None:
    """The sha256 of the chat template every run applied (lm-eval's ``chat_template_sha``, of the
    template's UTF-8 text as cube's is); None where no template was applied or the runs disagree."""
    runs = (logged.get("runs") or {}).values()
    if {run.get("chat_template_used") for run in runs} != {True}:
        return None
    shas = {run.get("chat_template_sha") for run in runs}
    sha = next(iter(shas)) if len(shas) == 1 else None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) else None


IMPORTER_LABEL = "lm-eval"
IMPORTER = HarnessImporter(
    name="lm-eval", source="lm-evaluation-harness", label=IMPORTER_LABEL,
    help="an `lm_eval --log_samples --output_path` folder: records + audit of its protocol",
    folder_help="the folder lm_eval --output_path wrote",
    model_help="the records' model name (default: the last part of pretrained=)",
    read=read, run=import_runs, format_report=format_report, report_json=report_json, describe=describe,
    benchmark_option=True,
)
