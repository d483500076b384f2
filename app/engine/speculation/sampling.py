"""Token sampling and speculative acceptance (docs/ARCHITECTURE.md, "The speculative round", step 3).

Pure numpy. ``warp_dist`` turns logits into the distribution a token is drawn from
(a ``Dist``: the kept tokens only, ``sparse_dist.py``),
mirroring llama.cpp's default sampler chain; ``greedy_accept`` and
``rejection_accept`` decide how much of a draft the target keeps.

Ties are broken towards the lower token id everywhere (argmax, top-k, top-p), so
the same logits always give the same kept set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from app.engine.speculation.row_grid import RowGrid
from app.engine.speculation.sparse_dist import Dist, sample_dense
from app.engine.types import SamplingConfig

# First guess at how many top tokens hold top_p of the mass; grown x8 on a miss.
# LLM distributions are peaked, so one partition of the vocab usually suffices.
_TOP_P_PROBE = 64


def warp(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    """``warp_dist`` as a dense float64 vector (tests, and callers that want arrays)."""
    return warp_dist(logits, cfg).dense()


def warp_dist(logits: np.ndarray, cfg: SamplingConfig) -> Dist:
    """The distribution to sample from, over the kept set only (a ``Dist``).

    Order as llama.cpp's default chain: top-k, top-p, min-p (all on the untempered
    softmax of the tokens still in play), then temperature over the survivors.
    As in llama.cpp, top-p's cumulative mass is renormalised over the top-k set.
    The result is dense (float32 weights over the vocabulary) only where nothing
    bounds the kept set: no top-k, min-p or top-p that cuts anything.
    """
    x = np.asarray(logits)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {x.shape}")
    if cfg.greedy:
        return Dist.point(int(np.argmax(x)), x.size)

    # Nothing below writes into vals, so the caller's logits (a view of llama.cpp's
    # buffer, even) are safe without a copy.
    vals = x if x.dtype.kind == "f" else x.astype(np.float32)
    ids: np.ndarray | None = None  # None: vals is the whole vocab, in id order
    if 0 < cfg.top_k < vals.size:
        ids = top_n(vals, cfg.top_k)
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
            sel = top_n(vals, n)
            ids = sel if ids is None else ids[sel]
            vals = vals[sel]
            e = e[sel]

    w = e if (e is not None and cfg.temperature == 1.0) else _exp(vals, vmax, cfg.temperature)
    total = float(w.sum(dtype=np.float64))  # >= 1: the max term is exp(0)
    if ids is None:
        return Dist(None, w, total, x.size)
    # The dense code's very values (float64(w) / total), with the ids sorted for lookups.
    order = np.argsort(ids)
    return Dist(ids[order], w[order].astype(np.float64) / total, 1.0, x.size)


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


def top_n(vals: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n largest values; ties at the cut go to the lowest positions.
    The order: those above the cut ascending, then the tied ones ascending.

    A partition of a whole vocabulary costs milliseconds (2 ms at 262k). On a long
    row the n-th largest of its column maxima (``row_grid.RowGrid``: one pass) is a
    lower bound on the n-th largest value, so every value of the answer, ties
    included, lies in the columns at or above it: the exact answer is found among
    those few. A bound that leaves too many (a row of many ties) falls back to the
    whole array.
    """
    size = vals.size
    if n >= size:
        return np.arange(size)
    if RowGrid.fits(vals) and n * 8 <= _TOP_N_COLUMNS:
        row = RowGrid(vals, _TOP_N_COLUMNS)
        cut = np.partition(row.colmax, row.n - n)[row.n - n]
        if np.isfinite(cut):
            ids, candidates = row.above(float(cut), inclusive=True)
            if ids.size <= size // 4:
                return ids[_top_n_all(candidates, n)]
    return _top_n_all(vals, n)


_TOP_N_COLUMNS = 4096  # a partition of 4,096 column maxima, then n columns read again
# Rows this long have near_top find their band with one compare pass.
_SUBSAMPLE_FROM = 8192


