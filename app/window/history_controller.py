"""Keeps the chat window and the history store in step: the window's chats survive restarts.

The window and the sidebar only display and emit; this controller answers them. It lives
on the GUI thread next to the store (sqlite3 connections stay on the thread that opened
them), records what the window reports — the first user message creates a conversation,
a streaming reply goes into a ``ReplyWriter`` batch by batch, the finished reply gets its
stats and status — and rebuilds a stored conversation in the chat view, token kinds and
all, when one is chosen in the sidebar.

A store error (disk full, read-only file) never interrupts chatting: it becomes one
notice above the conversation, and the next save tries again. A stored conversation
that cannot be shown (written by another tool, or by an old import) becomes a notice
too, never an exception at start-up; a long one shows its newest ``SHOWN_MESSAGES``.
An import runs on its own thread (``ImportTask``) with a progress bar in the status bar.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import sqlite3
from pathlib import Path
from typing import Any, Callable, Iterable

from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QMainWindow, QProgressBar

from app.engine.types import Stats, TokenEvent, TokenKind
from app.errors import TandemError
from app.storage.export import import_conversation, read_export, to_json, to_markdown
from app.storage.files import atomic_write_text
from app.storage.history import (
    COMMIT_INTERVAL_S,
    HistoryStore,
    ReplyWriter,
    TokenRecord,
    token_record,
)
from app.window.import_task import ImportTask
from app.ui.message_view import ASSISTANT, COMPLETE, FAILED, INTERRUPTED, STOPPED, STREAMING, USER, ChatMessage
from app.ui.notices import ERROR, INFO, WARNING
from app.ui.sidebar import ConversationSidebar

# The controller is handed the chat window (app.window.main_window.MainWindow), which imports
# this module; it is typed as the QMainWindow it is, so the two do not import each other.
MainWindow = QMainWindow

# format -> (file suffix, file dialog filter)
EXPORT_FORMATS = {"markdown": (".md", "Markdown (*.md)"), "json": (".json", "Tandem conversation (*.json)")}
NOTICE_KEY = "history"             # how the history was opened (moved aside, in memory)
SAVE_NOTICE_KEY = "history-save"   # the store failing now; cleared when it works again
FILE_NOTICE_KEY = "history-file"   # an export or import that did not work
RESTORE_NOTICE_KEY = "history-restore"  # a stored conversation that could not be shown whole
SHOWN_MESSAGES = 200  # newest messages of a conversation put on screen (each is a widget)
IMPORT_WAIT_S = 5.0   # how long closing waits for an import to roll back
SIDEBAR_WIDTH = 230
SEARCH_DELAY_MS = 150  # search once typing pauses, not on every key
NO_SELECTION = -1  # a conversation id that never exists: the sidebar selects nothing
# How often a reply whose tokens have paused is committed anyway: the writer commits
# only when told, and a long round must not leave its last tokens unsaved.
FLUSH_INTERVAL_MS = int(COMMIT_INTERVAL_S * 1000) // 2
_STATS_FIELDS = {f.name for f in dataclasses.fields(Stats)}
# Stored status -> the reply's state on screen. 'streaming' found at load time belongs
# to a reply another Tandem is writing, or that died: either way it is not going on here.
_SHOWN_STATUS = {COMPLETE: COMPLETE, STOPPED: STOPPED, INTERRUPTED: INTERRUPTED, STREAMING: INTERRUPTED}

log = logging.getLogger(__name__)


class HistoryController(QObject):
    """Records the window's conversation in ``store`` and drives the conversation sidebar."""

    import_finished = Signal(object)  # the imported conversation's id, or None

    def __init__(self, window: MainWindow, store: HistoryStore,
                 sidebar: ConversationSidebar | None = None) -> None:
        super().__init__(window)
        self.window = window
        self.store: HistoryStore | None = store
        self.sidebar = sidebar or ConversationSidebar(window)
        self.sidebar.setObjectName("conversationSidebar")
        self.sidebar.setMinimumWidth(180)
        # Long titles end in "…" rather than widening the list behind a scroll bar.
        self.sidebar.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.sidebar.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.current_id: int | None = None
        self._stored_ids: dict[ChatMessage, int] = {}   # messages on screen -> their rows
        self._writers: dict[ChatMessage, ReplyWriter] = {}
        self._save_failing = False
        self._import: ImportTask | None = None
        self.import_bar = QProgressBar(window)
        self.import_bar.setObjectName("importProgress")
        self.import_bar.setMaximumWidth(220)
        self.import_bar.setFormat("Importing… %p%")
        self.import_bar.hide()
        window.statusBar().addPermanentWidget(self.import_bar)

        # Refreshing rebuilds the list, which must not happen inside the list's own
        # signals (selection change, inline edit): refreshes run from the event loop.
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.timeout.connect(self.refresh_sidebar)
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self._flush_paused_replies)

        window.set_conversation_sidebar(self.sidebar)
        column, panel = window.splitter.sizes()[1:]
        window.splitter.setSizes([SIDEBAR_WIDTH, max(column - SIDEBAR_WIDTH, 300), panel])
        window.conversation_cleared.connect(self._on_cleared)
        window.user_message_added.connect(self._on_user_message)
        window.reply_started.connect(self._on_reply_started)
        window.reply_tokens.connect(self._on_reply_tokens)
        window.reply_finished.connect(self._on_reply_finished)
        window.reply_removed.connect(self._on_reply_removed)
        sidebar = self.sidebar
        sidebar.new_requested.connect(window.new_chat)
        sidebar.conversation_selected.connect(self.open_conversation)
        sidebar.rename_requested.connect(self.rename)
        sidebar.delete_requested.connect(self.delete)
        sidebar.undo_delete_requested.connect(self.undo_delete)
        sidebar.search_changed.connect(lambda _text: self._schedule_refresh(SEARCH_DELAY_MS))

        if store.notice:
            level = WARNING if store.path is not None else ERROR
            window.notices.show_notice(NOTICE_KEY, store.notice, level)
        self.refresh_sidebar()
        newest = self._read(lambda: store.list_conversations()[:1], default=[])
        if newest:  # carry on where the last session left off
            self.open_conversation(newest[0].id)
        self._update_actions()

    # --- what the sidebar and the window ask for ---------------------------------------

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
        messages = self._read(lambda: self.store.messages(conversation_id, last=SHOWN_MESSAGES), default=None)
        if messages is None:
            return False
        self.window.clear_chat()  # a reply still streaming is saved as stopped first
        self._forget_screen()
        self.window.notices.clear(RESTORE_NOTICE_KEY)
        try:
            self._show_messages(messages)
        except Exception as exc:  # noqa: BLE001 — whatever is stored, the window must start
            log.exception("Showing conversation %s failed", conversation_id)
            self.window.clear_chat()
            self._forget_screen()
            self.current_id = None
            self.window.notices.show_notice(
                RESTORE_NOTICE_KEY, f"Could not show the chat “{summary.title or 'Untitled chat'}”: "
                f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}. It stays in the history "
                "(export it to look inside).", ERROR)
            self._schedule_refresh()
            self._update_actions()
            return False
        self.current_id = conversation_id
        hidden = summary.message_count - len(messages)
        if hidden > 0:
            self.window.notices.show_notice(
                RESTORE_NOTICE_KEY, f"Showing the newest {len(messages):,} of {summary.message_count:,} "
                "messages; the earlier ones stay in the history and its exports, and are not sent "
                "to the model.", INFO)
        self._schedule_refresh()
        self._update_actions()
        return True

    def _show_messages(self, messages: list) -> None:
        chat = self.window.chat_view
        last_stats = None
        for stored in messages:
            if stored.role == USER:
                message = chat.add_user_message(str(stored.text))
            elif stored.role == ASSISTANT:
                stats = stats_from_record(stored.stats)
                message = chat.add_reply(events_from_records(stored.tokens, stored.text), stats,
                                         _SHOWN_STATUS.get(stored.status, COMPLETE))
                error = stored.stats.get("error") if isinstance(stored.stats, dict) else None
                if error:
                    message.fail(str(error))
                last_stats = stats or last_stats
            else:
                continue  # system messages are settings, not part of the chat on screen
            self._stored_ids[message] = stored.id
        if last_stats is not None:
            self.window.side_panel.stats.show_stats(last_stats, live=False)

    def rename(self, conversation_id: int, title: str) -> None:
        if self.store is not None:
            self._call(lambda: self.store.rename_conversation(conversation_id, title))
            self._schedule_refresh()

    def delete(self, conversation_id: int) -> None:
        """Delete (undoably, until the next start); the open conversation closes first."""
        if self.store is None:
            return
        if conversation_id == self.current_id:
            self.window.clear_chat()
            self._forget_screen()
            self.current_id = None
            self._update_actions()
        self._call(lambda: self.store.delete_conversation(conversation_id))
        self._schedule_refresh()

    def undo_delete(self, conversation_id: int) -> None:
        if self.store is None:
            return
        self._call(lambda: self.store.restore_conversation(conversation_id))
        if self.current_id is None and not self.window.chat_view.messages():
            self.open_conversation(conversation_id)  # nothing else open: bring it back into view
        self._schedule_refresh()

    def export_current(self, path: Path, fmt: str) -> Path | None:
        """Write the open conversation as 'markdown' or 'json'; returns the path written."""
        if fmt not in EXPORT_FORMATS:
            raise ValueError(f"unknown export format {fmt!r}")
        if self.store is None or self.current_id is None:
            return None
        for writer in self._writers.values():
            self._call(writer.flush)  # a reply still streaming goes out as far as it got
        conversation = self._read(lambda: self.store.conversation(self.current_id))
        messages = self._read(lambda: self.store.messages(self.current_id), default=None)
        if conversation is None or messages is None:
            return None
        text = (to_markdown if fmt == "markdown" else to_json)(conversation, messages)
        try:
            atomic_write_text(path, text)
        except OSError as exc:
            self._notify(f"Could not export the conversation to {path}: {exc.strerror or exc}")
            return None
        return path

    @property
    def importing(self) -> bool:
        return self._import is not None

    def import_file(self, path: Path) -> int | None:
        """Add a conversation exported as JSON and open it, all of it or nothing.

        With a history file the work runs on a thread and this returns None at once:
        ``import_finished`` brings the id (or None) when it is done. An in-memory
        history (its file could not be opened) imports here and returns the id."""
        if self.store is None:
            return None
        path = Path(path)
        if self._import is not None:
            self._notify(f"Could not import {path.name}: another import is still running.")
            return None
        self.window.notices.clear(FILE_NOTICE_KEY)
        if self.store.path is None:  # in-memory: the only connection is this thread's
            try:
                exported = read_export(path)
            except OSError as exc:
                return self._import_failed(path, f"Could not read {path.name}: {exc.strerror or exc}")
            except TandemError as exc:
                return self._import_failed(path, str(exc))
            conversation_id = self._call(lambda: import_conversation(self.store, exported), default=None)
            if conversation_id is not None:
                self._import_done(conversation_id, exported.title or path.name)
            else:
                self.import_finished.emit(None)
            return conversation_id
        task = self._import = ImportTask(path, self.store.path, self)
        task.progressed.connect(self._on_import_progress)
        task.succeeded.connect(self._on_import_succeeded)
        task.failed.connect(self._on_import_failed)
        self.import_bar.setRange(0, 0)  # busy until the first count: reading and checking
        self.import_bar.setToolTip(f"Importing {path.name}")
        self.import_bar.show()
        self.window.import_action.setEnabled(False)
        task.start()
        return None

    @Slot(int, int)
    def _on_import_progress(self, done: int, total: int) -> None:
        self.import_bar.setRange(0, max(total, 1))
        self.import_bar.setValue(done)

    @Slot(int, str)
    def _on_import_succeeded(self, conversation_id: int, title: str) -> None:
        task = self._end_import()
        if task is not None:
            self._import_done(conversation_id, title or task.source.name)

    @Slot(str)
    def _on_import_failed(self, message: str) -> None:
        task = self._end_import()
        if task is not None and message:  # '' is a cancelled import: the window is closing
            self._import_failed(task.source, message)
        elif task is not None:
            self.import_finished.emit(None)

    def _end_import(self) -> ImportTask | None:
        task, self._import = self._import, None
        self.import_bar.hide()
        if self.store is not None:
            self.window.import_action.setEnabled(True)
        return task if self.store is not None else None

    def _import_done(self, conversation_id: int, title: str) -> None:
        self.open_conversation(conversation_id)
        self.window.notices.show_notice(FILE_NOTICE_KEY, f"Imported “{title}”.", INFO)
        self._schedule_refresh()
        self.import_finished.emit(conversation_id)

    def _import_failed(self, path: Path, message: str) -> None:
        self._notify(message if message.startswith("Could not") else f"Could not import {path.name}: {message}")
        self.import_finished.emit(None)
        return None

    def suggested_file_name(self) -> str:
        conversation = (self._read(lambda: self.store.conversation(self.current_id))
                        if self.store is not None and self.current_id is not None else None)
        title = conversation.title if conversation is not None else ""
        return re.sub(r"[^\w\- ]+", "", title).strip()[:60] or "conversation"

    def shutdown(self) -> None:
        """The window is closing: finish what streams (the window already ended it) and let go."""
        self._flush_timer.stop()
        self._refresh_timer.stop()
        if self._import is not None:
            # Rolled back at its next batch; a thread still parsing a big file is left to
            # the process's end, which rolls back its transaction all the same.
            self._import.cancel()
            self._import.wait(IMPORT_WAIT_S)
            self._import = None
        for reply, writer in list(self._writers.items()):
            self._finish(reply, writer, STOPPED)
        self._writers.clear()
        self.store = None  # its opener closes it

    # --- what the window reports --------------------------------------------------------

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
        meta = reply_meta(self.window)
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
            self._finish(reply, writer, COMPLETE if reply.status == COMPLETE else STOPPED)
        self._schedule_refresh()

    def _on_reply_removed(self, reply: ChatMessage) -> None:
        """Regenerate: the old reply goes from the store too."""
        stored_id = self._stored_ids.pop(reply, None)
        self._writers.pop(reply, None)
        if stored_id is not None and self.store is not None:
            self._call(lambda: self.store.delete_message_and_after(stored_id))

    # --- internals ----------------------------------------------------------------------

    def _finish(self, reply: ChatMessage, writer: ReplyWriter, status: str) -> None:
        stats = stats_to_record(reply.stats)
        if reply.error:
            stats["error"] = reply.error
        # The writer has every token the window showed: the window forwards each batch.
        self._call(lambda: writer.finish(stats, status))

    def _flush_paused_replies(self) -> None:
        for writer in self._writers.values():
            self._call(lambda: writer.append(()))  # commits only if the interval has passed

    def _forget_screen(self) -> None:
        # Replies were finished by the window (reply_finished) before it cleared the view.
        self._stored_ids.clear()
        self._writers.clear()
        self._flush_timer.stop()

    def _schedule_refresh(self, delay_ms: int = 0) -> None:
        self._refresh_timer.start(delay_ms)

    def _selection_id(self) -> int:
        return self.current_id if self.current_id is not None else NO_SELECTION

    def _update_actions(self) -> None:
        has_conversation = self.current_id is not None
        self.window.export_markdown_action.setEnabled(has_conversation)
        self.window.export_json_action.setEnabled(has_conversation)

    def _call(self, operation: Callable[[], Any], default: Any = None, *, saves: bool = True) -> Any:
        """Run one store operation; a failure becomes a notice, gone again once a save works."""
        try:
            result = operation()
        except (TandemError, sqlite3.Error) as exc:  # StorageError: disk full, read-only, ...
            text = str(exc) if isinstance(exc, TandemError) else f"Chat history error: {exc}"
            self.window.notices.show_notice(SAVE_NOTICE_KEY, text, ERROR)
            self._save_failing = True
            return default
        if saves and self._save_failing:
            self._save_failing = False
            self.window.notices.clear(SAVE_NOTICE_KEY)
        return result

    def _read(self, operation: Callable[[], Any], default: Any = None) -> Any:
        return self._call(operation, default, saves=False)

    def _notify(self, text: str) -> None:
        self.window.notices.show_notice(FILE_NOTICE_KEY, text, ERROR)


