"""Copying from what the user already has (``CopySources``): the index against brute
force, its bound, choosing between context and sources, and, on the real demo pair,
greedy output identical with and without sources and a regeneration that copies."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.engine.speculation.copy_sources import CopySources
from app.engine.speculation.drafters import LookupDrafter
from app.engine.types import COPY_MIN, SamplingConfig, SpecConfig

GREEDY = SamplingConfig(temperature=0.0)


def _brute_force(sources: list[list[int]], context: list[int], n: int):
    """The rule spelled out: the latest occurrence (latest source, then latest position)
    of the context's last n tokens with at least one token after it."""
    tail = context[-n:]
    found = None
    for source in sources:
        for i in range(n, len(source)):
            if source[i - n:i] == tail:
                found = (source, i)
    return found


@pytest.mark.parametrize("n", [1, 3, 6])
def test_find_matches_brute_force(n):
    rng = random.Random(n)
    sources = [[rng.randrange(6) for _ in range(rng.randrange(0, 120))] for _ in range(12)]
    index = CopySources(n)
    for source in sources:
        index.add(source)
    kept = [s for s in sources if len(s) > n]
    assert len(index) == sum(map(len, kept)) and index.sources == len(kept)
    for _ in range(400):
        context = [rng.randrange(6) for _ in range(rng.randrange(0, 10))]
        expected = _brute_force(kept, context, n) if len(context) >= n else None
        assert index.find(context) == expected, context


def test_the_bound_drops_the_oldest_sources_and_finds_the_rest_exactly():
    rng = random.Random(5)
    index = CopySources(4, max_tokens=1000)
    added = []
    for _ in range(60):
        source = [rng.randrange(20) for _ in range(rng.randrange(50, 150))]
        index.add(source)
        added.append(source)
        assert len(index) <= 1000
    # What is left is the newest sources, whole, and finds agree with brute force over them.
    left, total = [], 0
    for source in reversed(added):
        if total + len(source) > len(index):
            break
        left.insert(0, source)
        total += len(source)
    assert total == len(index)
    for _ in range(300):
        context = [rng.randrange(20) for _ in range(6)]
        assert index.find(context) == _brute_force(left, context, 4)


def test_a_source_past_the_bound_keeps_its_end_and_a_short_one_is_not_kept():
    index = CopySources(3, max_tokens=100)
    index.add(list(range(250)))
    assert len(index) == 100 and index.find([200, 201, 202]) is not None and index.find([10, 11, 12]) is None
    index.add([1, 2, 3])  # nothing could follow a 3-token match
    assert index.sources == 1
    with pytest.raises(ValueError):
        CopySources(0)


def test_a_hash_hit_on_other_tokens_proposes_nothing():
    index = CopySources(2)
    index.add([1, 2, 3, 4])
    key = hash((1, 2))
    index._index[hash((7, 8))] = index._index[key]  # a collision, forced
    assert index.find([7, 8]) is None


def test_the_match_that_reaches_further_back_wins():
    """The context has the last tokens after another lead-in; the source has the same
    lead-in as now: the source's match reaches further, so its continuation is copied."""
    copier = LookupDrafter(100, 3, 3)
    context = [9, 1, 2, 3, 50, 51, 7, 7, 4, 1, 2, 3]
    sources = CopySources(3)
    sources.add([7, 4, 1, 2, 3, 60, 61, 62])
    assert copier.copy(context, 3, GREEDY, sources).tokens == [60, 61, 62]
    # Without the source, the context's own match; with own=False only the source.
    assert copier.copy(context, 3, GREEDY).tokens == [50, 51, 7]
    assert LookupDrafter(100, 3, 3).copy(context, 3, GREEDY, sources, own=False).tokens == [60, 61, 62]
    # Equal reach: the context, the conversation at hand, wins.
    even = CopySources(3)
    even.add([8, 1, 2, 3, 70, 71])
    assert LookupDrafter(100, 3, 3).copy(context, 3, GREEDY, even).tokens == [50, 51, 7]


