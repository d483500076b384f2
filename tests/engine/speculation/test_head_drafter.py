"""Drafting with the target's own MTP head (``HeadDrafter`` over ``MtpHead``), on tiny
random-weight models whose head agrees with the trunk part of the time
(``recurrent_models.MTP_SHAPE``): a hybrid (qwen35: chains, rollback by the exact trim)
and an attention model (glm4moe: trees too)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from scipy import stats as scistats

from app.backends.llama.backend import LlamaBackend
from app.engine.speculation.drafters import HeadDrafter
from app.engine.speculation.sampling import warp_dist
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig, TokenKind

from recurrent_models import MTP_ARCHITECTURES

SAMPLED = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)


def _open(path, **kw) -> LlamaBackend:
    # One thread: llama.cpp's CPU results then depend on nothing but the batch.
    return LlamaBackend(path, n_ctx=1024, n_threads=1, **kw)


@pytest.fixture(scope="module", params=MTP_ARCHITECTURES)
def engines(request, mtp_models):
    target = _open(mtp_models[request.param], load_mtp=True)
    plain = _open(mtp_models[request.param])
    head = target.mtp_head()
    spec = SpeculativeEngine(target, HeadDrafter(head, target.n_vocab, eog_ids=target.eog_ids))
    yield request.param, spec, SpeculativeEngine(plain), head
    target.close()
    plain.close()


def _ids(generation) -> list[int]:
    return [e.id for e in generation]


@pytest.mark.parametrize("draft_max", [4, "auto"])
def test_greedy_equals_the_target_alone_over_turns_and_a_regenerate(engines, draft_max):
    arch, spec, plain, head = engines
    prompt = spec.target.tokenize("Once upon a time, in a land far away,", add_special=True, parse_special=False)
    turns = [prompt]
    drafted = accepted = 0
    for turn in range(3):
        g = spec.generate(turns[-1], SamplingConfig(), SpecConfig(draft_max=draft_max), max_tokens=48)
        got = _ids(g)
        want = _ids(plain.generate(turns[-1], SamplingConfig(), SpecConfig(enabled=False), max_tokens=48))
        assert got == want, f"{arch} turn {turn}"
        assert g.stats.drafter == DrafterKind.MTP.value and g.stats.speculative
        drafted, accepted = drafted + g.stats.drafted, accepted + g.stats.accepted
        # The next turn extends this one (the prefix is reused); the last one goes back to
        # the first prompt with more text: a regenerate or an edit trims both caches.
        more = spec.target.tokenize(" And then?", add_special=False, parse_special=False)
        turns.append(turns[-1] + got + more if turn == 0 else turns[0] + more)
    if draft_max != "auto":  # (auto may stop drafting where the head does not pay)
        # The head agreed with the target part of the time: both accept and reject paths ran.
        assert drafted > 30 and 0.05 < accepted / drafted < 0.95
    assert head.blind_steps == 0  # every position read a row: the target's, or the head's own


def test_a_prompt_longer_than_a_batch_is_read_by_the_head_in_batches(engines):
    # The head catches up on the whole prompt at once; llama.cpp's batch holds n_batch
    # tokens (a 700-token prompt once stopped a benchmark with "refused token 512").
    arch, spec, plain, head = engines
    words = " ".join(f"item {i} is on the list," for i in range(80))
    prompt = spec.target.tokenize(words, add_special=True, parse_special=False)
    assert spec.target.n_batch < len(prompt) < spec.target.n_ctx - 64
    g = spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=3), max_tokens=24)
    assert _ids(g) == _ids(plain.generate(prompt, SamplingConfig(), SpecConfig(enabled=False), max_tokens=24))
    assert g.stats.drafted > 0, arch


def test_corrected_tokens_carry_what_the_head_proposed(engines):
    arch, spec, plain, head = engines
    prompt = spec.target.tokenize("The weather today", add_special=True, parse_special=False)
    events = list(spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=3), max_tokens=40))
    corrected = [e for e in events if e.kind is TokenKind.CORRECTED]
    assert corrected and all(e.draft_id is not None and e.draft_id != e.id for e in corrected)
    assert any(e.kind is TokenKind.ACCEPTED for e in events)


def test_sampled_tokens_follow_the_target_not_the_head(engines):
    """Rejection sampling with the head's warped logits as q: the first token of a reply
    is distributed as the target's own (chi-square), and not as the head's proposals."""
    arch, spec, plain, head = engines
    prompt = spec.target.tokenize("My favourite colour is", add_special=True, parse_special=False)
    plain.target.trim(0)
    p = warp_dist(plain.target.evaluate(prompt, [len(prompt) - 1])[0], SAMPLED)
    drafter = spec.drafter
    drafter.roll_back([])
    spec.target.trim(0)
    n = 1500
    counts: Counter[int] = Counter()
    rng = np.random.default_rng(1)
    for seed in range(n):
        g = spec.generate(prompt, dataclasses.replace(SAMPLED, seed=seed), SpecConfig(draft_max=3),
                          max_tokens=1)
        counts[_ids(g)[0]] += 1
    # The head's q for the same first token (what it proposes there).
    q = drafter.propose(prompt, 1, SAMPLED, rng, 0.0).q[0]
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

    assert len(p.support()) >= 3, "the prompt should give a spread of tokens"
    assert chi_square(p) > 1e-3
    assert chi_square(q) < 1e-6


def test_a_tree_round_keeps_the_head_in_step(mtp_models):
    """On attention the round may be a token tree (second candidates where the head is
    unsure); the kept branch's rows reach the head like a line's."""
    target = _open(mtp_models["glm4moe"], load_mtp=True)
    plain = _open(mtp_models["glm4moe"])
    try:
        head = target.mtp_head()
        spec = SpeculativeEngine(target, HeadDrafter(head, target.n_vocab, eog_ids=target.eog_ids))
        prompt = target.tokenize("A list of animals:", add_special=True, parse_special=False)
        g = spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=4, tree="on"), max_tokens=48)
        assert _ids(g) == _ids(SpeculativeEngine(plain).generate(prompt, SamplingConfig(), SpecConfig(enabled=False),
                                                                  max_tokens=48))
        assert g.stats.tree_rounds > 0
        assert head.blind_steps == 0
    finally:
        target.close()
        plain.close()


def test_a_model_loaded_without_its_head_refuses_one_in_a_line(mtp_models):
    target = _open(mtp_models["qwen35"])  # load_mtp off: llama.cpp would abort making a head context
    try:
        with pytest.raises(Exception, match="loaded without MTP layers"):
            target.mtp_head()
    finally:
        target.close()
