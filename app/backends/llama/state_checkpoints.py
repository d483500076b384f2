"""Saved recurrent states along one sequence: the way back for a model whose memory
cannot cut a sequence short (docs/recurrent-models.md).

A recurrent or hybrid model's memory holds one state per sequence, the sum of every
token so far; llama.cpp cannot take the last few tokens out of it (only the few its
``n_rs_seq`` snapshots cover, on the architectures that have them). So the backend
saves the state now and then (``llama_state_seq_get_data_ext``), and a trim to an
earlier position restores the latest state saved at or before it and decodes the
tokens from there again.

This module only keeps the books (which positions, which to let go); the saving and
restoring are ``app.backends.llama.backend``'s. Two kinds of checkpoint:

- the **round's**: where a speculative round may roll back to (before a verification,
  at a draft round's start). One at a time: the next round's replaces it.
- **kept** ones along the conversation: before and after each prompt's long batch
  and every ``KEEP_EVERY`` tokens, so that a regenerate, an edit or a new turn that
  matches only part of the cache does not read the whole chat again. At most
  ``KEPT_CHECKPOINTS_MOST`` of them and ``KEPT_CHECKPOINT_BYTES`` together
  (``app/engine/gguf/memory_estimate.py`` counts them); past that the one whose loss
  leaves the smallest gap goes, so they stay spread over the conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.engine.gguf.memory_estimate import KEPT_CHECKPOINT_BYTES, KEPT_CHECKPOINTS_MOST

KEEP_EVERY = 512        # tokens between kept checkpoints while a conversation grows


@dataclass
class Checkpoint:
    pos: int     # the state after this many tokens
    data: Any    # what llama.cpp wrote (a ctypes buffer), handed back to restore it
    size: int    # its bytes


class Checkpoints:
    def __init__(self) -> None:
        self.kept: list[Checkpoint] = []   # ascending positions
        self.round: Checkpoint | None = None

    def latest_at_or_before(self, pos: int) -> Checkpoint | None:
        found = [c for c in (*self.kept, self.round) if c is not None and c.pos <= pos]
        return max(found, key=lambda c: c.pos, default=None)

    def has(self, pos: int) -> bool:
        return any(c is not None and c.pos == pos for c in (*self.kept, self.round))

    def last_kept(self) -> int:
        return self.kept[-1].pos if self.kept else 0

    def drop_after(self, pos: int) -> None:
        """Forget every state saved after ``pos``: the tokens it summed are going."""
        self.kept = [c for c in self.kept if c.pos <= pos]
        if self.round is not None and self.round.pos > pos:
            self.round = None

    def set_round(self, checkpoint: Checkpoint) -> None:
        self.round = checkpoint

    def keep(self, checkpoint: Checkpoint) -> None:
        self.kept = [c for c in self.kept if c.pos != checkpoint.pos]
        self.kept.append(checkpoint)
        self.kept.sort(key=lambda c: c.pos)
        most = max(1, min(KEPT_CHECKPOINTS_MOST, KEPT_CHECKPOINT_BYTES // max(checkpoint.size, 1)))
        while len(self.kept) > most:
            # Never the latest (the next trim most likely needs it); of the rest, the
            # one whose neighbours are closest together.
            gaps = [(self.kept[i + 1].pos - (self.kept[i - 1].pos if i else 0), i)
                    for i in range(len(self.kept) - 1)]
            del self.kept[min(gaps)[1]]

    def clear(self) -> None:
        self.kept, self.round = [], None

    def buffer_for(self, size: int) -> Any | None:
        """A buffer of ``size`` bytes to reuse for the round's next checkpoint (it
        replaces the current one), or None."""
        if self.round is not None and self.round.size == size and all(c is not self.round for c in self.kept):
            data, self.round = self.round.data, None
            return data
        return None
