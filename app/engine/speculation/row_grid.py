"""A row of logits read as a grid, so that one pass finds where its top is.

A row of V logits is seen as ``fold`` × ``n`` (row r, column c holds token r·n + c;
the few tokens past ``fold`` · ``n`` are the ``rest``). One max over the grid's rows
gives each column's maximum, and from those ``n`` maxima alone:

- the row's maximum is theirs (and the rest's);
- every token above a cut lives in a column whose maximum is above it, so the tokens
  near the top are found by reading those few columns again, not the row;
- the k-th largest column maximum is a lower bound on the row's k-th largest value
  (k tokens, one per column, reach it), so the top k lie in the columns at or above it.

That is one pass over the vocabulary where an argmax, a compare and an index search
would be three (``peak.py``; ``sampling.top_n``).
"""

from __future__ import annotations

import numpy as np

GRID_FROM = 8192  # shorter rows take the plain passes


class RowGrid:
    """A contiguous float32 row and its column maxima (``colmax``); ``top`` is the row's
    maximum (NaN if it holds one)."""

    def __init__(self, x: np.ndarray, columns: int) -> None:
        self.x = x
        self.fold = max(2, x.size // columns)
        self.n = x.size // self.fold
        self.head = self.n * self.fold
        self.grid = x[:self.head].reshape(self.fold, self.n)
        self.colmax = self.grid.max(axis=0)  # the one pass over the row
        self.rest = x[self.head:]            # fewer than ``fold`` tokens past the grid
        top = self.colmax.max()
        self.top = float(np.max([top, self.rest.max()]) if self.rest.size else top)  # a NaN stays one

    @staticmethod
    def fits(x: np.ndarray) -> bool:
        return x.ndim == 1 and x.size >= GRID_FROM and x.dtype == np.float32 and x.flags.c_contiguous

    def above(self, floor: float, cols: np.ndarray | None = None, *, inclusive: bool = False
              ) -> tuple[np.ndarray, np.ndarray]:
        """The ids (ascending) and logits of every token above ``floor`` (or at it, with
        ``inclusive``); ``cols``: the columns to read (default: those whose max reaches it)."""
        above = np.greater_equal if inclusive else np.greater
        if cols is None:
            cols = np.flatnonzero(above(self.colmax, floor))
        block = self.grid[:, cols]  # fold × len(cols): a small gather
        rows, which = np.nonzero(above(block, floor))
        ids, vals = rows * self.n + cols[which], block[rows, which]
        if self.rest.size:
            extra = np.flatnonzero(above(self.rest, floor))
            ids, vals = np.concatenate([ids, self.head + extra]), np.concatenate([vals, self.rest[extra]])
        order = np.argsort(ids, kind="stable")
        return ids[order], vals[order]
