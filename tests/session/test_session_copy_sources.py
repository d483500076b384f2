"""The session's copy sources: ``remember`` other text, ``reply(replaced=...)`` on
Regenerate; the reply is the same, and copied from the old one."""

from __future__ import annotations

from app.backends.loader import LoadedPair
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import COPY_MIN, SamplingConfig, SpecConfig
from app.session.chat import ChatSession, LoadInfo

GREEDY = SamplingConfig(temperature=0.0)


def _session(target, draft) -> ChatSession:
    engine = SpeculativeEngine(target, ModelDrafter(draft, target.n_vocab))
    return ChatSession(LoadedPair(engine, target, draft, None), LoadInfo(target.name, ""))


def test_remember_indexes_text_bounded_and_skips_nothing_useful(q41_target, q40_draft):
    session = _session(q41_target, q40_draft)
    session.remember(["", "The quick brown fox jumps over the lazy dog near the river bank."])
    assert session.copy_sources.sources == 1 and len(session.copy_sources) > COPY_MIN


def test_regenerate_copies_the_reply_it_replaces(q41_target, q40_draft):
    session = _session(q41_target, q40_draft)
    history = [("user", "List five things to pack for a weekend of camping, with a reason for each.")]
    spec = SpecConfig(draft_max="auto", copy_min=COPY_MIN)
    first = session.reply(history, GREEDY, spec, 64)
    old_text = "".join(e.text for e in first)
    again = session.reply(history, GREEDY, spec, 64, replaced=[old_text])
    assert "".join(e.text for e in again) == old_text
    share = again.stats.copied_accepted / again.stats.tokens
    assert share >= 0.6, again.stats.to_dict()
    # Copying off: nothing is copied, from the old reply or anywhere.
    off = session.reply(history, GREEDY, SpecConfig(draft_max="auto"), 64, replaced=[old_text])
    assert "".join(e.text for e in off) == old_text and off.stats.copied == 0
