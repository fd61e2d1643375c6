"""What two ``cube explain`` sides differ in: per protocol dimension, and the cause of each flipped item.

:mod:`cube.analysis.explain` splits a gap into factors along a path; what it needs first is, for
every discordant common item, the one factor whose class the item belongs to. That attribution is
this module's one concern: ``compare_protocols`` says per protocol dimension whether the sides are
the same, differ, do not say, or are not comparable (placeholders only, never an item's text), and
``item_causes`` gives each item its cause.

An item's cause is read off its two records, in this order: one generation read two ways
(``extractor``); a reasoning checkpoint's generation on either side that gave no answer because of
its thinking block (``thinking``: cut by the token budget inside the block, or closed without an
answer after it; ``cube.protocol.thinking``); a parse failure on either side (generation); a tie
that decided it (the top score shared with the gold option: in a cell the audit calls degenerate,
the tie-break answers every item); a decision within its precision's measured noise
(``precision_noise``); else the protocol difference between the slices
(:mod:`cube.analysis.explain_protocol`): the model, the prompt's bytes (the full text with
placeholders, shots and option order), the label's tokenization (the same text split or tokenized
differently, or label tokens that differ in the records), the scorer's normalisation. Where exactly
one of those differs it carries the items; where none does, or several do, or a store does not say,
the items are the ``remainder``, with the reason ("not identifiable from these records") rather than
a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from cube.analysis.explain_selectors import cell_of
from cube.importers.contract import ScoringProtocol, chat_kind
from cube.protocol.chat import NO_CHAT
from cube.protocol.thinking import THINKING_FAILURES
from cube.records.store import list_matrix

PROTOCOL_FACTORS = ("model", "prompt_bytes", "exemplars", "chat_template", "label_tokenization",
                    "scorer_normalisation", "extractor", "precision")
# Dimensions an import may not record: unknown on a side does not keep a named difference from its items.
OPTIONAL_FACTORS = ("precision", "chat_template", "exemplars")
# A dimension that does not apply to the pair (label tokens of a generation, the extractor of scored
# options): neither a difference nor an unknown.
NOT_APPLICABLE = "not applicable"
NOT_IDENTIFIABLE = "not identifiable from these records"
# How to get a third slice that differs from A in one factor alone, with cube's own options (the
# advice named a cue of the prompt's whatever differed, a scorer's normalisation included).
SEPARATE_BY = {
    "model": "cube run --model with B's model and A's other options",
    "prompt_bytes": "cube run with B's prompt as an answer context of your own (--cues, CUBE_CONFIG_DIR)",
    "exemplars": "cube run --shots with B's number of exemplars",
    "chat_template": "cube run --chat-template none,model",
    "label_tokenization": "cube run --label-sets with B's labels",
    "scorer_normalisation": "cube rescore of one store under each scorer (--scorer M1-seq, M2..M5 on one cloze pass)",
    "extractor": "cube rescore of one M6 store under --scorer M6-strict and --scorer M6-lenient",
    "precision": "cube run --dtype with B's precision",
}


@dataclass(frozen=True)
class Side:
    """One slice, ready to compare: its records (one cell), aggregation and protocol."""

    name: str  # the slice as given
    table: pa.Table
    aggregation: str
    protocol: ScoringProtocol
    dtype: str | None = None  # the precision the cell was scored in (its manifest entry); None: not said


def _status(a: Any, b: Any) -> str:
    if a is None or b is None:
        return "unknown"
    return "same" if a == b else "differs"


def _label_tokens(table: pa.Table, rows: np.ndarray) -> np.ndarray | None:
    """First token ids and token counts of each option, per common item; None where not stored."""
    columns = []
    for name in ("first_token_ids", "n_tokens"):
        if name not in table.column_names or table.column(name).null_count > 0:
            return None
        columns.append(list_matrix(table.take(pa.array(rows)), name).astype(np.int64))
    return np.concatenate(columns, axis=1)


def compare_protocols(a: Side, b: Side, rows_a: np.ndarray, rows_b: np.ndarray) -> dict[str, dict[str, Any]]:
    """Per protocol dimension: same / differs / unknown, with each side's value (placeholders only)."""
    ca, cb, pa_, pb = cell_of(a.table), cell_of(b.table), a.protocol, b.protocol
    out: dict[str, dict[str, Any]] = {}
    out["model"] = {"status": _status(ca["model"], cb["model"]), "a": ca["model"], "b": cb["model"]}
    # The prompt's bytes with the exemplars' slot taken out: their count and content are a factor
    # of their own (EvalScope's C-Eval exemplars carry an explanation; cube's the answer alone).
    text = _status(pa_.text_without_exemplars(), pb.text_without_exemplars())
    if ca["order"] != cb["order"]:
        text = "differs"
    out["prompt_bytes"] = {"status": text, "a": f"order {ca['order']}, {pa_.harness}",
                           "b": f"order {cb['order']}, {pb.harness}"}
    shots = "differs" if int(ca["shots"]) != int(cb["shots"]) else _status(pa_.exemplars, pb.exemplars)
    out["exemplars"] = {"status": shots, "a": f"{ca['shots']}-shot; {pa_.exemplars or 'content not recorded'}",
                        "b": f"{cb['shots']}-shot; {pb.exemplars or 'content not recorded'}"}
    # The chat template (issue 37 §3): the same plain prompt shown as a chat or not. prompt_bytes
    # compares the plain prompts, so a chat-or-not gap is this factor's alone. Compared by kind
    # (none / model): two harnesses name one template differently; two "model" sides are the same
    # template only where both recorded its digest and the digests agree (a server's is unknown).
    chat = _status(chat_kind(pa_.chat_template), chat_kind(pb.chat_template))
    if chat == "same" and chat_kind(pa_.chat_template) != NO_CHAT:
        chat = _status(pa_.chat_template_sha256, pb.chat_template_sha256)
    out["chat_template"] = {"status": chat, "a": pa_.chat_template, "b": pb.chat_template}
    # The text written as the label decides first; then the label tokens the records hold (a
    # declared tokenization that yields the same tokens changes nothing); then the declared one.
    tokens_a, tokens_b = _label_tokens(a.table, rows_a), _label_tokens(b.table, rows_b)
    seen = "unknown"
    if tokens_a is not None and tokens_b is not None:
        seen = "same" if tokens_a.shape == tokens_b.shape and bool((tokens_a == tokens_b).all()) else "differs"
    tokenization = _status(pa_.label_prefix, pb.label_prefix)
    if tokenization != "differs":
        tokenization = seen if seen != "unknown" else _status(pa_.tokenization, pb.tokenization)
    if pa_.generation or pb.generation:
        tokenization = NOT_APPLICABLE  # a generation writes its label itself: no label tokens are scored
    out["label_tokenization"] = {
        "status": tokenization,
        "a": f"prefix {pa_.label_prefix!r}, {pa_.tokenization}" if pa_.label_prefix is not None else None,
        "b": f"prefix {pb.label_prefix!r}, {pb.tokenization}" if pb.label_prefix is not None else None,
        "records": seen}
    scorer = _status(ca["scorer"], cb["scorer"])
    by_audit = scorer == "differs" and (pa_.decides_as == cb["scorer"] or pb.decides_as == ca["scorer"])
    if by_audit:
        scorer = "same"  # e.g. OpenCompass's PPL, audited to decide every item as the summed log-likelihood
    if pa_.generation and pb.generation:
        scorer = "same"  # both read an answer off a generation; how they read it is the extractor
    out["scorer_normalisation"] = {"status": scorer, "by_audit": by_audit,
                                   "a": f"{ca['scorer']}: {pa_.normalisation}{_decides(pa_)}",
                                   "b": f"{cb['scorer']}: {pb.normalisation}{_decides(pb)}"}
    # The extractor (first or last match, strict or lenient, the harness's own): between two
    # generations only; a scored side has none.
    both = pa_.generation and pb.generation
    out["extractor"] = {"status": _status(pa_.extractor, pb.extractor) if both else NOT_APPLICABLE,
                        "a": pa_.extractor, "b": pb.extractor}
    # Precision (issue 33 §1): bf16 and fp32 move scores by up to the measured noise, enough to flip
    # close decisions. Only a recorded difference names it: an import that does not say is not a blocker.
    out["precision"] = {"status": _status(a.dtype, b.dtype), "a": a.dtype, "b": b.dtype}
    return out


