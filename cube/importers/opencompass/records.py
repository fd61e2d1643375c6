"""Building an OpenCompass import: each dataset's decisions, and the manifest's metadata of the run.

The two modes, as OpenCompass 0.5.4 computes them (``openicl/icl_inferencer/icl_ppl_inferencer.py``,
``models/huggingface_above_v4_33.py: HuggingFaceBaseModel.get_ppl``):

- PPL: each label's whole prompt (in-context examples, question, options and ``答案是: X``) is
  scored, and the label with the lowest PPL wins (the first, on a tie). PPL is the summed
  cross-entropy of tokens 2..n divided by n, the count of non-pad tokens: the whole sequence, not
  the answer alone, and n counts the first token, which is never predicted. So
  ``-PPL * n`` is the whole sequence's log-likelihood, and PPL differs from summing the label's
  log-likelihood (cube's M1-seq) only when the labels' prompts have different token counts.
  Records: scorer ``OC-ppl``, scores ``-PPL``.
- gen: a greedy generation after the prompt, read by ``first_capital_postprocess`` (the first
  capital letter anywhere, A-Z, scored against the gold letter). Records: ``M6-oc`` (that
  extraction, recomputed and checked against what OpenCompass logged), and cube's ``M6-strict``
  and ``M6-lenient`` on the same text. A run whose ``pred_postprocessor`` is another (or none) is
  refused (``cube.importers.opencompass.reading``): its decisions are not first_capital's.

Each decision is recomputed by the scorer table's entry and checked against OpenCompass's own, and
the dataset's reported accuracy against the records'. Apart from reading and matching because it
is the one step that turns a run into records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from cube.checksums import sha256_bytes, sha256_file
from cube.errors import HarnessImportError
from cube.importers.contract import Decision, Imported, generation_decisions, items_by_hash, one_model
from cube.importers.opencompass.audit import audit_labels
from cube.importers.opencompass.matching import LABELS, check_block, match_item, range_rows, shots_in
from cube.importers.opencompass.reading import (
    DatasetRun,
    OpenCompassRun,
    model_path,
    read_accuracy,
    read_predictions,
)
from cube.protocol.items import Item
from cube.protocol.scorers import SCORERS, tie_groups
from cube.protocol.tokenization import encode_ids

PPL_SCORER = "OC-ppl"
GEN_SCORER = "M6-oc"  # a third extractor of one generation, beside cube's M6-strict and M6-lenient


@dataclass
class DatasetImport:
    """What one dataset contributed, for the report and the manifest."""

    abbr: str
    mode: str
    n: int
    accuracy: float  # OpenCompass's own, from results/
    reproduced: float  # the same from the imported records
    scorers: list[str]
    n_tied: int = 0
    n_differs_from_seq: int | None = None  # PPL: docs where length normalisation changed the choice
    n_parse_failed: dict[str, int] = field(default_factory=dict)
    token_counts: list[list[int]] | None = None  # PPL: tokens of each label's whole prompt
    context: str = ""


def _ppl_values(entry: Mapping[str, Any], where: str) -> list[float]:
    values = []
    for label in LABELS:
        cell = entry.get(f"label: {label}")
        ppl = cell.get("PPL") if isinstance(cell, dict) else None
        if isinstance(ppl, bool) or not isinstance(ppl, (int, float)) or not np.isfinite(ppl) or ppl < 0:
            raise HarnessImportError(f"{where}: no finite non-negative PPL for label {label}")
        values.append(float(ppl))
    return values


def _gold(entry: Mapping[str, Any], item: Item, where: str) -> int:
    gold = entry.get("gold")
    if gold not in LABELS:
        raise HarnessImportError(f"{where}: gold {str(gold)[:12]!r} is not one of A-D")
    if LABELS.index(gold) != item.answer:
        raise HarnessImportError(f"{where}: OpenCompass's gold is {gold} but item {item.uid} has answer "
                                 f"{LABELS[item.answer]} (another copy of the benchmark?)")
    return item.answer


def context_name(dataset: DatasetRun, subject_zh: str = "") -> str:
    """The records' answer context: OpenCompass's own template, named by its hash with the subject's
    name taken out (the template names the subject; the context is one across subjects)."""
    infer = dataset.config.get("infer_cfg") or {}
    template = json.dumps(infer.get("prompt_template") or infer.get("ice_template"), ensure_ascii=False,
                          sort_keys=True)
    if subject_zh:
        template = template.replace(subject_zh, "{subject}")
    return f"oc-{dataset.mode}-{sha256_bytes(template.encode('utf-8'))[:8]}"


def import_dataset(dataset: DatasetRun, by_hash: Mapping[str, Sequence[Item]],
                   tokenizer: Any | None = None, leakage: Any | None = None) -> tuple[list[Decision], DatasetImport]:
    """The decisions of one dataset, each recomputed by the scorer table's entry and checked
    against OpenCompass's own; generations are stored scrubbed of item text where ``leakage``
    (a ``cube.records.leakage`` index) is given, as every importer's and cube's own are."""
    entries = read_predictions(dataset)
    accuracy = read_accuracy(dataset)
    subject_zh = next((i.subject_zh for group in by_hash.values() for i in group
                       if i.subject == dataset.subject), "")
    context = context_name(dataset, subject_zh)
    pool = [i for group in by_hash.values() for i in group
            if i.subject == dataset.subject and i.split == dataset.split]
    n_split = max((i.row for i in pool), default=-1) + 1 if pool else None
    rows_of = range_rows(dataset.test_range, len(entries), str(dataset.predictions), n_split)
    records: list[Decision] = []
    summary = DatasetImport(dataset.abbr, dataset.mode, len(entries), accuracy, 0.0, [])
    n_correct = 0
    counts: list[list[int]] = []
    seen: set[str] = set()
    for index, (entry, row) in enumerate(zip(entries, rows_of)):
        where = f"{dataset.predictions.name} index {index}"
        if dataset.mode == "ppl":
            prompts = [(entry.get(f"label: {lab}") or {}).get("prompt") for lab in LABELS]
            if not all(isinstance(p, str) for p in prompts):
                raise HarnessImportError(f"{where}: a label has no rendered 'prompt'")
            prompt = prompts[0]
        else:
            prompt = entry.get("origin_prompt")
            if not isinstance(prompt, str):
                raise HarnessImportError(f"{where}: no 'origin_prompt'")
        item = match_item(prompt, dataset, row, by_hash, where, pool)
        for label_prompt in (prompts if dataset.mode == "ppl" else [prompt]):
            # each label's prompt on its own: four label prompts of four questions made one record
            check_block(label_prompt, item, where)
            if shots_in(label_prompt) != dataset.shots:
                raise HarnessImportError(f"{where}: the config asks for {dataset.shots}-shot prompts, but the "
                                         f"prompt holds {shots_in(label_prompt)} in-context example(s); the "
                                         "predictions are not of this config")
        if item.uid in seen:
            raise HarnessImportError(f"{where}: item {item.uid} is matched by two predictions")
        seen.add(item.uid)
        gold = _gold(entry, item, where)
        cell = ("L1_halfwidth", context, dataset.shots, "original")
        if dataset.mode == "ppl":
            ppl = np.array(_ppl_values(entry, where))
            result = SCORERS[PPL_SCORER].score(ppl)  # the first minimum PPL, as OpenCompass's list.index(min)
            pred, tied = result.pred, result.tied
            if entry["prediction"] != LABELS[pred]:
                raise HarnessImportError(f"{where}: OpenCompass predicted {str(entry['prediction'])[:4]!r} but "
                                         f"its own PPLs give {LABELS[pred]}")
            first_ids = n_tokens = None
            if tokenizer is not None:
                ids = [encode_ids(tokenizer, p) for p in prompts]  # add_special_tokens, as get_ppl
                counts.append([len(i) for i in ids])
                common = len(_common_prefix(ids))
                tails = [i[common:] for i in ids]
                first_ids = [t[0] if t else -1 for t in tails]
                n_tokens = [len(t) for t in tails]
                whole = -ppl * np.array([len(i) for i in ids])  # log-likelihood of each whole prompt
                summary.n_differs_from_seq = (summary.n_differs_from_seq or 0) + (int(np.argmax(whole)) != pred)
            summary.n_tied += tied
            # the tie groups of the tokens each label's prompt ends in; the scores stay OpenCompass's
            groups = tie_groups(first_ids) if first_ids else ()
            records.append(Decision(item, PPL_SCORER, cell, gold, replace(result, tie_groups=groups),
                                    first_token_ids=first_ids, n_tokens=n_tokens))
            n_correct += pred == gold
        else:
            text = entry["prediction"]
            if not isinstance(text, str):
                raise HarnessImportError(f"{where}: the prediction is not a generation (text)")
            oc_pred = SCORERS[GEN_SCORER].score(text, LABELS)
            n_correct += oc_pred == gold
            records += generation_decisions(item, cell, gold, GEN_SCORER, oc_pred, text, LABELS, leakage,
                                            summary.n_parse_failed)
    summary.reproduced = 100.0 * n_correct / len(entries)
    if abs(summary.reproduced - accuracy) > 1e-9:
        raise HarnessImportError(
            f"{dataset.results}: OpenCompass reports accuracy {accuracy:g} but its own predictions give "
            f"{summary.reproduced:g} ({n_correct}/{len(entries)}); the results are not of these predictions"
        )
    summary.scorers = [PPL_SCORER] if dataset.mode == "ppl" else [GEN_SCORER, *SCORERS["M6"].records]
    summary.token_counts = counts or None
    summary.context = context
    return records, summary


def _common_prefix(seqs: Sequence[Sequence[int]]) -> tuple[int, ...]:
    out = []
    for column in zip(*seqs):
        if len(set(column)) != 1:
            break
        out.append(column[0])
    return tuple(out)


def ppl_audit(summary: DatasetImport, decisions: Sequence[Decision]) -> dict[str, Any]:
    """What PPL mode scored, on the real prompts: tokens per label prompt and per label."""
    counts = summary.token_counts or []
    equal = all(len(set(c)) == 1 for c in counts)
    label_tokens = sorted({tuple(d.n_tokens or ()) for d in decisions if d.scorer == PPL_SCORER})
    return {
        "normalised_over": "the whole prompt (in-context examples, question, options, label): "
                           "sum of the cross-entropy of tokens 2..n divided by n",
        "equal_token_counts": equal,
        "label_token_counts": [list(t) for t in label_tokens],
        "n_decision_differs_from_summed_loglik": summary.n_differs_from_seq,
    }


def import_runs(runs: Sequence[OpenCompassRun], items: Sequence[Item], model: str | None = None,
                tokenizer: Any | None = None, family: str | None = None,
                tokenizer_source: str | None = None) -> Imported:
    """Records and report of every dataset of ``runs`` (one model), nothing written yet."""
    from cube.records.leakage import build_index

    name = one_model({run.model for run in runs}, model, "model abbr")
    by_hash = items_by_hash(items)
    leakage = build_index(items)
    rows: list[Decision] = []
    summaries: list[DatasetImport] = []
    datasets: dict[str, Any] = {}
    logged: dict[str, Any] = {}
    for run in runs:
        files = {"config": {run.config_path.name: sha256_file(run.config_path)}, "predictions": {}, "results": {}}
        for dataset in run.datasets:
            key = f"{dataset.abbr}@{dataset.mode}"
            if key in datasets:
                raise HarnessImportError(f"dataset {dataset.abbr} ({dataset.mode}) appears in two runs; "
                                         "import one run of it at a time")
            records, summary = import_dataset(dataset, by_hash, tokenizer, leakage)
            rows += records
            summaries.append(summary)
            files["predictions"][dataset.abbr] = sha256_file(dataset.predictions)
            files["results"][dataset.abbr] = sha256_file(dataset.results)
            entry = {"run": run.folder.name, "mode": dataset.mode, "benchmark": dataset.benchmark,
                     "subject": dataset.subject, "split": dataset.split, "test_range": dataset.test_range,
                     "shots": dataset.shots, "postprocessor": dataset.postprocessor, "n": summary.n,
                     "accuracy": summary.accuracy, "reproduced_accuracy": summary.reproduced,
                     "scorers": summary.scorers, "context": summary.context, "n_tied": summary.n_tied,
                     "n_parse_failed": summary.n_parse_failed, "config": dataset.config}
            if dataset.mode == "ppl" and tokenizer is not None:
                entry["audit"] = ppl_audit(summary, records)
            datasets[key] = entry
        logged[run.folder.name] = {"model": run.model_config, "files": files,
                                   "config_file": run.config_path.name}
    audit = audit_labels(tokenizer, family or name) if tokenizer is not None else None
    metadata: dict[str, Any] = {
        "source": "opencompass",
        "opencompass": {"runs": logged, "datasets": datasets, "tokenizer": tokenizer_source, "audit": audit,
                        "tokenizer_path": model_path(runs[0])},
    }
    if family:
        metadata["families"] = {name: family}
    return Imported(name, rows, summaries, metadata)


def accuracy_by_dataset(rows: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """(OpenCompass's reported accuracy, the accuracy of the imported records) per dataset, from a
    store alone: the records of a dataset are those of its subject, mode's scorer and context."""
    out = {}
    for key, d in metadata["opencompass"]["datasets"].items():
        scorer = PPL_SCORER if d["mode"] == "ppl" else GEN_SCORER
        mine = [r for r in rows if r["subject"] == d["subject"] and r["scorer"] == scorer
                and r["context"] == d["context"]]
        if len(mine) != d["n"]:
            raise HarnessImportError(f"{key}: {len(mine)} records for {d['n']} predictions")
        out[key] = (float(d["accuracy"]), 100.0 * sum(bool(r["correct"]) for r in mine) / len(mine))
    return out
