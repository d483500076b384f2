"""The protocol the engine drives. ``app/backends/llama/backend.py`` implements it.

A backend is one loaded model with one KV cache holding one sequence. It remembers
which tokens that cache holds (``tokens``) so the engine can reuse a common prefix
and roll back rejected drafts with ``trim``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


class ModelBackend(Protocol):
    n_vocab: int
    n_ctx: int
    bos_id: int
    eos_id: int
    add_bos: bool
    eog_ids: frozenset[int]        # every end-of-generation token (EOS, EOT, ...)
    chat_template: str | None
    name: str
    # The cache can be copied out as a ``CacheImage`` and put back (``KeepsStates``): what
    # the keepers of the target's states (app/session/kept_states.py) and ``tandem serve``'s
    # pauses (app/server/interleave.py) ask of a target. False: they leave its cache alone.
    keeps_states: bool

    @property
    def tokens(self) -> list[int]:
        """The tokens whose keys and values the cache holds, in order."""

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 character)."""

    def token_text(self, token_id: int) -> str:
        """The special-token-aware text of one token, for templates (e.g. '<|im_end|>')."""

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` to the cache in one batch.

        Returns float32 logits of shape (len(logits_at), n_vocab), one row per
        index into ``tokens``; logits are computed only at those indices. The array
        is the caller's (see ``LendingBackend`` for one that is not).
        """

    def trim(self, n_keep: int) -> None:
        """Drop every cached token from position ``n_keep`` on: exactly, whatever the
        model's memory (a recurrent one restores a saved state and decodes again,
        app/backends/llama/backend.py), or raise EngineError."""

    def close(self) -> None: ...


class RollbackBackend(ModelBackend, Protocol):
    """A backend whose way back costs something (optional: a recurrent model's memory).
    The engine says where it may roll back to when the backend cannot see it: a draft
    model's round, whose single-token steps a trim may take back."""

    memory_note: str  # what its memory means for speculation, one line ("" for attention)

    def rollback_point(self) -> None:
        """A later ``trim`` may come back to the cache's end as it is now."""


class TreeBackend(ModelBackend, Protocol):
    """A backend that verifies a token tree in one batch (optional: the engine makes
    tree rounds only on backends that have this; app/engine/speculation/token_tree.py)."""

    tree_branches: int  # the most leaves a tree may have (llama.cpp: sequences in the context)

    def evaluate_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Evaluate a tree after the cached tokens in one batch: node 0 (``parents[0]``
        is -1) follows the cache, node i follows node ``parents[i]`` (an earlier node).
        Returns float32 logits of shape (len(tokens), n_vocab), row i after the path
        to node i. ``tokens`` is unchanged until ``keep_branch``, which must come next."""

    def keep_branch(self, nodes: Sequence[int]) -> None:
        """Keep the path ``nodes`` (node 0, a child of it, a child of that ...) of the
        tree just evaluated as the cache's continuation, and drop every other node:
        the cache holds one sequence again."""


class ThreadedBackend(ModelBackend, Protocol):
    """A backend on CPU threads whose count can change between steps (optional: the
    engine adapts threads only on backends that have this; app/engine/speculation/thread_policy.py)."""

    threads: int              # the count the next step runs with
    adaptive_threads: bool    # the user left the count to the engine (threads setting 0)

    def set_threads(self, n: int) -> None: ...


class LendingBackend(ModelBackend, Protocol):
    """A backend that can lend its logits instead of copying them (optional: the engine
    borrows only from backends with ``lends_logits``; see ``borrow_rows``).

    ``evaluate(tokens, logits_at, borrow=True)`` (and ``evaluate_tree(..., borrow=True)``
    for a TreeBackend) may return a view of the backend's own buffer: valid until the
    backend's next step, which overwrites it. Whoever borrows reads it and lets it go;
    nothing that outlives the step may keep it or anything that is a view of it."""

    lends_logits: bool

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int], borrow: bool = False) -> np.ndarray: ...


def borrow_rows(backend: ModelBackend, tokens: Sequence[int], logits_at: Sequence[int]) -> np.ndarray:
    """``backend.evaluate``, borrowing the rows where the backend lends them: valid
    until its next step (``LendingBackend``)."""
    if getattr(backend, "lends_logits", False):
        return backend.evaluate(tokens, logits_at, borrow=True)
    return backend.evaluate(tokens, logits_at)


def borrow_tree(backend: TreeBackend, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
    """``backend.evaluate_tree``, borrowing as ``borrow_rows`` does."""
    if getattr(backend, "lends_logits", False):
        return backend.evaluate_tree(tokens, parents, borrow=True)
    return backend.evaluate_tree(tokens, parents)


@dataclass(frozen=True)
class CacheImage:
    """What a backend's cache holds, as plain data that can be kept in memory, go to a
    file and come back (``app/session/kept_states.py``): its tokens, llama.cpp's sequence
    state, the rows an MTP head reads (rows, known) if it has one, and what the state only
    fits (``identity``: the model file, context size, flash attention, llama.cpp's version)."""

    tokens: list[int]
    state: bytes | bytearray  # a bytearray where the backend wrote it in place (no copy)
    identity: dict
    rows: tuple[np.ndarray, np.ndarray] | None = None


class KeepsStates(ModelBackend, Protocol):
    """A backend whose ``keeps_states`` is True: its cache can be saved as a ``CacheImage``
    and put back."""

    cache_identity: dict

    def cache_image(self) -> CacheImage: ...

    def load_cache_image(self, image: CacheImage) -> None:
        """Make the cache what ``image`` held; raises where llama.cpp refuses it."""
