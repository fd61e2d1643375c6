"""Rendering items into the prompts the scorers score.

Every prompt is a pure function of (item, cell, dev items) and the frozen templates in
``config/templates.yaml``: no run order, sampling or global state enters, so any record can be
re-derived and re-scored from its uid and cell alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from cube.config import config_dir, load_config
from cube.errors import ConfigError, ItemsError
from cube.protocol.chat import CHAT_FORMS, NO_CHAT, ChatTemplate, record_context
from cube.protocol.items import Item
from cube.protocol.label_sets import MAX_OPTIONS, LabelSet
from cube.protocol.tokenization import continuation_tokenizer

ORIGINAL_ORDER = "original"
_SHIFT = re.compile(r"shift([1-9][0-9]*)")


@dataclass(frozen=True)
class Cell:
    """One protocol cell: how an item is shown (labels, answer cue, shots, option order)."""

    label_set: LabelSet
    context: str  # a key of templates.yaml `contexts`, e.g. 'zh_cue'
    shots: int  # number of dev items shown before the question (0 or 5 in the study)
    order: str = ORIGINAL_ORDER  # 'original' or 'shiftK': cyclic shift so the gold label moves
    chat: str = NO_CHAT  # 'none' (plain text) or 'model': the checkpoint's chat template (cube.protocol.chat)

    def __post_init__(self) -> None:
        if not isinstance(self.shots, int) or self.shots < 0:
            raise ConfigError(f"cell shots must be a non-negative integer, got {self.shots!r}")
        if self.order != ORIGINAL_ORDER and not _SHIFT.fullmatch(self.order):
            raise ConfigError(f"cell order {self.order!r} is not 'original' or 'shiftK' (K >= 1)")
        if self.chat not in CHAT_FORMS:
            raise ConfigError(f"cell chat template {self.chat!r} is not one of {', '.join(CHAT_FORMS)}")

    @property
    def record_context(self) -> str:
        """The answer context its records carry: ``zh_cue``, or ``zh_cue@chat`` in a chat cell."""
        return record_context(self.context, self.chat)

    @property
    def key(self) -> str:
        """A stable name for records and file names."""
        return f"{self.label_set.name}|{self.record_context}|{self.shots}shot|{self.order}"


@dataclass(frozen=True)
class Context:
    """An answer context: the cue the prompt ends with and the text written before the label."""

    name: str
    cue: str
    label_prefix: str
    description: str = ""
    tokenization: str = "in_context"  # or "separate": see cube.protocol.tokenization


@dataclass(frozen=True)
class Prompt:
    context: str  # everything before the scored continuation, ending with the answer cue
    label_continuations: tuple[str, ...]  # label_prefix + label, one per displayed position
    gold: int | None  # displayed position of the gold option; None where the split has no answers
    permutation: tuple[int, ...]  # displayed position -> original option index
    tokenization: str = "in_context"  # how the labels are tokenized after the context


class ClozePrompt(NamedTuple):
    context: str  # the question then the cloze cue
    continuations: tuple[str, ...]  # option texts in the original order
    unconditional_context: str  # the cue alone, for M5's log p(option | cue)


class JudgementPrompt(NamedTuple):
    context: str  # one statement "question -> option", ending with the judgement cue
    true_word: str
    false_word: str
    is_true: bool | None  # whether the option is the gold one; None where answers are unknown


# --- templates ----------------------------------------------------------------------------------

_TEMPLATE_CACHE: dict[tuple[str, int], dict] = {}


def load_templates() -> dict:
    """``config/templates.yaml``, re-read only when the file changes: prompts are rendered in hot
    loops."""
    path = config_dir() / "templates.yaml"
    try:
        key = (str(path), path.stat().st_mtime_ns)
    except OSError:
        return load_config("templates")  # raises the one-line ConfigError
    if key not in _TEMPLATE_CACHE:
        _TEMPLATE_CACHE.clear()
        _TEMPLATE_CACHE[key] = load_config("templates")
    return _TEMPLATE_CACHE[key]


FORMATS_KEY = "formats"
# The template keys a benchmark (its format or a user's card) may set: the prompt's text, never the
# audit's own item.
PROMPT_KEYS = ("header", "question", "option", "shot_separator", "cloze", "judgement", "generation",
               "default_context")


def templates_for(format_name: str | None = None, overrides: dict | None = None,
                  contexts: dict | None = None) -> dict:
    """The templates a benchmark's prompts are rendered with: ``config/templates.yaml`` with the
    named format's keys (``formats.<name>``), then ``overrides``, then extra answer ``contexts``.

    With none of them, the exam format exactly as before formats existed (``formats`` itself is
    dropped), so that the cells of CMMLU and C-Eval keep their template digests. A nested key
    (``cloze``, ``judgement``, ``generation``) is merged one level deep: a card may set
    ``cloze.cue`` alone."""
    base = load_templates()
    known = base.get(FORMATS_KEY) or {}
    out = {k: v for k, v in base.items() if k != FORMATS_KEY}
    layers = []
    if format_name is not None:
        if format_name not in known:
            raise ConfigError(f"unknown prompt format {format_name!r}; known: {', '.join(known) or 'none'} "
                              "(config/templates.yaml formats)")
        layers.append(known[format_name])
    if overrides:
        layers.append(overrides)
    for layer in layers:
        for key, value in layer.items():
            if key not in PROMPT_KEYS:
                raise ConfigError(f"template key {key!r} cannot be set by a benchmark; known: {', '.join(PROMPT_KEYS)}")
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = {**out[key], **value}
            else:
                out[key] = value
    if contexts:
        out["contexts"] = {**out["contexts"], **contexts}
    return out


def _field(templates: Any, *keys: str) -> Any:
    node = templates
    for depth, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            raise ConfigError(f"config/templates.yaml has no {'.'.join(keys[: depth + 1])!r}")
        node = node[key]
    return node


def load_contexts(names: Iterable[str] | None = None, templates: dict | None = None) -> list[Context]:
    """The named answer contexts of config/templates.yaml (none named: all, the default first).

    The one reader of the answer-context axis, for the audit, the harness and the importers alike:
    each read the YAML its own way before, with three different errors for an unknown name.
    """
    templates = templates if templates is not None else load_templates()
    raw = _field(templates, "contexts")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("config/templates.yaml: `contexts` must map names to answer contexts")
    default = templates.get("default_context")
    order = [default] + [n for n in raw if n != default] if default in raw else list(raw)
    out = []
    for name in list(names) if names else order:
        if name not in raw:
            raise ConfigError(f"unknown answer context {name!r}; known: {', '.join(order)}")
        entry = raw[name]
        cue = _field(raw, name, "cue")
        tokenization = str(entry.get("tokenization", "in_context"))
        continuation_tokenizer(tokenization)  # a clear error for an unknown tokenization
        out.append(Context(name, str(cue), str(entry.get("label_prefix", "")), str(entry.get("description", "")),
                           tokenization))
    return out


def answer_context(templates: dict, name: str) -> tuple[str, str]:
    """(cue, label_prefix) of a named answer context."""
    context = load_contexts([name], templates)[0]
    return context.cue, context.label_prefix


# --- option order and shots ---------------------------------------------------------------------


def option_permutation(order: str, n_options: int) -> tuple[int, ...]:
    """Displayed position -> original option index. ``shiftK`` shows option (p + K) mod n at p,
    so the gold option's position moves by -K: the label, not the content, changes."""
    if order == ORIGINAL_ORDER:
        return tuple(range(n_options))
    match = _SHIFT.fullmatch(order)
    if not match or int(match.group(1)) >= n_options:
        raise ConfigError(
            f"option order {order!r} is not 'original' or shift1..shift{n_options - 1}"
        )
    k = int(match.group(1))
    return tuple((p + k) % n_options for p in range(n_options))


