"""A synthetic records cube at the paper's scale, from a generative model whose truth is known.

Used for two things only: timing the analysis at full scale (benchmarks/analysis_scale.py) and
checking that the statistics recover what the generator put in. It is never a result: its
manifest says ``synthetic: true``, every model is named ``sim-<checkpoint>``, every item uid is
``sim/<subject>/test/<row>`` (benchmark ``sim``), and no benchmark text is involved (the qhash
is ``sha256("sim:" + uid)[:16]``).

Scale: the 18 checkpoints of ``config/models.yaml`` x 12,925 items x the 11 protocol cells of
``SIM_CELLS`` = 2,559,150 records. The items are spread over CMMLU's 67 real subject names as
evenly as possible (192 or 193 each), so category rescoring uses the real CMMLU taxonomy.
``fraction`` keeps the first rows of every subject (at least one each), so a smaller cube is a
subset of the full one: the same items, models and draws.

Generative model (all draws from ``numpy.random.default_rng`` seeded by ``seed`` and, for
per-model draws, by the model's and cell's index):

* ability ``theta_m ~ N(0, 0.8)`` per model;
* difficulty ``b_i = s_subject + e_i`` with ``s ~ N(0, 0.4)`` per subject, ``e ~ N(0, 1)``;
* protocol effect ``delta_c`` = the sum of the fixed effects in ``PROTOCOL_EFFECTS`` for the
  cell's scorer, label set, context, shots and order, plus a model x cell interaction
  ``gamma_mc ~ N(0, 0.25)`` (the part that reorders models between protocols);
* ``P(right) = 1/4 + 3/4 * sigmoid(theta_m - b_i + delta_c + gamma_mc)`` (chance floor 1/4);
* gold: uniform over the 4 options per item; an order ``shiftK`` shows it at ``(gold+K) % 4``;
  a wrong answer is uniform over the other three options;
* scores: log-softmax of normal logits with the chosen option raised above the rest by an
  Exp(1) margin; ``probs`` = softmax of ``scores``;
* ties: in every M1-strict cell the frozen prediction marks DEGEN for the model's family, the
  predicted groups of labels get identical first-token ids and scores (the group's first
  member's), and the prediction becomes numpy's argmax (first maximum) of the tied scores,
  exactly as the harness's tie-break does. Nowhere else do two scores tie;
* M6: model m fails to parse with rate ``r_m ~ U(0.2%, 4%)`` under the strict extractor; the
  lenient extractor recovers each failure with probability 0.7 (same generation, so lenient
  failures are a subset). A parse failure has ``pred = -1`` and is not correct. M6 rows carry
  the same kind of synthetic scores (they only satisfy the schema) and a made-up
  ``generation`` such as ``"sim: B"``; first-token ids are filled for M1-strict rows only.

The manifest's ``metadata.generator`` records every parameter above (abilities, protocol
effects, interactions, parse-failure rates), so a test can compare estimates with the truth.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from cube.analysis.confirm import predicted_cells
from cube.config import FROZEN_PREDICTION
from cube.errors import ConfigError, RecordsError
from cube.models_config import study_checkpoints
from cube.protocol.items import allocate_per_subject
from cube.protocol.taxonomy import load_cmmlu_taxonomy
from cube.records.schema import GENERATION_RECORD_SCORERS
from cube.records.store import MANIFEST_NAME, from_columns, write_records
from cube.tokenizers.audit import read_prediction

SIM_PREFIX = "sim-"
SIM_BENCHMARK = "sim"
SIM_ITEMS = 12_925
N_OPTIONS = 4
DEFAULT_PREDICTION = FROZEN_PREDICTION


@dataclass(frozen=True)
class Cell:
    scorer: str
    label_set: str
    context: str
    shots: int
    order: str

    @property
    def name(self) -> str:
        return f"{self.scorer}/{self.label_set}/{self.context}/{self.shots}shot/{self.order}"


# 11 cells: first-token scoring on every label set in the context where the audit predicts the
# most collisions (with its M1-seq counterparts on L1 and the partially colliding L3), one
# Chinese-cue M1-strict cell, a 0-shot vs 5-shot/shifted M1-seq pair, and a generation pair.
SIM_CELLS = (
    Cell("M1-strict", "L1_halfwidth", "en_label_space", 0, "original"),
    Cell("M1-strict", "L2_fullwidth", "en_label_space", 0, "original"),
    Cell("M1-strict", "L3_ganzhi", "en_label_space", 0, "original"),
    Cell("M1-strict", "L4_circled", "en_label_space", 0, "original"),
    Cell("M1-seq", "L1_halfwidth", "en_label_space", 0, "original"),
    Cell("M1-seq", "L3_ganzhi", "en_label_space", 0, "original"),
    Cell("M1-strict", "L4_circled", "zh_cue", 0, "original"),
    Cell("M1-seq", "L1_halfwidth", "zh_cue", 0, "original"),
    Cell("M1-seq", "L1_halfwidth", "zh_cue", 5, "shift1"),
    Cell("M6-strict", "L1_halfwidth", "zh_cue", 0, "original"),
    Cell("M6-lenient", "L1_halfwidth", "zh_cue", 0, "original"),
)

PROTOCOL_EFFECTS = {
    "scorer": {"M1-seq": 0.0, "M1-strict": -0.05, "M6-strict": -0.3, "M6-lenient": -0.3},
    "label_set": {"L1_halfwidth": 0.0, "L2_fullwidth": -0.15, "L3_ganzhi": -0.3,
                  "L4_circled": -0.2},
    "context": {"zh_cue": 0.0, "en_label_space": -0.1},
    "shots": {0: 0.0, 5: 0.2},
    "order": {"original": 0.0, "shift1": -0.05},
}
ABILITY_SD, SUBJECT_SD, ITEM_SD, INTERACTION_SD = 0.8, 0.4, 1.0, 0.25
PARSE_FAILURE_RANGE = (0.002, 0.04)
LENIENT_RECOVERY = 0.7


def protocol_effect(cell: Cell) -> float:
    return float(sum(PROTOCOL_EFFECTS[name][getattr(cell, name)] for name in PROTOCOL_EFFECTS))


def p_right(ability: float, difficulty: np.ndarray, effect: float) -> np.ndarray:
    return 0.25 + 0.75 / (1.0 + np.exp(-(ability - difficulty + effect)))


def sim_models() -> dict[str, str]:
    """``sim-<checkpoint>`` -> tokenizer family, for the study's 18 checkpoints."""
    return {f"{SIM_PREFIX}{name}": checkpoint.family for name, checkpoint in study_checkpoints().items()}


