"""Importing OpenCompass runs of CMMLU and C-Eval: PPL choices and generations as cube records.

OpenCompass is the harness Chinese-benchmark users run most, and its two multiple-choice modes
score differently from lm-eval and from cube: imported, a run's items can be rescored, compared
and explained beside cube's own records, with no model.

What is read: one OpenCompass output folder (``opencompass CONFIG -w WORK_DIR`` writes
``WORK_DIR/<timestamp>/``; give either): ``configs/*.py`` (the whole run's configuration, as
mmengine dumps it: read as a syntax tree, never executed), ``predictions/<model>/<dataset>.json``
and ``results/<model>/<dataset>.json``. Predictions hold the rendered prompts (benchmark text): they
are read in memory only, to match each prediction to its item by question hash and to tokenize
what was scored, and are never written. Records keep uid + qhash and numbers.

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
  refused: its decisions are not first_capital's.

Refused, each in one line, because the records would then not be the run's decisions on the items
they name: an accuracy that is not a finite percentage; a prompt whose question block does not
carry the item's own options in its order (checked in every label's prompt, so four label prompts
of four questions are not one record); a ``test_range`` the predictions do not fill, or a
prediction at a row the range does not put there; prompts with another number of in-context
examples than the config's retriever asks for.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from cube.checksums import sha256_bytes, sha256_file
from cube.errors import HarnessImportError
from cube.files import read_text
from cube.importers.contract import (
    EXEMPLAR_SLOT,
    EXEMPLARS_ANSWER,
    EXEMPLARS_EXPLANATION,
    Decision,
    HarnessImporter,
    Imported,
    RunsRead,
    ScoringProtocol,
    dtype_name,
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
from cube.protocol.scorers import SCORERS, tie_groups
from cube.protocol.tokenization import encode_ids

PPL_SCORER = "OC-ppl"
GEN_SCORER = "M6-oc"  # a third extractor of one generation, beside cube's M6-strict and M6-lenient
LABELS = ("A", "B", "C", "D")
# OpenCompass's dataset classes of the two benchmarks cube reads (the config's ``type``).
KNOWN_DATASETS = {"CMMLUDataset": "cmmlu", "CEvalDataset": "ceval"}
INFERENCERS = {"PPLInferencer": "ppl", "GenInferencer": "gen"}
# The gen postprocessors whose decisions cube reproduces (``first_capital`` below): any other is refused.
GEN_POSTPROCESSORS = ("first_capital_postprocess",)


# --------------------------------------------------------------------------------------------
# The configuration, as a syntax tree
# --------------------------------------------------------------------------------------------


class _Unsupported(ValueError):
    pass


def _value(node: ast.AST) -> Any:
    """The value of a dumped config expression: literals and ``dict(...)`` only, nothing run."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {kw.arg: _value(kw.value) for kw in node.keywords}
    raise _Unsupported(type(node).__name__)


def read_config(path: Path, within: Path | None = None) -> dict[str, Any]:
    """The top-level names of a dumped OpenCompass config (those that are not plain data: None);
    ``within``: the run folder, which a link must not lead out of."""
    text = read_text(path, HarnessImportError, "OpenCompass config", within=within).removeprefix("\ufeff")  # a BOM
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise HarnessImportError(f"{path}: not a Python config file: line {exc.lineno}: {exc.msg} (truncated, or "
                                 "not the config OpenCompass dumped?)") from None
    except (ValueError, RecursionError) as exc:
        reason = "it nests too deep" if isinstance(exc, RecursionError) else str(exc).splitlines()[0]
        raise HarnessImportError(f"{path}: not a Python config file ({reason})") from None
    out: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                out[stmt.targets[0].id] = _value(stmt.value)
            except (_Unsupported, RecursionError):
                out[stmt.targets[0].id] = None
    return out


def _type_name(value: Any) -> str:
    """``opencompass.datasets.CMMLUDataset`` (as dumped) -> ``CMMLUDataset``."""
    return str(value or "").rsplit(".", 1)[-1]


