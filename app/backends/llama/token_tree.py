"""How a token tree sits in llama.cpp's cache: one sequence per leaf, each node on the
sequences of the leaves below it, so that attention along each sequence sees exactly
the node's ancestors (``LlamaBackend.evaluate_tree``).
"""

from __future__ import annotations


def leaf_sequences(parents: list[int]) -> list[list[int]]:
    """Per node, the sequences it belongs to: one per leaf below it. The leaf reached by
    first children from the root is sequence 0, so a tree that is a chain is one sequence."""
    n = len(parents)
    has_child = [False] * n
    for p in parents[1:]:
        has_child[p] = True
    first_leaf = 0
    while True:
        child = next((i for i in range(first_leaf + 1, n) if parents[i] == first_leaf), None)
        if child is None:
            break
        first_leaf = child
    leaves = [first_leaf] + [i for i in range(n) if not has_child[i] and i != first_leaf]
    seqs: list[list[int]] = [[] for _ in range(n)]
    for seq, leaf in enumerate(leaves):
        node = leaf
        while node >= 0:
            seqs[node].append(seq)
            node = parents[node]
    return seqs