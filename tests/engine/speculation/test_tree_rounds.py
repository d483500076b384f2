"""Tree rounds through the whole speculative loop: sampled output follows the target (and
not the draft), greedy output is the target's own, on Markov models and the real pairs."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats as scistats

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.draft_policy import AutoDraftLength, FixedDraftLength, RoundPlan
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig

from markov_backend import MarkovBackend
from .test_lossless import GREEDY, N_TOKENS, PROMPTS, _plain


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class AlwaysBranch(FixedDraftLength):
    """Every draft token gets a second candidate and every differing copy is verified
    too, so every round with a guess is a tree."""

    def plan_round(self, limit):
        return RoundPlan(super().plan_round(limit).length, branch=lambda prob: True, fork_copies=True)


def _joint(logits, first):
    p = _softmax(logits)
    return {(a, b, c): p[first, a] * p[a, b] * p[b, c] for a in range(len(p)) for b in range(len(p))
            for c in range(len(p))}


def _pvalue(counts: Counter, exact: dict, n: int) -> float:
    keys = list(exact)
    probs = np.array([exact[k] for k in keys])
    observed = np.array([counts[k] for k in keys])
    keep = probs * n >= 5  # chi-square needs expected counts of at least ~5
    expected = np.append(probs[keep], probs[~keep].sum()) * n
    got = np.append(observed[keep], observed[~keep].sum())
    return scistats.chisquare(got, expected).pvalue


@pytest.mark.parametrize("copying", [False, True], ids=["second candidates", "forked copies"])
def test_sampled_tree_rounds_follow_the_target_and_not_the_draft(copying):
    """Markov target and draft, temperature 1, every round after the first token (the
    prompt's own) a tree: 3-token sequences match the target's joint (chi-square) and are
    told apart from the draft's."""
    rng = np.random.default_rng(7)
    vocab = 5
    target_logits = rng.normal(0, 1.5, (vocab, vocab))
    draft_logits = target_logits + rng.normal(0, 1.0, (vocab, vocab))
    target = MarkovBackend(target_logits)
    engine = SpeculativeEngine(target, ModelDrafter(MarkovBackend(draft_logits), vocab))
    # Copying: the prompt has an earlier 1 followed by 2, 0 and a copy source has 1 then 3, 3:
    # after a first token 1, the round copies the one and forks to the other.
    prompt, sources = ([3, 4, 1, 2, 0, 1], [[4, 1, 3, 3]]) if copying else ([0, 1], None)
    n = 20_000
    counts: Counter[tuple[int, ...]] = Counter()
    rounds = tree_rounds = branch_tokens = replies_with_trees = 0
    for seed in range(n):
        generation = engine.generate(prompt, SamplingConfig(temperature=1.0, seed=seed),
                                     SpecConfig(draft_max=3, copy_min=1 if copying else 0), max_tokens=3,
                                     policy=AlwaysBranch(3), copy_sources=sources)
        counts[tuple(e.id for e in generation)] += 1
        stats = generation.stats
        replies_with_trees += stats.tree_rounds >= 1
        rounds += stats.rounds
        tree_rounds += stats.tree_rounds
        branch_tokens += stats.branch_tokens
        assert len(target.tokens) == len(prompt) + stats.tokens - 1  # one sequence, the committed one
    assert sum(counts.values()) == n
    # The second token always comes out of a tree where the draft model drafts; a copy
    # forks only where two continuations of the first token disagree.
    assert replies_with_trees >= (n // 10 if copying else n), replies_with_trees
    assert branch_tokens > n // 20 // (10 if copying else 1), "branches should be taken, and often"
    assert _pvalue(counts, _joint(target_logits, 1), n) > 1e-3
    assert _pvalue(counts, _joint(draft_logits, 1), n) < 1e-6
    exact = _joint(target_logits, 1)
    assert 0.5 * sum(abs(counts[k] / n - exact[k]) for k in exact) < 0.03


def test_greedy_tree_rounds_on_markov_models_are_the_targets_own():
    rng = np.random.default_rng(3)
    target_logits = rng.normal(0, 1.0, (12, 12))
    draft_logits = target_logits + rng.normal(0, 0.8, (12, 12))
    target = MarkovBackend(target_logits, n_ctx=256)
    plain = [e.id for e in SpeculativeEngine(target).generate([0], GREEDY, SpecConfig(enabled=False), 100)]
    engine = SpeculativeEngine(target, ModelDrafter(MarkovBackend(draft_logits, n_ctx=256), 12))
    generation = engine.generate([0], GREEDY, SpecConfig(draft_max=4), 100, policy=AlwaysBranch(4))
    assert [e.id for e in generation] == plain
    assert generation.stats.tree_rounds > 0


# ---------------------------------------------------------------------------
# The real pairs

@pytest.fixture(scope="module")
def strict_plain(q41_target):
    return {p: _plain(q41_target, chat_tokens(q41_target, build_messages([("user", p)]))) for p in PROMPTS[:6]}


@pytest.mark.parametrize("policy", ["always", "unsure", "auto on"])
def test_strict_pair_tree_rounds_are_exactly_lossless(q41_target, q40_draft, strict_plain, policy):
    """Q4_1 target, Q4_0 draft (batch-invariant logits): the ids are the target's own,
    whichever branch the target takes."""
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    engine = SpeculativeEngine(q41_target, drafter)
    tree_rounds = branch_tokens = 0
    for prompt, plain in strict_plain.items():
        tokens = chat_tokens(q41_target, build_messages([("user", prompt)]))
        chosen = {"always": AlwaysBranch(6), "unsure": FixedDraftLength(6, "on"), "auto on": AutoDraftLength("on")}
        generation = engine.generate(tokens, GREEDY, SpecConfig(draft_max=6, tree="on"), N_TOKENS,
                                     policy=chosen[policy])
        assert [e.id for e in generation] == plain, f"diverged on {prompt!r}"
        tree_rounds += generation.stats.tree_rounds
        branch_tokens += generation.stats.branch_tokens
        assert len(q41_target.tokens) == len(tokens) + N_TOKENS - 1
    assert tree_rounds > 0 and branch_tokens > 0, "second candidates should be kept sometimes"


def test_demo_pair_tree_rounds_are_lossless_up_to_near_ties(f32_target, q41_draft):
    """The F32 target, as test_lossless's demo-pair test: a difference only at a near-tie."""
    from .test_lossless import _plain_with_gaps

    drafter = ModelDrafter(q41_draft, f32_target.n_vocab, eog_ids=f32_target.eog_ids)
    engine = SpeculativeEngine(f32_target, drafter)
    branch_tokens = 0
    for prompt in PROMPTS[:5]:
        tokens = chat_tokens(f32_target, build_messages([("user", prompt)]))
        plain_ids, gaps = _plain_with_gaps(f32_target, tokens)
        generation = engine.generate(tokens, GREEDY, SpecConfig(draft_max=6), N_TOKENS, policy=AlwaysBranch(6))
        ids = [e.id for e in generation]
        branch_tokens += generation.stats.branch_tokens
        for i, (a, b) in enumerate(zip(plain_ids, ids)):
            if a != b:
                assert gaps[i] < 0.1, f"{prompt!r}: token {i} differs with a top-2 gap of {gaps[i]:.3f}"
                break
        else:
            assert len(ids) == len(plain_ids) == N_TOKENS
    assert branch_tokens > 0


def test_auto_learns_second_candidates_from_chain_rounds(f32_target, q41_draft):
    """Greedy chain rounds teach the tree policy what a runner-up would have done, so it
    has measured the demo pair's second candidates before it ever pays for one."""
    drafter = ModelDrafter(q41_draft, f32_target.n_vocab, eog_ids=f32_target.eog_ids)
    engine = SpeculativeEngine(f32_target, drafter)
    policy = AutoDraftLength()
    for prompt in PROMPTS[:2]:
        tokens = chat_tokens(f32_target, build_messages([("user", prompt)]))
        engine.generate(tokens, GREEDY, SpecConfig(draft_max="auto"), N_TOKENS, policy=policy).run()
    judged = sum(policy.branches.second._judged)
    assert judged > 0
