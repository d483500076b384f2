"""The history held locked by another program (a second Tandem, a backup tool, a SQLite
browser): a save waits a moment, never SQLite's long busy timeout, then waits its turn
in the store's journal; released, every save is written, in order, nothing lost."""

from __future__ import annotations

import sqlite3
import time

import pytest

from app.storage.history import HistoryStore, token_record
from app.storage.pending_writes import NotSavedYet, PendingId

SLOW_SAVE_S = 3.0  # a hang guard: a lock wait of SQLite's old 30 s (or even 5 s) fails it


@pytest.fixture
def store(tmp_path):
    opened = HistoryStore.open(tmp_path / "history.sqlite3")
    yield opened
    opened.close()


@pytest.fixture
def locker(store):
    """Another program's connection, holding the write lock until ``release()``."""
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    yield other
    if other.in_transaction:
        other.execute("ROLLBACK")
    other.close()


def timed(operation):
    started = time.monotonic()
    result = operation()
    return result, time.monotonic() - started


def test_saves_under_a_lock_return_at_once_and_are_written_once_it_goes(store, locker):
    conversation, seconds = timed(lambda: store.create_conversation())
    assert isinstance(conversation, PendingId) and conversation < 0 and seconds < SLOW_SAVE_S
    question, seconds = timed(lambda: store.add_message(conversation, "user", "Saved later?"))
    assert isinstance(question, PendingId) and seconds < SLOW_SAVE_S  # queued behind, not tried
    writer = store.begin_reply(conversation)
    for word in ("Yes", ",", " later"):
        writer.append([token_record(word, "accepted")])
        writer.flush()
    writer.finish({"tokens": 3})
    assert store.pending_writes == 4  # conversation, question, reply row, its updates merged into one
    with pytest.raises(NotSavedYet):
        store.messages(conversation)
    assert store.list_conversations() == []  # nothing is in the file yet
    assert store.retry_pending() == 4          # still locked: all wait, in order

    locker.execute("ROLLBACK")
    assert store.retry_pending() == 0
    real = store.saved_id(conversation)
    assert real > 0 and store.saved_id(question) > 0
    [user, reply] = store.messages(real)
    assert (user.text, reply.text, reply.status, reply.stats) == ("Saved later?", "Yes, later", "complete",
                                                                 {"tokens": 3})
    assert [t["text"] for t in reply.tokens] == ["Yes", ",", " later"]
    assert store.messages(conversation) == [user, reply]  # the pending id still finds them
    assert store.list_conversations()[0].title == "Saved later?"


def test_a_change_that_cannot_wait_in_line_is_refused_while_saves_wait(store, locker):
    from app.storage.pending_writes import HistoryLocked

    locker.execute("ROLLBACK")
    conversation = store.create_conversation()
    first = store.add_message(conversation, "user", "one")
    locker.execute("BEGIN EXCLUSIVE")
    store.add_message(conversation, "user", "two")  # waits
    locker.execute("ROLLBACK")
    with pytest.raises(HistoryLocked):
        store.switch_branch(first)  # would run before "two": refused until the journal is empty
    assert store.retry_pending() == 0
    assert [m.text for m in store.messages(conversation)] == ["one", "two"]


def test_closing_gives_the_waiting_saves_a_last_try(tmp_path):
    path = tmp_path / "history.sqlite3"
    store = HistoryStore.open(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    conversation = store.create_conversation()
    store.add_message(conversation, "user", "kept at close")
    other.execute("ROLLBACK")
    other.close()
    store.close()
    with HistoryStore.open(path) as again:
        [summary] = again.list_conversations()
        assert [m.text for m in again.messages(summary.id)] == ["kept at close"]