# --------------------------------------------------------------------------------------------
# Reading the output folder
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetRun:
    """One dataset of a run: its configuration and the files OpenCompass wrote for it."""

    abbr: str
    benchmark: str
    subject: str
    split: str
    mode: str  # ppl | gen
    test_range: str
    shots: int
    postprocessor: str | None
    config: dict[str, Any]
    predictions: Path
    results: Path


@dataclass(frozen=True)
class OpenCompassRun:
    folder: Path
    config_path: Path
    config: dict[str, Any]
    model: str
    model_config: dict[str, Any]
    datasets: tuple[DatasetRun, ...]


def find_runs(folder: str | Path) -> list[Path]:
    """The run folders at or below ``folder``: each holds ``configs/`` and ``predictions/``."""
    return run_folders(folder, "**/predictions/*/*.json", "an OpenCompass",
                       "the -w WORK_DIR OpenCompass wrote, or one run in it")


def _check_abbr(kind: str, value: Any, where: Path) -> str:
    return plain_name(f"{kind} abbr", value, where)


def _model_abbr(model: Mapping[str, Any]) -> Any:
    if model.get("abbr"):
        return model["abbr"]
    return Path(str(model.get("path") or "").rstrip("/")).name or None


def read_run(folder: str | Path) -> OpenCompassRun:
    """One run folder, checked for everything an import needs before any prediction is read."""
    folder = Path(folder)
    configs = sorted((folder / "configs").glob("*.py")) if (folder / "configs").is_dir() else []
    if not configs:
        raise HarnessImportError(f"{folder / 'configs'}: no dumped config (*.py); OpenCompass writes one per "
                                 "run, and an import needs it to know how each dataset was scored")
    config_path = configs[-1]
    config = read_config(config_path, within=folder)
    models, datasets = config.get("models"), config.get("datasets")
    if not isinstance(models, list) or not isinstance(datasets, list) or not datasets:
        raise HarnessImportError(f"{config_path}: no 'models' and 'datasets' lists; not an OpenCompass config")
    if len(models) != 1 or not isinstance(models[0], dict):
        raise HarnessImportError(f"{config_path}: {len(models)} models; import a run of one model")
    model = _check_abbr("model", _model_abbr(models[0]), config_path)
    out = []
    for d in datasets:
        if not isinstance(d, dict):
            raise HarnessImportError(f"{config_path}: a dataset entry is not a mapping")
        abbr = _check_abbr("dataset", d.get("abbr"), config_path)
        kind = _type_name(d.get("type"))
        if kind not in KNOWN_DATASETS:
            raise HarnessImportError(f"{config_path}: dataset {abbr} is {kind or 'of no type'}, not C-Eval or CMMLU "
                                     f"({', '.join(KNOWN_DATASETS)}); only those two are imported")
        infer = d.get("infer_cfg") or {}
        inferencer = _type_name((infer.get("inferencer") or {}).get("type"))
        if inferencer not in INFERENCERS:
            raise HarnessImportError(f"{config_path}: dataset {abbr} uses {inferencer or 'no inferencer'}; only "
                                     "PPLInferencer and GenInferencer are imported")
        reader = d.get("reader_cfg") or {}
        retriever = infer.get("retriever") or {}
        shots = len(retriever.get("fix_id_list") or []) if _type_name(retriever.get("type")) == "FixKRetriever" else 0
        post = (d.get("eval_cfg") or {}).get("pred_postprocessor")
        if INFERENCERS[inferencer] == "gen":
            _check_postprocessor(post, abbr, config_path)
        predictions = folder / "predictions" / model / f"{abbr}.json"
        results = folder / "results" / model / f"{abbr}.json"
        for path, what in ((predictions, "predictions"), (results, "results")):
            if not path.is_file():
                raise HarnessImportError(f"{path}: missing; OpenCompass's {'inference' if what == 'predictions' else 'evaluation'} "
                                         "of this dataset did not finish")
        out.append(DatasetRun(abbr, KNOWN_DATASETS[kind], str(d.get("name") or ""), str(reader.get("test_split") or "test"),
                              INFERENCERS[inferencer], str(reader.get("test_range") or ""), shots,
                              _type_name(post.get("type")) if isinstance(post, dict) else None, d, predictions, results))
    return OpenCompassRun(folder, config_path, config, model, models[0], tuple(out))


