"""A distribution over token ids that stores only where it has mass.

Sampling's warpers (top-k, top-p, min-p) keep a few dozen tokens of a vocabulary of
50k-260k, and a deterministic guess (a copy, a lookahead n-gram) is one token. Every
operation the speculative round needs -- the probability of a token, a draw, the
residual max(0, p - q) after a rejection, q without the siblings already drawn -- then
works on those candidates, not on the vocabulary (docs/host-costs.md).

Invariants of a ``Dist``:
- ``size`` is the vocabulary size; the distribution is over ids 0 .. size-1.
- ``ids`` is None (dense: ``w`` has one weight per id, in id order) or a sorted,
  duplicate-free int64 array of ids, ``w`` holding one weight per entry.
- ``w`` >= 0 and ``total`` = the sum of ``w`` > 0 (a float64 sum); the probability of
  id i is ``w[i] / total``, and 0 for an id outside ``ids``. Sparse weights are
  float64 (there are few); dense ones are float32 (``warp_dist``'s exponentials,
  when nothing bounds the kept set).
- A ``Dist`` is never changed after it is made; operations return new ones.

The probabilities are the very float64 values the dense code computed (``w`` as
float64, divided by ``total``), so a sparse and a dense path give the same
distribution bit for bit. Every draw takes exactly one uniform from ``rng``, so a
seed still fixes a reply.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

# A residual with this little mass is rounding (p and q equal up to float error):
# its shape is noise, so the caller samples from p instead (sampling.rejection_accept).
RESIDUAL_EPS = 1e-10

# Block size of a dense draw's two-level inverse CDF.
_BLOCK = 256


class Dist:
    __slots__ = ("ids", "w", "total", "size")

    def __init__(self, ids: np.ndarray | None, w: np.ndarray, total: float, size: int) -> None:
        self.ids, self.w, self.total, self.size = ids, w, float(total), int(size)

    # -- making one -------------------------------------------------------------
    @classmethod
    def point(cls, token: int, size: int) -> Dist:
        """All mass on ``token``: a deterministic guess's q, a greedy choice."""
        return cls(np.array([int(token)], dtype=np.int64), np.ones(1), 1.0, size)

    @classmethod
    def of(cls, probs) -> Dist:
        """``probs`` as a Dist: a Dist stays itself; a dense array of probabilities (need
        not be normalised: tests and callers that still think in arrays) becomes a dense one."""
        if isinstance(probs, Dist):
            return probs
        w = np.asarray(probs, dtype=np.float64)
        return cls(None, w, 1.0, w.size)

    # -- reading it --------------------------------------------------------------
    def prob(self, token: int) -> float:
        if self.ids is None:
            return float(self.w[token]) / self.total
        i = int(np.searchsorted(self.ids, token))
        if i < self.ids.size and self.ids[i] == token:
            return float(self.w[i]) / self.total
        return 0.0

    def probs_at(self, ids: np.ndarray) -> np.ndarray:
        """float64 probabilities of ``ids`` (any order)."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.ids is None:
            return self.w[ids].astype(np.float64) / self.total
        pos = np.searchsorted(self.ids, ids)
        pos[pos >= self.ids.size] = 0
        hit = self.ids[pos] == ids
        return np.where(hit, self.w[pos], 0.0) / self.total

    def support(self) -> np.ndarray:
        """The ids with mass, ascending."""
        if self.ids is None:
            return np.flatnonzero(self.w)
        return self.ids[self.w > 0]

    def dense(self) -> np.ndarray:
        """The float64 probability vector (tests, and code that still wants arrays)."""
        out = np.zeros(self.size, dtype=np.float64)
        if self.ids is None:
            np.divide(self.w, self.total, out=out, dtype=np.float64)
        else:
            out[self.ids] = self.w / self.total
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.dense()
        return out if dtype is None else out.astype(dtype)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        n = "dense" if self.ids is None else f"{self.ids.size} ids"
        return f"Dist({n} of {self.size}, total={self.total:.6g})"

    # -- drawing -----------------------------------------------------------------
    def sample(self, rng) -> int:
        """One id, with one uniform from ``rng``."""
        if self.ids is None:
            return sample_dense(self.w, rng)
        cdf = np.cumsum(self.w)
        _check_mass(float(cdf[-1]))
        return int(self.ids[_inverse_cdf(self.w, cdf, rng.random() * float(cdf[-1]))])

    # -- what a rejection leaves -------------------------------------------------
    def minus(self, q: Dist | None, token: int) -> Dist | None:
        """The residual max(0, p - q), unnormalised (``total`` is its mass), where q is
        what ``token`` was drawn from (None: one-hot at ``token``). None when its mass
        is rounding (<= RESIDUAL_EPS). p - q > 0 only where p > 0, so the residual lives
        on p's support: the union of the two supports is never built."""
        if q is None:
            return self.without((token,))
        if q.ids is not None and q.ids.size == 1:  # one-hot: p without its token
            return self.without((int(q.ids[0]),))
        if self.ids is None:
            # Dense p (nothing bounded the set): float32 weights, touched at q's support only.
            qids = q.support()
            r = self.w.copy()
            r[qids] = np.maximum(self.w[qids] - q.probs_at(qids) * self.total, 0.0)
            mass = float(r.sum(dtype=np.float64))
            return Dist(None, r, mass, self.size) if mass / self.total > RESIDUAL_EPS else None
        r = np.maximum(self.w / self.total - q.probs_at(self.ids), 0.0)
        return _sparse_or_none(self.ids, r, self.size)

    def without(self, tokens: Iterable[int]) -> Dist | None:
        """This distribution with ``tokens`` removed (unnormalised: a draw without
        replacement after them); None when nothing is left."""
        drop = np.fromiter((int(t) for t in tokens), dtype=np.int64)
        if self.ids is None:
            r = self.w.copy()
            r[drop] = 0
            mass = float(r.sum(dtype=np.float64))
            return Dist(None, r, mass, self.size) if mass / self.total > RESIDUAL_EPS else None
        keep = ~np.isin(self.ids, drop)
        return _sparse_or_none(self.ids[keep], self.w[keep] / self.total, self.size)

    def keep(self, mask: np.ndarray) -> Dist:
        """Only the support's ids where ``mask`` (one bool per ``support()`` id), renormalised."""
        ids = self.support()[mask]
        w = self.probs_at(ids)
        return Dist(ids, w / w.sum(), 1.0, self.size)

    def normalised(self) -> Dist:
        """The same distribution with ``total`` 1 (its weights are then its probabilities)."""
        if self.total == 1.0:
            return self
        if self.ids is None:
            return Dist(None, self.w.astype(np.float64) / self.total, 1.0, self.size)
        w = self.w / self.total
        return Dist(self.ids, w, 1.0, self.size)


