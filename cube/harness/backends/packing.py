"""Whole subtrees of the prefix tree packed into one row each, seen through a tree attention mask.

Why: run node by node, the prefix tree (``prefix_tree``) costs one forward per sibling batch, and
below an item's question those batches are tiny (a 2-token label suffix, four short cloze
options). Each forward's ~10 ops per layer end in a barrier of the torch thread pool, and on a busy
machine a barrier waits for a descheduled thread: the issue-24 measurement saw cube's full-protocol
run take 4.4x longer under a competing 2-thread job, against 1.6x for lm-eval's large padded
batches. Packed, an item's whole subtree (its question, every label set's options, cloze and its
option texts) is one row: each token attends to its own ancestors only, with its own position id,
so it computes exactly what the node-by-node run computes, with no KV copy per child and a handful
of large forwards per ``score`` call instead of hundreds of small ones. Forward tokens stay at the
prefix-tree minimum: every node's tokens are in exactly one row once.

Units that share a parent (the items under one subject's 5-shot header) are packed into the same
rows, first fit by decreasing size, so a row needs one copy of its parent's cache, and the rows'
padding is what is left of the longest row of a batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cube.harness.backends.prefix_tree import Segment


def subtree_sizes(root: Segment) -> tuple[dict[int, int], dict[int, int]]:
    """(tokens in each node's subtree, the largest ``end`` in it), keyed by ``id(node)``."""
    tokens: dict[int, int] = {}
    last: dict[int, int] = {}
    order, stack = [], [root]
    while stack:  # parents before children, then summed children first
        node = stack.pop()
        order.append(node)
        stack.extend(node.children)
    for node in reversed(order):
        tokens[id(node)] = len(node) + sum(tokens[id(c)] for c in node.children)
        last[id(node)] = max([node.end] + [last[id(c)] for c in node.children])
    return tokens, last


@dataclass
class PackedRow:
    """Units (whole subtrees) of one parent cache row, their nodes in depth-first order."""

    parent_row: int | None
    nodes: list[Segment] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # each node's first token in the row
    up: list[int] = field(default_factory=list)  # index in ``nodes`` of each node's parent, -1 at a unit
    length: int = 0

    def add(self, unit: Segment) -> None:
        stack = [(unit, -1)]
        while stack:
            node, parent = stack.pop()
            self.up.append(parent)
            self.nodes.append(node)
            self.offsets.append(self.length)
            self.length += len(node)
            here = len(self.nodes) - 1
            stack.extend((child, here) for child in reversed(node.children))

    def positions(self, width: int) -> np.ndarray:
        """Each token's position id (its place in its own sequence); 0 at the padding."""
        out = np.zeros(width, dtype=np.int64)
        for node, offset in zip(self.nodes, self.offsets):
            out[offset:offset + len(node)] = np.arange(node.start, node.end)
        return out

    def tokens(self, width: int, pad_id: int) -> np.ndarray:
        out = np.full(width, pad_id, dtype=np.int64)
        for node, offset in zip(self.nodes, self.offsets):
            out[offset:offset + len(node)] = node.tokens
        return out

    def mask(self, width: int) -> np.ndarray:
        """(width, width) bool: query i sees key j iff j's node is i's node or one of its ancestors
        in this row, and j is not after i. A padding position sees itself only, so it stays finite
        (a padded query with no key at all would turn to NaN, and NaN values leak through 0-weights)."""
        k = len(self.nodes)
        seen = np.zeros((k, k), dtype=bool)  # seen[a, b]: b is a or an ancestor of a
        for a in range(k):
            b = a
            while b >= 0:
                seen[a, b] = True
                b = self.up[b]
        owner = np.full(width, -1, dtype=np.int64)
        for index, (node, offset) in enumerate(zip(self.nodes, self.offsets)):
            owner[offset:offset + len(node)] = index
        real = owner >= 0
        out = seen[np.maximum(owner, 0)[:, None], np.maximum(owner, 0)[None, :]]
        out &= real[:, None] & real[None, :]
        out &= np.tril(np.ones((width, width), dtype=bool))  # an ancestor's tokens all come earlier
        pad = np.flatnonzero(~real)
        out[pad, pad] = True
        return out


def pack_rows(units: list[Segment], parent_rows: list[int | None], sizes: dict[int, int],
              capacity: int) -> list[PackedRow]:
    """Rows of at most ``capacity`` tokens (a unit larger than that gets a row of its own), units of
    one parent row only, first fit by decreasing size: near-equal rows, so little padding."""
    by_parent: dict[int | None, list[Segment]] = {}
    for unit, parent in zip(units, parent_rows):
        by_parent.setdefault(parent, []).append(unit)
    rows: list[PackedRow] = []
    for parent, group in by_parent.items():
        own: list[PackedRow] = []
        for unit in sorted(group, key=lambda u: sizes[id(u)], reverse=True):
            row = next((r for r in own if r.length + sizes[id(unit)] <= capacity), None)
            if row is None:
                row = PackedRow(parent)
                own.append(row)
            row.add(unit)
        rows.extend(own)
    return rows


__all__ = ["PackedRow", "pack_rows", "subtree_sizes"]
