"""The report's analysis as typed records, and their JSON form.

``cube report`` computes the analysis once (``cube.report.analysis``), writes it as JSON beside
the site's notebooks, and every page reads it back as these classes: the pages render, they do
not compute, so two pages can never disagree about a number. The JSON carries ``REPORT_VERSION``;
a file of another version is refused by name.
"""

from __future__ import annotations

import json
import types
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from cube.errors import ConfigError

REPORT_VERSION = "cube.report/1"
# The protocol dimensions a cell varies along, as the report names them; ``cue`` and
# ``chat_template`` are the two halves of the records' ``context`` (``zh_cue@chat``).
DIMENSIONS = ("scorer", "label_set", "cue", "shots", "order", "chat_template")
DIMENSION_NAMES = {"scorer": "scorer", "label_set": "label set", "cue": "answer cue / whitespace",
                   "shots": "number of shots", "order": "option order", "chat_template": "chat template (and thinking)"}
# What a user adds to `cube run` for a dimension the store does not vary.
DIMENSION_OPTIONS = {"scorer": "--scorers M1-seq,M1-strict,M6", "label_set": "--label-sets L1_halfwidth,L4_circled",
                     "cue": "--cues zh_cue,en_label_space", "shots": "--shots 0,5",
                     "order": "--orders original,shift1", "chat_template": "--chat-template none,model"}


@dataclass(frozen=True)
class CellScore:
    """One protocol cell of one model: its accuracy on its items, with what qualifies it."""

    store: str
    model: str
    benchmark: str
    scorer: str
    label_set: str
    cue: str
    chat_template: str
    shots: int
    order: str
    n: int
    n_correct: int
    accuracy: float
    ci_lo: float  # Wilson 95 %, as `cube rescore`
    ci_hi: float
    chance: float  # mean of 1/N over the items (cube.analysis.chance)
    tie_rate: float
    parse_failure_rate: float
    within_noise_rate: float | None  # None: the precision or the margins are not known
    dtype: str  # as recorded; "not recorded" where no record says

    def value(self, dimension: str) -> Any:
        return getattr(self, dimension)

    @property
    def name(self) -> str:
        """The cell as one short line: the fields that make it a protocol."""
        chat = " @chat" if self.chat_template != "none" else ""
        return f"{self.scorer} · {self.label_set} · {self.cue}{chat} · {self.shots}-shot · {self.order}"


@dataclass(frozen=True)
class ScorerRange:
    """A scorer's score across one model's cells: at the reference, and its lowest and highest."""

    model: str
    scorer: str
    n_cells: int
    reference: CellScore | None
    low: CellScore
    high: CellScore
    chance: float


@dataclass(frozen=True)
class Comparison:
    """One level of one dimension against the reference level, on the same items (paired)."""

    model: str
    dimension: str
    reference_level: str
    level: str
    cell_a: str  # the reference cell's name
    cell_b: str
    n: int  # items both cells hold
    acc_a: float
    acc_b: float
    delta: float  # b - a
    delta_lo: float  # exact interval of the McNemar test (cube.analysis.paired_tests.mcnemar_interval)
    delta_hi: float
    a_only_right: int
    b_only_right: int
    p_value: float  # exact McNemar, two-sided
    p_holm: float  # Holm over every comparison of the report
    power: float | None  # of the exact McNemar at this n and discordant rate to detect |delta|
    mde: float | None  # the smallest |difference| the test detects with 80 % power here
    precision: str
    relaxed: tuple[str, ...] = ()  # fields the level's cell differs in besides the dimension (cloze scorers)


@dataclass(frozen=True)
class RefusedComparison:
    model: str
    dimension: str
    level: str
    reason: str


@dataclass(frozen=True)
class AuditCell:
    """The audit made before the run against the ties the records show (claim 2's matrix)."""

    model: str
    label_set: str
    context: str
    predicted: str  # DEGEN, max<N>tok, or "not audited"
    n: int
    n_tied: int
    status: str  # confirmed | mismatch | unpredicted
    explanation: str


