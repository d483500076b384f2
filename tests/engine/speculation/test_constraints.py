"""Constraints on sampling, in closed form: a Markov target under a table constraint.

The constrained target is known exactly (each row's warped distribution, what the
constraint forbids removed, renormalised), so the whole speculative loop's output
can be checked against it, as test_speculative checks the unconstrained loop.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats as scistats

from app.engine.speculation.constraints import ConstraintError, allowed_mask, constrained_argmax, constrained_dist
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.sampling import warp
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.speculation.target_rows import log_softmax
from app.engine.types import SamplingConfig, SpecConfig

from markov_backend import MarkovBackend


class TableConstraint:
    """Which token may follow which: ``allowed[last, next]`` (a first-order grammar)."""

    def __init__(self, allowed: np.ndarray, last: int) -> None:
        self.table, self.last, self.start = allowed, last, last
        self.n_vocab = allowed.shape[1]
        self.calls = 0

    def allows(self, tokens):
        self.calls += 1
        return self.table[self.last][np.asarray(tokens)]

    def advance(self, token):
        if not self.table[self.last][token]:
            raise ConstraintError(f"{token} may not follow {self.last}")
        self.last = int(token)

    def fork(self):
        return TableConstraint(self.table, self.last)

    def reset(self):
        self.last = self.start

    def close(self):
        pass


def _markov(seed: int, vocab: int = 5):
    rng = np.random.default_rng(seed)
    target_logits = rng.normal(0, 1.5, (vocab, vocab))
    draft_logits = target_logits + rng.normal(0, 1.0, (vocab, vocab))
    allowed = rng.random((vocab, vocab)) < 0.75
    np.fill_diagonal(allowed, False)  # never the same token twice
    allowed[:, 0] = True  # and never a dead end
    # The draft model's favourite is often forbidden: its constrained fork must matter.
    allowed[np.arange(vocab), draft_logits.argmax(axis=1)] = False
    allowed[:, 0] = True
    # One row whose two likeliest tokens are both forbidden (top-k 2 then falls back to
    # warping the masked logits).
    for row in range(vocab):
        top2 = np.argsort(-target_logits[row])[:2]
        if 0 not in top2 and row not in top2:
            allowed[row, top2] = False
            break
    return target_logits, draft_logits, allowed


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.8, top_k=2)],
                         ids=["temperature 1", "top-k 2"])
def test_constrained_joint_distribution_through_the_whole_loop(sampling):
    """3-token sequences under the constraint follow the constrained target exactly."""
    target_logits, draft_logits, allowed = _markov(3)
    vocab = target_logits.shape[0]
    engine = SpeculativeEngine(MarkovBackend(target_logits), ModelDrafter(MarkovBackend(draft_logits), vocab))
    n = 10_000
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = accepted = 0
    for seed in range(n):
        generation = engine.generate([0, 1], SamplingConfig(**{**sampling.__dict__, "seed": seed}),
                                     SpecConfig(draft_max=3), max_tokens=3,
                                     constraint=TableConstraint(allowed, last=1))
        counts[tuple(e.id for e in generation)] += 1
        drafted += generation.stats.drafted
        accepted += generation.stats.accepted
    p = np.stack([_reference(target_logits[a], sampling, allowed[a]) for a in range(vocab)])
    sequences = [(a, b, c) for a in range(vocab) for b in range(vocab) for c in range(vocab)]
    exact = np.array([p[1, a] * p[a, b] * p[b, c] for a, b, c in sequences])
    observed = np.array([counts[s] for s in sequences])
    assert observed.sum() == n
    assert observed[exact == 0].sum() == 0, "a sequence the constraint forbids came out"
    keep = exact * n >= 5  # the rest pooled, where any is possible
    rare = ~keep & (exact > 0)
    expected, got = exact[keep] * n, observed[keep]
    if rare.any():
        expected, got = np.append(expected, exact[rare].sum() * n), np.append(got, observed[rare].sum())
    assert scistats.chisquare(got, expected).pvalue > 1e-3
    assert 0.5 * np.abs(observed / n - exact).sum() < 0.03
    assert 0.2 < accepted / drafted < 0.98  # both accept and reject paths ran
    if sampling.top_k:  # some row's top-k is all forbidden: the fallback ran too
        assert any(not (allowed[a] & (warp(target_logits[a], sampling) > 0)).any() for a in range(vocab))


def test_chi_square_catches_an_unconstrained_target():
    """The check has teeth: the unconstrained target's sequences are far from the constrained ones."""
    target_logits, _, allowed = _markov(3)
    p = np.stack([warp(row, SamplingConfig(temperature=1.0)) for row in target_logits])
    pc = np.stack([_reference(target_logits[a], SamplingConfig(temperature=1.0), allowed[a]) for a in range(len(p))])
    assert 0.5 * np.abs(p[1] - pc[1]).sum() > 0.1


