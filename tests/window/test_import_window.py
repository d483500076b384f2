"""Imports in the window: off the GUI thread with a progress bar, all or nothing, refused
with the first bad field; a stored conversation that cannot be shown never stops a start."""

from __future__ import annotations

import json
import time

import pytest
from PySide6.QtCore import QElapsedTimer, QTimer

from app.storage.history import HistoryStore
from app.storage.settings import Settings
from app.window import history_controller
from app.ui.notices import ERROR

from window_fixtures import REPLY_TIMEOUT_MS, wait_loaded
from bridge.fakes import ScriptedLoader, tokens

SETTINGS = Settings(target_path="/models/scripted.gguf", draft_path="/models/scripted-draft.gguf")


@pytest.fixture
def window_with_history(make_window, qtbot):
    opened = []

    def make(store=None):
        store = store or HistoryStore.open()
        window = make_window(SETTINGS, loader=ScriptedLoader(tokens("Hi", "!")), history_store=store)
        wait_loaded(qtbot, window)
        opened.append((window, store))
        return window, store

    yield make
    for window, store in opened:
        window.close()
        store.close()


def write_export(path, messages, title="Shared chat"):
    path.write_text(json.dumps({"format": "tandem-conversation", "version": 1, "title": title,
                                "created_at": 1.0, "updated_at": 1.0, "messages": messages}), encoding="utf-8")
    return path


def big_chat(count: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "text": f"message {i}",
             "tokens": [] if i % 2 == 0 else [{"t": f"message {i}", "k": "accepted"}]} for i in range(count)]


def test_a_hundred_thousand_message_import_keeps_the_window_responsive(window_with_history, qtbot, tmp_path):
    window, store = window_with_history()
    path = write_export(tmp_path / "big.json", big_chat(100_000))

    # A 20 ms timer on the GUI thread: the longest gap between its ticks is how long the
    # window was frozen at most.
    ticks: list[int] = []
    clock = QElapsedTimer()
    clock.start()
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(clock.elapsed()))
    timer.start(20)
    progress_seen = []
    window.history.import_bar.valueChanged.connect(lambda value: progress_seen.append(value))
    with qtbot.waitSignal(window.history.import_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        assert window.history.import_file(path) is None
        assert window.history.import_bar.isVisible() and window.history.importing
    timer.stop()

    conversation_id = blocker.args[0]
    assert conversation_id is not None and window.history.current_id == conversation_id
    assert store.conversation(conversation_id).message_count == 100_000
    assert progress_seen and not window.history.import_bar.isVisible()
    gaps = [later - earlier for earlier, later in zip(ticks, ticks[1:])]
    assert len(ticks) > 10 and max(gaps) < 1500, f"the window froze for {max(gaps)} ms"
    # The newest messages are on screen, and the notice says the rest stay in the history.
    shown = window.chat_view.messages()
    assert len(shown) == history_controller.SHOWN_MESSAGES
    assert shown[-1].text() == "message 99999"
    assert "newest 200 of 100,000" in window.notices.notice("history-restore").text()
    assert "Imported “Shared chat”" in window.notices.notice("history-file").text()


@pytest.mark.parametrize("messages, named", [
    ("not a list", "messages must be a list"),
    ([{"role": "user", "text": "ok"}, {"role": "assistant", "text": "x", "tokens": [{"t": "x", "p": [1]}]}],
     "messages[1].tokens[0].p must be a number"),
    ([{"role": "assistant", "text": "x", "stats": {"tokens": "lots"}}], "messages[0].stats.tokens"),
])
def test_a_hostile_import_is_refused_in_one_line_and_nothing_is_added(window_with_history, qtbot, tmp_path,
                                                                      messages, named):
    window, store = window_with_history()
    path = write_export(tmp_path / "shared.json", messages)
    with qtbot.waitSignal(window.history.import_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        window.history.import_file(path)
    assert blocker.args == [None]
    notice = window.notices.notice("history-file")
    assert notice is not None and named in notice.text() and "\n" not in notice.text()
    assert store.list_conversations() == []
    assert window.history.files.import_action.isEnabled()


def test_a_second_import_waits_for_the_first(window_with_history, qtbot, tmp_path):
    window, store = window_with_history()
    first = write_export(tmp_path / "first.json", big_chat(20_000))
    second = write_export(tmp_path / "second.json", big_chat(2))
    with qtbot.waitSignal(window.history.import_finished, timeout=REPLY_TIMEOUT_MS):
        window.history.import_file(first)
        assert not window.history.files.import_action.isEnabled()
        window.history.import_file(second)
        assert "another import is still running" in window.notices.notice("history-file").text()
    assert len(store.list_conversations()) == 1


def test_closing_the_window_during_an_import_adds_nothing(make_window, qtbot, tmp_path):
    store = HistoryStore.open()
    window = make_window(SETTINGS, loader=ScriptedLoader(tokens("Hi")), history_store=store)
    wait_loaded(qtbot, window)
    path = write_export(tmp_path / "big.json", big_chat(100_000))
    window.history.import_file(path)
    qtbot.waitUntil(lambda: window.history.import_bar.maximum() > 0, timeout=REPLY_TIMEOUT_MS)  # counting rows
    started = time.monotonic()
    window.close()
    assert time.monotonic() - started < history_controller.IMPORT_WAIT_S + 5
    count = store.list_conversations()
    assert count == [] or count[0].message_count == 100_000  # all or nothing, never a part
    store.close()


def seed_damaged(store) -> int:
    """A conversation as an old import or another tool left it: wrong types everywhere."""
    conversation = store.create_conversation("damaged")
    db = store._db
    db.execute("INSERT INTO messages (conversation_id, role, text, tokens, status, meta, stats, created_at, "
               "updated_at) VALUES (?, 'user', 42, '\"not a list\"', 'complete', '[]', '7', 0, 0)", (conversation,))
    db.execute("INSERT INTO messages (conversation_id, role, text, tokens, status, meta, stats, created_at, "
               "updated_at) VALUES (?, 'assistant', 'Hi', ?, 'weird', '{}', ?, 0, 0)",
               (conversation, json.dumps(["x", {"t": 5}, {"t": "Hi", "k": "corrected", "d": [1], "p": "high"}]),
                json.dumps({"tokens": "many", "tokens_per_second": [1], "speculative": "yes", "error": 3})))
    return conversation


def test_damaged_stored_data_still_opens_at_start(window_with_history, qtbot):
    store = HistoryStore.open()
    seed_damaged(store)
    window, _ = window_with_history(store)
    user, reply = window.chat_view.messages()
    assert user.text() == "42" and reply.text() == "Hi"
    assert window.history.current_id is not None


def test_a_conversation_that_cannot_be_shown_is_a_notice_not_a_failed_start(window_with_history, qtbot,
                                                                            monkeypatch):
    store = HistoryStore.open()
    conversation = store.create_conversation("cursed")
    store.add_message(conversation, "user", "hello")
    monkeypatch.setattr(history_controller.HistoryController, "_show_messages",
                        lambda self, messages: (_ for _ in ()).throw(RuntimeError("cannot draw this")))
    window, _ = window_with_history(store)  # the newest conversation is opened at start
    notice = window.notices.notice("history-restore")
    assert notice is not None and notice.level == ERROR
    assert "“cursed”" in notice.text() and "cannot draw this" in notice.text()
    assert window.history.current_id is None and window.chat_view.messages() == []
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.send("still works")  # a new chat starts as usual
