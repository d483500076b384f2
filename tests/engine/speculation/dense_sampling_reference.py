"""Today's dense sampling code, as it was at 6158230 (before ``sparse_dist``): the
reference the sparse path must match bit for bit (tests/engine/speculation/test_sparse_dist.py).
Copied, not imported, so that it stays the landed behaviour whatever the engine becomes."""

from __future__ import annotations

import math

import numpy as np

from app.engine.types import SamplingConfig

_RESIDUAL_EPS = 1e-10
_TOP_P_PROBE = 64
_BLOCK = 256

def warp(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    """Return the float64 distribution to sample from: zero outside the kept set.

    Order as llama.cpp's default chain: top-k, top-p, min-p (all on the untempered
    softmax of the tokens still in play), then temperature over the survivors.
    As in llama.cpp, top-p's cumulative mass is renormalised over the top-k set.
    """
    x = np.asarray(logits)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {x.shape}")
    out = np.zeros(x.size, dtype=np.float64)
    if cfg.greedy:
        out[int(np.argmax(x))] = 1.0
        return out

    # Nothing below writes into vals, so the caller's logits are safe without a copy.
    vals = x if x.dtype.kind == "f" else x.astype(np.float32)
    ids: np.ndarray | None = None  # None: vals is the whole vocab, in id order
    if 0 < cfg.top_k < vals.size:
        ids = _top_n(vals, cfg.top_k)
        vals = vals[ids]

    vmax = float(vals.max())
    if not math.isfinite(vmax):
        raise ValueError("logits need a finite maximum to sample from")

    # Unnormalised untempered probabilities, kept for top-p's cumulative mass
    # (normalised over the set top-p sees: after top-k, before min-p).
    e: np.ndarray | None = None
    if cfg.top_p < 1.0 and vals.size > 1:
        e = _exp(vals, vmax)
        z_total = float(e.sum(dtype=np.float64))

    # top-p and min-p each keep a prefix of the same descending order, so they
    # commute: the O(V) min-p cut goes first and leaves top-p little to sort.
    if cfg.min_p > 0.0:
        # As llama.cpp: keep logit >= max_logit + log(min_p), i.e. p >= min_p * p_max.
        # min_p above 1 would keep nothing; llama.cpp keeps at least the top token.
        sel = np.flatnonzero(vals >= vmax + math.log(min(cfg.min_p, 1.0)))
        ids = sel if ids is None else ids[sel]
        vals = vals[sel]
        e = None if e is None else e[sel]

    if e is not None and vals.size > 1:
        n = _top_p_count(e, z_total, cfg.top_p)
        if n < vals.size:
            sel = _top_n(vals, n)
            ids = sel if ids is None else ids[sel]
            vals = vals[sel]
            e = e[sel]

    w = e if (e is not None and cfg.temperature == 1.0) else _exp(vals, vmax, cfg.temperature)
    total = float(w.sum(dtype=np.float64))  # >= 1: the max term is exp(0)
    if ids is None:
        np.divide(w, total, out=out, dtype=np.float64)
    else:
        out[ids] = w.astype(np.float64) / total
    return out


def _exp(vals: np.ndarray, vmax: float, temperature: float = 1.0) -> np.ndarray:
    """exp((vals - vmax) / temperature) in float32, in one fresh array.

    float32 exp is several times faster than float64 on a 50k vocab, and every
    full-vocab temporary costs page faults, so there is only one. The relative
    error (~1e-7) is far below anything sampling can see; llama.cpp's sampler is
    float32 throughout. Losslessness does not depend on it: it holds for whatever
    p and q are, as long as q is what the draft really sampled from.
    """
    t = np.subtract(vals, vmax, dtype=np.float32)  # <= 0, so exp cannot overflow
    if temperature != 1.0:
        t /= temperature
    return np.exp(t, out=t)


def _top_n(vals: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n largest values; ties at the cut go to the lowest positions."""
    if n >= vals.size:
        return np.arange(vals.size)
    cut = vals.size - n
    threshold = np.partition(vals, cut)[cut]  # the n-th largest value
    above = np.flatnonzero(vals > threshold)
    tied = np.flatnonzero(vals == threshold)[: n - above.size]
    return np.concatenate([above, tied])


def _top_p_count(e: np.ndarray, z_total: float, top_p: float) -> int:
    """Size of the smallest top set whose mass e / z_total reaches top_p, at least 1.

    Returns e.size when even all of e falls short (min-p already cut deeper).
    """
    probe = _TOP_P_PROBE
    while True:
        if probe * 4 >= e.size:  # a partition would cost about as much as the sort
            top = np.sort(e)[::-1]
        else:
            top = np.sort(np.partition(e, e.size - probe)[e.size - probe :])[::-1]
        mass = np.cumsum(top, dtype=np.float64) / z_total
        i = int(np.searchsorted(mass, top_p, side="left"))  # first i with mass[i] >= top_p
        if i < top.size:
            return i + 1
        if top.size == e.size:
            return e.size
        probe *= 8


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one index from probs (need not be normalised) with a single uniform."""
    w = np.asarray(probs, dtype=np.float64)
    if w.size <= _BLOCK:
        cdf = w.cumsum()
        _check_mass(float(cdf[-1]))
        return _inverse_cdf(w, cdf, rng.random() * float(cdf[-1]))
    # Two-level inverse CDF: a cumsum over a 50k vocab is slow (it is sequential),
    # block sums are not, and then only one block needs a running sum.
    starts = np.arange(0, w.size, _BLOCK)
    block_mass = np.add.reduceat(w, starts)
    block_cdf = block_mass.cumsum()
    _check_mass(float(block_cdf[-1]))
    u = rng.random() * float(block_cdf[-1])
    b = _inverse_cdf(block_mass, block_cdf, u)
    lo = int(starts[b])
    block = w[lo : lo + _BLOCK]
    # u >= block_cdf[b - 1] (searchsorted guarantees it), so the offset is >= 0.
    return lo + _inverse_cdf(block, block.cumsum(), u - (float(block_cdf[b - 1]) if b else 0.0))


def _check_mass(total: float) -> None:
    if not (total > 0.0 and math.isfinite(total)):
        raise ValueError("cannot sample from a distribution with no mass")


def _inverse_cdf(w: np.ndarray, cdf: np.ndarray, u: float) -> int:
    """Index i with cdf[i-1] <= u < cdf[i]: never a zero-weight index."""
    i = int(cdf.searchsorted(u, side="right"))  # side="right" skips flat stretches
    if i >= w.size:  # u rounded onto (or past) the total
        i = int(np.flatnonzero(w)[-1])
    return i


