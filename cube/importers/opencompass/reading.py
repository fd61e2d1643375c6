"""Reading an OpenCompass output folder: its runs, each dataset's configuration, predictions and accuracy.

Each run folder holds ``configs/*.py`` (``cube.importers.opencompass.config``),
``predictions/<model>/<dataset>.json`` and ``results/<model>/<dataset>.json``. Every check a file's
shape needs is made here before any prediction is matched or scored: only C-Eval and CMMLU
datasets, only PPLInferencer and GenInferencer, only gen postprocessors whose decisions cube
reproduces, names that cannot lead out of the folder, an accuracy that is a finite percentage.
Apart from matching and the records because it knows OpenCompass's file layout and nothing of
scoring.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cube.errors import HarnessImportError
from cube.files import read_text
from cube.importers.contract import plain_name, run_folders
from cube.importers.opencompass.config import read_config

# OpenCompass's dataset classes of the two benchmarks cube reads (the config's ``type``).
KNOWN_DATASETS = {"CMMLUDataset": "cmmlu", "CEvalDataset": "ceval"}
INFERENCERS = {"PPLInferencer": "ppl", "GenInferencer": "gen"}
# The gen postprocessors whose decisions cube reproduces (``cube.protocol.scorers.extract_oc_gen``): any other
# is refused.
GEN_POSTPROCESSORS = ("first_capital_postprocess",)


def _type_name(value: Any) -> str:
    """``opencompass.datasets.CMMLUDataset`` (as dumped) -> ``CMMLUDataset``."""
    return str(value or "").rsplit(".", 1)[-1]


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


def check_abbr(kind: str, value: Any, where: Path) -> str:
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
    model = check_abbr("model", _model_abbr(models[0]), config_path)
    out = []
    for d in datasets:
        if not isinstance(d, dict):
            raise HarnessImportError(f"{config_path}: a dataset entry is not a mapping")
        abbr = check_abbr("dataset", d.get("abbr"), config_path)
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


def model_path(run: OpenCompassRun) -> str:
    """The model folder the run's model config names for its tokenizer (``tokenizer_path``, else
    ``path``); empty where it names none."""
    return str(run.model_config.get("tokenizer_path") or run.model_config.get("path") or "")
