"""Keeps the chat on screen and the history store in step: the window's chats survive restarts.

The widgets only display and emit; this controller answers them. It lives on the GUI
thread next to the store (sqlite3 connections stay on the thread that opened them),
records what the chat controller reports — the first user message creates a
conversation, a streaming reply goes into a ``ReplyWriter`` batch by batch, the finished
reply gets its stats and status — and rebuilds a stored conversation in the chat view,
token kinds and all, when one is chosen in the conversation sidebar. The record
conversions are ``app.session.records``'; exports and imports are ``HistoryFiles``'.

Its actions (``actions``: export, import, search, rename, delete) are made here; the
window places them in its menus.

A store error (disk full, read-only file) never interrupts chatting: it becomes one
notice above the conversation, and the next save tries again. A stored conversation
that cannot be shown (written by another tool, or by an old import) becomes a notice
too, never an exception at start-up; a long one shows its newest ``SHOWN_MESSAGES``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QProgressBar, QWidget

from app.engine.types import TokenEvent
from app.session.records import (
    error_from_record,
    events_from_records,
    records_from_events,
    shown_state,
    stats_from_record,
    stats_to_record,
)
from app.session import chat_states
from app.storage import paths
from app.storage.history import COMMIT_INTERVAL_S, HistoryStore, ReplyWriter
from app.ui.chat_view import ChatView
from app.ui.message_view import ASSISTANT, COMPLETE, FAILED, INTERRUPTED, STOPPED, USER, ChatMessage
from app.ui.notices import ERROR, INFO, WARNING, NoticeArea
from app.ui.sidebar import ConversationSidebar
from app.ui.stats_panel import StatsPanel
from app.window.chat_controller import ChatController
from app.window.history_files import EXPORT_FORMATS, IMPORT_WAIT_S, HistoryFiles, StoreCalls

__all__ = ["EXPORT_FORMATS", "IMPORT_WAIT_S", "SHOWN_MESSAGES", "HistoryController"]

NOTICE_KEY = "history"             # how the history was opened (moved aside, in memory)
RESTORE_NOTICE_KEY = "history-restore"  # a stored conversation that could not be shown whole
SHOWN_MESSAGES = 200  # newest messages of a conversation put on screen (each is a widget)
SEARCH_DELAY_MS = 150  # search once typing pauses, not on every key
NO_SELECTION = -1  # a conversation id that never exists: the sidebar selects nothing
# How often a reply whose tokens have paused is committed anyway: the writer commits
# only when told, and a long round must not leave its last tokens unsaved.
FLUSH_INTERVAL_MS = int(COMMIT_INTERVAL_S * 1000) // 2

log = logging.getLogger(__name__)


class HistoryController(QObject):
    """Records the chat in ``store`` and drives the conversation sidebar."""

    conversation_shown = Signal()  # a stored conversation is on screen (opened, or another branch)

    def __init__(self, store: HistoryStore, *, chat: ChatController, chat_view: ChatView, stats: StatsPanel,
                 notices: NoticeArea, sidebar: ConversationSidebar, import_bar: QProgressBar,
                 reply_meta: Callable[[], dict[str, Any]], say: Callable[[str, int], None],
                 dialog_parent: QWidget) -> None:
        """``reply_meta()`` is what a reply starting now is asked with (models, settings);
        ``say(text, ms)`` shows a passing line; dialogs open over ``dialog_parent``, which
        also owns this. The window places ``sidebar`` and ``import_bar``."""
        super().__init__(dialog_parent)
        self.chat = chat
        self.chat_view = chat_view
        self.stats = stats
        self.notices = notices
        self.sidebar = sidebar
        self._reply_meta = reply_meta
        self._calls = StoreCalls(store, notices, caught_up=self._saves_caught_up)
        self.current_id: int | None = None
        self._stored_ids: dict[ChatMessage, int] = {}   # messages on screen -> their rows
        self._writers: dict[ChatMessage, ReplyWriter] = {}
        self._alternative_of: int | None = None  # Regenerate: the next reply is a version of this one
        self.files = HistoryFiles(self._calls, current=lambda: self.current_id, flush=self._flush_writers,
                                  imported=self._imported, notices=notices, import_bar=import_bar, say=say,
                                  dialog_parent=dialog_parent)
        self._build_actions()

        # Refreshing rebuilds the list, which must not happen inside the list's own
        # signals (selection change, inline edit): refreshes run from the event loop.
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.timeout.connect(self.refresh_sidebar)
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self._flush_paused_replies)

        chat.conversation_cleared.connect(self._on_cleared)
        chat.conversation = lambda: self.current_id  # the engine keeps each chat's cache by it
        self._prune_states()
        chat.user_message_added.connect(self._on_user_message)
        chat.reply_started.connect(self._on_reply_started)
        chat.reply_tokens.connect(self._on_reply_tokens)
        chat.reply_finished.connect(self._on_reply_finished)
        chat.reply_removed.connect(self._on_reply_removed)
        sidebar.new_requested.connect(chat.new_chat)
        sidebar.conversation_selected.connect(self.open_conversation)
        sidebar.rename_requested.connect(self.rename)
        sidebar.delete_requested.connect(self.delete)
        sidebar.undo_delete_requested.connect(self.undo_delete)
        sidebar.search_changed.connect(lambda _text: self._schedule_refresh(SEARCH_DELAY_MS))

        if store.notice:
            level = WARNING if store.path is not None else ERROR
            notices.show_notice(NOTICE_KEY, store.notice, level)
        self.refresh_sidebar()
        newest = self._read(lambda: store.list_conversations()[:1], default=[])
        if newest:  # carry on where the last session left off
            self.open_conversation(newest[0].id)
        self._update_actions()

    def _build_actions(self) -> None:
        def action(text: str, shortcut, tip: str, slot) -> QAction:
            made = QAction(text, self)
            if shortcut:
                made.setShortcut(QKeySequence(shortcut))
                made.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            made.setToolTip(tip)
            made.triggered.connect(slot)
            return made

        self.search_chats_action = action("&Search chats", QKeySequence.StandardKey.Find,
                                          "Search chat titles and text (Ctrl+F)", self.focus_search)
        self.rename_chat_action = action("Re&name chat", "F2", "Rename the selected chat (F2)",
                                         lambda: self.sidebar.rename_current())
        # No window-wide Delete shortcut: Delete edits text in the composer. The list
        # itself deletes the selected chat on Delete.
        self.delete_chat_action = action("&Delete chat", None,
                                         "Delete the selected chat (Delete in the list; undo follows)",
                                         lambda: self.sidebar.delete_current())
        self.chat_actions = (self.search_chats_action, self.rename_chat_action, self.delete_chat_action)
        self.file_actions = self.files.actions
        self.actions = self.file_actions + self.chat_actions

    # The files part, as the window and the tests reach it.
    @property
    def store(self) -> HistoryStore | None:
        return self._calls.store

    @property
    def import_finished(self):
        return self.files.import_finished

    @property
    def import_bar(self) -> QProgressBar:
        return self.files.import_bar

    @property
    def importing(self) -> bool:
        return self.files.importing

    def import_file(self, path: Path) -> int | None:
        return self.files.import_file(path)

    def export_current(self, path: Path, fmt: str) -> Path | None:
        return self.files.export_current(path, fmt)

    def suggested_file_name(self) -> str:
        return self.files.suggested_file_name()

    def focus_search(self) -> None:
        search = self.sidebar.search_edit
        search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        search.selectAll()

    def _imported(self, conversation_id: int) -> None:
        self.open_conversation(conversation_id)
        self._schedule_refresh()

    def _flush_writers(self) -> None:
        for writer in self._writers.values():
            self._call(writer.flush)

    # --- what the sidebar and the menus ask for ----------------------------------------

    @property
    def refresh_pending(self) -> bool:
        return self._refresh_timer.isActive()

    def refresh_sidebar(self) -> None:
        """Show the conversations matching the search, newest first, the open one selected."""
        self._refresh_timer.stop()
        if self.store is None:
            return
        search = self.sidebar.search_edit.text()
        conversations = self._read(lambda: self.store.list_conversations(search), default=None)
        if conversations is not None:
            self.sidebar.set_conversations(conversations, self._selection_id())

    def open_conversation(self, conversation_id: int) -> bool:
        """Show a stored conversation in the chat view; the next message continues it."""
        if self.store is None or conversation_id == self.current_id:
            return False
        summary = self._read(lambda: self.store.conversation(conversation_id))
        if summary is None:
            return False  # deleted meanwhile, or unreadable
        search = self.sidebar.search_edit.text()
        if search.strip():  # found by a search: show the branch that holds the text
            self._call(lambda: self.store.show_branch_with(conversation_id, search))
        messages = self._read(lambda: self.store.messages(conversation_id, last=SHOWN_MESSAGES), default=None)
        if messages is None:
            return False
        self.chat.clear()  # a reply still streaming is saved as stopped first
        self._forget_screen()
        self.notices.clear(RESTORE_NOTICE_KEY)
        try:
            self._show_messages(messages)
        except Exception as exc:  # noqa: BLE001 — whatever is stored, the window must start
            log.exception("Showing conversation %s failed", conversation_id)
            self.chat.clear()
            self._forget_screen()
            self.current_id = None
            self.notices.show_notice(
                RESTORE_NOTICE_KEY, f"Could not show the chat “{summary.title or 'Untitled chat'}”: "
                f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}. It stays in the history "
                "(export it to look inside).", ERROR)
            self._schedule_refresh()
            self._update_actions()
            return False
        self.current_id = conversation_id
        self.conversation_shown.emit()
        hidden = summary.message_count - len(messages)
        if hidden > 0:
            self.notices.show_notice(
                RESTORE_NOTICE_KEY, f"Showing the newest {len(messages):,} of {summary.message_count:,} "
                "messages; the earlier ones stay in the history and its exports, and are not sent "
                "to the model.", INFO)
        self._schedule_refresh()
        self._update_actions()
        return True

    def _show_messages(self, messages: list) -> None:
        chat = self.chat_view
        last_stats = None
        for stored in messages:
            if stored.role == USER:
                message = chat.add_user_message(str(stored.text))
            elif stored.role == ASSISTANT:
                stats = stats_from_record(stored.stats)
                message = chat.add_reply(events_from_records(stored.tokens, stored.text), stats,
                                         shown_state(stored.status))
                error = error_from_record(stored.stats)
                if error:
                    message.fail(error)
                last_stats = stats or last_stats
            else:
                continue  # system messages are settings, not part of the chat on screen
            self._stored_ids[message] = stored.id
        if last_stats is not None:
            self.stats.show_stats(last_stats, live=False)

    # --- for the branches (app/window/branch_controller.py) ------------------------------

    def stored_id(self, message: ChatMessage) -> int | None:
        return self._stored_ids.get(message)

    def remember(self, message: ChatMessage, stored_id: int) -> None:
        self._stored_ids[message] = stored_id

    def forget(self, messages: list[ChatMessage]) -> None:
        """Messages taken off the screen (an edit): their rows stay, on their branch."""
        for message in messages:
            self._stored_ids.pop(message, None)
            self._writers.pop(message, None)

    def reopen(self) -> bool:
        """Show the open conversation again (its shown branch changed)."""
        conversation_id, self.current_id = self.current_id, None
        return conversation_id is not None and self.open_conversation(conversation_id)

    def call(self, operation: Callable[[], Any], default: Any = None) -> Any:
        return self._call(operation, default)

    def read(self, operation: Callable[[], Any], default: Any = None) -> Any:
        return self._read(operation, default)

    def rename(self, conversation_id: int, title: str) -> None:
        if self.store is not None:
            self._call(lambda: self.store.rename_conversation(conversation_id, title))
            self._schedule_refresh()

    def delete(self, conversation_id: int) -> None:
        """Delete (undoably, until the next start); the open conversation closes first."""
        if self.store is None:
            return
        if conversation_id == self.current_id:
            self.chat.clear()
            self._forget_screen()
            self.current_id = None
            self._update_actions()
        self._call(lambda: self.store.delete_conversation(conversation_id))
        chat_states.forget(paths.chat_states_dir(), conversation_id)  # nothing of it stays on disk
        self._schedule_refresh()

    def _prune_states(self) -> None:
        """Saved caches of chats the history no longer has (deleted, purged at this start)
        are removed: a cache holds the conversation's words too."""
        if self.store is None or self.store.path != paths.history_db():
            return
        live = self._read(lambda: {c.id for c in self.store.list_conversations()}, default=None)
        if live is not None:
            chat_states.prune(paths.chat_states_dir(), live)

    def undo_delete(self, conversation_id: int) -> None:
        if self.store is None:
            return
        self._call(lambda: self.store.restore_conversation(conversation_id))
        if self.current_id is None and not self.chat_view.messages():
            self.open_conversation(conversation_id)  # nothing else open: bring it back into view
        self._schedule_refresh()

    def shutdown(self) -> None:
        """The window is closing: finish what streams (the window already ended it) and let go."""
        self._flush_timer.stop()
        self._refresh_timer.stop()
        self.files.shutdown()
        for reply, writer in list(self._writers.items()):
            self._finish(reply, writer, STOPPED)
        self._writers.clear()
        self._calls.retry_timer.stop()
        self._calls.store = None  # its opener closes it (and gives the saves that wait a last try)

    # --- what the chat reports --------------------------------------------------------

    def _on_cleared(self) -> None:
        self._forget_screen()
        self.current_id = None
        self._schedule_refresh()
        self._update_actions()

    def _on_user_message(self, message: ChatMessage) -> None:
        if self.store is None:
            return
        created = self.current_id is None
        if created:
            self.current_id = self._call(self.store.create_conversation, default=None)
            if self.current_id is None:
                return
        stored_id = self._call(lambda: self.store.add_message(self.current_id, USER, message.text()), default=None)
        if stored_id is not None:
            self._stored_ids[message] = stored_id
        elif created:  # no empty, untitled chat left behind; the next message tries again
            conversation_id, self.current_id = self.current_id, None
            self._call(lambda: self.store.delete_conversation(conversation_id), saves=False)
        self._update_actions()
        self._schedule_refresh()

    def _on_reply_started(self, reply: ChatMessage) -> None:
        if self.store is None or self.current_id is None:
            return
        meta = self._reply_meta()
        alternative, self._alternative_of = self._alternative_of, None
        if alternative is not None:  # Regenerate: a sibling of the earlier reply, which stays
            writer = self._call(lambda: self.store.begin_alternative(alternative, meta), default=None)
        else:
            writer = self._call(lambda: self.store.begin_reply(self.current_id, meta), default=None)
        if writer is None:
            return
        self._writers[reply] = writer
        self._stored_ids[reply] = writer.message_id
        self._flush_timer.start()

    def _on_reply_tokens(self, reply: ChatMessage, events: list[TokenEvent]) -> None:
        writer = self._writers.get(reply)
        if writer is not None:
            self._call(lambda: writer.append(records_from_events(events)))

    def _on_reply_finished(self, reply: ChatMessage) -> None:
        writer = self._writers.pop(reply, None)
        if writer is None:
            return
        if not self._writers:
            self._flush_timer.stop()
        if reply.status == FAILED:  # nothing worth keeping: the user message waits for Regenerate
            self._stored_ids.pop(reply, None)
            self._call(lambda: self.store.delete_message_and_after(writer.message_id))
        else:
            self._finish(reply, writer, reply.status if reply.status in (COMPLETE, INTERRUPTED) else STOPPED)
        self._schedule_refresh()

    def _on_reply_removed(self, reply: ChatMessage) -> None:
        """Regenerate: the old reply leaves the screen but stays in the store, and the new
        one is written as another version of it (‹ 1/2 ›)."""
        stored_id = self._stored_ids.pop(reply, None)
        self._writers.pop(reply, None)
        self._alternative_of = stored_id

    # --- internals ----------------------------------------------------------------------

    def _finish(self, reply: ChatMessage, writer: ReplyWriter, status: str) -> None:
        stats = stats_to_record(reply.stats)
        if reply.error:
            stats["error"] = reply.error
        # The writer has every token the chat showed: the chat forwards each batch.
        self._call(lambda: writer.finish(stats, status))

    def _saves_caught_up(self) -> None:
        """The saves that waited for another program's lock are written: the rows they
        made have their real ids now (``HistoryStore.saved_id``)."""
        store = self.store
        if store is None:
            return
        if self.current_id is not None:
            self.current_id = store.saved_id(self.current_id)
        self._stored_ids = {message: store.saved_id(row) for message, row in self._stored_ids.items()}
        for writer in self._writers.values():
            writer.message_id = store.saved_id(writer.message_id)
        self._schedule_refresh()
        self._update_actions()

    def _flush_paused_replies(self) -> None:
        for writer in self._writers.values():
            self._call(lambda: writer.append(()))  # commits only if the interval has passed

    def _forget_screen(self) -> None:
        # Replies were finished by the chat (reply_finished) before it cleared the view.
        self._stored_ids.clear()
        self._writers.clear()
        self._flush_timer.stop()

    def _schedule_refresh(self, delay_ms: int = 0) -> None:
        self._refresh_timer.start(delay_ms)

    def _selection_id(self) -> int:
        return self.current_id if self.current_id is not None else NO_SELECTION

    def _update_actions(self) -> None:
        self.files.set_has_conversation(self.current_id is not None)

    def _call(self, operation: Callable[[], Any], default: Any = None, *, saves: bool = True) -> Any:
        return self._calls.call(operation, default, saves=saves)

    def _read(self, operation: Callable[[], Any], default: Any = None) -> Any:
        return self._calls.read(operation, default)