def _check_postprocessor(post: Any, abbr: str, where: Path) -> None:
    """A gen dataset's ``pred_postprocessor`` must be one whose decisions cube reproduces exactly.

    OpenCompass scores a generation by what its postprocessor reads from it; an import that read
    it another way (first_capital on a ``first_option_postprocess`` run) imported other decisions
    under OpenCompass's name, and its accuracy agreed only by chance or not at all.
    """
    name = _type_name(post.get("type")) if isinstance(post, dict) else None
    if name is None:
        raise HarnessImportError(
            f"{where}: dataset {abbr} is scored in gen mode with no eval_cfg.pred_postprocessor, so OpenCompass "
            "compared the raw generation with the gold letter; cube reproduces gen decisions of "
            f"{', '.join(GEN_POSTPROCESSORS)} only: rerun OpenCompass with one of them")
    if name not in GEN_POSTPROCESSORS:
        raise HarnessImportError(
            f"{where}: dataset {abbr}'s pred_postprocessor is {name}, whose decisions cube does not reproduce "
            f"(it reproduces {', '.join(GEN_POSTPROCESSORS)}); rerun OpenCompass with one of them")
    extra = sorted(k for k in post if k != "type")
    if extra:
        raise HarnessImportError(f"{where}: dataset {abbr}'s pred_postprocessor {name} has arguments "
                                 f"({', '.join(extra)}) cube does not reproduce")


def _load_json(path: Path, what: str) -> Any:
    # predictions/<model>/<dataset>.json and results/...: a link out of the run folder is refused
    text = read_text(path, HarnessImportError, f"OpenCompass {what} file", within=path.parents[2])
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HarnessImportError(f"{path}: not valid JSON at line {exc.lineno} (a truncated {what} file?)") from None
    except RecursionError:
        raise HarnessImportError(f"{path}: JSON nested too deep to parse") from None


def read_predictions(dataset: DatasetRun) -> list[dict[str, Any]]:
    """The dataset's predictions in index order; a gap in the indices is a truncated file."""
    data = _load_json(dataset.predictions, "predictions")
    if not isinstance(data, dict) or not data:
        raise HarnessImportError(f"{dataset.predictions}: not an object of predictions by index")
    if sorted(data, key=lambda k: (len(k), k)) != [str(i) for i in range(len(data))]:
        raise HarnessImportError(f"{dataset.predictions}: its indices are not 0..{len(data) - 1}")
    out = []
    for i in range(len(data)):
        entry = data[str(i)]
        if not isinstance(entry, dict) or "prediction" not in entry or "gold" not in entry:
            raise HarnessImportError(f"{dataset.predictions} index {i}: no 'prediction' and 'gold'")
        out.append(entry)
    return out


def read_accuracy(dataset: DatasetRun) -> float:
    data = _load_json(dataset.results, "results")
    value = data.get("accuracy") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HarnessImportError(f"{dataset.results}: no numeric 'accuracy'")
    if not (np.isfinite(value) and 0 <= value <= 100):  # NaN passed every comparison with the records
        raise HarnessImportError(f"{dataset.results}: accuracy {value!r} is not a percentage from 0 to 100; "
                                 "OpenCompass's evaluation of this dataset did not finish or was edited")
    return float(value)


