"""What the draft model reads. A new prompt of up to ``READ_WHOLE`` tokens it reads
whole; of a longer one only its tail (``ModelDrafter.reads_at_most``), so a
context-filling history is read once by the target rather than twice; the reply is the
same (the target judges every drafted token). It keeps what it read: a prompt grown by
a turn is read from where its reading began, only what was added, however long the chat
grows. The first token comes from the prompt's own logits, and the draft reads after it."""

from __future__ import annotations

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.drafters import READ_BUDGET_S, READ_WHOLE, TAIL_LEAST, ModelDrafter
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


def test_an_ordinary_chat_is_read_whole_on_any_machine(q41_target, q40_draft):
    """Up to READ_WHOLE tokens, however slowly the draft was timed reading."""
    q40_draft.trim(0)
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    drafter.read_cost = 1.0  # a second a token: the slowest machine there is
    for turns in (2, 61):
        prompt = chat_tokens(q41_target, build_messages(_history(turns)))
        assert len(prompt) <= READ_WHOLE
        q40_draft.trim(0)
        drafter.prepare(prompt)
        assert drafter._offset == 0 and q40_draft.tokens == prompt[:-1]


def test_a_long_prompt_is_read_as_far_as_its_budget(q41_target, q40_draft):
    """Nothing timed yet: TAIL_LEAST of a longer prompt's tail. Then its own reading, timed,
    sets what it reads: the tail it reads in READ_BUDGET_S, never less than TAIL_LEAST."""
    q40_draft.trim(0)
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    assert drafter.read_cost is None and drafter.reads_at_most == TAIL_LEAST
    prompt = chat_tokens(q41_target, build_messages(_history(120)))
    assert len(prompt) > READ_WHOLE + 100
    drafter.prepare(prompt)
    assert drafter.read_cost and drafter._offset == len(prompt) - TAIL_LEAST
    assert q40_draft.tokens == prompt[-TAIL_LEAST:-1]
    assert drafter.reads_at_most == max(TAIL_LEAST, int(READ_BUDGET_S / drafter.read_cost))
    for cost, tokens in ((1e-6, 1_000_000), (READ_BUDGET_S / 1000, 1000), (1.0, TAIL_LEAST)):
        drafter.read_cost = cost
        assert drafter.reads_at_most == tokens
        drafter.model.trim(0)
        assert drafter.unread(prompt) == min(len(prompt), tokens)


def test_a_growing_chat_never_moves_what_the_draft_reads(q41_target, q40_draft):
    """Turn after turn, long past twice the window: the draft reads from where it began,
    only what each turn added, and never what it holds already."""
    q40_draft.trim(0)
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids)
    drafter.reads_at_most = 64
    prompt = chat_tokens(q41_target, build_messages(_history(41)))
    drafter.prepare(prompt)
    begun = drafter._offset
    assert begun == len(prompt) - 64
    for turns in range(43, 71, 2):  # the chat grows by 4 x 64 tokens past where it began
        grown = chat_tokens(q41_target, build_messages(_history(turns)))
        added = len(grown) - len(prompt)
        assert drafter.unread(grown) == added + 1  # the new turn (its last token is the next step's)
        drafter.prepare(grown)
        assert drafter._offset == begun and q40_draft.tokens == grown[begun:-1]
        prompt = grown
    assert len(prompt) - begun > 4 * 64


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
