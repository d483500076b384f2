"""Lookahead decoding (app/engine/speculation/lookahead.py): the window's shape is lookahead's mask,
its n-grams are its columns, the policy drops the window where it does not pay, and the
reply is the target's own: greedy on the real strict target, sampled on Markov models."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.lookahead import JacobiWindow, LookaheadDrafter, LookaheadPolicy, NgramPool
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.speculation.token_tree import TokenTree
from app.engine.types import SamplingConfig, SpecConfig

from markov_backend import MarkovBackend
from .test_lossless import GREEDY, N_TOKENS, PROMPTS, _plain
from .test_tree_rounds import _joint, _pvalue


# -- the pool ----------------------------------------------------------------------

def test_the_pool_keeps_the_latest_distinct_ngrams_per_first_token():
    pool = NgramPool(per_key=2)
    pool.add(7, [1, 2])
    pool.add(7, [3, 4])
    pool.add(7, [1, 2])      # seen again: newest, not twice
    assert pool.after(7) == [(1, 2), (3, 4)]
    pool.add(7, [5, 6])      # a third: the oldest goes
    assert pool.after(7) == [(5, 6), (1, 2)] and pool.after(8) == [] and len(pool) == 2


def test_a_pool_line_goes_on_through_the_pool_and_stops_before_an_end():
    pool = NgramPool()
    pool.add(1, [2, 3])
    pool.add(3, [4, 5])
    pool.add(5, [9, 6])
    assert pool.line(1, (2, 3), 5, frozenset()) == [2, 3, 4, 5, 9]
    assert pool.line(1, (2, 3), 10, frozenset({9})) == [2, 3, 4, 5]
    assert pool.line(1, (2, 3), 1, frozenset()) == [2]


# -- the window ----------------------------------------------------------------------

def test_the_window_is_lookaheads_mask_as_a_tree():
    """Column i, level j sits at depth i + j and sees the root, level 0 of columns 1..i
    and levels 1..j of its own column (Fu et al.'s 2D window, llama.cpp's seq ids)."""
    width, ngram = 4, 3
    window = JacobiWindow(list(range(100, 120)), width, ngram)
    window.grid = [[10 * j + i for i in range(width)] for j in range(ngram - 1)]  # distinct tokens
    tree = TokenTree.rooted_at(999)
    window.hang(tree)
    assert len(tree) == 1 + window.size and tree.depth == window.depth == width - 1 + ngram - 2
    node = {token: n for n, token in enumerate(tree.tokens)}
    for i in range(width):
        for j in range(ngram - 1):
            if i == 0 and j == 0:
                continue  # level 0 of column 0 is the root itself
            path = [tree.tokens[n] for n in tree.path_to(node[10 * j + i])]
            assert path == [999] + [c for c in range(1, i + 1)] + [10 * k + i for k in range(1, j + 1)]
    assert len(tree.leaves) == width


def test_the_window_makes_ngrams_of_its_columns_and_keeps_positions():
    width, ngram = 3, 3
    window = JacobiWindow([1], width, ngram)
    window.grid = [[0, 11, 12], [20, 21, 22]]  # level 0, level 1
    tree = TokenTree.rooted_at(5)
    window.hang(tree)
    rows = np.zeros((len(tree), 50), dtype=np.float32)
    outputs = [30, 31, 32]
    for end, out in zip(window._ends, outputs):
        rows[end, out] = 1.0
    pool = NgramPool()
    window.advance(rows, 1, pool)
    # Column 0 starts at the root; each n-gram is a column read down, then its output.
    assert pool.after(5) == [(20, 30)] and pool.after(11) == [(21, 31)] and pool.after(12) == [(22, 32)]
    assert window.grid == [[20, 21, 22], [30, 31, 32]]  # one Jacobi step: the levels move up
    window.advance(rows, 2, pool)  # two tokens written: the columns move left one more
    assert window.grid == [[31, 32, 30], [31, 32, 30]]


# -- the policy ----------------------------------------------------------------------

def test_the_policy_drops_a_window_that_does_not_pay_and_says_so():
    """CPU-like costs: a round with the window writes 2 tokens in 60 ms, a plain step
    takes 20 ms. After the warm-up and the votes the window stops riding, the note
    says why, and it comes back for a probe after PROBE_EVERY rounds, then after twice
    as many each time it still does not pay."""
    policy = LookaheadPolicy()
    carried = []
    for _ in range(400):
        carry = policy.carry(plain_seconds=0.020)
        carried.append(carry)
        policy.observe(carry, 2 if carry else 1, 0.060 if carry else 0.020)
    warm = LookaheadPolicy.WARMUP
    assert all(carried[:warm + LookaheadPolicy.OFF_AFTER - 1])
    assert policy.off and "does not pay" in policy.note
    later = carried[warm + LookaheadPolicy.OFF_AFTER:]
    probes = [i for i, carry in enumerate(later) if carry]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert len(probes) >= 3 and gaps == sorted(gaps) and gaps[-1] >= 2 * gaps[0], probes
    assert gaps[0] >= LookaheadPolicy.PROBE_EVERY - 1


def test_a_window_that_pays_again_is_probed_at_the_first_pace_again():
    policy = LookaheadPolicy()
    cost = {True: 0.060}
    for n in range(600):
        carry = policy.carry(plain_seconds=0.020)
        policy.observe(carry, 2 if carry else 1, cost[True] if carry else 0.020)
        if n == 300:
            assert policy.off and policy._probe_every > LookaheadPolicy.PROBE_EVERY
            cost[True] = 0.012  # the machine changed: the window pays now
    assert not policy.off and policy._probe_every == LookaheadPolicy.PROBE_EVERY


def test_the_policy_keeps_a_window_that_pays():
    """GPU-like costs: the wide batch costs about what a plain step does."""
    policy = LookaheadPolicy()
    for _ in range(60):
        carry = policy.carry(plain_seconds=0.020)
        policy.observe(carry, 2 if carry else 1, 0.022 if carry else 0.020)
        assert carry
    assert not policy.off and policy.note == ""


def test_with_no_plain_step_measured_the_policy_measures_rounds_without():
    policy = LookaheadPolicy()
    carried = []
    for _ in range(40):
        carry = policy.carry(plain_seconds=None)
        carried.append(carry)
        policy.observe(carry, 2 if carry else 1, 0.060 if carry else 0.020)
    assert carried[:LookaheadPolicy.WARMUP] == [True] * LookaheadPolicy.WARMUP
    assert carried[LookaheadPolicy.WARMUP:LookaheadPolicy.WARMUP + 3] == [False] * 3  # rounds without, measured
    assert policy.off and "does not pay" in policy.note


def test_on_and_off_do_not_measure():
    on, off = LookaheadPolicy("on"), LookaheadPolicy("off")
    for _ in range(40):
        on.observe(True, 1, 1.0)
        assert on.carry(0.001) and not off.carry(0.001)
    assert off.note == "lookahead is off"


# -- the whole loop: sampled, on Markov models --------------------------------------

def test_sampled_lookahead_follows_the_target():
    """Temperature 1, a Markov target, the window in every round: 3-token sequences match
    the target's joint (chi-square), with many of them from the pool and the window."""
    rng = np.random.default_rng(11)
    vocab = 5
    target_logits = rng.normal(0, 1.5, (vocab, vocab))
    target = MarkovBackend(target_logits)
    drafter = LookaheadDrafter(vocab, mode="on", width=2, ngram=2, copy=False)
    engine = SpeculativeEngine(target, drafter)
    prompt = [0, 1]
    n = 20_000
    counts: Counter[tuple[int, ...]] = Counter()
    accepted = lookahead_rounds = 0
    for seed in range(n):
        generation = engine.generate(prompt, SamplingConfig(temperature=1.0, seed=seed),
                                     SpecConfig(draft_max=3), max_tokens=3)
        counts[tuple(e.id for e in generation)] += 1
        accepted += generation.stats.accepted
        lookahead_rounds += generation.stats.lookahead_rounds
        assert len(target.tokens) == len(prompt) + generation.stats.tokens - 1  # one sequence
    assert lookahead_rounds >= n and accepted > n // 2, "the pool's and the window's guesses should be kept, often"
    exact = _joint(target_logits, 1)
    assert _pvalue(counts, exact, n) > 1e-3
    assert 0.5 * sum(abs(counts[k] / n - exact[k]) for k in exact) < 0.03


