"""A round's guesses as a tree, and how the target accepts a path through it
(docs/ARCHITECTURE.md, "The speculative round"; ``tree_round.py`` builds the tree).

Node 0 is the root: the last committed token, which the target has not cached yet.
Every other node is a guess that follows its parent; a parent comes before its
children, and a node's children are judged in the order they were added. The target
evaluates every node in one batch (``TreeBackend.evaluate_tree``), its row i being
the target's distribution after the path to node i.

Acceptance walks down from the root:
- greedy: go to the child whose token is the target's argmax; none: emit the argmax;
- sampled: recursive rejection sampling over the siblings (SpecInfer: Miao et al.,
  "SpecInfer: Accelerating Generative LLM Serving with Tree-based Speculative
  Inference and Verification", 2023, ASPLOS 2024): child i is kept with probability min(1, p_i(x_i) / q_i(x_i)); on rejection
  p_{i+1} = norm(max(0, p_i - q_i)) and the next sibling is judged against it; when
  every sibling is rejected the token is drawn from what is left. ``q_i`` is the
  distribution sibling i was drawn from *given the siblings before it*: q itself for
  a draw with replacement, q without the earlier siblings' tokens for a draw without
  replacement, one-hot for a deterministic guess (a copy, a top-k candidate). With
  that q_i, each step is an ordinary rejection step whose target is p_i, so by
  induction from the last sibling back the emitted token is distributed as p.

The three cases of q_i:
- i.i.d. draws from q (SpecInfer's multi-step sampling): q_i = q;
- draws without replacement (the draft model's second draw, so no sibling is wasted on
  a repeat): q_i = q without the earlier siblings' tokens, renormalised (as in Jeon et
  al., "Recursive Speculative Decoding", 2024);
- deterministic guesses (a copy, the greedy runner-up, a top-k candidate): q_i is
  one-hot, so the rule keeps x_i with probability p_i(x_i) and the residual is p_i
  without it.
Judging deterministic top-k branches by the draft's own q, as llama.cpp's
``examples/speculative`` does, is biased; so is judging draws without replacement by q.
tests/engine/speculation/test_token_tree.py shows all three exact (chi-square over 60,000 trees)
and both mistakes caught. Whether a sibling exists may depend on the siblings drawn
before it and on the draft's probabilities, never on the target: that keeps the
argument intact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from app.engine.speculation.sparse_dist import Dist


@dataclass
class TokenTree:
    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    # Per node (sampled decoding only): the distribution it was drawn from given its
    # earlier siblings; None is one-hot at its own token (a deterministic guess).
    q: list[Dist | None] = field(default_factory=lambda: [None])
    probs: list[float] = field(default_factory=lambda: [1.0])  # the drafter's probability of each
    depths: list[int] = field(default_factory=lambda: [0])
    _children: list[list[int]] = field(default_factory=lambda: [[]])

    @classmethod
    def rooted_at(cls, last: int) -> TokenTree:
        return cls(tokens=[int(last)])

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, parent: int, token: int, prob: float = 1.0, q: Dist | np.ndarray | None = None) -> int:
        """A guess after node ``parent``, judged after its existing siblings; its index."""
        if not 0 <= parent < len(self.tokens):
            raise ValueError(f"no node {parent} to hang a guess on")
        node = len(self.tokens)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.q.append(q)
        self.probs.append(float(prob))
        self.depths.append(self.depths[parent] + 1)
        self._children.append([])
        self._children[parent].append(node)
        return node

    def add_path(self, parent: int, tokens: Sequence[int]) -> list[int]:
        """Deterministic guesses (one-hot q) after ``parent``, merged with the children
        already there: a prefix another guess shares is one node (a trie), so two copies
        that agree for a while and then differ fork where they differ. Only a fork's new
        node is a new sibling, judged after the old ones, which one-hot proposals allow."""
        nodes, node = [], parent
        for token in tokens:
            same = next((c for c in self._children[node] if self.tokens[c] == token and self.q[c] is None), None)
            node = same if same is not None else self.add(node, token)
            nodes.append(node)
        return nodes

    def children(self, node: int) -> list[int]:
        return self._children[node]

    @property
    def leaves(self) -> list[int]:
        return [n for n in range(len(self.tokens)) if not self._children[n]]

    @property
    def depth(self) -> int:
        return max(self.depths)

    def path_to(self, node: int) -> list[int]:
        """The nodes from the root to ``node``, both included."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def first_chain(self, node: int = 0) -> list[int]:
        """From ``node`` (excluded) down the first child each time: the guess a straight
        line of drafts would have made."""
        chain = []
        while self._children[node]:
            node = self._children[node][0]
            chain.append(node)
        return chain


def accept_greedy(tree: TokenTree, argmax: Sequence[int]) -> tuple[list[int], int]:
    """The path of nodes the target's argmax follows (from the root) and the token it
    writes after it. ``argmax[i]``: the target's choice after node i."""
    node, path = 0, [0]
    while True:
        want = int(argmax[node])
        child = next((c for c in tree.children(node) if tree.tokens[c] == want), None)
        if child is None:
            return path, want
        path.append(child)
        node = child


def accept_sampled(tree: TokenTree, target_p: Callable[[int], Dist | np.ndarray],
                   rng: np.random.Generator) -> tuple[list[int], int]:
    """Recursive rejection sampling down the tree (SpecInfer's rule, see the module's
    docstring). ``target_p(i)``: the target's warped distribution after node i (asked
    for only along the walk). Returns the accepted path (from the root) and the next
    token; every emitted token is distributed exactly as the target alone would draw it.
    Distributions are ``Dist``s (dense arrays are taken too): a residual lives on the
    target's kept candidates, never on the vocabulary."""
    node, path = 0, [0]
    while True:
        p = Dist.of(target_p(node))
        kept = None
        for child in tree.children(node):
            x, q = tree.tokens[child], tree.q[child]
            q = None if q is None else Dist.of(q)
            q_x = 1.0 if q is None else q.prob(x)
            if rng.random() * q_x < p.prob(x):  # min(1, p/q) with no division (see rejection_accept)
                kept = child
                break
            residual = p.minus(q, x)
            if residual is None:
                # p_i and q_i agree up to rounding, so a rejection was (nearly) impossible:
                # there is no residual shape to speak of, and p_i itself stands.
                return path, p.sample(rng)
            p = residual
        if kept is None:
            return path, p.sample(rng)
        path.append(kept)
        node = kept


def without(q: Dist | np.ndarray, tokens: Sequence[int]) -> Dist | None:
    """q with ``tokens`` removed and renormalised: the distribution of a draw without
    replacement after those; None when nothing is left."""
    rest = Dist.of(q).without(tokens)
    return None if rest is None else rest.normalised()
