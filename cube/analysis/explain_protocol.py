"""What a slice's store says about the protocol it was scored under, for ``cube explain``.

A gap between two harnesses is only explained when each side's protocol is read from what the
run itself kept, not from what its harness usually does: cube's own records name their answer
context and label set, which render to cube's prompt; an ``cube import lm-eval`` store keeps each
task's logged ``doc_to_text`` and ``target_delimiter``; each importer reads its own stores
(``HarnessImporter.describe``). Each side becomes a ``ScoringProtocol`` (cube.importers.contract):
the prompt as a template with placeholders (``{{Question}}``, ``{{A}}``; never an item's text),
what is written between prompt and label, how the label is tokenized, the scorer's
normalisation and, where the tokenizer audit judged the cell, its verdict. Where a store keeps
none of it, the fields are None and the comparison says "not identifiable from these records".
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from cube.errors import CubeError
from cube.importers.contract import EXEMPLAR_SLOT, EXEMPLARS_ANSWER, ScoringProtocol, exemplars_of, extractor_of
from cube.importers.registry import importer_of

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
    "M6-es": "generation, EvalScope's extracted answer (EvalScope)",
    "M6-inspect": "generation, inspect_ai's choice answer (inspect_ai)",
    "M1-inspect": "the label's token at the generation's answer token, top-K logged (inspect_ai)",
}
CUBE_AGGREGATION = "per slice: the records' mean (micro) or the mean of subjects' means (macro), as selected"
CUBE_TOKENIZATION = {"in_context": "whole text, label past the common prefix",
                     "separate": "prompt and label tokenized apart"}


def _cube_prompt(cell: Mapping[str, Any], templates: Mapping[str, Any] | None = None,
                 n_options: int | None = None) -> tuple[str | None, str | None, str | None]:
    """cube's prompt of a cell as a template, its label prefix and tokenization; Nones where the
    cell is not a label cell cube can render (cloze, judgement, chain of thought), or where it was
    made on a user's file that is not at hand (its card decides the prompt, not CMMLU's template).

    ``templates``: the ones the run rendered with (``Benchmark.templates`` of the file it read;
    None: CMMLU's and C-Eval's exam format); ``n_options``: the most options an item of the cell
    shows, so a ten-label set shows the labels it showed (its first N), not all ten."""
    from cube.importers.lm_eval.matching import OPTION_FIELDS
    from cube.protocol.benchmarks import BENCHMARKS
    from cube.protocol.chat import split_context
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import answer_context, load_templates, option_permutation

    context = split_context(cell["context"])[0]  # the plain prompt; the chat form is its own dimension
    exam = templates is None
    if exam and cell.get("benchmark") not in (None, *BENCHMARKS):
        return None, None, None
    try:
        templates = load_templates() if exam else templates
        labels = load_label_sets()[cell["label_set"]].labels[:n_options]
        cue, prefix = answer_context(templates, context)
        mode = str(templates["contexts"][context].get("tokenization", "in_context"))
        shown = option_permutation(cell["order"], len(labels))
    except (CubeError, KeyError):
        return None, None, None
    option = str(templates["option"])
    text = (str(templates["header"]).format(subject="{{subject_zh}}" if exam else "{{subject}}")
            + str(templates["question"]).format(question="{{Question}}")
            + "".join(option.format(label=label, text="{{" + (OPTION_FIELDS[index] if index < len(OPTION_FIELDS)
                                                              else "ABCDEFGHIJ"[index]) + "}}")
                      for label, index in zip(labels, shown))
            + cue)
    if int(cell["shots"]) > 0:
        text = EXEMPLAR_SLOT + text
    return text, prefix, CUBE_TOKENIZATION.get(mode, mode)


def cell_verdict(frozen: Mapping[str, Any] | None, family: str | None, cell: Mapping[str, Any]) -> str | None:
    """The verdict an audit document (the frozen prediction, or a run's own audit) gives a record's
    (family, label set, context) cell; None where it has none."""
    if not frozen or not family:
        return None
    for c in frozen.get("cells", []):
        if (c.get("family"), c.get("label_set"), c.get("context")) == (family, cell["label_set"], cell["context"]):
            return c.get("verdict")
    return None


def describe(manifest: Mapping[str, Any], cell: Mapping[str, Any],
             frozen_audit: Mapping[str, Any] | None = None, family: str | None = None,
             contexts: Sequence[str] = (), templates: Mapping[str, Any] | None = None,
             n_options: int | None = None) -> ScoringProtocol:
    """The protocol of one cell of a store, from the store's manifest (and cube's frozen audit
    for cube's own cells, whose verdicts were made before any record existed). ``contexts``: all
    the slice's contexts, where a prefix joined several (OpenCompass's one per subject);
    ``templates`` and ``n_options``: a cube cell's own prompt format and option count
    (``_cube_prompt``)."""
    metadata = manifest.get("metadata") or {}
    normalisation = SCORER_NORMALISATION.get(cell["scorer"], cell["scorer"])
    family = family or (metadata.get("families") or {}).get(cell["model"])
    importer = importer_of(metadata)
    if importer is not None:  # the importer that wrote the store reads its own manifest
        return importer.describe(metadata, cell, contexts, normalisation)
    harness = next((k for k in metadata if k not in ("families", "source")), None)
    if harness is not None:  # a store of an importer this version does not know: its prompt is not read
        return ScoringProtocol(str(harness), None, None, None, normalisation, None,
                               extractor=extractor_of(cell["scorer"]), exemplars=exemplars_of(cell["shots"], None))
    prompt, prefix, tokenization = _cube_prompt(cell, templates, n_options)
    digest = _chat_sha256(manifest, cell)
    return ScoringProtocol("cube", prompt, prefix, tokenization, normalisation,
                           cell_verdict(frozen_audit, family, cell), extractor=extractor_of(cell["scorer"]),
                           aggregation=CUBE_AGGREGATION, headline="micro", chat_template=_chat_template(cell, digest),
                           chat_template_sha256=digest,
                           # cube's shots: dev items of the subject, each ending in its answer label
                           exemplars=exemplars_of(cell["shots"], EXEMPLARS_ANSWER))


def _chat_template(cell: Mapping[str, Any], digest: str | None) -> str:
    """A cube cell's chat form: ``none``, or ``model`` (``model+nothink``/``model+think`` under
    ``--thinking``: a thinking on/off gap shows as this dimension) with the digest of the template its
    store recorded (``_chat_sha256``)."""
    from cube.protocol.chat import NO_CHAT, split_context

    chat = split_context(str(cell["context"]))[1]
    if chat == NO_CHAT:
        return chat
    return f"{chat} (template sha256 {digest[:12]}...)" if digest else chat


def _chat_sha256(manifest: Mapping[str, Any], cell: Mapping[str, Any]) -> str | None:
    """The digest of the chat template the store recorded for the model's chat cells
    (``cube.harness.run_spec.cell_configs``), where they record one; None for a plain cell."""
    from cube.protocol.chat import MODEL_CHAT, NO_CHAT, split_context

    if split_context(str(cell["context"]))[1] == NO_CHAT:
        return None
    digests = {c.get("chat_template_sha256") for k, c in (manifest.get("cells") or {}).items()
               if k.startswith(f"{cell['model']}/") and c.get("chat_template") == MODEL_CHAT}
    digest = digests.pop() if len(digests) == 1 else None
    return digest if isinstance(digest, str) else None


def prompt_diff(a: ScoringProtocol, b: ScoringProtocol) -> list[str]:
    """Changed lines of the two full texts (placeholders, never item text), each JSON-quoted so
    that a space or a newline shows; [] where they are equal or one is unknown."""
    text_a, text_b = a.full_text(), b.full_text()
    if text_a is None or text_b is None or text_a == text_b:
        return []
    lines = difflib.unified_diff(text_a.splitlines(keepends=True), text_b.splitlines(keepends=True),
                                 "A", "B", n=0, lineterm="")
    return [line[0] + json.dumps(line[1:], ensure_ascii=False) if line[:1] in "+-" and line[:3] not in ("---", "+++")
            else line for line in lines if not line.startswith(("---", "+++"))]