def test_greedy_is_identical_with_and_without_speculation_and_never_breaks_the_constraint():
    target_logits, draft_logits, allowed = _markov(5, vocab=7)
    vocab = target_logits.shape[0]
    greedy = SamplingConfig()
    plain = SpeculativeEngine(MarkovBackend(target_logits))
    spec = SpeculativeEngine(MarkovBackend(target_logits), ModelDrafter(MarkovBackend(draft_logits), vocab))
    for start in range(vocab):
        prompt = [0, start]
        a = plain.generate(prompt, greedy, SpecConfig(enabled=False), 30, constraint=TableConstraint(allowed, start),
                           logprobs=3).run()
        g = spec.generate(prompt, greedy, SpecConfig(draft_max=4), 30, constraint=TableConstraint(allowed, start),
                          logprobs=3)
        b = g.run()
        assert [e.id for e in a] == [e.id for e in b]
        assert [e.logprobs for e in a] == [e.logprobs for e in b]
        assert g.stats.accepted > 0
        last = start
        for event in a:
            assert allowed[last, event.id]
            last = event.id
        unconstrained = [e.id for e in plain.generate(prompt, greedy, SpecConfig(enabled=False), 30).run()]
        assert unconstrained != [e.id for e in a]  # the constraint changed the reply


def test_greedy_logprobs_are_the_masked_softmax():
    target_logits, _, allowed = _markov(5, vocab=7)
    engine = SpeculativeEngine(MarkovBackend(target_logits))
    events = engine.generate([0, 1], SamplingConfig(), SpecConfig(enabled=False), 2,
                             constraint=TableConstraint(allowed, 1), logprobs=2).run()
    expected = log_softmax(np.where(allowed[1], target_logits[1], -np.inf))
    first = events[0].logprobs
    assert first.logprob == pytest.approx(expected[events[0].id], abs=1e-6)
    assert first.top[0][0] == events[0].id  # greedy takes the top allowed token
    assert [t for t, _ in first.top] == list(np.argsort(-expected)[:2])
    assert all(allowed[1, t] for t, _ in first.top)


def test_constrained_argmax_is_the_argmax_of_the_masked_logits():
    rng = np.random.default_rng(0)
    for trial in range(300):
        v = int(rng.integers(2, 3000))
        logits = rng.normal(0, 3, v).astype(np.float32)
        if trial % 3 == 0:
            logits = np.round(logits)  # many ties
        if trial % 5 == 0:
            logits[rng.random(v) < 0.3] = -np.inf
        allowed = rng.random(v) < rng.choice([0.001, 0.05, 0.5, 0.99])
        masked = np.where(allowed, logits, -np.inf)
        constraint = TableConstraint(allowed[None, :], 0)
        if not np.isfinite(masked.max()):
            with pytest.raises(ConstraintError):
                constrained_argmax(logits, constraint)
            continue
        assert constrained_argmax(logits, constraint) == int(np.argmax(masked))


def test_constrained_dist_masks_the_warped_support_and_falls_back_when_it_is_all_forbidden():
    logits = np.array([5.0, 4.0, 3.0, 0.0, -1.0], dtype=np.float32)
    top2 = SamplingConfig(temperature=1.0, top_k=2)
    allowed = np.array([True, False, True, True, True])
    p = constrained_dist(logits, top2, TableConstraint(allowed[None, :], 0)).dense()
    assert p.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]  # {0, 1} kept by top-k, 1 forbidden
    allowed = np.array([False, False, True, True, True])
    p = constrained_dist(logits, top2, TableConstraint(allowed[None, :], 0)).dense()
    assert p == pytest.approx(warp(np.array([-np.inf, -np.inf, 3.0, 0.0, -1.0]), top2))  # top-2 of what is allowed
    assert allowed_mask(TableConstraint(allowed[None, :], 0), 7).tolist() == [False, False, True, True, True,
                                                                               False, False]


def _reference(logits: np.ndarray, sampling: SamplingConfig, allowed: np.ndarray) -> np.ndarray:
    """The constrained distribution by its definition: the warped one masked and
    renormalised; when that leaves nothing, the masked logits warped."""
    q = np.where(allowed, warp(logits, sampling), 0.0)
    if q.sum() > 0:
        return q / q.sum()
    return warp(np.where(allowed, logits, -np.inf), sampling)


@pytest.mark.parametrize("sampling", [
    SamplingConfig(temperature=1.0, top_k=5), SamplingConfig(temperature=0.7, top_k=50),
    SamplingConfig(temperature=1.0, min_p=0.05), SamplingConfig(temperature=0.9, top_k=20, top_p=0.9, min_p=0.1),
    SamplingConfig(temperature=0.8), SamplingConfig(temperature=1.0, top_p=0.9)],
    ids=["top-k 5", "top-k 50", "min-p", "all three", "temperature", "top-p"])
def test_constrained_dist_is_its_definition(sampling):
    """Whichever shortcut it takes (the warped support, the top candidates, the whole
    vocabulary), the result is the definition's: masked and renormalised, else the
    masked logits warped."""
    rng = np.random.default_rng(1)
    for trial in range(60):
        v = int(rng.integers(50, 4000))
        logits = rng.normal(0, 3, v).astype(np.float32)
        if trial % 4 == 0:
            logits = np.round(logits)
        allowed = rng.random(v) < rng.choice([0.002, 0.02, 0.3, 0.95])
        allowed[int(rng.integers(v))] = True
        got = constrained_dist(logits, sampling, TableConstraint(allowed[None, :], 0)).dense()
        assert got == pytest.approx(_reference(logits, sampling, allowed), rel=1e-6, abs=1e-12)
