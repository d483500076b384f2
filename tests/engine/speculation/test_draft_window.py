"""A long prompt: the draft model reads only its tail (``ModelDrafter.reads_at_most``),
so a context-filling history is read once by the target rather than twice; the reply
is the same (the target judges every drafted token), and a prompt grown by a turn is
read by the draft from where it began reading. The first token comes from the
prompt's own logits, and the draft reads after it."""

from __future__ import annotations

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.drafters import DRAFT_WINDOW, DRAFT_WINDOW_MIN, READ_BUDGET_S, ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig, TokenKind


def _history(turns: int) -> list[tuple[str, str]]:
    return [("user" if i % 2 == 0 else "assistant", f"Message number {i} of a long chat.") for i in range(turns)]


def test_the_draft_reads_the_tail_and_the_reply_is_the_same(q41_target, q40_draft):
    prompt = chat_tokens(q41_target, build_messages(_history(41)))
    assert len(prompt) > 300
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    drafter.reads_at_most = 64
    plain = SpeculativeEngine(q41_target).generate(prompt, SamplingConfig(), SpecConfig(enabled=False), 16).run()
    generation = SpeculativeEngine(q41_target, drafter).generate(prompt, SamplingConfig(), SpecConfig(draft_max=4), 16)
    windowed = generation.run()
    assert [e.id for e in windowed] == [e.id for e in plain]
    assert generation.stats.drafted > 0
    assert len(q40_draft.tokens) <= 64 + 16 + 8  # the tail and the reply, not the whole prompt
    offset = drafter._offset
    assert offset == len(prompt) + 1 - 64  # it read once the first token was out: that token's tail
    grown = prompt + [e.id for e in windowed] + chat_tokens(q41_target, build_messages(_history(3)))[-20:]
    drafter.prepare(grown)
    assert drafter._offset == offset  # still reading from where it began: only the new turn is read


def test_a_short_prompt_is_read_whole(q41_target, q40_draft):
    prompt = chat_tokens(q41_target, build_messages(_history(2)))
    assert len(prompt) < DRAFT_WINDOW_MIN
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    drafter.prepare(prompt)
    assert drafter._offset == 0 and q40_draft.tokens == prompt[:-1]


def test_the_window_is_what_the_draft_reads_in_its_budget(q41_target, q40_draft):
    """Nothing timed yet: the smallest window. Then its own reading, timed, sets it:
    what it reads in READ_BUDGET_S, within [DRAFT_WINDOW_MIN, DRAFT_WINDOW]."""
    q40_draft.trim(0)
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    assert drafter.read_cost is None and drafter.reads_at_most == DRAFT_WINDOW_MIN
    drafter.prepare(chat_tokens(q41_target, build_messages(_history(41))))
    assert drafter.read_cost and len(q40_draft.tokens) == DRAFT_WINDOW_MIN - 1
    expected = min(DRAFT_WINDOW, max(DRAFT_WINDOW_MIN, int(READ_BUDGET_S / drafter.read_cost)))
    assert drafter.reads_at_most == expected
    for cost, window in ((1e-6, DRAFT_WINDOW), (READ_BUDGET_S / 100, 100), (1.0, DRAFT_WINDOW_MIN)):
        drafter.read_cost = cost
        assert drafter.reads_at_most == window


def _first_then_rest(generation) -> tuple[int, list[int]]:
    """(guesses drafted when the first token came out, every token's id)."""
    events = iter(generation)
    first = next(events)
    drafted_then = generation.stats.drafted
    return drafted_then, [first.id] + [e.id for e in events]


def test_the_first_token_comes_before_the_draft_reads_the_prompt(q41_target, q40_draft):
    prompt = chat_tokens(q41_target, build_messages(_history(41)))
    q40_draft.trim(0)
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    plain = SpeculativeEngine(q41_target).generate(prompt, SamplingConfig(), SpecConfig(enabled=False), 24).run()
    engine = SpeculativeEngine(q41_target, drafter)
    generation = engine.generate(prompt, SamplingConfig(), SpecConfig(draft_max=4), 24)
    events = iter(generation)
    first = next(events)
    # The first token is the target's alone, from the prompt's own logits: the draft had
    # read nothing yet, and the target's cache holds the whole prompt.
    assert first.kind == TokenKind.PLAIN and generation.stats.drafted == 0
    assert q40_draft.tokens == [] and q41_target.tokens == prompt
    rest = [e.id for e in events]
    assert [first.id] + rest == [e.id for e in plain]
    assert generation.stats.drafted > 0 and generation.stats.accepted > 0  # it drafted from the second round
    assert drafter.unread(prompt + [e.id for e in plain]) <= 1

    # A follow-up that adds little: the same, the draft reading only what was added.
    grown = prompt + [e.id for e in plain] + chat_tokens(q41_target, build_messages(_history(3)))[-12:]
    unread = drafter.unread(grown)
    assert 0 < unread <= 16
    plain = SpeculativeEngine(q41_target).generate(grown, SamplingConfig(), SpecConfig(enabled=False), 16).run()
    generation = engine.generate(grown, SamplingConfig(), SpecConfig(draft_max=4), 16)
    drafted_then, ids = _first_then_rest(generation)
    assert drafted_then == 0 and generation.stats.drafted > 0
    assert ids == [e.id for e in plain]