def _range_rows(test_range: str, n: int, where: str, n_split: int | None = None) -> range:
    """The test rows ``test_range`` (``"[a:b]"``, OpenCompass's slice of the split) selected.

    ``n_split``: the rows of the split in the benchmark in use; given, the slice must select
    exactly the ``n`` predictions the file holds (``[0:4]`` with one prediction is a run cut
    short or a config that is not this run's).
    """
    if not test_range:
        rows = range(n if n_split is None else n_split)
    else:
        m = re.fullmatch(r"\[\s*(\d*)\s*:\s*(\d*)\s*\]", test_range)
        if not m:
            raise HarnessImportError(f"{where}: test_range {test_range!r} is not a plain [a:b] slice")
        start = int(m.group(1) or 0)
        stop = int(m.group(2)) if m.group(2) else (n_split if n_split is not None else start + n)
        rows = range(n_split if n_split is not None else stop)[start:stop]
    if len(rows) != n:
        raise HarnessImportError(f"{where}: {n} prediction(s), but the config's test_range "
                                 f"{test_range or '(all)'} selects {len(rows)} row(s) of the split; the "
                                 "predictions are not of this config (or its inference did not finish)")
    return rows


# --------------------------------------------------------------------------------------------
# Matching predictions to items
# --------------------------------------------------------------------------------------------

_QUESTION = re.compile(r"题目：(.*?)\nA\. ", re.S)


def question_of(prompt: str, where: str) -> str:
    """The test question of a rendered prompt: the last ``题目：...\\nA. `` block (OpenCompass's
    CMMLU and C-Eval templates; in-context examples come before it)."""
    found = _QUESTION.findall(prompt)
    if not found:
        raise HarnessImportError(f"{where}: the prompt has no 题目：...A. block to read the question from")
    return found[-1]


def _question_by_block(prompt: str, pool: Sequence[Item]) -> str | None:
    """The question of the pool's item whose ``question\nA. option`` block ends the prompt last (the
    test item follows the in-context examples): for templates without CMMLU's 题目： (C-Eval's)."""
    best, at = None, -1
    for item in pool:
        pos = prompt.rfind(f"{item.question}\nA. {item.options[0]}")
        if pos > at:
            best, at = item.question, pos
    return best


def match_item(prompt: str, dataset: DatasetRun, row: int, by_hash: Mapping[str, Sequence[Item]],
               where: str, pool: Sequence[Item] = ()) -> Item:
    """The prediction's item: question hash, narrowed by subject and split, checked against the row."""
    question = _question_by_block(prompt, pool) if "题目：" not in prompt else None
    h = qhash(question if question is not None else question_of(prompt, where))
    candidates = [c for c in by_hash.get(h, ()) if c.subject == dataset.subject and c.split == dataset.split]
    if not candidates:
        raise HarnessImportError(f"{where}: question hash {h} matches no {dataset.benchmark} {dataset.subject} "
                                 f"{dataset.split} item (another copy of the benchmark? pass it with --data)")
    at_row = [c for c in candidates if c.row == row]
    if not at_row:
        raise HarnessImportError(f"{where}: its question is that of {candidates[0].uid}, but test_range puts row "
                                 f"{row} of {dataset.subject} {dataset.split} there (predictions of another "
                                 "config?)")
    return at_row[0]


def check_block(prompt: str, item: Item, where: str) -> None:
    """The prompt asks the item's own question with the item's own options, in their order.

    A question hash names the item but not what was asked about it: swapped options, or another
    item's options under this question, imported as this item (the lm-eval import refuses both).
    OpenCompass's CMMLU and C-Eval templates write the question and then ``A. ...`` to ``D. ...``
    one per line; the test item is the last block (the in-context examples come first).
    """
    block = item.question + "".join(f"\n{label}. {option}" for label, option in zip(LABELS, item.options))
    at = prompt.rfind(block)
    if at < 0 or prompt.rfind(f"\n{LABELS[0]}. ") > at + len(item.question):
        raise HarnessImportError(f"{where}: the prompt's options are not item {item.uid}'s, in its order "
                                 "(swapped, or another item's); the decision is not one on this item")


