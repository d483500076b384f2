"""Constraints on sampling: a grammar or a JSON schema, and the reply still lossless.

A ``Constraint`` says which tokens may come next (a grammar, a JSON schema) and moves
on as tokens are committed. The engine applies it to the target's *warped*
distribution in one function, ``constrained_dist`` (``constrained_argmax`` when
greedy), used alike by plain decoding and by speculative verification, so both
modes sample from the very same masked distribution. The draft model drafts under
its own fork of the constraint, so it rarely proposes what the target cannot accept.

A draft the grammar forbids has p = 0 at its row: greedy cannot match it and the
rejection rule rejects it; the engine also cuts a draft (copied ones too) before its
first refused token (``drafters.constrained_draft``), since nothing after it could be
kept. How each row gets its own grammar state: ``target_rows.py``.

Cheap where exact: only the warped support is checked (top-k, top-p, min-p keep it
small); greedy checks the top token, then the top 64, then 1024 (``_ARGMAX_PROBES``),
and the whole vocabulary only when none passes; a top-k / min-p fallback stops as soon
as every token it could keep is checked. Temperature or top-p alone needs the allowed
set's whole mass: a full-vocabulary check (docs/performance.md, "Grammar cost").

Never an abort: llama.cpp throws through its C API on a token its grammar refuses, so
``advance`` checks first and raises ``ConstraintError``.

This module is pure numpy; ``app/backends/llama/grammar.py`` implements the protocol with
llama.cpp's grammar sampler, used only as an oracle (candidates in, refused ones marked
-inf), and turns JSON schemas (bounded) and tool lists into its GBNF.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from app.engine.errors import EngineError
from app.engine.speculation.sampling import warp_dist
from app.engine.speculation.sparse_dist import Dist
from app.engine.types import SamplingConfig

# Candidates tried before the whole vocabulary when looking for the best allowed
# token: a grammar usually allows the model's favourite or one close behind it.
_ARGMAX_PROBES = (1, 64, 1024)


class ConstraintError(EngineError):
    """The constraint allows no token the model can write here."""


class Constraint(Protocol):
    """Which token may come next, in the state reached by the tokens advanced so far."""

    n_vocab: int

    def allows(self, tokens: np.ndarray) -> np.ndarray:
        """One bool per entry of ``tokens`` (int32 ids): may it come next?"""

    def advance(self, token: int) -> None:
        """Commit ``token``, which ``allows`` must allow (ConstraintError otherwise)."""

    def fork(self) -> "Constraint":
        """An independent copy of the current state (for drafting ahead)."""

    def reset(self) -> None:
        """Back to the start state."""

    def close(self) -> None: ...


def allowed_mask(constraint: Constraint, n_vocab: int) -> np.ndarray:
    """The full-vocabulary mask of the current state (the costly call: every token)."""
    mask = np.zeros(n_vocab, dtype=bool)
    m = min(n_vocab, constraint.n_vocab)
    mask[:m] = constraint.allows(np.arange(m, dtype=np.int32))
    return mask


def constrained_argmax(logits: np.ndarray, constraint: Constraint) -> int:
    """The best token the constraint allows: argmax of the masked logits, with ties to
    the lower id (as ``np.argmax``). Checks the top candidates first (exact: every
    token outside them scores lower) and the whole vocabulary only when none passes."""
    x = np.asarray(logits)
    top = int(np.argmax(x))
    if np.isfinite(x[top]) and constraint.allows(np.array([top], dtype=np.int32))[0]:
        return top
    for n in _ARGMAX_PROBES[1:]:
        if n >= x.size:
            break
        cut = x.size - n
        ids = np.argpartition(x, cut)[cut:]
        # The n-th largest value may be tied below the cut: only ids strictly above
        # the smallest kept value are surely the top ones.
        floor = x[ids].min()
        ids = ids[(x[ids] > floor) & np.isfinite(x[ids])]
        if ids.size == 0:
            continue
        ok = ids[constraint.allows(ids.astype(np.int32))]
        if ok.size:
            best = x[ok].max()
            return int(ok[x[ok] == best].min())
    masked = np.where(allowed_mask(constraint, x.size), x, -np.inf)
    top = int(np.argmax(masked))
    if not np.isfinite(masked[top]):
        raise ConstraintError("The grammar allows no token the model can write here.")
    return top


def constrained_dist(logits: np.ndarray, sampling: SamplingConfig, constraint: Constraint) -> Dist:
    """The distribution to sample from under ``constraint``: the warped distribution
    with what the constraint forbids removed and the rest renormalised. Only the warped
    support is checked (top-k, top-p and min-p keep it small). When the constraint
    forbids all of it, warping runs again on the masked logits, so the truncation picks
    among allowed tokens. Greedy gives the point at ``constrained_argmax``."""
    x = np.asarray(logits)
    if sampling.greedy:
        return Dist.point(constrained_argmax(x, constraint), x.size)
    p = warp_dist(x, sampling)
    support = p.support()
    ok = constraint.allows(support.astype(np.int32))
    if ok.all():
        return p
    if ok.any():
        return p.keep(ok)
    allowed = _allowed_top(x, sampling, constraint)
    if allowed is None:
        allowed = allowed_mask(constraint, x.size)
    masked = np.where(allowed, x, -np.inf).astype(np.float32)
    if not np.isfinite(masked.max()):
        raise ConstraintError("The grammar allows no token the model can write here.")
    return warp_dist(masked, sampling)


def _allowed_top(x: np.ndarray, sampling: SamplingConfig, constraint: Constraint) -> np.ndarray | None:
    """A mask that, for warping, is as good as the full one: every allowed token that
    top-k or min-p could keep, found by checking candidates from the top down. None when
    the truncation needs the allowed set's whole mass (top-p or temperature alone)."""
    k, min_p = sampling.top_k, sampling.min_p
    if not (k > 0 or (min_p > 0.0 and sampling.top_p >= 1.0)):
        return None
    for n in _ARGMAX_PROBES[1:]:
        if n >= x.size:
            return None
        cut = x.size - n
        ids = np.argpartition(x, cut)[cut:]
        floor = x[ids].min()
        # Only ids above the n-th value are surely the top n (ties may lie below the cut).
        ids = ids[(x[ids] > floor) & np.isfinite(x[ids])]
        ok = ids[constraint.allows(ids.astype(np.int32))]
        if not ok.size:
            continue
        # Enough when whatever lies below the floor cannot be kept: top-k holds k
        # allowed tokens above it; min-p's threshold is above it.
        if (k > 0 and ok.size >= k) or (k == 0 and x[ok].max() + math.log(min(min_p, 1.0)) > floor):
            mask = np.zeros(x.size, dtype=bool)
            mask[ok] = True
            return mask
    return None


def trim_to_constraint(tokens: list[int], constraint: Constraint) -> list[int]:
    """The longest prefix of ``tokens`` the constraint allows (a copied guess cut where
    the grammar would refuse it: the target could not accept the rest)."""
    state = constraint.fork()
    try:
        for i, token in enumerate(tokens):
            if not state.allows(np.array([token], dtype=np.int32))[0]:
                return tokens[:i]
            state.advance(token)
        return tokens
    finally:
        state.close()
