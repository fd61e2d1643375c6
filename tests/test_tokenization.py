from cube.tokenization import common_prefix_len, tokens_in_context
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
