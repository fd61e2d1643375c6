import pytest

from cube.errors import ConfigError
from cube.protocol.tokenization import common_prefix_len, tokens_in_context
from tests.synthetic import char_bpe


def test_common_prefix_len():
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


def test_continuation_is_what_follows_the_common_prefix():
    tok = char_bpe(["Q", ":", "A"])
    tic = tokens_in_context(tok, "Q:", "A")
    assert not tic.boundary_merge
    assert [tok.id_to_token(i) for i in tic.continuation_ids] == ["A"]


def test_boundary_merge_is_flagged_and_cut_at_the_common_prefix():
    # ":" + "A" merges into ":A", so the context's own last token changes.
    tok = char_bpe(["Q", ":", "A"], merges=[(":", "A")])
    tic = tokens_in_context(tok, "Q:", "A")
    assert tic.boundary_merge
    assert [tok.id_to_token(i) for i in tic.continuation_ids] == [":A"]
    # the naive cut len(tokenize(context)) would have returned nothing at all
    assert tic.full_ids[len(tic.context_ids):] == ()


def test_bos_does_not_change_the_continuation():
    plain, with_bos = char_bpe(["Q", ":", "A", "B"]), char_bpe(["Q", ":", "A", "B"], bos=True)
    a = tokens_in_context(plain, "Q:", "AB")
    b = tokens_in_context(with_bos, "Q:", "AB")
    assert b.full_ids[0] == 1 and a.full_ids[0] != 1
    assert a.continuation_ids == b.continuation_ids


@pytest.mark.registry
def test_separate_tokenization_keeps_the_prompts_space_and_never_merges(qwen3_tokenizer):
    """lm-evaluation-harness style: tokenize(context) + tokenize(label). 'Answer: ' + 'A' then
    scores the bare 'A' after a lone space token, where in context it is ' A' after 'Answer:'."""
    from cube.protocol.tokenization import continuation_tokenizer, encode_ids, tokens_in_context, tokens_separately

    tok = qwen3_tokenizer
    apart = tokens_separately(tok, "Answer: ", "A")
    together = tokens_in_context(tok, "Answer: ", "A")
    assert apart.full_ids == encode_ids(tok, "Answer: ") + encode_ids(tok, "A", add_special_tokens=False)
    assert apart.context_ids == encode_ids(tok, "Answer: ") and not apart.boundary_merge
    assert apart.continuation_ids == encode_ids(tok, "A", add_special_tokens=False)
    assert together.boundary_merge and together.continuation_ids != apart.continuation_ids
    assert continuation_tokenizer("separate") is tokens_separately
    with pytest.raises(ConfigError, match="unknown tokenization 'glued'"):
        continuation_tokenizer("glued")


def test_separate_tokenization_puts_no_bos_before_the_label():
    """A BOS model's prompt starts with BOS; the label tokenized apart must not get one too."""
    from cube.protocol.tokenization import encode_ids, tokens_separately

    tok = char_bpe(["Q", ":", " ", "A"], bos=True)
    apart = tokens_separately(tok, "Q: ", "A")
    assert apart.full_ids[0] == 1 and apart.full_ids.count(1) == 1
    assert apart.continuation_ids == encode_ids(tok, "A", add_special_tokens=False) == (tok.token_to_id("A"),)
