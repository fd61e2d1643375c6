"""The prefix tree of everything one ``score`` call must run, as runs of tokens (a radix tree).

The cells of one item share the header and the question (every label set, cloze, the judgement
statements), items of one subject share the header, and a 5-shot prompt shares its five examples
with every item of its subject. A backend that runs each node of this tree once, on a copy of its
parent's KV cache, runs exactly the prefix-tree minimum of forward tokens
(``base.prefix_tree_minimum``), however the requests were split into cells.

Built from the sorted sequences and their common prefixes in one pass (the way a suffix tree is
built from a sorted suffix array), so no per-token trie is ever held.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cube.harness.backends.base import RequestPlan
from cube.protocol.tokenization import common_prefix_len


@dataclass(eq=False)
class Segment:
    """The tokens ``path[start:end]`` of every sequence through this node; its children go on."""

    path: tuple[int, ...]  # one sequence through the node (the node's tokens are a slice of it)
    start: int
    end: int
    parent: Segment | None = None
    children: list[Segment] = field(default_factory=list)
    scored: list[int] = field(default_factory=list)  # absolute positions whose hidden state is read
    hidden: object = None  # a backend's hidden states at ``scored``, once the node has run

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.path[self.start:self.end]

    def __len__(self) -> int:
        return self.end - self.start


def build_tree(sequences: list[tuple[int, ...]]) -> tuple[Segment, dict[tuple[int, ...], Segment]]:
    """(a root of depth 0 with no tokens, each sequence -> the node that ends exactly where it ends).

    Every non-empty input sequence ends at a node boundary, so a sequence that is a prefix of
    another is a node of its own with the longer one below it.
    """
    root = Segment((), 0, 0)
    ends: dict[tuple[int, ...], Segment] = {}
    stack = [root]
    previous: tuple[int, ...] = ()
    for seq in sorted({s for s in sequences if s}):
        shared = common_prefix_len(previous, seq)
        popped = None
        while stack[-1].end > shared:
            popped = stack.pop()
        if stack[-1].end < shared:  # the popped node runs past the branch point: split it there
            parent = stack[-1]
            mid = Segment(popped.path, parent.end, shared, parent)
            parent.children[parent.children.index(popped)] = mid
            popped.start, popped.parent = shared, mid
            mid.children.append(popped)
            stack.append(mid)
        leaf = Segment(seq, stack[-1].end, len(seq), stack[-1])
        stack[-1].children.append(leaf)
        stack.append(leaf)
        ends[seq] = leaf
        previous = seq
    return root, ends


def node_at(end: Segment, position: int) -> Segment:
    """The node on the path ending at ``end`` that holds absolute ``position``."""
    node = end
    while node.start > position:
        node = node.parent  # type: ignore[assignment]
    return node


def scored_positions(plan: RequestPlan, j: int) -> tuple[tuple[int, ...], range]:
    """The sequence continuation ``j`` runs (its full tokens but the last) and the positions whose
    hidden states predict its tokens (the one before each of them)."""
    cont = plan.continuations[j]
    n = len(cont.continuation_ids)
    return cont.full_ids[:-1], range(cont.prefix_len - 1, cont.prefix_len - 1 + n)


def plan_tree(plans: list[RequestPlan]) -> tuple[Segment, list[list[list[tuple[Segment, int]]]]]:
    """The tree of ``plans`` and, per plan and continuation, the (node, position) of each scored
    token's predicting hidden state; each node lists its scored positions (``Segment.scored``)."""
    sequences = []
    for plan in plans:
        sequences.append(plan.shared_ids)
        sequences.extend(scored_positions(plan, j)[0] for j in range(len(plan.continuations)))
    root, ends = build_tree(sequences)
    where: list[list[list[tuple[Segment, int]]]] = []
    for plan in plans:
        per_plan = []
        for j in range(len(plan.continuations)):
            seq, positions = scored_positions(plan, j)
            end = ends[seq]
            per_plan.append([(node_at(end, p), p) for p in positions])
        where.append(per_plan)
    seen: dict[int, set[int]] = {}
    for per_plan in where:
        for per_cont in per_plan:
            for node, p in per_cont:
                if p not in seen.setdefault(id(node), set()):
                    seen[id(node)].add(p)
                    node.scored.append(p)
    return root, where


def tree_tokens(root: Segment) -> int:
    """Tokens the tree holds: the forward tokens of running each node once."""
    total, stack = 0, list(root.children)
    while stack:
        node = stack.pop()
        total += len(node)
        stack.extend(node.children)
    return total


__all__ = ["Segment", "build_tree", "node_at", "plan_tree", "scored_positions", "tree_tokens"]
