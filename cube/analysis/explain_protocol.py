"""What a slice's store says about the protocol it was scored under, for ``cube explain``.

A gap between two harnesses is only explained when each side's protocol is read from what the
run itself kept, not from what its harness usually does: cube's own records name their answer
context and label set, which render to cube's prompt; an ``cube import lm-eval`` store keeps each
task's logged ``doc_to_text`` and ``target_delimiter``. Each side becomes a :class:`Protocol`:
the prompt as a template with placeholders (``{{Question}}``, ``{{A}}``; never an item's text),
what is written between prompt and label, how the label is tokenized, the scorer's
normalisation and, where the tokenizer audit judged the cell, its verdict. Where a store keeps
none of it, the fields are None and the comparison says "not identifiable from these records".
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cube.errors import CubeError

# What each stored scorer normalises over (or how it decides), as a reader compares them.
SCORER_NORMALISATION = {
    "M1-seq": "sum of the label's token log-probabilities",
    "M1-strict": "the label's first token only",
    "M2": "sum over the option text",
    "M3": "mean per token of the option text",
    "M4": "per UTF-8 byte of the option text",
    "M4-char": "per character of the choice (lm-eval acc_norm)",
    "M5": "option given question minus option alone",
    "M6-strict": "generation, strict extraction",
    "M6-lenient": "generation, lenient extraction",
    "TF": "true/false judgement of each option",
    "OC-ppl": "PPL over each label's whole prompt (OpenCompass)",
    "M6-oc": "generation, first capital letter (OpenCompass)",
}
CUBE_TOKENIZATION = {"in_context": "whole text, label past the common prefix",
                     "separate": "prompt and label tokenized apart"}
LM_EVAL_TOKENIZATION = "whole text, label past len(tokens(prompt)) (lm-eval)"


@dataclass(frozen=True)
class Protocol:
    """One side's protocol; None where the store does not say."""

    harness: str  # cube | lm-eval | another importer's name
    prompt: str | None  # template up to where the label is written, placeholders for item text
    label_prefix: str | None  # written between the prompt and the label (lm-eval's target_delimiter)
    tokenization: str | None
    normalisation: str
    audit_verdict: str | None  # the tokenizer audit's verdict of this cell (DEGEN, max1tok, ...)
    decides_as: str | None = None  # another scorer whose decisions this one's equal on these items
    # "none" (the plain prompt) or "model (template sha256 ...)": the chat-template axis
    # (cube.protocol.chat); None where the store does not say (an import)
    chat_template: str | None = None

    def full_text(self) -> str | None:
        """What the model reads, label included: equal full texts with a different split differ
        only in how the label is tokenized."""
        if self.prompt is None or self.label_prefix is None:
            return None
        return self.prompt + self.label_prefix + "{{label}}"