def shots_in(prompt: str) -> int:
    """In-context examples before the test question: the ``A. `` option lines before the last."""
    return max(prompt.count(f"\n{LABELS[0]}. ") - 1, 0)


# --------------------------------------------------------------------------------------------
# Building the records
# --------------------------------------------------------------------------------------------


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
    rows_of = _range_rows(dataset.test_range, len(entries), str(dataset.predictions), n_split)
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


# --------------------------------------------------------------------------------------------
# A run config over chosen rows (to run OpenCompass on exactly the items cube scores)
# --------------------------------------------------------------------------------------------

# OpenCompass's own CMMLU configs of the two modes (opencompass/configs/datasets/cmmlu, 0.5.4):
# 5-shot (FixKRetriever over the dev split), "答案是: X" after the options.
CMMLU_CONFIGS = {"ppl": "cmmlu_ppl_8b9c76", "gen": "cmmlu_gen_c13365"}


def run_config(mode: str, cmmlu_dir: str | Path, model_dir: str | Path, rows: Mapping[str, int],
               model: str, max_out_len: int = 16, batch_size: int = 1) -> str:
    """An OpenCompass config (Python) of OpenCompass's own CMMLU ``mode`` config, its test rows
    narrowed to ``rows`` (subject -> row) with ``test_range``, and the HuggingFace base model class
    on a local folder (fp32, CPU, trust_remote_code off). It holds no benchmark text."""
    if mode not in CMMLU_CONFIGS:
        raise HarnessImportError(f"mode {mode!r}: give one of {', '.join(CMMLU_CONFIGS)}")
    _check_abbr("model", model, Path("run_config"))
    return f'''# OpenCompass config written by cube.importers.opencompass.run_config: OpenCompass's own
# CMMLU {mode} config ({CMMLU_CONFIGS[mode]}), test rows narrowed to {len(rows)} item(s).
from mmengine.config import read_base
from opencompass.models import HuggingFaceBaseModel

with read_base():
    from opencompass.configs.datasets.cmmlu.{CMMLU_CONFIGS[mode]} import cmmlu_datasets

CMMLU = {str(cmmlu_dir)!r}
MODEL = {str(model_dir)!r}
ROWS = {dict(sorted(rows.items()))!r}

datasets = [
    dict(d, path=CMMLU, reader_cfg=dict(d['reader_cfg'], test_range=f"[{{ROWS[d['name']]}}:{{ROWS[d['name']] + 1}}]"))
    for d in cmmlu_datasets if d['name'] in ROWS
]
models = [dict(
    type=HuggingFaceBaseModel, abbr={model!r}, path=MODEL,
    model_kwargs=dict(torch_dtype='torch.float32', device_map='cpu', trust_remote_code=False),
    tokenizer_kwargs=dict(trust_remote_code=False),
    max_out_len={int(max_out_len)}, batch_size={int(batch_size)}, run_cfg=dict(num_gpus=0),
)]
'''


# --------------------------------------------------------------------------------------------
# The audit of the protocol on the run's tokenizer
# --------------------------------------------------------------------------------------------

# OpenCompass's CMMLU/C-Eval answer context, both modes: "答案是: " then the label.
OC_CUE, OC_LABEL_PREFIX = "答案是:", " "


def audit_labels(tokenizer: Any, family: str) -> dict[str, Any]:
    """cube's cell audit of OpenCompass's answer context (labels A-D after ``答案是:`` + space)."""
    from cube.protocol.label_sets import load_label_sets
    from cube.tokenizers.audit import Context, audit_cell, cells_to_json

    label_set = load_label_sets()["L1_halfwidth"]
    cell = audit_cell(tokenizer, family, label_set, Context("oc-answer", OC_CUE, OC_LABEL_PREFIX,
                                                            "OpenCompass CMMLU/C-Eval: 答案是: X"))
    return {"cell": cells_to_json([cell])[0], "degenerate": cell.degenerate}


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