# --- conversions between what the window shows and what the store keeps -----------------

def records_from_events(events: Iterable[TokenEvent]) -> list[TokenRecord]:
    return [token_record(e.text, e.kind.value, e.draft_text, e.draft_prob) for e in events]


def events_from_records(records: Any, text: Any) -> list[TokenEvent]:
    """Token events to redraw a stored reply; a reply stored without kinds comes back plain.

    What is stored may come from another tool or an old import: anything that is not a
    record of the right types is left out (the reply then shows as plain text)."""
    events = []
    for record in records if isinstance(records, list) else ():
        if not isinstance(record, dict) or not isinstance(record.get("text", ""), str):
            continue
        try:
            kind = TokenKind(record.get("kind", "plain"))
        except (ValueError, TypeError):
            kind = TokenKind.PLAIN
        draft_text = record.get("draft_text") if isinstance(record.get("draft_text"), str) else None
        prob = record.get("draft_prob")
        draft_prob = float(prob) if _finite(prob) else None
        events.append(TokenEvent(-1, record.get("text", ""), kind, draft_text=draft_text, draft_prob=draft_prob))
    if "".join(e.text for e in events) != text and isinstance(text, str):
        events = [TokenEvent(-1, text, TokenKind.PLAIN)] if text else []  # records lost: the text is right
    return events


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def stats_to_record(stats: Stats | None) -> dict[str, Any]:
    """The derived figures (for exports and readers) plus the raw counters (to rebuild ``Stats``)."""
    if stats is None:
        return {}
    return {**dataclasses.asdict(stats), **stats.to_dict()}


