"""Chat history in the window, on the scripted engine: recording, reopening, sidebar, export, bad files."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QLineEdit, QMenu

from app.engine.types import TokenEvent, TokenKind
from app.storage import paths
from app.storage.export import from_json
from app.storage.history import HistoryStore, token_record
from app.storage.settings import Settings
from app.ui.message_view import COMPLETE, INTERRUPTED, STOPPED

from window_fixtures import REPLY_TIMEOUT_MS, send_and_wait, wait_loaded
from bridge.fakes import ScriptedLoader, tokens

SETTINGS = Settings(target_path="/models/scripted.gguf", draft_path="/models/scripted-draft.gguf",
                    temperature=0.0, draft_max=4)
# One of each kind, a corrected token with what the draft had proposed.
MIXED = [TokenEvent(1, "Hello", TokenKind.ACCEPTED), TokenEvent(2, " there", TokenKind.CORRECTED, 9, " their", 0.25),
         TokenEvent(3, ",", TokenKind.BONUS), TokenEvent(4, " friend", TokenKind.PLAIN)]
SLOW = tokens(*["tok "] * 2000)


@pytest.fixture
def history_window(make_window, qtbot):
    """``make(events, ...)`` -> (window, loader, store): a loaded window that keeps its chats."""
    opened = []

    def make(events=MIXED, *, delay=0.0, store=None):
        store = store or HistoryStore.open()
        loader = ScriptedLoader(events, delay=delay)
        window = make_window(SETTINGS, loader=loader, history_store=store)
        wait_loaded(qtbot, window)
        settle(qtbot, window)
        opened.append((window, store))
        return window, loader, store

    yield make
    for window, store in opened:
        window.close()  # saves a reply still streaming before its store goes
        store.close()


def settle(qtbot, window) -> None:
    """Let the sidebar catch up (it refreshes from the event loop, not inside its own signals)."""
    qtbot.wait(1)
    qtbot.waitUntil(lambda: not window.history.refresh_pending, timeout=5000)


def shown(window) -> list[tuple[str, str, list]]:
    return [(m.role, m.text(), [(e.text, e.kind, e.draft_text, e.draft_prob) for e in m.events])
            for m in window.chat_view.messages()]


def sidebar_titles(window) -> list[str]:
    items = window.history.sidebar.list
    return [items.item(row).text() for row in range(items.count())]


def click_row(qtbot, window, row: int) -> None:
    items = window.history.sidebar.list
    rect = items.visualItemRect(items.item(row))
    qtbot.mouseClick(items.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    settle(qtbot, window)


def stored_reply(store, conversation_id):
    replies = [m for m in store.messages(conversation_id) if m.role == "assistant"]
    assert len(replies) == 1
    return replies[0]


def test_the_first_message_starts_a_conversation_that_keeps_kinds_models_settings_and_stats(history_window, qtbot):
    window, _, store = history_window()
    assert sidebar_titles(window) == [] and not window.history.files.export_json_action.isEnabled()
    reply = send_and_wait(qtbot, window, "  What rhymes with\norange? ")
    settle(qtbot, window)

    [conversation] = store.list_conversations()
    assert conversation.title == "What rhymes with orange?"
    assert window.history.current_id == conversation.id
    assert sidebar_titles(window) == ["What rhymes with orange?"]
    assert window.history.sidebar.current_id() == conversation.id
    user, stored = store.messages(conversation.id)
    assert (user.role, user.text) == ("user", "What rhymes with\norange?")
    assert stored.text == reply.text() == "Hello there, friend" and stored.status == "complete"
    assert stored.tokens == [token_record("Hello", "accepted"), token_record(" there", "corrected", " their", 0.25),
                             token_record(",", "bonus"), token_record(" friend", "plain")]
    assert stored.meta["target"] == "scripted.gguf" and stored.meta["draft"] == "scripted-draft.gguf"
    assert stored.meta["speculation"] is True and stored.meta["draft_max"] == 4
    assert stored.meta["sampling"]["temperature"] == 0.0
    assert stored.stats["tokens"] == 4 and stored.stats["stop_reason"] == "eos"
    assert window.history.files.export_json_action.isEnabled()


def test_a_conversation_reopens_as_it_was_and_continues_with_its_history(history_window, qtbot):
    window, loader, store = history_window()
    send_and_wait(qtbot, window, "first question")
    before = shown(window)
    window.new_chat()
    settle(qtbot, window)
    assert window.chat_view.messages() == [] and window.history.sidebar.current_id() is None

    click_row(qtbot, window, 0)
    assert shown(window) == before
    reply = window.chat_view.messages()[1]
    assert reply.status == COMPLETE and reply.stats.tokens == 4
    assert reply.stats_label.text().startswith("4 tokens")
    assert window.side_panel.stats.tokens_label.text() == "4"

    loader.engine.events = tokens("More", ".")
    send_and_wait(qtbot, window, "second question")
    assert loader.models.histories[-1] == (("user", "first question"), ("assistant", "Hello there, friend"),
                                           ("user", "second question"))
    [conversation] = store.list_conversations()
    assert [m.text for m in store.messages(conversation.id)] == [
        "first question", "Hello there, friend", "second question", "More."]


def test_regenerate_replaces_the_stored_reply_also_in_a_reopened_conversation(history_window, qtbot):
    window, loader, store = history_window()
    send_and_wait(qtbot, window, "hi")
    conversation_id = window.history.current_id
    loader.engine.events = tokens("Second", " try")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.regenerate()
    assert [(m.role, m.text) for m in store.messages(conversation_id)] == [("user", "hi"), ("assistant", "Second try")]

    window.new_chat()
    window.history.open_conversation(conversation_id)
    loader.engine.events = tokens("Third", " try")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.regenerate()
    assert [(m.role, m.text) for m in store.messages(conversation_id)] == [("user", "hi"), ("assistant", "Third try")]
    assert loader.models.histories[-1] == (("user", "hi"),)


def test_new_chat_mid_reply_keeps_the_partial_reply_as_stopped(history_window, qtbot):
    window, _, store = history_window(SLOW, delay=0.005)
    reply = window.send("go on and on")
    qtbot.waitUntil(lambda: len(reply.events) >= 5, timeout=REPLY_TIMEOUT_MS)
    conversation_id = window.history.current_id
    with qtbot.waitSignal(window.reply_finished, timeout=5000) as finished:
        qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert finished.args[0] is reply and reply.status == STOPPED
    shown_text = reply.text()
    stored = stored_reply(store, conversation_id)
    assert stored.status == "stopped" and stored.text == shown_text and len(stored.tokens) == len(reply.events)
    assert window.chat_view.messages() == [] and window.history.current_id is None

    qtbot.waitUntil(lambda: not window.busy, timeout=REPLY_TIMEOUT_MS)
    assert stored_reply(store, conversation_id).text == shown_text  # late tokens went nowhere


def test_switching_conversations_mid_reply_keeps_it_as_stopped(history_window, qtbot):
    window, loader, store = history_window()
    send_and_wait(qtbot, window, "the older chat")
    older = window.history.current_id
    window.new_chat()
    loader.engine.events, loader.engine.delay = SLOW, 0.005
    reply = window.send("the newer chat")
    newer = window.history.current_id
    qtbot.waitUntil(lambda: len(reply.events) >= 3, timeout=REPLY_TIMEOUT_MS)
    settle(qtbot, window)
    assert sidebar_titles(window) == ["the newer chat", "the older chat"]

    with qtbot.waitSignal(window.reply_finished, timeout=5000):
        click_row(qtbot, window, 1)
    assert window.history.current_id == older
    assert [m.text() for m in window.chat_view.messages()] == ["the older chat", "Hello there, friend"]
    stored = stored_reply(store, newer)
    assert stored.status == "stopped" and stored.text == reply.text() != ""


def test_closing_the_window_mid_reply_keeps_it_as_stopped(history_window, qtbot):
    window, _, store = history_window(SLOW, delay=0.005)
    reply = window.send("long one")
    qtbot.waitUntil(lambda: len(reply.events) >= 3, timeout=REPLY_TIMEOUT_MS)
    conversation_id = window.history.current_id
    window.close()
    stored = stored_reply(store, conversation_id)
    assert stored.status == "stopped" and stored.text == reply.text() != ""


def test_a_reply_cut_off_by_a_crash_reopens_marked_interrupted_and_can_be_continued(history_window, qtbot):
    with HistoryStore.open() as store:  # what a killed session leaves behind
        conversation_id = store.create_conversation()
        store.add_message(conversation_id, "user", "tell me a story")
        writer = store.begin_reply(conversation_id, {"target": "scripted.gguf"})
        writer.append([token_record("Once", "accepted"), token_record(" upon", "corrected", " a", 0.5)])
        writer.flush()

    window, loader, store = history_window(tokens("The", " end"))
    assert window.history.current_id == conversation_id  # the newest chat opens at start
    user, reply = window.chat_view.messages()
    assert reply.status == INTERRUPTED and reply.text() == "Once upon"
    assert reply.state_label.text() == "interrupted" and not reply.state_label.isHidden()
    assert [e.kind for e in reply.events] == [TokenKind.ACCEPTED, TokenKind.CORRECTED]

    send_and_wait(qtbot, window, "go on")
    assert loader.models.histories[-1] == (("user", "tell me a story"), ("assistant", "Once upon"),
                                           ("user", "go on"))
    assert [m.status for m in store.messages(conversation_id)] == ["complete", "interrupted", "complete", "complete"]


def test_a_corrupt_history_file_is_moved_aside_with_a_notice_and_chatting_starts_afresh(history_window, qtbot):
    database = paths.history_db()
    garbage = b"this is not a database\x00" * 100
    database.write_bytes(garbage)

    window, _, store = history_window()
    kept = [p for p in database.parent.iterdir() if p.name.startswith(database.name + ".bad-")]
    assert len(kept) == 1 and kept[0].read_bytes() == garbage
    notice = window.notices.notice("history")
    assert notice is not None and str(kept[0]) in notice.text() and notice.level == "warning"
    assert sidebar_titles(window) == [] and window.chat_view.messages() == []
    assert window.history.sidebar.empty_label.isVisible()

    send_and_wait(qtbot, window, "fresh start")
    assert [c.title for c in store.list_conversations()] == ["fresh start"]
    assert store.path == database


def test_export_markdown_and_json_from_the_window(history_window, qtbot, tmp_path, monkeypatch):
    window, _, store = history_window()
    assert window.export_conversation(tmp_path / "none.md", "markdown") is None  # nothing open yet
    send_and_wait(qtbot, window, "Export me")

    markdown = tmp_path / "chat.md"
    assert window.export_conversation(markdown, "markdown") == markdown
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith("# Export me") and "## User\n\nExport me" in text
    assert "## Assistant\n\nHello there, friend" in text and "4 tokens" in text

    chosen = tmp_path / "chosen.json"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *args, **kw: (str(chosen), "")))
    window.history.files.export_json_action.trigger()
    exported = from_json(chosen.read_text(encoding="utf-8"))
    assert exported.title == "Export me"
    user, reply = exported.messages
    assert [(t["text"], t["kind"]) for t in reply.tokens] == [(e.text, e.kind.value) for e in MIXED]
    assert reply.stats["tokens"] == 4 and reply.meta["target"] == "scripted.gguf"
    assert json.loads(chosen.read_text(encoding="utf-8"))["format"] == "tandem-conversation"

    # ... and an exported conversation comes back in as a new one, colours included.
    with qtbot.waitSignal(window.history.import_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        assert window.history.import_file(chosen) is None  # it runs on its own thread
    imported_id = blocker.args[0]
    assert imported_id is not None and window.history.current_id == imported_id
    assert [e.kind for e in window.chat_view.messages()[1].events] == [e.kind for e in MIXED]
    assert len(store.list_conversations()) == 2

    not_an_export = tmp_path / "notes.json"
    not_an_export.write_text('{"hello": 1}', encoding="utf-8")
    with qtbot.waitSignal(window.history.import_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        window.history.import_file(not_an_export)
    assert blocker.args == [None]
    assert "Not a Tandem conversation export" in window.notices.notice("history-file").text()
    assert len(store.list_conversations()) == 2


def test_sidebar_search_rename_and_delete_with_undo_drive_the_store(history_window, qtbot):
    with HistoryStore.open() as seed:
        bread = seed.create_conversation()
        seed.add_message(bread, "user", "How do I bake bread?")
        seed.add_message(bread, "assistant", "Knead the dough, then let it rise.")
        soup = seed.create_conversation()
        seed.add_message(soup, "user", "A quick soup?")
    window, _, store = history_window()
    sidebar = window.history.sidebar
    assert sidebar_titles(window) == ["A quick soup?", "How do I bake bread?"]
    assert window.history.current_id == soup

    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)  # Ctrl+F: search
    assert sidebar.search_edit.hasFocus()
    qtbot.keyClicks(sidebar.search_edit, "DOUGH")  # message text, any case
    settle(qtbot, window)
    assert sidebar_titles(window) == ["How do I bake bread?"]
    sidebar.search_edit.clear()
    settle(qtbot, window)
    assert sidebar.current_id() == soup  # the open chat stays selected through a search

    click_row(qtbot, window, 1)
    assert window.history.current_id == bread
    assert [m.text() for m in window.chat_view.messages()] == ["How do I bake bread?",
                                                              "Knead the dough, then let it rise."]
    window.chat_view.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_F2)  # F2 renames the open chat from anywhere in the window
    editor = sidebar.list.findChild(QLineEdit)
    assert editor is not None
    editor.selectAll()
    qtbot.keyClicks(editor, "Bread")
    with qtbot.waitSignal(sidebar.rename_requested, timeout=5000):  # the delegate commits from the loop
        qtbot.keyClick(editor, Qt.Key.Key_Return)
    settle(qtbot, window)
    assert store.conversation(bread).title == "Bread"
    assert "Bread" in sidebar_titles(window)

    sidebar.list.setFocus()
    qtbot.keyClick(sidebar.list, Qt.Key.Key_Delete)  # deletes the open chat
    settle(qtbot, window)
    assert store.conversation(bread) is None and [c.id for c in store.list_conversations()] == [soup]
    assert window.chat_view.messages() == [] and window.history.current_id is None
    assert sidebar.undo_bar.isVisible()

    qtbot.mouseClick(sidebar.undo_button, Qt.MouseButton.LeftButton)
    settle(qtbot, window)
    assert store.conversation(bread).title == "Bread"
    assert window.history.current_id == bread and len(window.chat_view.messages()) == 2
    assert sorted(sidebar_titles(window)) == ["A quick soup?", "Bread"]

    window.history.delete(soup)  # not the open one: the chat stays
    settle(qtbot, window)
    assert window.history.current_id == bread and sidebar_titles(window) == ["Bread"]


def test_a_failed_save_is_a_notice_and_chatting_goes_on(history_window, qtbot, monkeypatch):
    from app.storage.errors import StorageError

    window, _, store = history_window()

    def full(*_args, **_kwargs):
        raise StorageError("Could not save chat history: database or disk is full")

    monkeypatch.setattr(store, "add_message", full)
    reply = send_and_wait(qtbot, window, "hello")
    assert reply.status == COMPLETE
    assert "disk is full" in window.notices.notice("history-save").text()
    monkeypatch.undo()
    window.new_chat()
    send_and_wait(qtbot, window, "again")
    assert window.notices.notice("history-save") is None  # saving works again
    assert [c.title for c in store.list_conversations()] == ["again"]


def test_a_window_without_a_store_has_no_sidebar_or_history_actions(make_window, qtbot):
    window = make_window(SETTINGS, loader=ScriptedLoader(MIXED))
    assert window.history is None
    shown = [a.text() for menu in window.menuBar().findChildren(QMenu) for a in menu.actions() if a.isVisible()]
    assert "&New chat" in shown  # the menus are read
    assert "Export conversation as &Markdown…" not in shown and "&Search chats" not in shown
    assert window.splitter.count() == 2


def test_the_app_starts_with_its_history_and_sets_a_corrupt_file_aside(qtbot, qasync_loop, monkeypatch, tmp_path):
    """``app.cli.gui.launch`` opens the store from the data dir, gives it to the window and closes it."""
    import app.bridge.async_glue
    import app.ui.resources
    from app.cli.main import build_parser
    from app.cli.gui import launch
    from PySide6.QtWidgets import QApplication

    database = paths.history_db()
    database.write_bytes(b"garbage" * 50)
    seen = {}

    def run_app(_app):
        [window] = [w for w in QApplication.topLevelWidgets() if hasattr(w, "history") and w.isVisible()]
        seen["sidebar"] = window.history.sidebar.isVisibleTo(window)
        seen["notice"] = window.notices.notice("history").text()
        seen["store"] = window.history.store
        window.close()
        return 0

    monkeypatch.setattr(app.bridge.async_glue, "run_app", run_app)
    monkeypatch.setattr(app.ui.resources, "style_sheet", lambda: "")  # keep the test app's look
    assert launch(build_parser().parse_args(["--target", str(tmp_path / "missing.gguf")])) == 0

    assert seen["sidebar"] and "moved to" in seen["notice"] and str(database.parent) in seen["notice"]
    assert seen["store"].path == database and database.exists()
    with pytest.raises(Exception, match="closed"):
        seen["store"].list_conversations()  # closed when the app ended


def test_a_history_locked_by_another_program_never_freezes_the_window(history_window, qtbot, tmp_path):
    """Another program holds the history's write lock while a chat is sent and answered:
    the event loop keeps ticking (a hang guard, not a timing), a notice says why nothing
    is saved yet, and once the lock goes every message is written."""
    import sqlite3
    import time

    from PySide6.QtCore import QTimer

    from app.window.history_files import LOCK_NOTICE_KEY

    window, _, store = history_window(tokens("Saved", " later"))
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    ticks: list[float] = []
    clock = QTimer()
    clock.setInterval(20)
    clock.timeout.connect(lambda: ticks.append(time.monotonic()))
    clock.start()
    try:
        for question in ("Are you saved?", "And now?"):
            send_and_wait(qtbot, window, question)
        qtbot.wait(1200)  # a few of the history's retries, still locked
        assert window.notices.notice(LOCK_NOTICE_KEY) is not None
        assert "locked by another program" in window.notices.notice(LOCK_NOTICE_KEY).text()
        assert store.pending_writes > 0 and not other.execute("SELECT * FROM messages").fetchall()
    finally:
        clock.stop()
        other.execute("ROLLBACK")
        other.close()
    gaps = [later - earlier for earlier, later in zip(ticks, ticks[1:])]
    assert len(gaps) > 10 and max(gaps) < 1.0  # SQLite's busy wait would stop it for seconds per save
    qtbot.waitUntil(lambda: store.pending_writes == 0, timeout=10_000)
    qtbot.waitUntil(lambda: window.notices.notice(LOCK_NOTICE_KEY) is None, timeout=5000)
    [summary] = store.list_conversations()
    assert [(m.role, m.text, m.status) for m in store.messages(summary.id)] == [
        ("user", "Are you saved?", "complete"), ("assistant", "Saved later", "complete"),
        ("user", "And now?", "complete"), ("assistant", "Saved later", "complete")]
    assert window.history.current_id == summary.id  # the chat shown is the one saved
    settle(qtbot, window)
    assert sidebar_titles(window) == ["Are you saved?"]