# --------------------------------------------------------------------------------------------
# The whole import
# --------------------------------------------------------------------------------------------


def _model_path(run: OpenCompassRun) -> str:
    return str(run.model_config.get("tokenizer_path") or run.model_config.get("path") or "")


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
                        "tokenizer_path": _model_path(runs[0])},
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


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------


def format_report(imported: Imported, out: Path | None = None) -> str:
    """What a user holding the folder wants from "check my run", one finding per line."""
    meta = imported.metadata["opencompass"]
    written = f" -> {out}" if out is not None else ""
    summaries = imported.units
    lines = [f"imported {sum(s.n for s in summaries)} predictions of {len(summaries)} dataset(s), model "
             f"{imported.model}: {len(imported.decisions)} records{written}"]
    for key, d in meta["datasets"].items():
        lines.append(f"  {key}: {d['benchmark']} {d['subject']} {d['split']}{d['test_range']}, {d['shots']}-shot, "
                     f"accuracy {d['accuracy']:g} (records: {d['reproduced_accuracy']:g}) -> scorers "
                     f"{', '.join(d['scorers'])}, context {d['context']}")
    lines.append("audit of the run:")
    audit = meta.get("audit")
    label_scored = any(d["mode"] == "ppl" for d in meta["datasets"].values())
    if not label_scored:  # a generation's answer is read from its text: no label cell to audit
        lines.append("  no label cell: a generation run's answers are read from the text it wrote, "
                     "so no first-token decision can tie")
    elif audit is None:
        lines.append("  not run (no tokenizer)")
    else:
        cell = audit["cell"]
        tokens = [lt["tokens"] for lt in cell.get("labels", [])]
        lines.append(f"  label cell ({OC_CUE!r} + {OC_LABEL_PREFIX!r} + A-D): {cell['verdict']}"
                     + (f" ({cell['collision']})" if audit["degenerate"] else "") + f"; label tokens {tokens}")
        lines.append("  degenerate cells: " + ("oc-answer" if audit["degenerate"] else "none"))
    for key, d in meta["datasets"].items():
        if d["mode"] == "ppl" and "audit" in d:
            a = d["audit"]
            lines.append(f"  {key}: PPL over the whole prompt (tokens 2..n summed, / n); label prompts "
                         f"{'of equal' if a['equal_token_counts'] else 'of UNEQUAL'} length, label tokens "
                         f"{a['label_token_counts']}; decisions differing from the summed label "
                         f"log-likelihood: {a['n_decision_differs_from_summed_loglik']}")
        if d["mode"] == "gen":
            fails = d["n_parse_failed"]
            lines.append(f"  {key}: parse failures (generations no answer was read from): OpenCompass's "
                         f"first_capital_postprocess {fails.get(GEN_SCORER, 0)}/{d['n']}, cube's M6-strict "
                         f"{fails.get('M6-strict', 0)}/{d['n']}, M6-lenient {fails.get('M6-lenient', 0)}/{d['n']}")
            if d["n"] and fails.get("M6-strict", 0) == d["n"]:
                lines.append("    M6-strict reads only the strict answer form its own prompts ask for, `答案：X`; "
                             "OpenCompass's gen prompt asks for none, so a bare ` A` fails it by design (not a "
                             "cube defect): M6-lenient and M6-oc read such answers")
        if d["n_tied"]:
            lines.append(f"  exact ties: {key}: {d['n_tied']}/{d['n']} (OpenCompass took the first label)")
    return "\n".join(lines)


def report_json(imported: Imported, out: Path | None = None) -> dict[str, Any]:
    meta = imported.metadata["opencompass"]
    return {"model": imported.model, "out": str(out) if out else None, "records": len(imported.decisions),
            "datasets": {k: {x: v for x, v in d.items() if x != "config"} for k, d in meta["datasets"].items()},
            "audit": meta.get("audit")}


