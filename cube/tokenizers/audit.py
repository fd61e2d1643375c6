"""The GPU-free tokenizer audit: which (tokenizer, label set, answer context) cells make
first-token-argmax scoring undefined.

First-token argmax compares the scores of each label's first token. When two labels share that
token, their scores are equal by construction and the "prediction" is the tie-break rule, not the
model. That is a property of the tokenizer alone, so it is predicted here before any model runs,
frozen (``--freeze``) and later confirmed on real records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from cube import __version__
from cube.errors import ConfigError, PredictionMismatch
from cube.files import read_json
from cube.protocol.chat import NO_CHAT, ChatTemplate, record_context, thinking_of
from cube.protocol.items import Item
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell, Context, load_templates, prompt_in_context
from cube.protocol.prompts import load_contexts  # noqa: F401  (its callers read the audit's contexts here)
from cube.protocol.tokenization import Encoder, continuation_tokenizer, encode_ids

SCHEMA = "cube.audit/1"


@dataclass(frozen=True)
class LabelTokens:
    label: str
    ids: tuple[int, ...]
    tokens: tuple[str, ...]  # the vocabulary's own strings: byte-level BPE writes E2 91 as 'âĳ'
    boundary_merge: bool
    raw: tuple[bytes, ...] = ()  # the bytes each token stands for (token_bytes), where known

    @property
    def shown(self) -> tuple[str, ...]:
        """Each token as a person reads it (``shown_token``); the vocabulary's strings where the
        bytes are not known."""
        if len(self.raw) != len(self.ids):
            return tuple(repr(t) for t in self.tokens)
        return tuple(shown_token(b) for b in self.raw)


# ---- tokens a person can read --------------------------------------------------------------------
# A byte-level BPE vocabulary spells each byte as one printable character (GPT-2's table), so the
# four circled labels print as 'âĳ', 'ł' / 'âĳ', '¡' ...: nobody can see that they share the bytes
# E2 91 and differ only in the last one. The audit shows each token's bytes instead: as the text
# they decode to where they are whole UTF-8, in hex where they are not.

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _decoders(tokenizer: Encoder) -> list[dict]:
    """The tokenizer's decoder steps (its JSON), flattened; [] where it has none or is not a
    ``tokenizers.Tokenizer``."""
    decoder = getattr(tokenizer, "decoder", None)
    if decoder is None:
        return []
    try:
        spec = json.loads(decoder.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return []
    return list(spec.get("decoders") or []) if spec.get("type") == "Sequence" else [spec]


def token_bytes(tokenizer: Encoder, ids: tuple[int, ...]) -> tuple[bytes, ...]:
    """The bytes each token of ``ids`` stands for, read from the vocabulary string the way the
    tokenizer's own decoder reads it: byte-level characters back to their bytes, ``<0xNN>``
    byte-fallback tokens to that byte, ``▁`` (or any other Replace step) to what it replaces.

    Not ``decode([id])``: a token that holds part of a character decodes to U+FFFD, which is the
    very information the audit must show.
    """
    from cube.tokenizers.build import byte_to_unicode

    steps = _decoders(tokenizer)
    kinds = {step.get("type") for step in steps}
    replaces = [(step["pattern"]["String"], step["content"]) for step in steps
                if step.get("type") == "Replace" and isinstance(step.get("pattern"), dict)
                and "String" in step["pattern"]]
    byte_of = {ch: b for b, ch in byte_to_unicode().items()} if "ByteLevel" in kinds else {}
    out = []
    for token_id in ids:
        piece = tokenizer.id_to_token(token_id)
        if piece is None:
            raise ConfigError(f"token id {token_id} is not in the tokenizer's vocabulary")
        if byte_of and all(ch in byte_of for ch in piece):
            out.append(bytes(byte_of[ch] for ch in piece))
            continue
        if "ByteFallback" in kinds and (m := _BYTE_FALLBACK.fullmatch(piece)):
            out.append(bytes([int(m[1], 16)]))
            continue
        for pattern, content in replaces:
            piece = piece.replace(pattern, content)
        out.append(piece.encode("utf-8"))  # an added token, or a vocabulary written as text
    return tuple(out)


def shown_token(raw: bytes) -> str:
    """One token for a reader: its text, quoted so that spaces and newlines show (``' A'``,
    ``'\\n'``), where its bytes are whole UTF-8; else the bytes in hex, ``<E2 91>``."""
    try:
        return repr(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "<" + " ".join(f"{b:02X}" for b in raw) + ">"


@dataclass(frozen=True)
class CellAudit:
    family: str
    label_set: str
    context: str
    verdict: str  # "DEGEN" or "max<N>tok"
    collision: str | None  # "full", "partial" or None
    collision_groups: tuple[tuple[str, ...], ...]
    boundary_merge: tuple[str, ...]  # labels whose appending changed the prompt's own tokens
    labels: tuple[LabelTokens, ...] = field(default_factory=tuple)

    @property
    def degenerate(self) -> bool:
        return self.verdict == "DEGEN"


def audit_item(n_labels: int, templates: dict) -> Item:
    """The audit's own item (templates.yaml ``audit_item``, never benchmark text), its options
    repeated in turn up to ``n_labels``, so that a label set of any size has an option per label."""
    item = templates["audit_item"]
    options = list(item["options"])
    return Item("audit", "audit_item", "audit", 0, item["question"],
                tuple(options[i % len(options)] for i in range(n_labels)), None, subject_zh=item["subject"])


def audit_prompt(label_set: LabelSet, context: Context, templates: dict | None = None, shots: int = 0,
                 chat_template: ChatTemplate | None = None) -> str:
    """A realistic prompt ending in the cue: the harness's own builder around the audit's item.

    With ``shots``, the audit's item is shown solved that many times before it (answers in turn),
    as a k-shot prompt shows dev items: the labels' tokens are read after the same text a k-shot
    cell scores them after, never after benchmark text. With ``chat_template``, the prompt of a
    chat cell: the cue at the start of the assistant turn, where the run scores the labels."""
    templates = templates or load_templates()
    item = audit_item(len(label_set.labels), templates)
    solved = [replace(item, split="dev", row=k + 1, answer=k % len(label_set.labels)) for k in range(shots)]
    cell = Cell(label_set, context.name, shots, chat=chat_template.chat_form if chat_template is not None else NO_CHAT)
    return prompt_in_context(item, cell, context, solved, templates, chat_template).context


def first_token_collisions(first_ids: list[int], labels: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Groups of labels (in label order) whose first token ids are equal; only groups of 2+."""
    groups: dict[int, list[str]] = {}
    for tid, label in zip(first_ids, labels):
        groups.setdefault(tid, []).append(label)
    return tuple(tuple(g) for g in groups.values() if len(g) > 1)


