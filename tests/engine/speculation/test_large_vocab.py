"""Lossless at a 262k vocabulary (Gemma 3's): the sparse sampled path, borrowed logits and
the greedy shortcuts, over tokens really drafted -- chain rounds, token trees, copies.

The models are first-order Markov chains over a few live tokens spread across the
vocabulary (the first id, ids past 200k, the last one), every other token a finite
logit far below: a 262,144-wide row each step, with the target's exact distribution
known from the landed dense ``warp`` (tests/engine/speculation/dense_sampling_reference.py). Both
models lend their logits as llama.cpp does -- a view of one buffer that the next step
overwrites -- so an engine that kept a view past its step would read the wrong rows.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import pytest
from scipy import stats as scistats

from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig

from . import dense_sampling_reference as ref
from .test_tree_rounds import AlwaysBranch

VOCAB = 262_144
LIVE = np.array([0, 70_001, 200_003, VOCAB - 1])
APP_CHAIN = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)


class WideMarkov:
    """A Markov "model" with a 262k vocabulary whose logits are lent, not copied."""

    lends_logits = True
    keeps_states = False
    tree_branches = 8

    def __init__(self, table: np.ndarray, seed: int, n_ctx: int = 64) -> None:
        self.table = table  # live state -> logits of the live tokens
        self.n_vocab, self.n_ctx = VOCAB, n_ctx
        self.bos_id = self.eos_id = -1
        self.add_bos = False
        self.eog_ids: frozenset[int] = frozenset()
        self.chat_template, self.name = None, "wide markov"
        self._tokens: list[int] = []
        self._tree: list[int] | None = None
        self._base = (np.random.default_rng(seed).standard_normal(VOCAB) - 40).astype(np.float32)
        self._buffer = np.empty((16, VOCAB), dtype=np.float32)
        self._lent = 16

    @property
    def tokens(self) -> list[int]:
        return self._tokens

    def row(self, prev: int) -> np.ndarray:
        out = self._base.copy()
        state = int(np.searchsorted(LIVE, prev)) % len(LIVE)
        out[LIVE] = self.table[state]
        return out

    def _lend(self, prevs: Sequence[int], borrow: bool) -> np.ndarray:
        self._buffer[:self._lent] = np.nan  # a view kept from the last step would read NaNs ...
        self._lent = len(prevs)
        for i, prev in enumerate(prevs):  # ... or this step's rows
            self._buffer[i] = self.row(prev)
        rows = self._buffer[:len(prevs)]
        return rows if borrow else rows.copy()

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int], borrow: bool = False) -> np.ndarray:
        tokens = list(tokens)
        assert len(self._tokens) + len(tokens) <= self.n_ctx
        self._tokens.extend(tokens)
        return self._lend([tokens[i] for i in logits_at], borrow)

    def evaluate_tree(self, tokens: Sequence[int], parents: Sequence[int], borrow: bool = False) -> np.ndarray:
        assert self._tree is None and parents[0] == -1
        self._tree = list(tokens)
        return self._lend(tokens, borrow)

    def keep_branch(self, nodes: Sequence[int]) -> None:
        self._tokens.extend(self._tree[i] for i in nodes)
        self._tree = None

    def trim(self, n_keep: int) -> None:
        self._tree = None
        del self._tokens[n_keep:]

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return [int(LIVE[ord(c) % len(LIVE)]) for c in text]

    def token_bytes(self, token_id: int) -> bytes:
        return b"t"

    def token_text(self, token_id: int) -> str:
        return "t"

    def close(self) -> None:
        pass


def _pair(seed: int = 7):
    rng = np.random.default_rng(seed)
    target_table = rng.normal(0, 1.5, (len(LIVE), len(LIVE))).astype(np.float32)
    draft_table = (target_table + rng.normal(0, 1.0, target_table.shape)).astype(np.float32)
    return WideMarkov(target_table, 1), WideMarkov(draft_table, 2)


def _joint(model: WideMarkov, sampling: SamplingConfig, first: int) -> dict:
    """The exact distribution of 3-token continuations, from the landed dense warp."""
    p = {int(a): ref.warp(model.row(int(a)), sampling) for a in LIVE}
    return {(a, b, c): p[first][a] * p[a][b] * p[b][c] for a in LIVE.tolist() for b in LIVE.tolist()
            for c in LIVE.tolist()}


def _pvalue(counts: Counter, exact: dict, n: int) -> float:
    keys = list(exact)
    probs = np.array([exact[k] for k in keys])
    observed = np.array([counts[k] for k in keys])
    keep = probs * n >= 5
    expected = np.append(probs[keep], probs[~keep].sum()) * n
    got = np.append(observed[keep], observed[~keep].sum())
    return scistats.chisquare(got, expected).pvalue


ROUNDS = {
    "chain": dict(spec=SpecConfig(draft_max=3), policy=None, prompt=[0, 70_001], sources=None),
    "tree": dict(spec=SpecConfig(draft_max=3), policy=AlwaysBranch(3), prompt=[0, 70_001], sources=None),
    # An earlier 70_001 followed by 0, 200_003 in the prompt, and one followed by the
    # last id twice in a copy source: rounds copy one and fork to the other.
    "copies": dict(spec=SpecConfig(draft_max=3, copy_min=1), policy=AlwaysBranch(3),
                   prompt=[200_003, VOCAB - 1, 70_001, 0, 200_003, 70_001], sources=[[0, 70_001, VOCAB - 1, VOCAB - 1]]),
}


@pytest.mark.parametrize("sampling", [APP_CHAIN, SamplingConfig(temperature=1.0)], ids=["app chain", "dense"])
@pytest.mark.parametrize("kind", list(ROUNDS))
def test_sampled_rounds_at_262k_follow_the_target(kind, sampling):
    if sampling.top_k == 0 and kind != "chain":
        pytest.skip("the dense path once, in chain rounds, is enough")
    setup = ROUNDS[kind]
    target, draft = _pair()
    engine = SpeculativeEngine(target, ModelDrafter(draft, VOCAB))
    n = 2000
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = accepted = trees = copied = 0
    for seed in range(n):
        generation = engine.generate(setup["prompt"], SamplingConfig(**{**sampling.__dict__, "seed": seed}),
                                     setup["spec"], max_tokens=3, policy=setup["policy"],
                                     copy_sources=setup["sources"])
        counts[tuple(e.id for e in generation)] += 1
        s = generation.stats
        drafted, accepted, trees, copied = drafted + s.drafted, accepted + s.accepted, trees + s.tree_rounds, copied + s.copied
    assert sum(counts.values()) == n
    assert 0.1 < accepted / drafted < 0.98  # both acceptance and rejection ran
    if kind == "tree":
        assert trees >= n
    if kind == "copies":
        assert copied > 0 and trees > 0
    exact = _joint(target, sampling, setup["prompt"][-1])
    assert _pvalue(counts, exact, n) > 1e-3
    assert _pvalue(counts, _joint(draft, sampling, setup["prompt"][-1]), n) < 1e-6  # the test has teeth


@pytest.mark.parametrize("kind", list(ROUNDS))
def test_greedy_rounds_at_262k_are_the_targets_own(kind):
    setup = ROUNDS[kind]
    greedy = SamplingConfig(temperature=0.0)
    target, draft = _pair(3)
    target.n_ctx = draft.n_ctx = 256
    plain = [e.id for e in SpeculativeEngine(target).generate(setup["prompt"], greedy, SpecConfig(enabled=False), 60)]
    # The draft's favourite after a token of the reply's cycle is the target's second.
    state = int(np.searchsorted(LIVE, plain[10]))
    first, second = np.argsort(-draft.table[state])[:2]
    draft.table[state, [first, second]] = draft.table[state, [second, first]]
    engine = SpeculativeEngine(target, ModelDrafter(draft, VOCAB))
    generation = engine.generate(setup["prompt"], greedy, setup["spec"], 60, policy=setup["policy"],
                                 copy_sources=setup["sources"])
    assert [e.id for e in generation] == plain
    assert generation.stats.drafted > 0 and generation.stats.accepted < generation.stats.drafted