def select_shots(item: Item, dev_items: list[Item] | None, shots: int) -> list[Item]:
    """The first ``shots`` dev items of the item's subject in file (row) order, never the item
    itself (so a dev item can be scored too)."""
    if shots == 0:
        return []
    pool = [
        d
        for d in dev_items or []
        if d.benchmark == item.benchmark and d.subject == item.subject and d.uid != item.uid
    ]
    pool.sort(key=lambda d: (d.split, d.row))
    if len(pool) < shots:
        raise ItemsError(
            f"{shots}-shot prompt for {item.uid} needs {shots} dev items of subject "
            f"{item.subject!r}; found {len(pool)}"
        )
    chosen = pool[:shots]
    for shot in chosen:
        if shot.answer is None:
            raise ItemsError(
                f"shot {shot.uid} has no answer; shots must come from a split with answers"
            )
    return chosen


# --- rendering ----------------------------------------------------------------------------------


def _header(templates: dict, item: Item) -> str:
    return str(_field(templates, "header")).format(subject=item.subject_zh or item.subject)


def _question_block(
    templates: dict, item: Item, labels: tuple[str, ...], permutation: tuple[int, ...], cue: str
) -> str:
    question = str(_field(templates, "question")).format(question=item.question)
    option = str(_field(templates, "option"))
    lines = "".join(
        option.format(label=labels[p], text=item.options[o]) for p, o in enumerate(permutation)
    )
    return question + lines + cue


def render_prompt(
    item: Item, cell: Cell, dev_items: list[Item] | None = None, templates: dict | None = None,
    chat_template: ChatTemplate | None = None,
) -> Prompt:
    """The multiple-choice prompt of one item in one cell: header, shots, question, options, cue.

    Shots keep their original option order (the order axis moves the scored item's gold label
    only) and end with their answer written as the scored continuation would be. In a chat cell
    (``cell.chat == 'model'``) all of it but the cue is the user turn of ``chat_template``, and the
    cue starts the assistant turn (``cube.protocol.chat``).
    """
    templates = templates if templates is not None else load_templates()
    return prompt_in_context(item, cell, load_contexts([cell.context], templates)[0], dev_items, templates,
                             chat_template)


