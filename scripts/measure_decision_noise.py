"""The precision's own noise on decisions (``cube.analysis.noise.DECISION_NOISE``).

The same requests (every 97th CMMLU test item, in L1_halfwidth and L4_circled with the Chinese cue,
and cloze) are scored on smollm2-135m-instruct twice in each precision: packed rows in batches of 16
(the default layout) and node by node one request at a time. Printed per precision: the largest
|change| of one option's score, of a request's margin (top minus runner-up), and the argmax flips.

    python scripts/measure_decision_noise.py N      # N items (3 requests each)

2026-12-02, this project's 2-core AVX2 CPU under load, N = 8 (24 requests): bfloat16 max |d score|
0.398, max |d margin| 0.454, 1 flip of 24; float32 3.05e-5, 3.24e-5, 0 flips. The maximum over a
larger sample can only grow: these are measured floors of the noise, not its supremum.
"""
import json
import sys

import numpy as np
import torch

from cube.harness.models import load_model
from cube.harness.backends.hf import HFBackend
from cube.harness.backends.base import ScoreRequest
from cube.protocol.items import load_cmmlu, find_benchmark_root
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell, render_prompt, cloze_prompt
torch.set_num_threads(1)
items = load_cmmlu(find_benchmark_root("cmmlu"))[::97][:int(sys.argv[1])]
reqs = []
for it in items:
    for ls in (("L1_halfwidth", ("A","B","C","D")), ("L4_circled", ("①","②","③","④"))):
        p = render_prompt(it, Cell(LabelSet(*ls), "zh_cue", 0))
        reqs.append(ScoreRequest(p.context, p.label_continuations, p.tokenization))
    c = cloze_prompt(it)
    reqs.append(ScoreRequest(c.context, c.continuations))
out = {}
for dtype in ("bfloat16", "float32"):
    model, tok = load_model("smollm2-135m-instruct", dtype)
    runs = []
    for pack, bs in ((512, 16), (0, 1)):
        got = HFBackend(model, tok, progress=False, pack_tokens=pack).score(reqs, batch_size=bs)
        runs.append([np.array([c.logprobs.sum() for c in r]) for r in got])
    ds, dm, flips = 0.0, 0.0, 0
    for a, b in zip(*runs):
        ds = max(ds, float(np.abs(a - b).max()))
        sa, sb = np.sort(a), np.sort(b)
        dm = max(dm, abs((sa[-1] - sa[-2]) - (sb[-1] - sb[-2])))
        flips += int(a.argmax() != b.argmax())
    out[dtype] = {"requests": len(reqs), "max_abs_score_delta": ds, "max_abs_margin_delta": dm, "flips": flips}
    print(dtype, out[dtype], flush=True)
print(json.dumps(out, default=float))