# --------------------------------------------------------------------------------------------
# OpenCompass's CMMLU prompts, rendered by cube (to score byte-equal prompts with cube's backend)
# --------------------------------------------------------------------------------------------


def _cmmlu_question(item: Item) -> str:
    a, b, c, d = item.options
    return (f"以下是关于{item.subject_zh}的单项选择题，请直接给出正确答案的选项。\n题目：{item.question}\n"
            f"A. {a}\nB. {b}\nC. {c}\nD. {d}")


def cmmlu_prompt(item: Item, shots: Sequence[Item], label: str | None) -> str:
    """OpenCompass 0.5.4's rendered CMMLU prompt, byte for byte, for its HuggingFace base model
    (no meta template): ``label`` given, the PPL prompt of that label (cmmlu_ppl_8b9c76); None, the
    gen prompt (cmmlu_gen_c13365). The in-context examples (``shots``, the dev items in file order)
    end in three newlines each and two more stand before the question in PPL mode, one newline each
    in gen mode (OpenCompass renders the two templates apart); tested on a real run."""
    if label is None:
        ice = "".join(f"{_cmmlu_question(s)}\n答案是: {LABELS[s.answer]}\n" for s in shots)
        return f"{ice}{_cmmlu_question(item)}\n答案是: "
    ice = "".join(f"{_cmmlu_question(s)}\n答案是: {LABELS[s.answer]}\n\n\n" for s in shots)
    return f"{ice}\n\n{_cmmlu_question(item)}\n答案是: {label}"


# --------------------------------------------------------------------------------------------
# The importer's contract (cube.importers.contract)
# --------------------------------------------------------------------------------------------


def read(folder: Path, benchmark: str | None = None) -> RunsRead:
    """Every run at or below ``folder``; the benchmark is the datasets' own (``benchmark`` unused:
    OpenCompass's config names its dataset class)."""
    runs = tuple(read_run(path) for path in find_runs(folder))
    chosen = one_benchmark({d.benchmark for run in runs for d in run.datasets})
    return RunsRead(runs, chosen, runs[0].model, _model_path(runs[0]) or None,
                    f"{runs[0].config_path}: its model config")


# How each label's tokens are scored in PPL mode, as ``cube explain`` names it.
LABEL_TOKENS = "each label's whole prompt tokenized (OpenCompass PPL)"
AGGREGATION = "per dataset (one subject): percent of its predictions correct"
# its headline for a benchmark of subjects: the summarizer's "cmmlu" and "ceval" groups are the
# naive_average of the subsets' accuracies (a "-weighted" group is the other, when configured)
HEADLINE = "macro"
_OC_FIELD = re.compile(r"(?<!\{)\{(question|A|B|C|D)\}(?!\})")


def _turns_text(template: Any, shots: int) -> str | None:
    """One label's dumped OpenCompass template as text: its turns' prompts joined by ``{{turn}}``
    (the model class joins them; cube does not guess how), ``</E>`` as the examples."""
    if isinstance(template, str):
        text = template
    elif isinstance(template, Mapping) and isinstance(template.get("round"), list):
        prompts = [t.get("prompt") for t in template["round"] if isinstance(t, Mapping)]
        if not all(isinstance(p, str) for p in prompts):
            return None
        text = str(template.get("begin") or "") + "{{turn}}".join(prompts)
    else:
        return None
    text = text.replace("</E>", EXEMPLAR_SLOT if shots else "")
    return _OC_FIELD.sub(lambda m: "{{" + ("Question" if m.group(1) == "question" else m.group(1)) + "}}", text)


