"""Prompt lookup and copying repeats: the n-gram index, where a copy ends, and how the
engine keeps copies apart from what it learns of the draft model."""

from __future__ import annotations

import numpy as np

from app.engine.speculation.draft_policy import AutoDraftLength, RoundPlan
from app.engine.speculation.drafters import LookupDrafter, ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig

from markov_backend import MarkovBackend

GREEDY = SamplingConfig(temperature=0.0)
RNG = np.random.default_rng(0)


def _propose(drafter, context, n_max=4):
    return drafter.propose(context, n_max, GREEDY, RNG, 0.0).tokens


def _brute_force(context, n_max, ngram_max, ngram_min):
    """The lookup rule spelled out: the latest earlier occurrence of the longest tail."""
    for n in range(ngram_max, ngram_min - 1, -1):
        if len(context) <= n:
            continue
        tail = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start:start + n] == tail:
                return context[start + n:start + n + n_max]
    return []


def test_proposes_what_followed_the_latest_occurrence_of_the_longest_tail():
    drafter = LookupDrafter(100)
    assert _propose(drafter, [1, 2, 3, 9, 2, 3, 7, 8, 5, 2, 3]) == [7, 8, 5, 2]  # (2, 3): the later one
    assert _propose(drafter, [4, 2, 3, 9, 5, 2, 3, 8, 4, 2, 3]) == [9, 5, 2, 3]  # (4, 2, 3) beats (2, 3)
    assert _propose(drafter, [1, 2, 3]) == []


def test_the_index_follows_a_growing_context_and_starts_over_on_another():
    """Against the rule spelled out, on random contexts that grow by a few tokens a
    round and now and then are replaced (another chat) or cut back (an edit)."""
    rng = np.random.default_rng(3)
    drafter = LookupDrafter(8, ngram_max=3, ngram_min=1)
    context: list[int] = []
    for step in range(400):
        if step % 97 == 96:
            context = context[:len(context) // 2]
        elif step % 131 == 130:
            context = rng.integers(0, 8, 5).tolist()
        context = context + rng.integers(0, 8, int(rng.integers(1, 5))).tolist()
        assert _propose(drafter, context, 6) == _brute_force(context, 6, 3, 1), step


def test_a_copy_ends_before_an_end_of_turn():
    end = 99
    drafter = LookupDrafter(100, ngram_max=2, ngram_min=2, eog_ids=[end])
    # An earlier turn ended "... 5 6 7 <end> 1 2"; the reply now writes "5 6".
    assert _propose(drafter, [5, 6, 7, end, 1, 2, 3, 5, 6], n_max=5) == [7]


class Recording(AutoDraftLength):
    """Drafts a fixed length, and counts what it is taught."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.length = length
        self.drafted_seen = 0
        self.confidences_seen = 0
        learn = self.confidence.observe

        def counted(prob: float, accepted: bool) -> None:
            self.confidences_seen += 1
            learn(prob, accepted)

        self.confidence.observe = counted

    def plan_round(self, limit: int) -> RoundPlan:
        return RoundPlan(max(0, min(self.length, limit)))

    def observe_round(self, draft, n_accepted, token, greedy) -> None:
        self.drafted_seen += len(draft)
        super().observe_round(draft, n_accepted, token, greedy)


def _engine(seed: int):
    rng = np.random.default_rng(seed)
    vocab = 4
    target_logits = rng.normal(0, 3.0, (vocab, vocab))  # peaked: the chain soon repeats itself
    draft = MarkovBackend(target_logits + rng.normal(0, 1.0, (vocab, vocab)), n_ctx=256)
    return SpeculativeEngine(MarkovBackend(target_logits, n_ctx=256), ModelDrafter(draft, vocab))


def test_copies_are_verified_like_drafts_but_teach_the_policy_nothing():
    engine = _engine(5)
    policy = Recording(4)
    prompt = [0, 1, 2, 3]
    plain = [e.id for e in engine.generate(prompt, GREEDY, SpecConfig(enabled=False), max_tokens=60)]
    generation = engine.generate(prompt, GREEDY, SpecConfig(draft_max=4, copy_min=3), max_tokens=60,
                                 policy=policy)
    assert [e.id for e in generation] == plain
    stats = generation.stats
    assert stats.copied > 0 and 0 < stats.copied_accepted <= stats.copied
    assert stats.accepted >= stats.copied_accepted
    assert policy.drafted_seen == stats.drafted - stats.copied  # only the model's drafts
    assert policy.confidences_seen <= policy.drafted_seen


def test_copying_is_off_unless_asked():
    engine = _engine(5)
    generation = engine.generate([0, 1, 2, 3], GREEDY, SpecConfig(draft_max=4), max_tokens=60)
    generation.run()
    assert generation.stats.copied == 0 and generation.stats.drafted > 0
