"""``app.session.compare``: where two runs part, the figures and words of a comparison,
and a real speculative-vs-plain run on the demo models."""

from __future__ import annotations

import pytest

from app.backends.loader import LoadedPair
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig, Stats, TokenEvent, TokenKind
from app.session.chat import ChatSession, LoadInfo
from app.session.compare import (
    IDENTICAL,
    Comparison,
    TurnRecord,
    compare_turn,
    first_difference,
    plan_rerun,
    refusal,
)
from app.vocabulary import MessageState

GREEDY = SamplingConfig(temperature=0.0)
WARM = SamplingConfig(temperature=0.8, seed=7)


def events(*pairs) -> list[TokenEvent]:
    return [TokenEvent(token_id, text, TokenKind.PLAIN) for token_id, text in pairs]


def test_the_first_difference_is_by_id_when_both_sides_have_ids_else_by_text():
    spec = events((1, "a"), (2, "b"), (3, "c"))
    assert first_difference(spec, events((1, "a"), (2, "b"), (3, "c"))) is None
    d = first_difference(spec, events((1, "a"), (9, "b"), (3, "c")))  # same text, other token
    assert (d.index, d.spec_text, d.spec_id, d.plain_text, d.plain_id) == (1, "b", 2, "b", 9)
    restored = [TokenEvent(-1, "a", TokenKind.PLAIN), TokenEvent(-1, "b", TokenKind.PLAIN)]
    assert first_difference(restored, events((1, "a"), (9, "b"))) is None  # no ids: texts decide
    shorter = first_difference(spec, events((1, "a")))
    assert (shorter.index, shorter.plain_text, shorter.plain_id) == (1, None, None)


def test_the_comparison_figures_and_words():
    spec_stats = Stats(tokens=30, seconds=1.0, speculative=True)   # 30 tokens/s
    plain_stats = Stats(tokens=30, seconds=2.0)                      # 15 tokens/s
    same = Comparison.of(GREEDY, events((1, "a")), spec_stats, events((1, "a")), plain_stats)
    assert same.identical and same.speedup == pytest.approx(2.0) and same.verdict == IDENTICAL
    assert same.spec_text == same.plain_text == "a" and same.difference_detail == ""
    parted = Comparison.of(GREEDY, events((1, "a"), (2, "\n")), spec_stats, events((1, "a"), (3, "b")), plain_stats)
    assert not parted.identical and "token 2" in parted.verdict and "near-tie" in parted.verdict
    assert parted.difference_detail == "First difference at token 2: speculative “↵” (token 2), plain “b” (token 3)."
    sampled = Comparison.of(WARM, events((1, "a")), spec_stats, events((3, "b")), plain_stats)
    assert "expected at temperature 0.8" in sampled.verdict and "seed" in sampled.explanation
    nothing = Comparison.of(GREEDY, events((1, "a")), spec_stats, [], Stats())
    assert nothing.speedup == 0.0


def test_a_reply_that_cannot_be_compared_says_why():
    spec = Stats(tokens=3, speculative=True)
    assert refusal(MessageState.COMPLETE, spec, 3) is None
    assert refusal(MessageState.STOPPED, spec, 3) is None
    assert "no finished text" in refusal(MessageState.STREAMING, spec, 3)
    assert "no finished text" in refusal(MessageState.FAILED, spec, 3)
    assert "no finished text" in refusal(MessageState.COMPLETE, None, 3)
    assert "no finished text" in refusal(MessageState.COMPLETE, spec, 0)
    plain = refusal(MessageState.COMPLETE, Stats(tokens=3, note="no draft model"), 3)
    assert "without speculation (no draft model)" in plain


def test_the_plain_rerun_matches_a_stopped_reply_and_names_its_caveats():
    record = TurnRecord(history=(("user", "hi"),), system_prompt="", sampling=GREEDY, max_tokens=64, models="A")
    plan = plan_rerun(record, status=MessageState.COMPLETE, tokens=20, models_now="A")
    assert (plan.max_tokens, plan.expected_tokens, plan.note) == (64, 20, "")
    stopped = plan_rerun(record, status=MessageState.STOPPED, tokens=12, models_now="B")
    assert stopped.max_tokens == 12 and "stopped after 12 tokens" in stopped.note and "models changed" in stopped.note
    sampled = TurnRecord(history=(), system_prompt="", sampling=WARM, max_tokens=64, recorded=False)
    plan = plan_rerun(sampled, status=MessageState.COMPLETE, tokens=20)
    assert plan.expected_tokens == 64 and "not recorded" in plan.note


def test_a_greedy_turn_compared_on_the_real_models_is_identical(q41_target, q40_draft):
    # The Q4_1 target scores batches and single tokens bit-identically on CPU: lossless
    # means not one token differs.
    session = ChatSession(LoadedPair(SpeculativeEngine(q41_target, ModelDrafter(q40_draft, q41_target.n_vocab)),
                                     q41_target, q40_draft, None), LoadInfo(q41_target.name, ""))
    comparison = compare_turn(session, [("user", "Name three colours of the rainbow.")], GREEDY,
                              SpecConfig(draft_max=4), 24)
    assert comparison.spec_stats.speculative and not comparison.plain_stats.speculative
    assert comparison.spec_stats.drafted > 0 and comparison.plain_stats.drafted == 0
    assert comparison.spec_stats.tokens == comparison.plain_stats.tokens > 0
    assert comparison.identical and comparison.spec_text == comparison.plain_text != ""
    assert comparison.verdict == IDENTICAL
