"""Checks every drafter that reads its target's rows must pass (an MTP head, an EAGLE-3
drafter): tests/engine/speculation/test_head_drafter.py and test_eagle_drafter.py run
them on their own engines. ``spec`` drafts with the head, ``plain`` is the same target
alone (``SpeculativeEngine``s)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
from scipy import stats as scistats

from app.engine.speculation.sampling import warp_dist
from app.engine.types import SamplingConfig, SpecConfig, TokenKind

SAMPLED = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)


def ids(generation) -> list[int]:
    return [e.id for e in generation]


def greedy_over_turns(spec, plain, draft_max, drafter: str, where: str = "") -> tuple[int, int]:
    """Three turns (the second extends the first, the third goes back to the first
    prompt: a regenerate or an edit trims both caches), each equal to the target alone;
    returns (drafted, accepted) over them."""
    prompt = spec.target.tokenize("Once upon a time, in a land far away,", add_special=True, parse_special=False)
    turns = [prompt]
    drafted = accepted = 0
    for turn in range(3):
        g = spec.generate(turns[-1], SamplingConfig(), SpecConfig(draft_max=draft_max), max_tokens=48)
        got = ids(g)
        want = ids(plain.generate(turns[-1], SamplingConfig(), SpecConfig(enabled=False), max_tokens=48))
        assert got == want, f"{where} turn {turn}"
        assert g.stats.drafter == drafter and g.stats.speculative
        drafted, accepted = drafted + g.stats.drafted, accepted + g.stats.accepted
        more = spec.target.tokenize(" And then?", add_special=False, parse_special=False)
        turns.append(turns[-1] + got + more if turn == 0 else turns[0] + more)
    return drafted, accepted


def long_prompt(spec, plain) -> int:
    """A prompt longer than a batch, equal to the target alone; returns what was drafted."""
    words = " ".join(f"item {i} is on the list," for i in range(80))
    prompt = spec.target.tokenize(words, add_special=True, parse_special=False)
    assert spec.target.n_batch < len(prompt) < spec.target.n_ctx - 64
    g = spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=3), max_tokens=24)
    assert ids(g) == ids(plain.generate(prompt, SamplingConfig(), SpecConfig(enabled=False), max_tokens=24))
    return g.stats.drafted


def corrected_tokens_carry_proposals(spec) -> None:
    prompt = spec.target.tokenize("The weather today", add_special=True, parse_special=False)
    events = list(spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=3), max_tokens=40))
    corrected = [e for e in events if e.kind is TokenKind.CORRECTED]
    assert corrected and all(e.draft_id is not None and e.draft_id != e.id for e in corrected)
    assert any(e.kind is TokenKind.ACCEPTED for e in events)


def sampled_first_token(spec, plain, n: int = 1500) -> tuple[float, float, int]:
    """Rejection sampling with the head's warped logits as q: the first token of ``n``
    replies, against the target's own distribution and the head's proposals there.
    Returns (chi-square p against the target's, against the head's, the target's support)."""
    prompt = spec.target.tokenize("My favourite colour is", add_special=True, parse_special=False)
    plain.target.trim(0)
    p = warp_dist(plain.target.evaluate(prompt, [len(prompt) - 1])[0], SAMPLED)
    drafter = spec.drafter
    drafter.roll_back([])
    spec.target.trim(0)
    counts: Counter[int] = Counter()
    for seed in range(n):
        g = spec.generate(prompt, dataclasses.replace(SAMPLED, seed=seed), SpecConfig(draft_max=3), max_tokens=1)
        counts[ids(g)[0]] += 1
    q = drafter.propose(prompt, 1, SAMPLED, np.random.default_rng(1), 0.0).q[0]
    support = sorted(set(p.support().tolist()) | set(counts))
    observed = np.array([counts[t] for t in support], dtype=float)

    def chi_square(dist) -> float:
        exact = np.array([dist.prob(t) for t in support])
        keep = exact * n >= 5
        expected = np.append(exact[keep], exact[~keep].sum()) * n
        got = np.append(observed[keep], observed[~keep].sum())
        nonzero = expected > 0
        if (got[~nonzero] > 0).any():
            return 0.0  # tokens the distribution cannot make: certainly not it
        return scistats.chisquare(got[nonzero], expected[nonzero] * got.sum() / expected[nonzero].sum()).pvalue

    return chi_square(p), chi_square(q), len(p.support())
