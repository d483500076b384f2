"""Chat history end to end on the real demo pair: a conversation survives closing the window."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.engine.types import TokenKind
from app.storage.history import HistoryStore
from app.ui.message_view import COMPLETE

from window_fixtures import demo_settings, send_and_wait, wait_loaded
from .test_chat_window_real import PROMPT, coloured_runs


def kinds_and_text(message) -> list[tuple[str, TokenKind, str | None]]:
    return [(e.text, e.kind, e.draft_text) for e in message.events]


def test_a_conversation_survives_the_window_with_its_colours(make_window, demo_models, qtbot):
    # A fixed draft length: 'auto' times the machine and may decode a short reply plainly.
    settings = demo_settings(demo_models, max_tokens=20, draft_max=4)
    first_store = HistoryStore.open()
    window = make_window(settings, history_store=first_store)
    wait_loaded(qtbot, window)
    reply = send_and_wait(qtbot, window, PROMPT)
    assert reply.status == COMPLETE and reply.text().strip()
    assert TokenKind.ACCEPTED in {e.kind for e in reply.events}  # it speculated: there are colours to keep
    before_events, before_colours, before_stats = kinds_and_text(reply), coloured_runs(reply), reply.stats_label.text()
    window.close()
    first_store.close()

    store = HistoryStore.open()  # what the next start opens: same TANDEM_HOME
    try:
        window = make_window(settings, history_store=store)
        wait_loaded(qtbot, window)
        qtbot.waitUntil(lambda: not window.history.refresh_pending, timeout=5000)
        sidebar = window.history.sidebar
        assert [sidebar.list.item(row).text() for row in range(sidebar.list.count())] == [PROMPT]

        window.new_chat()  # then choose it in the sidebar, as a user would
        qtbot.waitUntil(lambda: sidebar.current_id() is None, timeout=5000)
        rect = sidebar.list.visualItemRect(sidebar.list.item(0))
        qtbot.mouseClick(sidebar.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        user, restored = window.chat_view.messages()
        assert user.text() == PROMPT
        assert restored.text() == reply.text() and restored.status == COMPLETE
        assert kinds_and_text(restored) == before_events
        assert coloured_runs(restored) == before_colours
        assert restored.stats_label.text() == before_stats

        stored = [m for m in store.messages(window.history.current_id) if m.role == "assistant"][0]
        assert stored.meta["target"] == demo_models.target.name and stored.meta["draft"] == demo_models.draft.name
        assert stored.meta["speculation"] is True and stored.meta["sampling"]["temperature"] == 0.0

        follow_up = send_and_wait(qtbot, window, "Another one, please.")  # continues the restored chat
        assert follow_up.status == COMPLETE and follow_up.text().strip()
        assert [m.role for m in store.messages(window.history.current_id)] == [
            "user", "assistant", "user", "assistant"]
    finally:
        window.close()
        store.close()


def test_a_reopened_chat_reads_only_its_new_turn_and_a_deleted_one_leaves_no_state(make_window, demo_models,
                                                                                   qtbot, tandem_home):
    """The chat's cache goes to disk beside the history when the window closes (the
    engine's end); the next start's follow-up in that chat puts it back and reads only
    the new turn (app/session/chat_states.py). Deleting the chat removes it."""
    system = " ".join(f"Rule {i}: answer briefly and say which rule applied." for i in range(40))
    settings = demo_settings(demo_models, max_tokens=16, draft_max=4, n_ctx=2048, system_prompt=system)
    store = HistoryStore.open()
    window = make_window(settings, history_store=store)
    wait_loaded(qtbot, window)
    first = send_and_wait(qtbot, window, PROMPT)
    chat = window.history.current_id
    assert first.status == COMPLETE and first.stats.prompt_eval_tokens > 256  # a fresh engine read it all
    window.close()
    store.close()
    saved = tandem_home / "data" / "chat-states" / f"{chat}.state"
    assert saved.is_file()

    store = HistoryStore.open()
    try:
        window = make_window(settings, history_store=store)
        wait_loaded(qtbot, window)
        if window.history.current_id != chat:  # (the start may reopen the last chat itself)
            assert window.history.open_conversation(chat)
        follow_up = send_and_wait(qtbot, window, "Another one, please.")
        assert follow_up.status == COMPLETE and follow_up.text().strip()
        stats = follow_up.stats
        assert stats.prompt_tokens > 256 and stats.prompt_eval_tokens < 40, stats  # the new turn only
        window.history.delete(chat)
        assert not saved.exists()
    finally:
        window.close()
        store.close()