def _cube_prompt(cell: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """cube's prompt of a cell as a template, its label prefix and tokenization; Nones where the
    cell is not a label cell cube can render (cloze, judgement, chain of thought)."""
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import answer_context, load_templates, option_permutation
    from cube.records.lm_eval_import import OPTION_FIELDS

    from cube.protocol.chat import split_context

    context = split_context(cell["context"])[0]  # the plain prompt; the chat form is its own dimension
    try:
        templates = load_templates()
        label_set = load_label_sets()[cell["label_set"]]
        cue, prefix = answer_context(templates, context)
        mode = str(templates["contexts"][context].get("tokenization", "in_context"))
        shown = option_permutation(cell["order"], len(label_set.labels))
    except (CubeError, KeyError):
        return None, None, None
    option = str(templates["option"])
    text = (str(templates["header"]).format(subject="{{subject_zh}}")
            + str(templates["question"]).format(question="{{Question}}")
            + "".join(option.format(label=label, text="{{" + OPTION_FIELDS[index] + "}}")
                      for label, index in zip(label_set.labels, shown))
            + cue)
    if int(cell["shots"]) > 0:
        text = f"{{{{{int(cell['shots'])} solved examples of the subject}}}}" + text
    return text, prefix, CUBE_TOKENIZATION.get(mode, mode)


def _lm_eval_prompt(logged: Mapping[str, Any], cell: Mapping[str, Any]) -> tuple[str | None, str | None, str | None, str | None]:
    """The logged task whose protocol is this cell: its doc_to_text, delimiter and audit verdict."""
    for task in (logged.get("tasks") or {}).values():
        p = task.get("protocol") or {}
        if (p.get("label_set"), p.get("context"), int(p.get("shots", -1))) == \
                (cell["label_set"], cell["context"], int(cell["shots"])):
            text = (task.get("config") or {}).get("doc_to_text")
            verdict = ((task.get("audit") or {}).get("lm_eval") or {}).get("verdict")
            if int(cell["shots"]) > 0 and isinstance(text, str):
                text = f"{{{{{int(cell['shots'])} solved examples of the subject}}}}" + text
            return (text if isinstance(text, str) else None, str(p.get("target_delimiter", " ")),
                    LM_EVAL_TOKENIZATION, verdict)
    return None, None, None, None


OPENCOMPASS_TOKENIZATION = "each label's whole prompt tokenized (OpenCompass PPL)"
_OC_FIELD = re.compile(r"(?<!\{)\{(question|A|B|C|D)\}(?!\})")


def _turns_text(template: Any, shots: int) -> str | None:
    """One label's dumped OpenCompass template as text: its turns' prompts joined by ``{{turn}}``
    (the model class joins them; this page does not guess how), ``</E>`` as the examples."""
    if isinstance(template, str):
        text = template
    elif isinstance(template, Mapping) and isinstance(template.get("round"), list):
        prompts = [t.get("prompt") for t in template["round"] if isinstance(t, Mapping)]
        if not all(isinstance(p, str) for p in prompts):
            return None
        text = str(template.get("begin") or "") + "{{turn}}".join(prompts)
    else:
        return None
    text = text.replace("</E>", f"{{{{{shots} solved examples of the subject}}}}" if shots else "")
    return _OC_FIELD.sub(lambda m: "{{" + ("Question" if m.group(1) == "question" else m.group(1)) + "}}", text)


def _opencompass_protocol(logged: Mapping[str, Any], cell: Mapping[str, Any],
                          contexts: Sequence[str]) -> tuple[str | None, str | None, str | None, str | None, str | None]:
    """(prompt, label prefix, tokenization, audit verdict, decides_as) of an OpenCompass cell."""
    datasets = [d for d in (logged.get("datasets") or {}).values() if d.get("context") in set(contexts)]
    entry = next((d for d in datasets if d.get("context") == cell["context"]), None)
    verdict = (((logged.get("audit") or {}).get("cell")) or {}).get("verdict")
    if entry is None:
        return None, None, None, verdict, None
    infer = (entry.get("config") or {}).get("infer_cfg") or {}
    template = (infer.get("prompt_template") or infer.get("ice_template") or {}).get("template")
    prompt = prefix = tokenization = decides_as = None
    if entry.get("mode") == "ppl" and isinstance(template, Mapping) and "A" in template:
        text = _turns_text(template["A"], int(entry.get("shots") or 0))
        if text is not None and text.endswith("A"):
            prompt, prefix, tokenization = text[:-1], "", OPENCOMPASS_TOKENIZATION
        # PPL is the whole prompt's mean loss; where the import's audit found it decide every item as
        # the summed log-likelihood does (the labels' prompts share all but the label), it is M1-seq
        counts = [((d.get("audit") or {}).get("n_decision_differs_from_summed_loglik")) for d in datasets]
        if datasets and all(c == 0 for c in counts):
            decides_as = "M1-seq"
    elif entry.get("mode") == "gen":
        text = _turns_text(template, int(entry.get("shots") or 0))
        prompt = text
    return prompt, prefix, tokenization, verdict, decides_as


def _frozen_verdict(frozen: Mapping[str, Any] | None, family: str | None, cell: Mapping[str, Any]) -> str | None:
    if not frozen or not family:
        return None
    for c in frozen.get("cells", []):
        if (c.get("family"), c.get("label_set"), c.get("context")) == (family, cell["label_set"], cell["context"]):
            return c.get("verdict")
    return None


def describe(manifest: Mapping[str, Any], cell: Mapping[str, Any],
             frozen_audit: Mapping[str, Any] | None = None, family: str | None = None,
             contexts: Sequence[str] = ()) -> Protocol:
    """The protocol of one cell of a store, from the store's manifest (and cube's frozen audit
    for cube's own cells, whose verdicts were made before any record existed). ``contexts``: all
    the slice's contexts, where a prefix joined several (OpenCompass's one per subject)."""
    metadata = manifest.get("metadata") or {}
    normalisation = SCORER_NORMALISATION.get(cell["scorer"], cell["scorer"])
    family = family or (metadata.get("families") or {}).get(cell["model"])
    if "lm_eval" in metadata:
        prompt, prefix, tokenization, verdict = _lm_eval_prompt(metadata["lm_eval"], cell)
        return Protocol("lm-eval", prompt, prefix, tokenization, normalisation, verdict)
    if "opencompass" in metadata:
        prompt, prefix, tokenization, verdict, decides_as = _opencompass_protocol(
            metadata["opencompass"], cell, list(contexts) or [cell["context"]])
        return Protocol("OpenCompass", prompt, prefix, tokenization, normalisation, verdict, decides_as)
    harness = next((k for k in metadata if k not in ("families", "source")), None)
    if harness is not None:  # another importer's store: its prompt is not read here
        return Protocol(str(harness), None, None, None, normalisation, None)
    prompt, prefix, tokenization = _cube_prompt(cell)
    return Protocol("cube", prompt, prefix, tokenization, normalisation,
                    _frozen_verdict(frozen_audit, family, cell), chat_template=_chat_template(manifest, cell))


def _chat_template(manifest: Mapping[str, Any], cell: Mapping[str, Any]) -> str:
    """A cube cell's chat form: ``none``, or ``model`` with the digest of the template its store
    recorded (``cube.harness.runner.cell_configs``)."""
    from cube.protocol.chat import MODEL_CHAT, split_context

    chat = split_context(str(cell["context"]))[1]
    if chat != MODEL_CHAT:
        return chat
    digests = sorted({str(c.get("chat_template_sha256")) for k, c in (manifest.get("cells") or {}).items()
                      if k.startswith(f"{cell['model']}/") and c.get("chat_template") == MODEL_CHAT})
    return f"{MODEL_CHAT} (template sha256 {digests[0][:12]}...)" if len(digests) == 1 else MODEL_CHAT


def prompt_diff(a: Protocol, b: Protocol) -> list[str]:
    """Changed lines of the two full texts (placeholders, never item text), each JSON-quoted so
    that a space or a newline shows; [] where they are equal or one is unknown."""
    text_a, text_b = a.full_text(), b.full_text()
    if text_a is None or text_b is None or text_a == text_b:
        return []
    lines = difflib.unified_diff(text_a.splitlines(keepends=True), text_b.splitlines(keepends=True),
                                 "A", "B", n=0, lineterm="")
    return [line[0] + json.dumps(line[1:], ensure_ascii=False) if line[:1] in "+-" and line[:3] not in ("---", "+++")
            else line for line in lines if not line.startswith(("---", "+++"))]
