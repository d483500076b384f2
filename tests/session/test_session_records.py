"""``app.session.records``: a reply to the history's records and back, whatever is stored."""

from __future__ import annotations

import math

from app.engine.types import DrafterKind, Stats, StopReason, TokenEvent, TokenKind
from app.session.chat import LoadInfo
from app.session.records import (
    error_from_record,
    events_from_records,
    records_from_events,
    reply_meta,
    shown_state,
    stats_from_record,
    stats_to_record,
)
from app.storage.history import HistoryStore
from app.storage.settings import Settings
from app.vocabulary import MessageState

EVENTS = [TokenEvent(5, "Hel", TokenKind.ACCEPTED), TokenEvent(6, "lo", TokenKind.CORRECTED, draft_id=9,
                                                                draft_text="p", draft_prob=0.25),
          TokenEvent(7, " \n", TokenKind.BONUS), TokenEvent(8, "!", TokenKind.PLAIN)]


def test_token_events_come_back_from_their_records_kinds_and_guesses_included():
    back = events_from_records(records_from_events(EVENTS), "Hello \n!")
    assert [(e.text, e.kind, e.draft_text, e.draft_prob) for e in back] == [
        (e.text, e.kind, e.draft_text, e.draft_prob) for e in EVENTS]
    assert all(e.id == -1 for e in back)  # ids are not stored


def test_records_survive_the_real_store(tmp_path):
    store = HistoryStore.open(tmp_path / "history.db")
    try:
        conversation = store.create_conversation("t")
        writer = store.begin_reply(conversation, {})
        writer.append(records_from_events(EVENTS))
        writer.finish(stats_to_record(Stats(tokens=4, rounds=2, stop_reason=StopReason.EOS)), MessageState.COMPLETE)
        [stored] = store.messages(conversation)
        back = events_from_records(stored.tokens, stored.text)
        assert [(e.text, e.kind) for e in back] == [(e.text, e.kind) for e in EVENTS]
        stats = stats_from_record(stored.stats)
        assert stats.tokens == 4 and stats.rounds == 2 and stats.stop_reason is StopReason.EOS
    finally:
        store.close()


def test_damaged_records_are_left_out_and_the_text_wins():
    damaged = ["x", {"text": 5}, {"text": "Hi", "kind": "weird", "draft_text": [1], "draft_prob": math.nan}]
    [event] = events_from_records(damaged, "Hi")
    assert (event.text, event.kind, event.draft_text, event.draft_prob) == ("Hi", TokenKind.PLAIN, None, None)
    # Records that do not spell the stored text: the text, as one plain token.
    assert [(e.text, e.kind) for e in events_from_records(records_from_events(EVENTS), "other")] == [
        ("other", TokenKind.PLAIN)]
    assert events_from_records("not a list", "") == []


def test_stats_come_back_field_by_field_and_wrong_types_are_left_out():
    stats = Stats(tokens=12, rounds=5, drafted=10, accepted=7, accepted_by_position=[4, 3], seconds=1.5,
                  stop_reason=StopReason.MAX_TOKENS, speculative=True, note="", left_out=2)
    back = stats_from_record(stats_to_record(stats))
    assert back == stats
    assert stats_to_record(stats)["acceptance"] == 0.7  # the derived figures go along for readers
    assert stats_to_record(None) == {}
    partial = stats_from_record({"tokens": "many", "tokens_per_second": [1], "speculative": "yes",
                                 "rounds": -1, "seconds": math.inf, "accepted": 3})
    assert partial == Stats(accepted=3)
    assert stats_from_record({"tokens": "many"}) is None and stats_from_record(7) is None


def test_stored_timings_are_not_rounded_so_a_restored_reply_shows_the_same_rate():
    # Found by CI: a reply read 63.5 tok/s live and 63.6 once restored, because the record
    # kept the exported seconds (rounded to 4 places) over the raw ones.
    stats = Stats(tokens=20, seconds=0.31472431, draft_seconds=0.123456789, target_seconds=0.98765432)
    back = stats_from_record(stats_to_record(stats))
    assert back.seconds == stats.seconds and back.draft_seconds == stats.draft_seconds
    assert f"{back.tokens_per_second:.1f}" == f"{stats.tokens_per_second:.1f}"


def test_a_stored_error_and_status_read_back_defensively():
    assert error_from_record({"error": "boom"}) == "boom" and error_from_record({"error": 3}) == "3"
    assert error_from_record({}) is None and error_from_record("x") is None
    assert shown_state("streaming") is MessageState.INTERRUPTED  # nobody is writing it here
    assert shown_state("stopped") is MessageState.STOPPED
    assert shown_state("weird") is MessageState.COMPLETE and shown_state(None) is MessageState.COMPLETE


def test_reply_meta_names_what_was_loaded_or_what_the_settings_ask_for():
    settings = Settings(target_path="/m/target.gguf", draft_path="/m/draft.gguf", temperature=0.5, seed=3,
                        max_tokens=99, system_prompt="Be brief.")
    waiting = reply_meta(settings, None)
    assert (waiting["target"], waiting["draft"], waiting["speculation"]) == ("target.gguf", "draft.gguf", True)
    assert waiting["sampling"]["temperature"] == 0.5 and waiting["sampling"]["seed"] == 3
    assert waiting["max_tokens"] == 99 and waiting["system_prompt"] == "Be brief."
    info = LoadInfo(target_name="T", target_path="/m/t", draft_name="", drafter=DrafterKind.NONE,
                    speculation_available=False)
    loaded = reply_meta(settings, info)
    assert (loaded["target"], loaded["draft"], loaded["drafter"], loaded["speculation"]) == (
        "T", "", DrafterKind.NONE, False)
    assert reply_meta(Settings(), None)["target"] == "demo target"
