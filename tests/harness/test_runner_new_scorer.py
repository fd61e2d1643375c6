"""Adding a scorer is one entry in the scorer table: a toy cloze scorer "M7" registered there
(and nowhere else) is offered by `cube run --help`, joins the schema's groups, and a real run of a
tiny random-weight Qwen3 (the real Qwen3 tokenizer, real CMMLU items) writes its records, which a
store read accepts.

The entry is added in a fresh interpreter before anything else of cube is imported, as an entry
written into ``cube/protocol/scorers.py`` would be: the schema's groups are read from the table
once, when ``cube.records.schema`` is first imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.registry

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json, sys
    from pathlib import Path

    import numpy as np

    from cube.protocol import scorers


    def score_m7(options):
        """M7 (a toy): the log-probability of each option's last token."""
        return scorers.decide(np.array([o.logprobs[-1] for o in options]),
                              scorers.tie_groups([tuple(o.token_ids.tolist()) for o in options]))


    scorers.SCORERS["M7"] = scorers.Scorer("M7", "cloze", ("M7",), "log p of the option's last token",
                                           score_m7, "cloze")

    import torch, transformers
    from cube.cli import build_parser
    from cube.config import load_config
    from cube.harness.backends.base import ScoreRequest
    from cube.harness.backends.hf import HFBackend
    from cube.harness.run_spec import RunSpec
    from cube.harness.runner import run
    from cube.protocol.items import load_cmmlu, stratified_sample
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import Cell, cloze_prompt
    from cube.records import schema
    from cube.records.store import read_records
    from cube.tokenizers.sources import resolve_tokenizer

    benchmarks, out = Path(sys.argv[1]), Path(sys.argv[2])
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    src = load_config("models")["families"]["qwen3"]["offline"]
    tok = resolve_tokenizer(src["spec"], src["sha256"])
    torch.manual_seed(1234)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
        tie_word_embeddings=True, initializer_range=0.2)).to(torch.float32).eval()
    items = tuple(stratified_sample(load_cmmlu(benchmarks / "cmmlu", subjects=["anatomy", "virology"]), 3, seed=0))
    backend = HFBackend(model, tok, progress=False)
    cells = (Cell(load_label_sets()["L1_halfwidth"], "zh_cue", 0),)
    run(backend, RunSpec(model="tiny", items=items, cells=cells, scorers=("M2", "M7"), shard_size=2),
        out, progress=False)
    table = read_records(out)
    rows = [r for r in table.to_pylist() if r["scorer"] == "M7"]
    # M7 by hand, from the backend's own log-probabilities of each option after the cloze prompt
    expected = {}
    for item in items:
        prompt = cloze_prompt(item)
        conts = backend.score([ScoreRequest(prompt.context, prompt.continuations)], 4)[0]
        expected[item.uid] = [float(c.logprobs[-1]) for c in conts]
    print(json.dumps({
        "help": run_help, "all": schema.ALL_SCORERS, "cloze": schema.CLOZE_SCORERS,
        "names": schema.SCORER_NAMES, "files": sorted(p.name for p in (out / "tiny").glob("*.parquet")),
        "m7": {r["uid"]: [r["scores"], r["pred"], list(r[k] for k in ("label_set", "context", "shots", "order"))]
               for r in rows},
        "expected": expected, "scorers": sorted(set(table.column("scorer").to_pylist())),
    }))
''')


def test_a_scorer_registered_in_the_table_reaches_the_help_the_schema_and_a_run(tmp_path, benchmarks_root):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(benchmarks_root), str(tmp_path / "store")],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert "M7" in " ".join(seen["help"].split())  # argparse wraps the help
    assert seen["all"] == ["M1-seq", "M1-strict", "M2", "M3", "M4", "M5", "M6", "M6-cot", "TF", "M7"]
    assert seen["cloze"] == ["M2", "M3", "M4", "M5", "M7"]
    assert "M7" in seen["names"]
    assert seen["scorers"] == ["M2", "M7"]  # the cloze pass feeds both; no other pass ran
    assert seen["files"] == ["cloze--cloze--00000.parquet", "cloze--cloze--00001.parquet"]
    assert sorted(seen["m7"]) == sorted(seen["expected"])
    for uid, (scores, pred, cell) in seen["m7"].items():
        # scored again alone: float32 and another batch, so equal to float32 noise, not bit for bit
        assert scores == pytest.approx(seen["expected"][uid], abs=1e-4)
        assert pred == max(range(len(scores)), key=lambda i: (scores[i], -i))
        assert cell == ["-", "cloze", 0, "original"]
