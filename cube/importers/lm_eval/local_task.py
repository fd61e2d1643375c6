"""A local lm-eval task over cube's items: lm-eval run on exactly the prompts cube scores.

The other direction of the importer: instead of reading what lm-eval scored, it writes a task
(``lm_eval --include_path FOLDER``) whose docs are cube's items in lm-eval's CMMLU fields and whose
``doc_to_text`` renders cube's zero-shot prompt byte for byte, so that lm-eval and cube score the
same bytes (``benchmarks/vs_lm_eval.py``, the committed ``data/imported`` runs). Apart from the
import because nothing in it reads a run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from cube.importers.lm_eval.matching import OPTION_FIELDS
from cube.protocol.items import Item
from cube.protocol.label_sets import LabelSet


# lm-eval's own CMMLU prompt (lm_eval/tasks/cmmlu/_default_template_yaml, 0.4.13); its
# target_delimiter is lm-eval's default, a space.
LM_EVAL_CMMLU_TEXT = "{{Question.strip()}}\nA. {{A}}\nB. {{B}}\nC. {{C}}\nD. {{D}}\n答案："


def cube_doc_to_text(label_set: LabelSet, context: str) -> str:
    """A jinja ``doc_to_text`` that renders cube's zero-shot prompt of a cell byte for byte."""
    from cube.protocol.prompts import answer_context, load_templates

    templates = load_templates()
    cue, _ = answer_context(templates, context)
    option = str(templates["option"])
    return (str(templates["header"]).format(subject="{{subject_zh}}")
            + str(templates["question"]).format(question="{{Question}}")
            + "".join(option.format(label=label, text="{{" + field + "}}")
                      for label, field in zip(label_set.labels, OPTION_FIELDS))
            + cue)


def write_local_task(folder: str | Path, task: str, items: Sequence[Item], doc_to_text: str,
                     labels: Sequence[str], target_delimiter: str | None) -> Path:
    """A local JSONL task for ``lm_eval --include_path FOLDER``: docs in lm-eval's CMMLU fields.

    The JSONL holds the items' text: it belongs in a scratch folder, never in a repository.
    ``target_delimiter=None`` leaves lm-eval's default (a space).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{task}.jsonl"
    docs = [{"Question": it.question, **dict(zip(OPTION_FIELDS, it.options)),
             "Answer": OPTION_FIELDS[it.answer], "subject_zh": it.subject_zh} for it in items]
    data.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    config = {
        "task": task, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test", "output_type": "multiple_choice", "doc_to_text": doc_to_text,
        "doc_to_choice": list(labels), "doc_to_target": "{{['A', 'B', 'C', 'D'].index(Answer)}}",
        "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}],
    }
    if target_delimiter is not None:
        config["target_delimiter"] = target_delimiter
    path = folder / f"{task}.yaml"
    path.write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")  # JSON is YAML
    return path