def _top_n_all(vals: np.ndarray, n: int) -> np.ndarray:
    """``top_n`` by a partition of the whole of ``vals``; all of them when n covers it,
    still in ``top_n``'s order (a candidate set exactly n long must sum as the
    vocabulary's top n would)."""
    if n >= vals.size:
        threshold = vals.min() if vals.size else 0.0
    else:
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
            top = np.sort(e[top_n(e, probe)])[::-1]
        mass = np.cumsum(top, dtype=np.float64) / z_total
        i = int(np.searchsorted(mass, top_p, side="left"))  # first i with mass[i] >= top_p
        if i < top.size:
            return i + 1
        if top.size == e.size:
            return e.size
        probe *= 8


def sample(probs, rng: np.random.Generator) -> int:
    """Draw one index from probs (a ``Dist``, or an array that need not be normalised)
    with a single uniform."""
    if isinstance(probs, Dist):
        return probs.sample(rng)
    return sample_dense(probs, rng)


def near_top(logits: np.ndarray, token: int, second: bool = False) -> tuple[float, int | None]:
    """The softmax probability (temperature 1) of ``token``, the argmax of ``logits``, and
    with ``second`` the best other token (ties to the lower id; None when nothing else
    is possible), without a softmax over the vocabulary where the row is peaked.

    Logits within ``_BAND`` of the top are summed exactly; each one below weighs less
    than e^-_BAND (1e-7) of the top token, and their sum (at most 3% of the whole at a
    262k vocabulary, far less in a real row) is estimated from a strided sample of the
    row (``_TAIL_SAMPLE`` values). Where most of the row lies in the band
    (a flat row) it is one exact float32 pass over the row. The figure steers the draft's
    length and is reported with a correction; it never enters an acceptance rule."""
    x = np.asarray(logits)
    top = float(x[token])
    if not math.isfinite(top):
        return 0.0, None
    floor = top - _BAND
    band = sparse_nonzero(x > floor) if x.size >= _SUBSAMPLE_FROM else None
    if band is None or band.size * 8 > x.size:
        e = np.subtract(x, top, dtype=np.float32)
        total = float(np.exp(e, out=e).sum(dtype=np.float64))
        return 1.0 / total, (runner_up(x, token) if second else None)
    stride = x.size // _TAIL_SAMPLE
    return _band_prob(x, top, band, x[band], x[::stride], token, second)


def _band_prob(x: np.ndarray, top: float, band: np.ndarray, vals: np.ndarray, sample: np.ndarray,
               token: int, second: bool) -> tuple[float, int | None]:
    """``near_top``'s figures from the band (ids ascending, their logits) and the row's
    strided sample (for the tail below the band)."""
    total = float(np.exp(np.subtract(vals, top, dtype=np.float32)).sum(dtype=np.float64))
    tail = sample[sample <= top - _BAND]
    total += x.size / sample.size * float(np.exp(np.subtract(tail, top, dtype=np.float32)).sum(dtype=np.float64))
    if not second:
        return 1.0 / total, None
    if band.size > 1:
        others = vals.copy()
        others[np.searchsorted(band, token)] = -np.inf
        return 1.0 / total, int(band[int(np.argmax(others))])
    return 1.0 / total, runner_up(x, token)


_BAND = 16.0
_TAIL_SAMPLE = 1024  # values of a row that estimate the tail's (at most 3%) share


