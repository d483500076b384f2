"""What the target says over one round's rows of logits: the choice at each position,
under a constraint when there is one, and the log-probabilities of what it emits.

One round verifies ``[last, d1 .. dk]``; row i is the target's distribution after
d_i (row 0: after the committed tokens). Plain decoding is the round with no drafts,
so plain and speculative replies take every token from the same function of the same
row: ``constrained_dist`` / ``constrained_argmax`` under a constraint, ``warp`` /
argmax without one. Rows are worked out lazily, in order, as the acceptance rule asks
for them (it stops at the first rejection): under a constraint each row needs its own
grammar state, the state after the drafts before it, and the constraint advances
along the accepted drafts only. The acceptance rules themselves are ``sampling``'s,
unchanged: they read these rows as sequences.

Log-probabilities (``TokenLogprobs``) come from the distribution the token was drawn
from: the warped (and masked) p when sampling; when greedy, whose warped distribution
is one-hot, the model's own softmax at temperature 1, masked by the constraint. Every
emitted token's row is in the batch, accepted drafts' included, so both modes report
the same figures from the same logits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
import numpy as np

from app.engine.speculation.constraints import Constraint, allowed_mask, constrained_argmax, constrained_dist
from app.engine.speculation.sampling import greedy_accept, log_sum_exp, rejection_accept, top_n, warp_dist
from app.engine.speculation.sparse_dist import Dist
from app.engine.types import SamplingConfig, TokenLogprobs

MAX_TOP_LOGPROBS = 20
# What a token of zero probability reports (JSON has no -inf; OpenAI uses this too).
NO_PROBABILITY = -9999.0


class TargetRows:
    """The target's choices over ``rows`` for ``draft``, advancing ``constraint`` (in
    place) along what is accepted. ``n_top``: None for no log-probabilities, else how
    many top tokens each emitted one reports.

    ``rows`` may be a view of the backend's logits (valid until its next step): it is
    read during the round (``accept``, then ``logprobs`` for the round's events) and
    dropped with this object; nothing made from it outlives the round as a view."""

    def __init__(self, rows: np.ndarray, draft: Sequence[int], q: Sequence[Dist],
                 sampling: SamplingConfig, constraint: Constraint | None = None,
                 n_top: int | None = None) -> None:
        # q: what each draft was sampled from (``Draft.q``; empty when greedy).
        self.rows, self.draft, self.q, self.sampling = rows, list(draft), q, sampling
        self.constraint, self.n_top = constraint, n_top
        self._advanced = 0  # drafts the constraint has taken
        self._dists: dict[int, Dist] = {}
        self._argmax: dict[int, int] = {}
        # row -> (logits, their log-sum-exp): greedy log-probabilities, for n_top
        self._lse: dict[int, tuple[np.ndarray, float]] = {}

    def accept(self, rng: np.random.Generator) -> tuple[int, int]:
        """(n_accepted, next token), by ``sampling``'s rules; the constraint then stands
        after every emitted token."""
        k = len(self.draft)
        if self.sampling.greedy:
            # Row by row: the rows after the first mismatch are never read.
            n, token = greedy_accept(self.draft, _Rows(k + 1, self._argmax_at))
        elif k == 0:
            n, token = 0, self._dist_at(0).sample(rng)
        else:
            n, token = rejection_accept(self.draft, self.q, _Rows(k + 1, self._dist_at), rng)
        if self.constraint is not None:
            self._reach(n)
            self.constraint.advance(token)
        return n, token

    def logprobs(self, position: int, token: int) -> TokenLogprobs | None:
        """The figures of ``token`` emitted at ``position`` (a row ``accept`` visited)."""
        if self.n_top is None:
            return None
        if self.sampling.greedy:
            x, lse = self._lse[position]
            value = float(x[token]) - lse
            ids = top_n(x, min(self.n_top, x.size)) if self.n_top else np.empty(0, np.int64)
            scores = x[ids].astype(np.float64) - lse
        else:
            dist = self._dists[position]
            p = dist.prob(token)
            value = math.log(p) if p > 0 else -math.inf
            # Sparse: the few kept candidates; dense: its top n_top (at most) by weight.
            ids = (dist.support() if dist.ids is not None or not self.n_top
                   else top_n(dist.w, min(self.n_top, dist.size)))
            with np.errstate(divide="ignore"):
                scores = np.log(dist.probs_at(ids))
        top: tuple[tuple[int, float], ...] = ()
        if self.n_top:
            order = np.lexsort((ids, -scores))[: self.n_top]  # most likely first, ties to the lower id
            top = tuple((int(ids[i]), _finite(float(scores[i]))) for i in order if np.isfinite(scores[i]))
        return TokenLogprobs(_finite(value), top)

    # -- rows, lazily and in order ---------------------------------------------------
    def _reach(self, i: int) -> None:
        """Advance the constraint by the drafts before row ``i`` (each one accepted)."""
        while self._advanced < i:
            self.constraint.advance(self.draft[self._advanced])
            self._advanced += 1

    def _argmax_at(self, i: int) -> int:
        if i not in self._argmax:
            row = self.rows[i]
            if self.constraint is None:
                self._argmax[i] = int(np.argmax(row))
            else:
                self._reach(i)
                self._argmax[i] = constrained_argmax(row, self.constraint)
            self._note_logprobs(i)
        return self._argmax[i]

    def _dist_at(self, i: int) -> Dist:
        if i not in self._dists:
            if self.constraint is None:
                self._dists[i] = warp_dist(self.rows[i], self.sampling)
            else:
                self._reach(i)
                self._dists[i] = constrained_dist(self.rows[i], self.sampling, self.constraint)
        return self._dists[i]

    def _note_logprobs(self, i: int) -> None:
        """Greedy, while the constraint stands at row ``i``: what the row's
        log-probabilities need (sampled, the row's ``Dist`` has them)."""
        if self.n_top is None or i in self._lse:
            return
        x = self.rows[i]
        if self.constraint is not None:
            x = np.where(allowed_mask(self.constraint, x.size), x, -np.inf).astype(np.float32)
        self._lse[i] = (x, log_sum_exp(x))


def log_softmax(x: np.ndarray) -> np.ndarray:
    """The dense float64 log-softmax (tests' reference)."""
    x = np.asarray(x, dtype=np.float64)
    top = float(x.max())
    return x - (top + math.log(float(np.exp(x - top).sum())))


def _finite(value: float) -> float:
    return value if math.isfinite(value) else NO_PROBABILITY


def row_argmax(rows: np.ndarray) -> Sequence[int]:
    """Each row's argmax, worked out when asked for (an acceptance walk reads few)."""
    cache: dict[int, int] = {}

    def at(i: int) -> int:
        if i not in cache:
            cache[i] = int(np.argmax(rows[i]))
        return cache[i]

    return _Rows(len(rows), at)


class _Rows(Sequence):
    """Row i on demand: the acceptance rules read a round's rows as a sequence."""

    def __init__(self, n: int, at) -> None:
        self._n, self._at = n, at

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice) or not -self._n <= i < self._n:
            raise IndexError(i)
        return self._at(i % self._n)