@dataclass(frozen=True)
class CalibrationCell:
    model: str
    cell: str
    n: int
    ece: float
    ece_lo: float
    ece_hi: float
    confidence: list[float]  # per non-empty bin: mean confidence, accuracy, items
    accuracy: list[float]
    count: list[int]


@dataclass(frozen=True)
class GroupScore:
    model: str
    level: str  # subject | category
    group: str
    n: int
    accuracy: float
    ci_lo: float
    ci_hi: float


@dataclass(frozen=True)
class RankShift:
    """Claim 3's method on the user's models: the footrule from the reference protocol."""

    cell: str
    models: list[str]
    n_items: int
    accuracy_reference: list[float]
    accuracy_other: list[float]
    footrule: float
    floor_p95: float
    multiple_of_p95: float
    verdict: str


@dataclass(frozen=True)
class HarnessGap:
    """``cube explain`` between two stores' cells of one model (an import and a run, say)."""

    model: str
    side_a: str
    side_b: str
    score_a: float
    score_b: float
    n_common: int
    gap: float
    mcnemar_p: float
    factors: list[tuple[str, float, str]]  # name, share of the gap, status; largest first


@dataclass(frozen=True)
class Flip:
    uid: str
    subject: str
    gold: int
    pred_a: int
    pred_b: int
    text: str | None = None  # only with --show-items, read at build time, never stored in a store


@dataclass(frozen=True)
class Flips:
    model: str
    cell_a: str
    cell_b: str
    a_only_right: int
    b_only_right: int
    items: list[Flip]


@dataclass(frozen=True)
class StoreProvenance:
    path: str
    harness: str
    schema_version: str
    models: list[dict[str, str]]  # per (model, run): model, identity digest, source, backend, dtype, ...
    commands: list[str]


@dataclass(frozen=True)
class ReportAnalysis:
    """Everything a report shows; ``missing`` holds, per section, the one line saying which
    ``cube run`` options would produce it where the records cannot."""

    version: str
    title: str
    stores: list[str]
    incomplete: list[str]
    reference: dict[str, str]
    cells: list[CellScore]
    ranges: list[ScorerRange]
    summaries: list[str]  # one sentence per model, quotable
    code: str  # sha256 of cube's sources that built the report (cube.report.provenance.code_digest)
    audit: list[AuditCell]
    audit_source: str
    comparisons: list[Comparison]
    refused: list[RefusedComparison]
    calibration: list[CalibrationCell]
    groups: list[GroupScore]
    ranks: list[RankShift]
    harness_gaps: list[HarnessGap]
    flips: list[Flips]
    provenance: list[StoreProvenance]
    show_items: bool = False
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        return " ".join(self.summaries)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, indent=1, allow_nan=True)


def _load(kind: Any, data: Any) -> Any:
    """``data`` (JSON) as ``kind``: dataclasses, lists, tuples, dicts and optionals, nested."""
    if is_dataclass(kind):
        hints = get_type_hints(kind)
        return kind(**{f.name: _load(hints[f.name], data[f.name]) for f in fields(kind) if f.name in data})
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(kind) if a is not type(None)]
        return None if data is None else _load(inner[0], data)
    if origin is list:
        return [_load(get_args(kind)[0], x) for x in data]
    if origin is tuple:
        args = get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_load(args[0], x) for x in data)
        return tuple(_load(a, x) for a, x in zip(args, data))
    if origin is dict:
        return {k: _load(get_args(kind)[1], v) for k, v in data.items()}
    return data


def read_analysis(path: str | Path) -> ReportAnalysis:
    """The analysis a report wrote (``report.json``), checked for its version."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a report analysis ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION:
        got = data.get("version") if isinstance(data, dict) else None
        raise ConfigError(f"{path}: report analysis version {got!r}, expected {REPORT_VERSION}; build the report again")
    return _load(ReportAnalysis, data)


__all__ = ["DIMENSIONS", "DIMENSION_NAMES", "DIMENSION_OPTIONS", "REPORT_VERSION", "AuditCell", "CalibrationCell",
           "CellScore", "Comparison", "Flip", "Flips", "GroupScore", "HarnessGap", "RankShift", "RefusedComparison",
           "ReportAnalysis", "ScorerRange", "StoreProvenance", "read_analysis"]

