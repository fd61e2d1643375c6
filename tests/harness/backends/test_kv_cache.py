"""``cube.harness.backends.kv_cache`` and the greedy loop built on it: rows that finish early are
dropped from the batch, and every row still generates exactly what it generates alone."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from cube.harness.backends.hf import HFBackend
from cube.harness.backends.kv_cache import preallocate
from cube.harness.backends.reference import ReferenceBackend
from cube.protocol.label_sets import LabelSet
from cube.protocol.prompts import Cell, render_prompt
from tests.harness.backends.conftest import LABEL_SETS

pytestmark = pytest.mark.registry


def test_rows_finishing_at_different_steps_each_equal_their_own_generation(model, tokenizer, items):
    prompts = [render_prompt(it, Cell(LabelSet("L1", LABEL_SETS["L1"]), "zh_cue", 0)).context for it in items[:6]]
    free = ReferenceBackend(model, tokenizer, progress=False).generate(prompts, max_new_tokens=12)
    # Stop tokens taken from two generations at different steps: rows end at different times.
    stop = frozenset({free[0].token_ids[2], free[3].token_ids[7]})
    want = ReferenceBackend(model, tokenizer, eos_ids=stop, progress=False).generate(prompts, max_new_tokens=12)
    lengths = sorted({len(w.token_ids) for w in want})
    assert len(lengths) >= 2 and lengths[-1] == 12  # some rows stop early, some run to the end
    got = HFBackend(model, tokenizer, eos_ids=stop, progress=False).generate(prompts, 12, batch_size=6)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]


def test_a_preallocated_cache_refuses_to_grow_past_its_capacity(model):
    ids = torch.tensor([[5, 6, 7]])
    with torch.inference_mode():
        out = model.base_model(input_ids=ids, use_cache=True)
        cache = preallocate(out.past_key_values, 1)
        model.base_model(input_ids=torch.tensor([[8]]), past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="capacity 4 exceeded: 5 positions"):
            model.base_model(input_ids=torch.tensor([[9]]), past_key_values=cache, use_cache=True)