@dataclass(frozen=True)
class SimItems:
    uids: list[str]
    index: np.ndarray  # each item's position in the full 12,925-item list
    uid: pa.Array
    subject: pa.Array
    qhash: pa.Array


def sim_items(fraction: float = 1.0) -> SimItems:
    """The synthetic items kept at ``fraction``, with their key columns."""
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"fraction must lie in (0, 1], got {fraction!r}")
    subjects = sorted(load_cmmlu_taxonomy().categories)
    base, extra = divmod(SIM_ITEMS, len(subjects))
    sizes = {s: base + (i < extra) for i, s in enumerate(subjects)}
    keep = allocate_per_subject(sizes, max(len(subjects), round(SIM_ITEMS * fraction)))
    uids, index, start = [], [], 0
    for s in subjects:
        uids.extend(f"{SIM_BENCHMARK}/{s}/test/{row}" for row in range(keep[s]))
        index.extend(range(start, start + keep[s]))
        start += sizes[s]
    return SimItems(
        uids,
        np.asarray(index, dtype=np.int64),
        pa.array(uids),
        pa.array([u.split("/")[1] for u in uids]),
        pa.array([hashlib.sha256(f"sim:{u}".encode()).hexdigest()[:16] for u in uids]),
    )


def _groups_text(groups: tuple[tuple[int, ...], ...]) -> str:
    return ";".join("=".join(str(i) for i in g) for g in groups)


@dataclass(frozen=True)
class Truth:
    ability: dict[str, float]
    difficulty: np.ndarray  # full 12,925 items
    subject_effect: dict[str, float]
    interaction: dict[str, dict[str, float]]  # model -> cell name -> gamma
    parse_failure: dict[str, float]
    gold: np.ndarray  # original gold per full item

    def expected_accuracy(self, model: str, cell: Cell, index: np.ndarray) -> float:
        """Mean P(right) over the items: the accuracy a cell without ties estimates.

        For M6 cells this is before parse failures (a failure is never correct); M6-lenient
        shares M6-strict's generation, hence its P(right).
        """
        if cell.scorer == "M6-lenient":
            cell = Cell("M6-strict", cell.label_set, cell.context, cell.shots, cell.order)
        effect = protocol_effect(cell) + self.interaction[model][cell.name]
        return float(p_right(self.ability[model], self.difficulty[index], effect).mean())

    def metadata(self) -> dict[str, Any]:
        return {
            "ability": self.ability,
            "subject_effect": self.subject_effect,
            "interaction": self.interaction,
            "parse_failure_strict": self.parse_failure,
            "lenient_recovery": LENIENT_RECOVERY,
            "protocol_effects": {k: {str(a): b for a, b in v.items()}
                                 for k, v in PROTOCOL_EFFECTS.items()},
            "cells": [c.name for c in SIM_CELLS],
        }


