"""A tiny first-order Markov "model" implementing the backend protocol in numpy.

Used only where the exact target distribution must be known in closed form: the
joint-distribution test of the whole speculative loop at temperature > 0.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class MarkovBackend:
    keeps_states = False  # its cache is never copied out

    def __init__(self, logits: np.ndarray, n_ctx: int = 64) -> None:
        self.table = logits.astype(np.float32)  # row = previous token
        self.n_vocab = logits.shape[0]
        self.n_ctx = n_ctx
        self.bos_id = self.eos_id = -1
        self.add_bos = False
        self.eog_ids: frozenset[int] = frozenset()
        self.chat_template = None
        self.name = "markov"
        self._tokens: list[int] = []

    @property
    def tokens(self) -> list[int]:
        return self._tokens

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return [ord(c) % self.n_vocab for c in text]

    def token_bytes(self, token_id: int) -> bytes:
        return bytes([65 + token_id])

    def token_text(self, token_id: int) -> str:
        return chr(65 + token_id)

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int]) -> np.ndarray:
        tokens = list(tokens)
        assert len(self._tokens) + len(tokens) <= self.n_ctx
        self._tokens.extend(tokens)
        return np.stack([self.table[tokens[i]] for i in logits_at]) if len(logits_at) else \
            np.empty((0, self.n_vocab), dtype=np.float32)

    def trim(self, n_keep: int) -> None:
        self._tree = None
        del self._tokens[n_keep:]

    # A token tree: first-order, so each node's row is its own token's.
    tree_branches = 8
    _tree: list[int] | None = None

    def evaluate_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        assert self._tree is None, "a tree was evaluated and not kept"
        assert parents[0] == -1 and all(0 <= p < i for i, p in enumerate(parents) if i)
        leaves = set(range(len(tokens))) - set(parents)
        assert len(leaves) <= self.tree_branches
        assert len(self._tokens) + len(tokens) <= self.n_ctx
        self._tree, self._parents = list(tokens), list(parents)
        return np.stack([self.table[t] for t in tokens])

    def keep_branch(self, nodes: Sequence[int]) -> None:
        assert self._tree is not None and nodes[0] == 0
        assert all(self._parents[b] == a for a, b in zip(nodes, nodes[1:])), "not a path from the root"
        self._tokens.extend(self._tree[i] for i in nodes)
        self._tree = None

    def close(self) -> None:
        pass