def test_greedy_lookahead_on_markov_models_is_the_targets_own():
    rng = np.random.default_rng(5)
    target = MarkovBackend(rng.normal(0, 1.0, (12, 12)), n_ctx=256)
    plain = [e.id for e in SpeculativeEngine(target).generate([0], GREEDY, SpecConfig(enabled=False), 100)]
    engine = SpeculativeEngine(target, LookaheadDrafter(12, mode="on", copy=False))
    generation = engine.generate([0], GREEDY, SpecConfig(draft_max=6), 100)
    assert [e.id for e in generation] == plain
    assert generation.stats.lookahead_rounds > 0 and generation.stats.accepted > 0


# -- the whole loop: greedy, on the real strict target ---------------------------------

REPETITIVE = [
    "Count from 1 to 60, separated by commas.",
    "Write the word 'hello' twenty times, one per line.",
]


@pytest.fixture(scope="module")
def lookahead_plain(q41_target):
    return {p: _plain(q41_target, chat_tokens(q41_target, build_messages([("user", p)])))
            for p in REPETITIVE + PROMPTS[:1]}


@pytest.mark.parametrize("copy", [False, True], ids=["pool alone", "pool and copies"])
def test_strict_target_with_lookahead_is_exactly_lossless(q41_target, lookahead_plain, copy):
    """Q4_1 target (batch-invariant logits): the ids are the target's own, with the window
    in every batch, and the pool's guesses are kept (with copying off, every kept guess
    is the pool's or the window's)."""
    drafter = LookaheadDrafter(q41_target.n_vocab, eog_ids=q41_target.eog_ids, mode="on", copy=copy)
    engine = SpeculativeEngine(q41_target, drafter)
    accepted = lookahead_rounds = 0
    for prompt, plain in list(lookahead_plain.items())[:None if not copy else 2]:
        tokens = chat_tokens(q41_target, build_messages([("user", prompt)]))
        generation = engine.generate(tokens, GREEDY, SpecConfig(draft_max=6), N_TOKENS)
        assert [e.id for e in generation] == plain, f"diverged on {prompt!r}"
        assert len(q41_target.tokens) == len(tokens) + N_TOKENS - 1  # the verified path, one sequence
        accepted += generation.stats.accepted
        lookahead_rounds += generation.stats.lookahead_rounds
    assert lookahead_rounds > 0 and accepted > 20
    assert len(drafter.pool) > 0


def test_without_trees_lookahead_still_copies_and_drafts_from_its_pool(q41_target, lookahead_plain):
    """A window that cannot ride (a grammar, logprobs, no trees) leaves lines: here logprobs."""
    drafter = LookaheadDrafter(q41_target.n_vocab, eog_ids=q41_target.eog_ids, mode="on")
    engine = SpeculativeEngine(q41_target, drafter)
    tokens = chat_tokens(q41_target, build_messages([("user", REPETITIVE[0])]))
    plain = lookahead_plain[REPETITIVE[0]]
    generation = engine.generate(tokens, GREEDY, SpecConfig(draft_max=6), N_TOKENS, logprobs=1)
    assert [e.id for e in generation] == plain
    assert generation.stats.lookahead_rounds == 0 and generation.stats.accepted > 0
