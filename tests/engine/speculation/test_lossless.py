"""Greedy speculative decoding emits exactly what the target alone would (real models)."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.drafters import LookupDrafter, ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import COPY_MIN, SamplingConfig, SpecConfig, TokenKind

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a hash map works.",
    "List five tips for learning a new language.",
    "What causes the seasons on Earth?",
    "Write a Python function that reverses a linked list.",
    "Describe the water cycle to a ten-year-old.",
    "Give me a recipe for pancakes.",
    "Summarise the plot of Romeo and Juliet.",
    "Why is the sky blue?",
    "Compose a haiku about autumn, then explain it.",
]
GREEDY = SamplingConfig(temperature=0.0, ignore_eos=True)
N_TOKENS = 128


def _plain(target, prompt_tokens):
    engine = SpeculativeEngine(target)
    return [e.id for e in engine.generate(prompt_tokens, GREEDY, SpecConfig(enabled=False), N_TOKENS)]


def _speculative(target, drafter, prompt_tokens, draft_max, copy_min=0):
    engine = SpeculativeEngine(target, drafter)
    generation = engine.generate(prompt_tokens, GREEDY, SpecConfig(draft_max=draft_max, copy_min=copy_min), N_TOKENS)
    return [e.id for e in generation], generation.stats


@pytest.fixture(scope="module")
def strict_plain(q41_target):
    return {p: _plain(q41_target, chat_tokens(q41_target, build_messages([("user", p)]))) for p in PROMPTS}


@pytest.mark.parametrize("draft_max", [1, 4, 8, "auto"])
def test_strict_pair_is_exactly_lossless(q41_target, q40_draft, strict_plain, draft_max):
    """Q4_1 target, Q4_0 draft: batch-invariant logits, so ids must match exactly."""
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    corrected = 0
    for prompt in PROMPTS:
        tokens = chat_tokens(q41_target, build_messages([("user", prompt)]))
        ids, stats = _speculative(q41_target, drafter, tokens, draft_max)
        assert len(ids) == N_TOKENS
        assert ids == strict_plain[prompt], f"diverged on {prompt!r}"
        assert stats.drafted > 0
        corrected += stats.drafted - stats.accepted
    assert corrected > 0, "the strict pair should exercise corrections"


def test_strict_pair_copying_repeats_is_exactly_lossless(q41_target, q40_draft, strict_plain):
    """Copied guesses go through the same verification; the draft model catches up on them."""
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    copied = copied_accepted = 0
    for prompt in PROMPTS:
        tokens = chat_tokens(q41_target, build_messages([("user", prompt)]))
        ids, stats = _speculative(q41_target, drafter, tokens, "auto", copy_min=COPY_MIN)
        assert ids == strict_plain[prompt], f"diverged on {prompt!r}"
        copied += stats.copied
        copied_accepted += stats.copied_accepted
    assert 0 < copied_accepted < copied, "copies should be both accepted and rejected"


def test_lookup_drafter_is_exactly_lossless(q41_target, strict_plain):
    drafter = LookupDrafter(q41_target.n_vocab)
    for prompt in PROMPTS[:4]:
        tokens = chat_tokens(q41_target, build_messages([("user", prompt)]))
        ids, stats = _speculative(q41_target, drafter, tokens, 4)
        assert ids == strict_plain[prompt]
        assert stats.rounds < N_TOKENS  # lookup found something to draft


@pytest.fixture(scope="module")
def demo_plain(f32_target):
    return {p: _plain_with_gaps(f32_target, chat_tokens(f32_target, build_messages([("user", p)])))
            for p in PROMPTS}


@pytest.mark.parametrize("draft_max", [1, 4, 8])
def test_demo_pair_is_lossless_up_to_near_ties(f32_target, q41_draft, demo_plain, draft_max):
    """F32 batched logits differ from single-token ones by up to ~0.06 on CPU: the only
    tolerated difference is a near-tie in the plain run, and comparison stops there."""
    drafter = ModelDrafter(q41_draft, f32_target.n_vocab, eog_ids=f32_target.eog_ids)
    for prompt in PROMPTS:
        tokens = chat_tokens(f32_target, build_messages([("user", prompt)]))
        plain_ids, gaps = demo_plain[prompt]
        ids, _ = _speculative(f32_target, drafter, tokens, draft_max)
        for i, (a, b) in enumerate(zip(plain_ids, ids)):
            if a != b:
                assert gaps[i] < 0.1, f"{prompt!r}: token {i} differs with a top-2 gap of {gaps[i]:.3f}"
                break
        else:
            assert len(ids) == len(plain_ids) == N_TOKENS


def _plain_with_gaps(target, prompt_tokens):
    """Plain greedy decoding recording the top-2 logit gap of every step."""
    target.trim(0)
    target.evaluate(prompt_tokens[:-1], [])
    last, ids, gaps = prompt_tokens[-1], [], []
    for _ in range(N_TOKENS):
        row = target.evaluate([last], [0])[0]
        row[list(target.eog_ids)] = -np.inf
        top2 = np.partition(row, -2)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        last = int(np.argmax(row))
        ids.append(last)
    return ids, gaps


def test_draft_equal_to_target_accepts_everything(q41_target, q41_draft):
    drafter = ModelDrafter(q41_draft, q41_target.n_vocab)
    engine = SpeculativeEngine(q41_target, drafter)
    tokens = chat_tokens(q41_target, build_messages([("user", PROMPTS[0])]))
    generation = engine.generate(tokens, GREEDY, SpecConfig(draft_max=5), 96)
    events = generation.run()
    assert generation.stats.acceptance == 1.0
    # The first token is the prompt's own (the target's alone); after it every round
    # drafted 5 and all were kept: 6 tokens a round (the last one as many as were left).
    assert events[0].kind == TokenKind.PLAIN
    assert {e.kind for e in events[1:]} <= {TokenKind.ACCEPTED, TokenKind.BONUS}
    assert len(events) == 96 and generation.stats.rounds == 1 + -(-95 // 6)


def test_demo_pair_acceptance_is_high(f32_target, q41_draft):
    """Catches the draft-cache drift bug: the output stays right but acceptance collapses
    (0.97 -> ~0.55 in a prototype). Measured here: 0.87-1.0 per prompt, ~0.94 overall."""
    drafter = ModelDrafter(q41_draft, f32_target.n_vocab)
    engine = SpeculativeEngine(f32_target, drafter)
    drafted = accepted = 0
    for prompt in PROMPTS[:5]:
        tokens = chat_tokens(f32_target, build_messages([("user", prompt)]))
        generation = engine.generate(tokens, GREEDY, SpecConfig(draft_max=5), N_TOKENS)
        generation.run()
        drafted += generation.stats.drafted
        accepted += generation.stats.accepted
        assert generation.stats.tokens_per_round >= 4.5
    assert accepted / drafted >= 0.9
