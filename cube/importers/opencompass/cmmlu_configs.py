"""OpenCompass's own CMMLU configs, from cube's side: to run both harnesses on the same bytes.

The other direction of the importer: ``run_config`` writes an OpenCompass config of its own CMMLU
config of a mode, narrowed to chosen test rows, so that OpenCompass scores exactly the items cube
scores; ``cmmlu_prompt`` renders the prompts those configs render, byte for byte, so that cube's
backend scores them too (``tests/importers/test_opencompass.py``, the committed ``data/imported``
run). Apart from the import because nothing in it reads a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cube.errors import HarnessImportError
from cube.importers.opencompass.matching import LABELS
from cube.importers.opencompass.reading import check_abbr
from cube.protocol.items import Item


# OpenCompass's own CMMLU configs of the two modes (opencompass/configs/datasets/cmmlu, 0.5.4):
# 5-shot (FixKRetriever over the dev split), "答案是: X" after the options.
CMMLU_CONFIGS = {"ppl": "cmmlu_ppl_8b9c76", "gen": "cmmlu_gen_c13365"}


def run_config(mode: str, cmmlu_dir: str | Path, model_dir: str | Path, rows: Mapping[str, int],
               model: str, max_out_len: int = 16, batch_size: int = 1) -> str:
    """An OpenCompass config (Python) of OpenCompass's own CMMLU ``mode`` config, its test rows
    narrowed to ``rows`` (subject -> row) with ``test_range``, and the HuggingFace base model class
    on a local folder (fp32, CPU, trust_remote_code off). It holds no benchmark text."""
    if mode not in CMMLU_CONFIGS:
        raise HarnessImportError(f"mode {mode!r}: give one of {', '.join(CMMLU_CONFIGS)}")
    check_abbr("model", model, Path("run_config"))
    return f'''# OpenCompass config written by cube.importers.opencompass.cmmlu_configs.run_config:
# OpenCompass's own CMMLU {mode} config ({CMMLU_CONFIGS[mode]}), test rows narrowed to {len(rows)} item(s).
from mmengine.config import read_base
from opencompass.models import HuggingFaceBaseModel

with read_base():
    from opencompass.configs.datasets.cmmlu.{CMMLU_CONFIGS[mode]} import cmmlu_datasets

CMMLU = {str(cmmlu_dir)!r}
MODEL = {str(model_dir)!r}
ROWS = {dict(sorted(rows.items()))!r}

datasets = [
    dict(d, path=CMMLU, reader_cfg=dict(d['reader_cfg'], test_range=f"[{{ROWS[d['name']]}}:{{ROWS[d['name']] + 1}}]"))
    for d in cmmlu_datasets if d['name'] in ROWS
]
models = [dict(
    type=HuggingFaceBaseModel, abbr={model!r}, path=MODEL,
    model_kwargs=dict(torch_dtype='torch.float32', device_map='cpu', trust_remote_code=False),
    tokenizer_kwargs=dict(trust_remote_code=False),
    max_out_len={int(max_out_len)}, batch_size={int(batch_size)}, run_cfg=dict(num_gpus=0),
)]
'''


def _cmmlu_question(item: Item) -> str:
    a, b, c, d = item.options
    return (f"以下是关于{item.subject_zh}的单项选择题，请直接给出正确答案的选项。\n题目：{item.question}\n"
            f"A. {a}\nB. {b}\nC. {c}\nD. {d}")


def cmmlu_prompt(item: Item, shots: Sequence[Item], label: str | None) -> str:
    """OpenCompass 0.5.4's rendered CMMLU prompt, byte for byte, for its HuggingFace base model
    (no meta template): ``label`` given, the PPL prompt of that label (cmmlu_ppl_8b9c76); None, the
    gen prompt (cmmlu_gen_c13365). The in-context examples (``shots``, the dev items in file order)
    end in three newlines each and two more stand before the question in PPL mode, one newline each
    in gen mode (OpenCompass renders the two templates apart); tested on a real run."""
    if label is None:
        ice = "".join(f"{_cmmlu_question(s)}\n答案是: {LABELS[s.answer]}\n" for s in shots)
        return f"{ice}{_cmmlu_question(item)}\n答案是: "
    ice = "".join(f"{_cmmlu_question(s)}\n答案是: {LABELS[s.answer]}\n\n\n" for s in shots)
    return f"{ice}\n\n{_cmmlu_question(item)}\n答案是: {label}"
