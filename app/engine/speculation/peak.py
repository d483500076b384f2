"""A greedy draft step's one pass over its row: the argmax, its softmax probability
(the draft's confidence) and the runner-up.

A greedy draft needs three figures per token, and each costs a pass over the whole
vocabulary when taken apart (an argmax, a compare to find the tokens near the top,
the indices of those): at 262k tokens that is most of a greedy round's host time.
``peak`` reads the row once (``row_grid.RowGrid``) and finds the rest from its column
maxima and the few columns that reach near the top:

- the argmax: the top value, then the lowest id holding it (as ``np.argmax``);
- the confidence: the logits within ``BAND`` nats of the top are summed exactly;
  each token below weighs under e^-8 of the top one, and their share is estimated
  from a strided sample of ``TAIL_SAMPLE`` logits (on Gemma 3's and SmolLM2's own rows,
  within 6% of the exact figure, half a percent typically). The figure only steers
  the draft's length (through acceptance learned per confidence band,
  ``acceptance.py``), never an acceptance rule, so it cannot change an output token;
- the runner-up: the best other value, then the lowest id holding it.

A flat row (the band reaching many columns), a short row or one without a finite
top falls back to ``sampling.near_top``, which is exact within 16 nats.
"""

from __future__ import annotations

import numpy as np

from app.engine.speculation.row_grid import RowGrid
from app.engine.speculation.sampling import near_top

BAND = 8.0           # nats below the top summed exactly
TAIL_SAMPLE = 2048   # logits of a row that estimate the share below the band
COLUMNS = 16384      # about this many columns: a band of a hundred tokens is a small gather


def peak(logits: np.ndarray) -> tuple[int, float, int | None]:
    """(argmax with ties to the lowest id, its softmax probability at temperature 1,
    the best other token with ties to the lowest id, or None when no other is possible)."""
    x = np.asarray(logits)
    if not RowGrid.fits(x):
        return _plain(x)
    row = RowGrid(x, COLUMNS)
    top = row.top
    if not np.isfinite(top):  # all masked, or a NaN: the plain passes say what
        return _plain(x)
    floor = top - BAND
    cols = np.flatnonzero(row.colmax > floor)
    if cols.size * row.fold * 8 > x.size:  # a flat row: most of it is near the top
        return _plain(x)
    ids, vals = row.above(floor, cols)
    token = int(ids[int(np.argmax(vals))])  # ids ascend: the first maximum is the lowest id
    total = float(np.exp(np.subtract(vals, top, dtype=np.float32)).sum(dtype=np.float64))
    sample = np.ascontiguousarray(x[::max(1, x.size // TAIL_SAMPLE)])
    tail = sample[sample <= floor]
    total += x.size / sample.size * float(np.exp(np.subtract(tail, top, dtype=np.float32)).sum(dtype=np.float64))
    return token, 1.0 / total, _second(row, token, ids, vals)


def _plain(x: np.ndarray) -> tuple[int, float, int | None]:
    token = int(np.argmax(x))
    prob, second = near_top(x, token, second=True)
    return token, prob, second


def _second(row: RowGrid, token: int, ids: np.ndarray, vals: np.ndarray) -> int | None:
    """The best token but ``token``, ties to the lowest id: from the band when it holds
    another, else from the column maxima with the token's own column read again."""
    if ids.size > 1:
        others = vals.copy()
        others[np.searchsorted(ids, token)] = -np.inf
        return int(ids[int(np.argmax(others))])
    # The token is alone in the band: the runner-up is further down, wherever it is.
    best = row.colmax
    if token < row.head:
        best = best.copy()
        column = row.grid[:, token % row.n].copy()
        column[token // row.n] = -np.inf
        best[token % row.n] = column.max()
    second = float(best.max())
    if row.rest.size:
        rest = row.rest.copy()
        if token >= row.head:
            rest[token - row.head] = -np.inf
        second = max(second, float(rest.max()))
    if not np.isfinite(second):
        return None
    found, _ = row.above(second, np.flatnonzero(best >= second), inclusive=True)
    return next((int(i) for i in found if i != token), None)  # ascending: ties to the lowest id
