"""The OpenCompass importer's contract (``cube.importers.contract``): ``cube import opencompass``
and ``cube explain`` call it.

``read`` finds the runs of a folder and what they say of the benchmark, model and tokenizer;
``describe`` tells the protocol of one stored cell from the manifest metadata an import wrote
(the dumped template, how PPL tokenizes, the audit's verdict, the exemplars, the chat form and
precision); ``IMPORTER`` is the entry ``cube.importers.registry`` lists. Apart from the import's
steps because it is the one face the rest of cube sees: the commands know this module, never the
steps behind it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cube.importers.contract import (
    EXEMPLAR_SLOT,
    EXEMPLARS_ANSWER,
    EXEMPLARS_EXPLANATION,
    HarnessImporter,
    RunsRead,
    ScoringProtocol,
    dtype_name,
    exemplars_of,
    extractor_of,
    one_benchmark,
)
from cube.importers.opencompass.reading import find_runs, model_path, read_run
from cube.importers.opencompass.records import import_runs
from cube.importers.opencompass.report import format_report, report_json


def read(folder: Path, benchmark: str | None = None) -> RunsRead:
    """Every run at or below ``folder``; the benchmark is the datasets' own (``benchmark`` unused:
    OpenCompass's config names its dataset class)."""
    runs = tuple(read_run(path) for path in find_runs(folder))
    chosen = one_benchmark({d.benchmark for run in runs for d in run.datasets})
    return RunsRead(runs, chosen, runs[0].model, model_path(runs[0]) or None,
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