def describe(metadata: Mapping[str, Any], cell: Mapping[str, Any], contexts: Sequence[str],
             normalisation: str) -> ScoringProtocol:
    """The protocol of one stored cell (``contexts``: all of the slice's, one per subject): the
    dumped template, how PPL tokenizes, the audit's verdict, and where the import's audit found
    PPL deciding every item as the summed label log-likelihood, that it decides as M1-seq."""
    logged = metadata.get("opencompass") or {}
    contexts = list(contexts) or [cell["context"]]
    datasets = [d for d in (logged.get("datasets") or {}).values() if d.get("context") in set(contexts)]
    entry = next((d for d in datasets if d.get("context") == cell["context"]), None)
    verdict = (((logged.get("audit") or {}).get("cell")) or {}).get("verdict")
    extractor = extractor_of(cell["scorer"])
    chat = _chat_form(logged)
    dtypes = {dtype_name(((run.get("model") or {}).get("model_kwargs") or {}).get("torch_dtype"))
              for run in (logged.get("runs") or {}).values()}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
    if entry is None:
        return ScoringProtocol(IMPORTER_LABEL, None, None, None, normalisation, verdict,
                               extractor=extractor, aggregation=AGGREGATION, headline=HEADLINE, chat_template=chat,
                               exemplars=exemplars_of(cell["shots"], None), dtype=dtype)
    infer = (entry.get("config") or {}).get("infer_cfg") or {}
    template = (infer.get("prompt_template") or infer.get("ice_template") or {}).get("template")
    prompt = prefix = tokenization = decides_as = None
    if entry.get("mode") == "ppl" and isinstance(template, Mapping) and "A" in template:
        text = _turns_text(template["A"], int(entry.get("shots") or 0))
        if text is not None and text.endswith("A"):
            prompt, prefix, tokenization = text[:-1], "", LABEL_TOKENS
        # PPL is the whole prompt's mean loss; where the import's audit found it decide every item as
        # the summed log-likelihood does (the labels' prompts share all but the label), it is M1-seq
        counts = [((d.get("audit") or {}).get("n_decision_differs_from_summed_loglik")) for d in datasets]
        if datasets and all(c == 0 for c in counts):
            decides_as = "M1-seq"
    elif entry.get("mode") == "gen":
        prompt = _turns_text(template, int(entry.get("shots") or 0))
    return ScoringProtocol(IMPORTER_LABEL, prompt, prefix, tokenization, normalisation, verdict, decides_as,
                           extractor=extractor, aggregation=AGGREGATION, headline=HEADLINE, chat_template=chat,
                           exemplars=exemplars_of(cell["shots"], _exemplar_content(infer)), dtype=dtype)


def _exemplar_content(infer: Mapping[str, Any]) -> str | None:
    """What the dumped ``ice_template`` shows of an exemplar: an explanation where it has a field
    for one, else the answer alone; None where no template was dumped."""
    ice = (infer.get("ice_template") or {}).get("template")
    if not ice:
        return None
    text = json.dumps(ice, ensure_ascii=False)
    return EXEMPLARS_EXPLANATION if ("{explanation}" in text or "解析" in text) else EXEMPLARS_ANSWER


# OpenCompass's HF model classes: the base class feeds the prompt as plain text, the chat class
# through the tokenizer's chat template.
_CHAT_FORMS = {"HuggingFaceBaseModel": "none", "HuggingFacewithChatTemplate": "model (the tokenizer's, by OpenCompass)"}


def _chat_form(logged: Mapping[str, Any]) -> str | None:
    """The chat-template axis of the store's runs, from each run's logged model class; None where
    the runs disagree or use a class not listed."""
    forms = {_CHAT_FORMS.get(str((run.get("model") or {}).get("type") or "").rsplit(".", 1)[-1])
             for run in (logged.get("runs") or {}).values()}
    return next(iter(forms)) if len(forms) == 1 else None


IMPORTER_LABEL = "OpenCompass"
IMPORTER = HarnessImporter(
    name="opencompass", source="opencompass", label=IMPORTER_LABEL,
    help="an `opencompass CONFIG -w DIR` output folder (PPL and gen modes): records + audit",
    folder_help="the work dir opencompass wrote (or one run in it)",
    model_help="the records' model name (default: the model's abbr in the config)",
    read=read, run=import_runs, format_report=format_report, report_json=report_json, describe=describe,
)
