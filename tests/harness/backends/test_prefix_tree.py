"""``cube.harness.backends.prefix_tree``: the radix tree holds exactly the prefix-tree minimum,
and every sequence can be read back off it, position by position."""

from __future__ import annotations

import random

from cube.harness.backends.base import prefix_tree_tokens
from cube.harness.backends.prefix_tree import build_tree, node_at, tree_tokens


def _random_sequences(seed: int) -> list[tuple[int, ...]]:
    """Shared headers, shared questions, diverging options, duplicates and strict prefixes."""
    rng = random.Random(seed)
    out = []
    for _ in range(rng.randint(1, 6)):
        header = tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 5)))
        for _ in range(rng.randint(1, 5)):
            question = header + tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 6)))
            for _ in range(rng.randint(1, 4)):
                out.append(question + tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 4))))
    return out


def test_the_tree_holds_the_naive_tries_token_count_and_every_sequence_reads_back():
    for seed in range(300):
        sequences = _random_sequences(seed)
        root, ends = build_tree(sequences)
        assert tree_tokens(root) == prefix_tree_tokens(sequences)  # the dict-of-dicts trie
        for seq in sequences:
            if not seq:
                continue
            end = ends[seq]
            assert end.end == len(seq)
            for position, token in enumerate(seq):
                node = node_at(end, position)
                assert node.start <= position < node.end and node.path[position] == token


def test_a_node_branches_only_where_sequences_differ():
    root, ends = build_tree([(1, 2, 3, 4), (1, 2, 3, 5), (1, 2), (7,)])
    top = sorted(root.children, key=lambda n: n.tokens)
    assert [n.tokens for n in top] == [(1, 2), (7,)]
    (shared,) = top[0].children
    assert shared.tokens == (3,) and sorted(c.tokens for c in shared.children) == [(4,), (5,)]
    assert ends[(1, 2)] is top[0]