def in_chat(text: str, cue: str, cell: Cell, chat_template: ChatTemplate | None) -> str:
    """``text`` (ending in ``cue``) as the cell shows it: unchanged in a plain cell; in a chat cell
    the text before the cue as the user turn, the cue opening the assistant turn."""
    if cell.chat == NO_CHAT:
        return text
    if chat_template is None:
        raise ConfigError(f"cell {cell.key} needs the model's chat template, and none was given")
    return chat_template.wrap(text[: len(text) - len(cue)], cue)


def prompt_in_context(
    item: Item, cell: Cell, context: Context, dev_items: list[Item] | None = None, templates: dict | None = None,
    chat_template: ChatTemplate | None = None,
) -> Prompt:
    """``render_prompt`` with its answer context given whole, not named: the one prompt builder,
    also for the audit's own item and for an imported harness's cue, which templates.yaml lacks."""
    templates = templates if templates is not None else load_templates()
    labels = cell.label_set.labels
    if len(labels) < len(item.options) or len(labels) > MAX_OPTIONS:
        raise ConfigError(
            f"label set {cell.label_set.name!r} has {len(labels)} labels but {item.uid} has "
            f"{len(item.options)} options" + (f" (and no item has more than {MAX_OPTIONS})"
                                              if len(labels) > MAX_OPTIONS else "")
        )
    every_label = labels
    labels = labels[: len(item.options)]  # a ten-label set shows its first N on N options
    cue, label_prefix = context.cue, context.label_prefix
    permutation = option_permutation(cell.order, len(item.options))
    blocks = []
    for shot in select_shots(item, dev_items, cell.shots):  # a shot shows its own options' labels
        if len(shot.options) > len(every_label):
            raise ConfigError(f"label set {cell.label_set.name!r} has {len(every_label)} labels but shot "
                              f"{shot.uid} has {len(shot.options)} options")
        shot_labels = every_label[: len(shot.options)]
        identity = tuple(range(len(shot.options)))
        blocks.append(_question_block(templates, shot, shot_labels, identity, cue) + label_prefix
                      + shot_labels[shot.answer])
    blocks.append(_question_block(templates, item, labels, permutation, cue))
    separator = str(_field(templates, "shot_separator")) if len(blocks) > 1 else ""  # zero-shot needs none
    text = in_chat(_header(templates, item) + separator.join(blocks), cue, cell, chat_template)
    gold = permutation.index(item.answer) if item.answer is not None else None
    return Prompt(
        context=text,
        label_continuations=tuple(label_prefix + label for label in labels),
        gold=gold,
        permutation=permutation,
        tokenization=context.tokenization,
    )


def cloze_prompt(
    item: Item, cell: Cell | None = None, templates: dict | None = None, chat_template: ChatTemplate | None = None
) -> ClozePrompt:
    """The cloze prompt (M2-M5): the question then the cue; each option's text is a continuation.

    Cloze never shows labels or the option list, so the label set, answer context and order of
    ``cell`` cannot change it; ``cell`` is accepted so callers can treat every cell alike.
    Continuations stay in the original order: the gold index is ``item.answer``. With a
    ``chat_template``, the question is the user turn and the cue opens the assistant turn; the
    unconditional context (M5) is the cue after an empty user turn.
    """
    templates = templates if templates is not None else load_templates()
    question = str(_field(templates, "question")).format(question=item.question)
    cue = str(_field(templates, "cloze", "cue"))
    unconditional = str(_field(templates, "cloze", "unconditional_context"))
    prefix = str(_field(templates, "cloze").get("option_prefix", ""))  # " " in en_mcq; none in the exam format
    continuations = tuple(prefix + option for option in item.options)
    if chat_template is not None:
        return ClozePrompt(chat_template.wrap(question, cue), continuations, chat_template.wrap("", unconditional))
    return ClozePrompt(
        context=question + cue,
        continuations=continuations,
        unconditional_context=unconditional,
    )


def _judgement_word(templates: dict, which: str) -> str:
    # YAML 1.1 reads the keys `true:` / `false:` as booleans, so accept either spelling.
    words = _field(templates, "judgement", "words")
    flag = which == "true"
    for key in (which, flag):
        if isinstance(words, dict) and key in words:
            return str(words[key])
    raise ConfigError(f"config/templates.yaml has no 'judgement.words.{which}'")


def judgement_prompts(item: Item, templates: dict | None = None,
                      chat_template: ChatTemplate | None = None) -> list[JudgementPrompt]:
    """The item recast as one true/false statement per option (for partial-credit analyses);
    with a ``chat_template``, each statement is the user turn and the cue opens the reply."""
    templates = templates if templates is not None else load_templates()
    statement = str(_field(templates, "judgement", "statement"))
    cue = str(_field(templates, "judgement", "cue"))
    true_word = _judgement_word(templates, "true")
    false_word = _judgement_word(templates, "false")

    def shown(text: str) -> str:
        return chat_template.wrap(text, cue) if chat_template is not None else text + cue

    return [
        JudgementPrompt(
            context=shown(statement.format(question=item.question, option=text)),
            true_word=true_word,
            false_word=false_word,
            is_true=None if item.answer is None else index == item.answer,
        )
        for index, text in enumerate(item.options)
    ]