def draw_truth(models: dict[str, str], seed: int) -> Truth:
    rng = np.random.default_rng([seed, 0])
    subjects = sorted(load_cmmlu_taxonomy().categories)
    base, extra = divmod(SIM_ITEMS, len(subjects))
    sizes = [base + (i < extra) for i in range(len(subjects))]
    subject_of_item = np.repeat(np.arange(len(subjects)), sizes)
    ability = rng.normal(0.0, ABILITY_SD, len(models))
    subject_effect = rng.normal(0.0, SUBJECT_SD, len(subjects))
    difficulty = subject_effect[subject_of_item] + rng.normal(0.0, ITEM_SD, SIM_ITEMS)
    gold = rng.integers(0, N_OPTIONS, SIM_ITEMS)
    interaction = rng.normal(0.0, INTERACTION_SD, (len(models), len(SIM_CELLS)))
    failure = rng.uniform(*PARSE_FAILURE_RANGE, len(models))
    names = list(models)
    return Truth(
        {m: float(a) for m, a in zip(names, ability)},
        difficulty,
        {s: float(e) for s, e in zip(subjects, subject_effect)},
        {m: {c.name: float(interaction[i, j]) for j, c in enumerate(SIM_CELLS)}
         for i, m in enumerate(names)},
        {m: float(f) for m, f in zip(names, failure)},
        gold,
    )


def _cell_rows(
    truth: Truth, model: str, model_index: int, cell_index: int, index: np.ndarray,
    groups: tuple[tuple[int, ...], ...], seed: int,
) -> dict[str, np.ndarray]:
    """Outcome columns of one (model, cell) over the selected items; draws use all items."""
    cell = SIM_CELLS[cell_index]
    # M6-lenient reuses M6-strict's generation: same stream, then its own recovery draws.
    source = cell if cell.scorer != "M6-lenient" else Cell(
        "M6-strict", cell.label_set, cell.context, cell.shots, cell.order)
    rng = np.random.default_rng([seed, 1, model_index, SIM_CELLS.index(source)])
    shift = int(cell.order.removeprefix("shift")) if cell.order.startswith("shift") else 0
    gold = (truth.gold + shift) % N_OPTIONS
    effect = protocol_effect(source) + truth.interaction[model][source.name]
    right = rng.random(SIM_ITEMS) < p_right(truth.ability[model], truth.difficulty, effect)
    wrong = (gold + rng.integers(1, N_OPTIONS, SIM_ITEMS)) % N_OPTIONS
    pred = np.where(right, gold, wrong)
    logits = rng.normal(0.0, 1.0, (SIM_ITEMS, N_OPTIONS))
    margin = rng.exponential(1.0, SIM_ITEMS)
    logits[np.arange(SIM_ITEMS), pred] = logits.max(axis=1) + margin
    parse_failed = np.zeros(SIM_ITEMS, dtype=bool)
    if cell.scorer in GENERATION_RECORD_SCORERS:  # a generation's extractor (scorer table)
        parse_failed = rng.random(SIM_ITEMS) < truth.parse_failure[model]
        recovered = rng.random(SIM_ITEMS) < LENIENT_RECOVERY
        if cell.scorer == "M6-lenient":
            parse_failed &= ~recovered

    gold, pred, logits, parse_failed = gold[index], pred[index], logits[index], parse_failed[index]
    scores = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    ids = np.tile(1000 + np.arange(N_OPTIONS), (len(index), 1))
    for group in groups:  # a predicted collision: same first token, same score
        scores[:, list(group)] = scores[:, [group[0]]]
        ids[:, list(group)] = ids[:, [group[0]]]
    if groups:
        pred = np.argmax(scores, axis=1)
    pred = np.where(parse_failed, -1, pred)
    probs = np.exp(scores)
    probs /= probs.sum(axis=1, keepdims=True)
    top = scores.max(axis=1)
    tied = (scores == top[:, None]).sum(axis=1) > 1
    return {
        "gold": gold, "pred": pred, "correct": pred == gold, "parse_failed": parse_failed,
        "tied": tied, "scores": scores, "probs": probs.astype(np.float32), "ids": ids,
    }