def audit_cell(tokenizer: Encoder, family: str, label_set: LabelSet, context: Context,
               templates: dict | None = None, shots: int = 0, chat_template: ChatTemplate | None = None) -> CellAudit:
    """One cell's verdict; with ``chat_template``, the chat cell's (its context named ``zh_cue@chat``)."""
    prompt = audit_prompt(label_set, context, templates, shots, chat_template)
    prompt_ids = encode_ids(tokenizer, prompt)
    tokenize = continuation_tokenizer(context.tokenization)
    labels = []
    for label in label_set.labels:
        tic = tokenize(tokenizer, prompt, context.label_prefix + label, context_ids=prompt_ids)
        ids = tic.continuation_ids
        if not ids:
            raise ConfigError(f"{family}: label {label!r} adds no tokens after the prompt")
        tokens = tuple(tokenizer.id_to_token(i) for i in ids)
        labels.append(LabelTokens(label, ids, tokens, tic.boundary_merge, token_bytes(tokenizer, ids)))
    groups = first_token_collisions([lt.ids[0] for lt in labels], label_set.labels)
    if groups:
        verdict = "DEGEN"
        collision = "full" if len(groups) == 1 and len(groups[0]) == len(label_set) else "partial"
    else:
        verdict = f"max{max(len(lt.ids) for lt in labels)}tok"
        collision = None
    merged = tuple(lt.label for lt in labels if lt.boundary_merge)
    name = record_context(context.name, chat_template.chat_form if chat_template is not None else NO_CHAT)
    return CellAudit(family, label_set.name, name, verdict, collision, groups, merged, tuple(labels))


def run_audit(tokenizers: dict[str, Encoder], label_sets: list[LabelSet], contexts: list[Context]) -> list[CellAudit]:
    """Every (family, label set, context) cell, ordered context-major (default context first)."""
    templates = load_templates()
    return [
        audit_cell(tok, family, ls, ctx, templates)
        for ctx in contexts for family, tok in tokenizers.items() for ls in label_sets
    ]


# ---- output forms -------------------------------------------------------------------------------