def _sparse_or_none(ids: np.ndarray, w: np.ndarray, size: int) -> Dist | None:
    mass = float(w.sum())
    return Dist(ids, w, mass, size) if mass > RESIDUAL_EPS else None


def sample_dense(probs: np.ndarray, rng) -> int:
    """Draw one index from ``probs`` (need not be normalised; float32 or float64, no
    copy of it) with a single uniform. Two-level inverse CDF: a cumsum over a whole
    vocabulary is slow (it is sequential), block sums are not, and then only one
    block needs a running sum."""
    w = np.asarray(probs)
    if w.size <= _BLOCK:
        cdf = w.cumsum(dtype=np.float64)
        _check_mass(float(cdf[-1]))
        return _inverse_cdf(w, cdf, rng.random() * float(cdf[-1]))
    starts = np.arange(0, w.size, _BLOCK)
    block_mass = np.add.reduceat(w, starts, dtype=np.float64)
    block_cdf = block_mass.cumsum()
    _check_mass(float(block_cdf[-1]))
    u = rng.random() * float(block_cdf[-1])
    b = _inverse_cdf(block_mass, block_cdf, u)
    lo = int(starts[b])
    block = w[lo: lo + _BLOCK]
    # u >= block_cdf[b - 1] (searchsorted guarantees it), so the offset is >= 0.
    return lo + _inverse_cdf(block, block.cumsum(dtype=np.float64), u - (float(block_cdf[b - 1]) if b else 0.0))


def _check_mass(total: float) -> None:
    if not (total > 0.0 and math.isfinite(total)):
        raise ValueError("cannot sample from a distribution with no mass")


def _inverse_cdf(w: np.ndarray, cdf: np.ndarray, u: float) -> int:
    """Index i with cdf[i-1] <= u < cdf[i]: never a zero-weight index."""
    i = int(cdf.searchsorted(u, side="right"))  # side="right" skips flat stretches
    if i >= w.size:  # u rounded onto (or past) the total
        i = int(np.flatnonzero(w)[-1])
    return i