def simulate_model(
    truth: Truth, model: str, family: str, model_index: int, items: SimItems,
    degenerate: dict[tuple[str, str, str], tuple[tuple[int, ...], ...]], seed: int,
) -> pa.Table:
    """All cells of one model as one record table."""
    index = items.index
    n_items, n_cells = len(index), len(SIM_CELLS)
    parts, group_text = [], []
    for c, cell in enumerate(SIM_CELLS):
        groups = ()
        if cell.scorer == "M1-strict":  # only first-token scoring sees a shared first token
            groups = degenerate.get((family, cell.label_set, cell.context), ())
        parts.append(_cell_rows(truth, model, model_index, c, index, groups, seed))
        group_text.append(_groups_text(groups))
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    cell_of_row = np.repeat(np.arange(n_cells), n_items)
    item_of_row = np.tile(np.arange(n_items), n_cells)

    def by_cell(values: list) -> pa.Array:
        return pa.array(values).take(pa.array(cell_of_row))

    is_strict = np.repeat([c.scorer == "M1-strict" for c in SIM_CELLS], n_items)
    ids = pa.array(cat["ids"].reshape(-1).astype(np.int32))
    offsets = pa.array(np.arange(0, len(ids) + 1, N_OPTIONS, dtype=np.int32))
    is_m6 = np.repeat([c.scorer in GENERATION_RECORD_SCORERS for c in SIM_CELLS], n_items)
    answer_texts = pa.array(["sim: A", "sim: B", "sim: C", "sim: D", "sim: (no answer)"])
    answer_index = np.where(cat["pred"] < 0, N_OPTIONS, cat["pred"])
    rows = pa.array(item_of_row)
    columns = {
        "model": pa.array([model]).take(pa.array(np.zeros(len(rows), dtype=np.int64))),
        "uid": items.uid.take(rows),
        "qhash": items.qhash.take(rows),
        "benchmark": pa.array([SIM_BENCHMARK]).take(pa.array(np.zeros(len(rows), dtype=np.int64))),
        "subject": items.subject.take(rows),
        "scorer": by_cell([c.scorer for c in SIM_CELLS]),
        "label_set": by_cell([c.label_set for c in SIM_CELLS]),
        "context": by_cell([c.context for c in SIM_CELLS]),
        "shots": pa.array(np.repeat([c.shots for c in SIM_CELLS], n_items).astype(np.int8)),
        "order": by_cell([c.order for c in SIM_CELLS]),
        "gold": cat["gold"].astype(np.int8),
        "pred": cat["pred"].astype(np.int8),
        "correct": cat["correct"],
        "parse_failed": cat["parse_failed"],
        "tied": cat["tied"],
        "tie_groups": by_cell(group_text),
        "scores": cat["scores"],
        "probs": cat["probs"],
        "first_token_ids": pa.ListArray.from_arrays(offsets, ids, mask=pa.array(~is_strict)),
        "generation": answer_texts.take(pa.array(answer_index, mask=~is_m6)),
    }
    return from_columns(columns, num_rows=len(rows))


def simulate(
    out: str | Path,
    fraction: float = 1.0,
    seed: int = 0,
    prediction: str | Path = DEFAULT_PREDICTION,
    progress: bool = False,
) -> dict[str, Any]:
    """Write the synthetic cube to ``out`` (a new folder); returns a summary."""
    out = Path(out)
    if out.exists() and not out.is_dir():  # (iterdir on a file raised NotADirectoryError)
        raise RecordsError(f"{out} is a file; the simulation writes a new records folder")
    if (out / MANIFEST_NAME).exists() or (out.exists() and any(out.iterdir())):
        raise RecordsError(f"{out}: not empty; the simulation writes a new store")
    doc = read_prediction(Path(prediction))
    degenerate = {key: cell.groups for key, cell in predicted_cells(doc).items() if cell.degenerate}
    models = sim_models()
    truth = draw_truth(models, seed)
    items = sim_items(fraction)
    metadata = {
        "families": models,
        "generator": {
            "module": "cube.simulate", "seed": seed, "fraction": fraction,
            "items": len(items.uids), "prediction_sha256": doc.get("content_sha256"),
            **truth.metadata(),
        },
        "note": "SYNTHETIC records from cube.analysis.simulate; not results of any model",
    }
    total = 0
    for m, (model, family) in enumerate(tqdm(models.items(), desc="simulating", unit="model",
                                             disable=not progress)):
        table = simulate_model(truth, model, family, m, items, degenerate, seed)
        write_records(out, table, synthetic=True, metadata=metadata)
        total += table.num_rows
    return {"records": total, "models": len(models), "items": len(items.uids),
            "cells": len(SIM_CELLS)}
