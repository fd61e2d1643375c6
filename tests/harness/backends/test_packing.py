"""Packed rows see exactly what each sequence sees on its own: checked against the sequences.

The mask is derived from the tree's parent links; the check here is derived from the sequences
alone (a token at position p of sequence s may see the tokens of s before it, and nothing else).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from cube.harness.backends.packing import PackedRow, pack_rows, subtree_sizes
from cube.harness.backends.prefix_tree import build_tree


def random_sequences(rng: random.Random, n: int) -> list[tuple[int, ...]]:
    """Sequences with shared prefixes of every depth, as cells of items share theirs."""
    stems = [tuple(rng.randrange(50) for _ in range(rng.randint(1, 6))) for _ in range(4)]
    out = []
    for _ in range(n):
        seq = rng.choice(stems)
        for _ in range(rng.randint(0, 3)):
            seq = seq + tuple(rng.randrange(5) for _ in range(rng.randint(1, 3)))
        out.append(seq)
    return out


def token_owner(row: PackedRow, width: int) -> list[tuple[object, int] | None]:
    """(node, absolute position) of each slot of the row, None at padding."""
    out: list[tuple[object, int] | None] = [None] * width
    for node, offset in zip(row.nodes, row.offsets):
        for k in range(len(node)):
            out[offset + k] = (node, node.start + k)
    return out


def path_to(node) -> list:
    path = []
    while node is not None and len(node):
        path.append(node)
        node = node.parent
    return path


@pytest.mark.parametrize("seed", range(20))
def test_each_token_sees_exactly_its_own_sequence_before_it(seed):
    rng = random.Random(seed)
    root, _ = build_tree(random_sequences(rng, rng.randint(1, 12)))
    sizes, _ = subtree_sizes(root)
    rows = pack_rows(root.children, [None] * len(root.children), sizes, capacity=rng.randint(1, 30))
    for row in rows:
        width = row.length + rng.randint(0, 3)
        mask, owner = row.mask(width), token_owner(row, width)
        tokens, positions = row.tokens(width, pad_id=-7), row.positions(width)
        for i, here in enumerate(owner):
            if here is None:  # padding: itself only, so its row stays finite
                assert mask[i].tolist() == [j == i for j in range(width)]
                assert tokens[i] == -7
                continue
            node, position = here
            assert positions[i] == position and tokens[i] == node.path[position]
            ancestors = {id(n) for n in path_to(node)}
            want = [o is not None and id(o[0]) in ancestors and o[1] <= position for o in owner]
            assert mask[i].tolist() == want


def test_rows_hold_whole_units_of_one_parent_within_capacity():
    rng = random.Random(3)
    root, _ = build_tree(random_sequences(rng, 40))
    sizes, _ = subtree_sizes(root)
    units = list(root.children)
    parents = [k % 3 for k in range(len(units))]
    rows = pack_rows(units, parents, sizes, capacity=25)
    placed = [n for row in rows for n, up in zip(row.nodes, row.up) if up < 0]
    assert sorted(map(id, placed)) == sorted(map(id, units))  # every unit once
    for row in rows:
        unit_parents = {parents[[id(u) for u in units].index(id(n))] for n, up in zip(row.nodes, row.up) if up < 0}
        assert unit_parents == {row.parent_row}
        assert row.length == sum(len(n) for n in row.nodes)
        roots = sum(1 for up in row.up if up < 0)
        assert row.length <= 25 or roots == 1  # a unit larger than a row gets one alone


def test_subtree_sizes_count_every_token_once():
    rng = random.Random(5)
    root, _ = build_tree(random_sequences(rng, 30))
    sizes, ends = subtree_sizes(root)

    def walk_tokens(node):
        return len(node) + sum(walk_tokens(c) for c in node.children)

    def walk_end(node):
        return max([node.end] + [walk_end(c) for c in node.children])

    for node in root.children:
        assert sizes[id(node)] == walk_tokens(node)
        assert ends[id(node)] == walk_end(node)
    assert np.sum([sizes[id(c)] for c in root.children]) == sizes[id(root)]