def format_table(cells: list[CellAudit], details: bool = True) -> str:
    """One block per context: a header row of label sets, then one row per family with each label
    set's verdict (``max1tok``, ``DEGEN``) in its column. It printed each family's row as a
    Python dict (``qwen3 {'L1_halfwidth': 'max1tok', ...}``), which a reader had to parse."""
    lines: list[str] = []
    for ctx in dict.fromkeys(c.context for c in cells):
        block = [c for c in cells if c.context == ctx]
        lines.append(f"== context: {ctx}")
        label_sets = list(dict.fromkeys(c.label_set for c in block))
        families = list(dict.fromkeys(c.family for c in block))
        verdict = {(c.family, c.label_set): c.verdict for c in block}
        first = max(len("family"), *map(len, families))
        widths = [max(len(ls), *(len(verdict.get((f, ls), "-")) for f in families)) for ls in label_sets]
        lines.append("  ".join([f"{'family':<{first}}", *(f"{ls:<{w}}" for ls, w in zip(label_sets, widths))]).rstrip())
        for family in families:
            cells_row = (f"{verdict.get((family, ls), '-'):<{w}}" for ls, w in zip(label_sets, widths))
            lines.append("  ".join([f"{family:<{first}}", *cells_row]).rstrip())
        for c in block:
            if c.boundary_merge:
                lines.append(f"  ! {c.family} {c.label_set}: label(s) {', '.join(c.boundary_merge)} merge across the prompt boundary")
        if details:
            for c in block:
                what = f"DEGEN ({c.collision}: {' | '.join('='.join(g) for g in c.collision_groups)})" if c.degenerate else c.verdict
                toks = "; ".join(f"{lt.label} -> {list(lt.ids)} [{', '.join(lt.shown)}]" for lt in c.labels)
                lines.append(f"  {c.family:<16} {c.label_set:<14} {what}: {toks}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def cells_to_json(cells: list[CellAudit], readable: bool = False) -> list[dict]:
    """Cells as JSON. The frozen prediction's form by default: ids and the vocabulary's strings
    (what was pre-registered and is compared; its hash covers exactly these fields).
    ``readable`` adds, per label, each token's bytes in hex (``"E2 91"``) and what the table
    shows (``"<E2 91>"``, ``"'①'"``), for a reader of ``cube audit --json``."""
    out = []
    for c in cells:
        d = asdict(c)
        d["collision_groups"] = [list(g) for g in c.collision_groups]
        d["boundary_merge"] = list(c.boundary_merge)
        d["labels"] = []
        for lt in c.labels:
            label = {"label": lt.label, "ids": list(lt.ids), "tokens": list(lt.tokens),
                     "boundary_merge": lt.boundary_merge}
            if readable:
                label["bytes"] = [b.hex(" ").upper() for b in lt.raw]
                label["shown"] = list(lt.shown)
            d["labels"].append(label)
        out.append(d)
    return out


# ---- one model's own tokenizer, before a run --------------------------------------------------------

@dataclass(frozen=True)
class RunCellAudit:
    """The verdict of one (label set, answer context, shots) cell on the tokenizer a run scores with.

    ``cube run`` makes these before the weights load and logs them (``to_log``), so ``cube confirm``
    can hold the run's records to the prediction made before them; ``cube audit --model`` prints
    the same lines for a checkpoint without running it."""

    shots: int
    cell: CellAudit

    @property
    def key(self) -> str:
        return f"{self.cell.label_set} | {self.cell.context} | {self.shots}-shot"

    def line(self) -> str:
        """``L4_circled | zh_cue | 0-shot: DEGEN (full): ①=②=③=④ share first token 9331 <E2 91>``."""
        c = self.cell
        if not c.degenerate:
            shown = "; ".join(f"{lt.label} {' '.join(lt.shown)}" for lt in c.labels)
            return f"{self.key}: {c.verdict} ({shown})"
        by_label = {lt.label: lt for lt in c.labels}
        groups = []
        for group in c.collision_groups:
            first = by_label[group[0]]
            groups.append(f"{'='.join(group)} share first token {first.ids[0]} {first.shown[0]}")
        return f"{self.key}: DEGEN ({c.collision}): {'; '.join(groups)}"

    def to_log(self) -> dict:
        return {"shots": self.shots, **cells_to_json([self.cell], readable=True)[0]}


def audit_run_cells(tokenizer: Encoder, model: str, label_sets: list[LabelSet], contexts: list[Context],
                    shots: list[int], chats: tuple[str, ...] = (NO_CHAT,),
                    chat_template: ChatTemplate | None = None, templates: dict | None = None) -> list[RunCellAudit]:
    """Every (label set x context x shots x chat template) cell of a run, audited on ``tokenizer``
    (the model's own); a chat cell (``model``, or with a thinking mode ``model+nothink``) on
    ``chat_template`` in that mode, which it then needs: with thinking off the labels are read after
    the template's own empty thinking block. In the run's own prompt format (``templates``: a
    benchmark's; None: the exam format)."""
    templates = templates or load_templates()
    if any(chat != NO_CHAT for chat in chats) and chat_template is None:
        raise ConfigError(f"{model}: a chat cell needs the model's chat template, and none was given")
    return [RunCellAudit(k, audit_cell(tokenizer, model, ls, ctx, templates, k,
                                       chat_template.with_thinking(thinking_of(chat)) if chat != NO_CHAT else None))
            for ls in label_sets for ctx in contexts for k in shots for chat in chats]


def format_run_audit(model: str, cells: list[RunCellAudit]) -> str:
    """The lines ``cube run`` prints before the weights load, and ``cube audit --model`` prints."""
    n_degen = sum(c.cell.degenerate for c in cells)
    head = f"audit of {model}'s tokenizer: {len(cells)} cell{'' if len(cells) == 1 else 's'}, {n_degen} DEGEN"
    return "\n".join([head] + [f"  {c.line()}" for c in cells]) + "\n"


def run_prediction(logged: Mapping[str, list[dict]]) -> dict:
    """The audits runs logged (model -> its logged cells) as one prediction document whose
    families are the models, for ``cube confirm --run-audit``.

    Shots do not change which first token a label starts with after the cue, and confirm pools
    them, so a (label set, context) cell takes the verdict of its fewest shots."""
    cells, label_sets, contexts = {}, {}, {}
    for model, entries in logged.items():
        for entry in sorted(entries, key=lambda e: e["shots"]):
            key = (model, entry["label_set"], entry["context"])
            label_sets[entry["label_set"]] = [lt["label"] for lt in entry["labels"]]
            contexts[entry["context"]] = {}
            if key not in cells:
                cells[key] = {k: entry[k] for k in ("label_set", "context", "verdict", "collision",
                                                      "collision_groups", "boundary_merge", "labels")}
                cells[key]["family"] = model
    return {"schema": SCHEMA, "label_sets": label_sets, "contexts": contexts,
            "sources": {model: {"spec": "the audit its cube run logged"} for model in logged},
            "skipped": {}, "cells": list(cells.values())}


# ---- pre-registration ---------------------------------------------------------------------------

def canonical_sha256(payload: dict) -> str:
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def prediction_document(cells: list[CellAudit], label_sets: list[LabelSet], contexts: list[Context],
                        sources: dict[str, dict], skipped: dict[str, str]) -> dict:
    """The frozen prediction: what was audited, from which exact files, and every cell's verdict."""
    body = {
        "schema": SCHEMA,
        "cube_version": __version__,
        "label_sets": {ls.name: list(ls.labels) for ls in label_sets},
        "contexts": {c.name: {"cue": c.cue, "label_prefix": c.label_prefix} for c in contexts},
        "sources": sources,
        "skipped": skipped,
        "cells": cells_to_json(cells),
    }
    return {**body, "content_sha256": canonical_sha256(body)}


def read_prediction(path: Path) -> dict:
    """Load a frozen prediction, refusing one whose content no longer matches its own hash."""
    doc = read_json(path, ConfigError, "frozen prediction")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError(f"{path}: schema {doc.get('schema') if isinstance(doc, dict) else None!r} is not {SCHEMA!r}")
    body = {k: v for k, v in doc.items() if k != "content_sha256"}
    if canonical_sha256(body) != doc.get("content_sha256"):
        raise PredictionMismatch(f"{path}: content_sha256 does not match the file's content (edited after freezing?)")
    return doc


def diff_predictions(frozen: dict, now: dict) -> list[str]:
    """Human-readable differences between a frozen and a recomputed prediction document."""
    diffs = []
    for fam in sorted(set(frozen["sources"]) | set(now["sources"])):
        a, b = frozen["sources"].get(fam), now["sources"].get(fam)
        if a != b:
            diffs.append(f"source of {fam}: frozen {a} vs now {b}")
    for fam in sorted(set(frozen["skipped"]) ^ set(now["skipped"])):
        state = "skipped now" if fam in now["skipped"] else "skipped when frozen"
        diffs.append(f"family {fam}: {state}")
    key = lambda c: (c["family"], c["label_set"], c["context"])  # noqa: E731
    fa, fb = {key(c): c for c in frozen["cells"]}, {key(c): c for c in now["cells"]}
    for k in sorted(set(fa) | set(fb)):
        if k not in fb:
            if k[0] not in now["skipped"]:
                diffs.append(f"cell {'/'.join(k)}: missing now")
        elif k not in fa:
            diffs.append(f"cell {'/'.join(k)}: not in the frozen prediction")
        elif fa[k] != fb[k]:
            fields = [f for f in fa[k] if fa[k][f] != fb[k].get(f)]
            diffs.append(f"cell {'/'.join(k)}: {', '.join(fields)} differ "
                         f"(frozen {fa[k]['verdict']}, now {fb[k]['verdict']})")
    return diffs
