"""The hook through which a drafter that reads its target is told what the target read.

Some drafters read more of the target than its tokens: an MTP head reads the target's
last hidden row at each position (``mtp_head.py``), an EAGLE-3 drafter the inputs of
three of its layers (``eagle_head.py``). llama.cpp's speculative API has a ``process``
step for this: after each target batch, the drafter is told what the target read. Here
that step is ``BatchListener.target_read``, and ``LlamaBackend`` calls it (one listener
at a time, ``LlamaBackend.listen``) after every change to its sequence:

- each decode: a prompt's chunks, a verification, a kept branch read again in order,
  what a rollback decodes again;
- a token tree's kept branch (``keep_branch``): the kept nodes, at the positions they now
  hold, from the tree's decode;
- a trim, as a batch of no tokens: the sequence now ends at its ``start``.

The listener keeps whatever it needs; the target keeps none of it. The rows a batch made
are the listener's to ask for (``LlamaBackend.hidden_rows``, ``layer_input_rows``) while
it is told, before the target's next decode overwrites them. A listener that keeps rows
hands them out and takes them back for a chat's saved state (``app/backends/llama/
cache_image.py``), since the target's cache state alone does not hold them.

The batch says positions and tokens, nothing about what a listener reads, so rows of
another kind (an image's) or a drafter that only follows the target's cache need no
change to the hook.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence

import numpy as np


class TargetBatch(NamedTuple):
    """Positions ``start``, ``start + 1`` ... of the target's sequence now hold ``tokens``.

    ``outputs`` says which rows of the target's last decode (of ``decoded`` rows) those
    positions' rows are: a slice for a line (the rows as they are, no copy), the kept
    nodes' indices for a tree's branch. A batch of no tokens is a trim: the sequence
    ends at ``start``, and what a listener kept of later positions no longer holds."""

    start: int
    tokens: Sequence[int]
    outputs: slice | list[int]
    decoded: int

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)

    def pick(self, rows: np.ndarray) -> np.ndarray:
        """This batch's rows of ``rows`` (all the last decode's): a view for a line."""
        return rows[self.outputs]

    @staticmethod
    def trim(end: int) -> TargetBatch:
        return TargetBatch(end, (), slice(0, 0), 0)

    @staticmethod
    def line(start: int, tokens: Sequence[int], first: int = 0, decoded: int | None = None) -> TargetBatch:
        """``tokens`` at ``start`` on, their rows the last decode's from ``first`` on."""
        n = len(tokens)
        return TargetBatch(start, tokens, slice(first, first + n), first + n if decoded is None else decoded)


class BatchListener(Protocol):
    """Told of every change to the target's sequence (see the module's docstring)."""

    def target_read(self, batch: TargetBatch) -> None:
        """The target's sequence changed as ``batch`` says; its rows can be asked of the
        target until the target decodes again."""

    @property
    def row_width(self) -> int | None:
        """The width of the rows it keeps by position (None: it keeps none)."""

    def rows_copy(self) -> tuple[np.ndarray, np.ndarray] | None:
        """What it keeps, copied out (rows, and which positions are known), for a chat's
        saved state; None where it keeps nothing."""

    def restore_rows(self, saved: tuple[np.ndarray, np.ndarray]) -> None:
        """Put back what ``rows_copy`` gave: the target's sequence is again what it was."""