def _decides(protocol: ScoringProtocol) -> str:
    return (f" (decides every item as {protocol.decides_as}, by its store's audit)"
            if protocol.decides_as else "")


def _within_noise(side: Side, rows: np.ndarray) -> np.ndarray:
    """Per row: not tied and its margin within the side's precision's measured noise
    (``cube.analysis.noise``); False where the precision is not recorded."""
    from cube.analysis.noise import DECISION_NOISE, margins

    bound = DECISION_NOISE.get(side.dtype or "")
    if bound is None:
        return np.zeros(len(rows), dtype=bool)
    sub = side.table.take(pa.array(rows))
    return (margins(sub) <= bound) & ~sub.column("tied").to_numpy(zero_copy_only=False)


def _same_generation(a: Side, b: Side, rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """Per common item: both sides are generations and hold the very same (scrubbed) text."""
    if not (a.protocol.generation and b.protocol.generation):
        return np.zeros(len(rows_a), dtype=bool)
    text_a = np.asarray(a.table.column("generation").to_pylist(), dtype=object)[rows_a]
    text_b = np.asarray(b.table.column("generation").to_pylist(), dtype=object)[rows_b]
    return np.array([x is not None and x == y for x, y in zip(text_a, text_b)], dtype=bool)


def _thinking_failed(table: pa.Table, rows: np.ndarray) -> np.ndarray:
    """Per row: a generation that gave no answer because of its thinking block (False where the
    records do not say: scored records, and generations written before schema 3)."""
    if "thinking" not in table.column_names:
        return np.zeros(len(rows), dtype=bool)
    values = np.asarray(table.column("thinking").to_pylist(), dtype=object)[rows]
    return np.isin(values, list(THINKING_FAILURES))


def _decided_by_tie(table: pa.Table, rows: np.ndarray) -> np.ndarray:
    """Per row: the record's top score is shared and the gold option is among the tied."""
    sub = table.take(pa.array(rows))
    tied = sub.column("tied").to_numpy(zero_copy_only=False)
    if not tied.any():
        return tied
    scores = list_matrix(sub, "scores")
    gold = sub.column("gold").to_numpy().astype(np.int64)
    gold_top = scores[np.arange(len(rows)), gold] == scores.max(axis=1)
    return tied & gold_top


def item_causes(a: Side, b: Side, rows_a: np.ndarray, rows_b: np.ndarray, discordant: np.ndarray,
             protocol: Mapping[str, Mapping[str, Any]]) -> tuple[np.ndarray, dict[str, str]]:
    """The factor of each common item (None where concordant), and why the protocol items went
    where they did."""
    cause = np.full(len(rows_a), None, dtype=object)
    # One generation read two ways (the same text on both sides): whatever else differs, only the
    # extractor can have changed the outcome, a parse failure of one of them included.
    # Each class takes the discordant items no earlier class took, in this order.
    one_text = discordant & _same_generation(a, b, rows_a, rows_b)
    cause[one_text] = "extractor"
    rest = discordant & ~one_text
    thought = rest & (_thinking_failed(a.table, rows_a) | _thinking_failed(b.table, rows_b))
    cause[thought] = "thinking"
    rest &= ~thought
    failed = rest & (a.table.column("parse_failed").to_numpy()[rows_a] | b.table.column("parse_failed").to_numpy()[rows_b])
    cause[failed] = "parse_failure"
    rest &= ~failed
    tie = rest & (_decided_by_tie(a.table, rows_a) | _decided_by_tie(b.table, rows_b))
    cause[tie] = "tie_break"
    rest &= ~tie
    # a decision a change of layout alone can flip, on either side: precision noise, not protocol
    noise = rest & (_within_noise(a, rows_a) | _within_noise(b, rows_b))
    cause[noise] = "precision_noise"
    rest &= ~noise
    differing = [d for d in PROTOCOL_FACTORS if protocol[d]["status"] == "differs"]
    unknown = [d for d in PROTOCOL_FACTORS if protocol[d]["status"] == "unknown" and d not in OPTIONAL_FACTORS]
    notes: dict[str, str] = {}
    if one_text.any():
        notes["same_generation"] = (f"{int(one_text.sum())} of its flips on items where both sides "
                                    "read the very same generation")
    if len(differing) == 1 and not unknown:
        cause[rest] = differing[0]
    elif differing or unknown:
        cause[rest] = "remainder"
        parts = [f"the slices differ in {' and '.join(differing)}"] if differing else []
        if unknown:
            parts.append(f"the records do not say whether they differ in {' and '.join(unknown)}")
        apart = differing + unknown
        if len(apart) > 1:  # what would separate them: a run that changes one alone
            parts.append(f"a third slice that differs from A in {apart[0]} alone separates the factors "
                         f"(e.g. {SEPARATE_BY[apart[0]]}); explain it against A and B")
        notes["remainder"] = f"{NOT_IDENTIFIABLE}: {'; '.join(parts)}"
        notes.update({d: NOT_IDENTIFIABLE for d in differing + unknown})
    else:
        cause[rest] = "remainder"
        notes["remainder"] = ("the same protocol on both sides: numerical differences (batching, "
                              "precision) or a difference the records do not show")
    return cause, notes