def stats_from_record(record: Any) -> Stats | None:
    """The reply's Stats again; a field of the wrong type (another tool's) is left out."""
    if not isinstance(record, dict):
        return None
    values = {key: value for key, value in record.items() if key in _STATS_FIELDS and _fits(key, value)}
    if not values:
        return None
    try:
        return Stats(**values)
    except TypeError:
        return None


_STATS_DEFAULTS = Stats()


def _fits(name: str, value: Any) -> bool:
    default = getattr(_STATS_DEFAULTS, name)
    if name == "stop_reason":  # None while running; stored as its value ("" when unknown)
        return isinstance(value, str)
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if isinstance(default, float):
        return _finite(value) and value >= 0
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, list):
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return False


def reply_meta(window: MainWindow) -> dict[str, Any]:
    """The models and settings a reply is being produced with (as the window just sent them)."""
    settings = window.settings
    info = window.client.info
    if info is not None:
        target, draft, drafter = info.target_name, info.draft_name, info.drafter
        speculating = settings.speculation and info.speculation_available
    else:  # sent while models load: the request waits for what the settings name
        target = Path(settings.target_path).name or "demo target"
        draft = Path(settings.draft_path).name if settings.draft_path else ""
        drafter, speculating = settings.drafter, settings.speculation
    return {
        "target": target,
        "draft": draft,
        "drafter": drafter,
        "speculation": speculating,
        "draft_max": settings.draft_max,
        "draft_min": settings.draft_min,
        "p_min": settings.p_min,
        "sampling": {"temperature": settings.temperature, "top_k": settings.top_k, "top_p": settings.top_p,
                     "min_p": settings.min_p, "seed": settings.seed},
        "max_tokens": settings.max_tokens,
        "system_prompt": settings.system_prompt,
    }