def test_a_match_that_reaches_far_back_copies_further_when_stretching():
    sources = CopySources(3)
    old = list(range(100, 160))
    sources.add(old)
    context = [1, 2] + old[:30]  # the last 30 tokens match: reach 30
    copier = LookupDrafter(200, 3, 3)
    assert copier.copy(context, 4, GREEDY, sources, own=False).tokens == old[30:34]
    assert copier.copy(context, 4, GREEDY, sources, own=False, stretch_to=12).tokens == old[30:42]
    assert copier.copy(context, 4, GREEDY, sources, own=False, stretch_to=40).tokens == old[30:45]  # reach / 2
    short = [1, 2] + old[:5]  # reach 5: half of it is less than asked, so what was asked
    assert copier.copy(short, 4, GREEDY, sources, own=False, stretch_to=12).tokens == old[5:9]


def test_a_sampled_copy_from_a_source_carries_one_hot_q():
    sources = CopySources(2)
    sources.add([5, 6, 7, 8])
    draft = LookupDrafter(10, 2, 2).copy([1, 5, 6], 2, SamplingConfig(temperature=0.8), sources, own=False)
    assert draft.tokens == [7, 8] and draft.probs == [1.0, 1.0]
    assert [q.support().tolist() for q in draft.q] == [[7], [8]] and all(q.dense().sum() == 1.0 for q in draft.q)


# -- the real demo pair ------------------------------------------------------------------

def _engine(target, draft):
    from app.engine.speculation.drafters import ModelDrafter
    from app.engine.speculation.speculative import SpeculativeEngine

    return SpeculativeEngine(target, ModelDrafter(draft, target.n_vocab))


def _prompt(target, text):
    from app.engine.prompting.chat import build_messages, chat_tokens

    return chat_tokens(target, build_messages([("user", text)]))


def test_greedy_output_is_the_same_with_and_without_sources(q41_target, q40_draft):
    """Sources that match in places and mislead in others change only the speed."""
    engine = _engine(q41_target, q40_draft)
    spec = SpecConfig(draft_max="auto", copy_min=COPY_MIN)
    prompt = _prompt(q41_target, "Explain in a few sentences how a refrigerator keeps food cold.")
    without = engine.generate(prompt, GREEDY, spec, 64).run()
    ids = [e.id for e in without]
    # Misleading sources: the reply's own openings, each followed by other text.
    misleading = [ids[:12] + q41_target.tokenize(" completely different words follow here", add_special=False,
                                                 parse_special=False),
                  ids[20:34] + ids[:10]]
    generation = engine.generate(prompt, GREEDY, spec, 64, copy_sources=misleading)
    assert [e.id for e in generation.run()] == ids
    assert generation.stats.copied > 0 and generation.stats.copied_accepted < generation.stats.copied
    # Copying off: sources are not looked at either.
    off = engine.generate(prompt, GREEDY, SpecConfig(draft_max="auto"), 64, copy_sources=misleading)
    assert [e.id for e in off.run()] == ids and off.stats.copied == 0


def test_a_regeneration_at_temperature_0_copies_most_of_the_reply_it_replaces(q41_target, q40_draft):
    """Regenerate: the replaced reply is a copy source; at temperature 0 the new reply is
    the old one, so nearly all of it comes from copies."""
    engine = _engine(q41_target, q40_draft)
    spec = SpecConfig(draft_max="auto", copy_min=COPY_MIN)
    prompt = _prompt(q41_target, "Describe a walk through a forest in autumn.")
    first = engine.generate(prompt, GREEDY, spec, 96)
    old = [e.id for e in first.run()]
    again = engine.generate(prompt, GREEDY, spec, 96, copy_sources=[old])
    assert [e.id for e in again.run()] == old
    share = again.stats.copied_accepted / again.stats.tokens
    assert share >= 0.75, again.stats.to_dict()
    assert share > first.stats.copied_accepted / first.stats.tokens + 0.5