def sparse_nonzero(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)`` for a 1-D bool mask with few True entries, several times
    faster on a vocabulary: the mask is read as 64-bit words, and only the words with a
    True in them are looked into."""
    n = mask.size - mask.size % 8
    if n < 64 or not mask.flags.c_contiguous:
        return np.flatnonzero(mask)
    words = np.flatnonzero(mask[:n].view(np.uint64) != 0)
    if words.size * 2 > n // 8:  # dense after all
        return np.flatnonzero(mask)
    spots = (words[:, None] * 8 + _EIGHT).ravel()
    found = spots[mask[spots]]
    if n < mask.size:
        found = np.concatenate([found, n + np.flatnonzero(mask[n:])])
    return found


_EIGHT = np.arange(8, dtype=np.int64)


def runner_up(logits: np.ndarray, first: int) -> int | None:
    """The best token but ``first`` (None when nothing else is possible); one pass."""
    x = np.asarray(logits)
    best = None
    lo = int(np.argmax(x[:first])) if first > 0 else None
    hi = first + 1 + int(np.argmax(x[first + 1:])) if first + 1 < x.size else None
    for i in (lo, hi):  # lo first: a tie goes to the lower id
        if i is not None and np.isfinite(x[i]) and (best is None or x[i] > x[best]):
            best = i
    return best


def softmax_prob(logits: np.ndarray, token: int) -> float:
    """The softmax probability (temperature 1) of any ``token``: exp(x_t - logsumexp)."""
    x = np.asarray(logits)
    top = int(np.argmax(x))
    prob, _ = near_top(x, top)
    if token == top or prob == 0.0:
        return prob
    return prob * math.exp(float(x[token]) - float(x[top]))


def log_sum_exp(logits: np.ndarray) -> float:
    """log(sum(exp(logits))) with the band of ``near_top`` (-inf for an all -inf row)."""
    x = np.asarray(logits)
    top = int(np.argmax(x))
    prob, _ = near_top(x, top)
    return float(x[top]) - math.log(prob) if prob > 0.0 else -math.inf


def greedy_accept(draft_tokens: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Keep drafts while they match the target's argmax; then emit the target's token.

    target_argmax[i] is the target's choice after the prefix ending in draft i-1, so
    it has one more entry than draft_tokens (the last is the bonus token).
    """
    if len(target_argmax) != len(draft_tokens) + 1:
        raise ValueError("target_argmax needs len(draft_tokens) + 1 entries")
    n = 0
    while n < len(draft_tokens) and int(draft_tokens[n]) == int(target_argmax[n]):
        n += 1
    return n, int(target_argmax[n])


def rejection_accept(
    draft_tokens: Sequence[int],
    q: Sequence,
    p: Sequence,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

    q[i]: the warped draft distribution d_i was sampled from (k entries; one-hot for a
    deterministic drafter). p[i]: the warped target distribution at the same position
    (k + 1 entries; the last is for the bonus token). Each a ``Dist`` or a dense array
    of probabilities. Returns (n_accepted, next_token); the emitted tokens are
    draft_tokens[:n_accepted] + [next_token].
    """
    k = len(draft_tokens)
    if len(q) < k or len(p) < k + 1:
        raise ValueError(f"need {k} rows of q and {k + 1} rows of p, got {len(q)} and {len(p)}")
    for i, d in enumerate(draft_tokens):
        p_i, q_i = Dist.of(p[i]), Dist.of(q[i])
        p_d, q_d = p_i.prob(d), q_i.prob(d)
        # Accept d ~ q with prob min(1, p(d)/q(d)); on rejection draw from
        # norm(max(0, p - q)). P(accept and x) = q(x) min(1, p(x)/q(x)) = min(p, q)(x);
        # P(reject) = sum max(0, q - p) = sum max(0, p - q), the residual's own
        # normaliser, so P(x) = min(p, q)(x) + max(0, p - q)(x) = p(x): exactly the target.
        # Written as u*q < p so that q(d) == 0 needs no division: a draft q could
        # not have produced is kept iff the target allows it (p(d) > 0), and one
        # with p(d) == 0 is always rejected. For one-hot q this is "accept with
        # prob p(d)", and the residual below is p with d removed.
        if rng.random() * q_d < p_d:
            continue
        residual = p_i.minus(q_i, d)
        return i, (p_i if residual is None else residual).sample(rng)  # a draw normalises
    return k, Dist.of(p[k]).sample(rng)
