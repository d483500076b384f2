"""The llama.cpp backend's token trees: one batch over several sequences, then exactly one
sequence of the right length, holding what a line of the kept tokens would have held."""

from __future__ import annotations

import llama_cpp as ll
import numpy as np
import pytest

from app.backends.llama.backend_error import BackendError
from app.engine.gguf.context_shape import TREE_BRANCHES
from app.engine.prompting.chat import build_messages, chat_tokens

#          root  a    b    c   a'   b'   a'->x
TOKENS = [None, 100, 200, 300, 500, 600, 700]
PARENTS = [-1, 0, 1, 2, 0, 1, 4]


def _sequences(backend):
    return [ll.llama_memory_seq_pos_max(backend._memory, s) for s in range(TREE_BRANCHES)]


@pytest.mark.parametrize("kept", [[0], [0, 1, 2, 3], [0, 1, 2], [0, 4], [0, 4, 6], [0, 1, 5]])
def test_a_kept_branch_leaves_one_sequence_as_a_line_would(q41_target, kept):
    backend = q41_target
    prompt = chat_tokens(backend, build_messages([("user", "Why is the sky blue?")]))
    backend.trim(0)
    backend.evaluate(prompt[:-1], [])
    n = len(backend.tokens)
    tokens = [prompt[-1], *TOKENS[1:]]
    rows = backend.evaluate_tree(tokens, PARENTS)
    assert rows.shape == (len(tokens), backend.n_vocab)
    assert backend.tokens == prompt[:-1]  # unchanged until a branch is kept
    backend.keep_branch(kept)
    path = [tokens[i] for i in kept]
    assert backend.tokens == prompt[:-1] + path
    positions = _sequences(backend)
    assert all(p == -1 for p in positions[1:]), "every other branch is gone"
    # Sequence 0 holds the kept path, but a branch off the first chain is re-fed with the next batch.
    first_chain = kept == list(range(len(kept)))
    assert positions[0] + 1 + backend._uncached == len(backend.tokens) and (backend._uncached == 0) == first_chain
    after = backend.evaluate([400, 401], [0, 1])
    assert _sequences(backend)[0] == n + len(kept) + 1
    backend.trim(n)
    line = backend.evaluate(path + [400, 401], range(len(path) + 2))
    # Batch-invariant logits (Q4_1 with flash attention): equal, bit for bit.
    assert np.array_equal(after, line[-2:])
    assert np.array_equal(rows[kept], line[:len(kept)])


def test_bad_trees_are_refused_and_an_unkept_tree_is_dropped_by_trim(q41_target):
    backend = q41_target
    backend.trim(0)
    backend.evaluate([1, 2, 3], [])
    with pytest.raises(ValueError):
        backend.evaluate_tree([5, 6], [-1, 1])  # a parent after its child
    with pytest.raises(ValueError):
        backend.evaluate_tree([5] * (TREE_BRANCHES + 2), [-1] + [0] * (TREE_BRANCHES + 1))  # too many leaves
    with pytest.raises(BackendError):
        backend.keep_branch([0])  # nothing evaluated
    backend.evaluate_tree([5, 6, 7], [-1, 0, 0])
    with pytest.raises(BackendError):
        backend.evaluate_tree([5], [-1])  # the last tree was not kept
    backend.trim(3)
    assert backend.tokens == [1, 2, 3] and _sequences(backend) == [2] + [-1] * (TREE_BRANCHES - 1)
    backend.trim(0)
