"""The chat history's files: a conversation exported (Markdown, JSON) and one imported.

Part of the history controller (app/window/history_controller.py), which hands in the
store (guarded: ``StoreCalls``), the open conversation and what to do once an import
is in. It makes the File menu's three actions; an import of a history file runs on its
own thread (``ImportTask``) with the progress bar it is given.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QProgressBar, QWidget

from app.errors import TandemError
from app.storage.export import import_conversation, read_export, to_json, to_markdown
from app.storage.files import atomic_write_text
from app.storage.history import HistoryStore
from app.storage.pending_writes import LOCKED_TEXT, HistoryLocked, NotSavedYet
from app.ui.notices import ERROR, INFO, WARNING, NoticeArea
from app.window.import_task import ImportTask

# format -> (file suffix, file dialog filter)
EXPORT_FORMATS = {"markdown": (".md", "Markdown (*.md)"), "json": (".json", "Tandem conversation (*.json)")}
SAVE_NOTICE_KEY = "history-save"   # the store failing now; cleared when it works again
LOCK_NOTICE_KEY = "history-locked"  # saves waiting for another program's lock; cleared once written
RETRY_INTERVAL_MS = 500  # how often waiting saves are tried again (each try waits ~0.1 s at most)
FILE_NOTICE_KEY = "history-file"   # an export or import that did not work
IMPORT_WAIT_S = 5.0   # how long closing waits for an import to roll back


class StoreCalls:
    """The history store, each operation guarded: a failure (disk full, read-only file)
    becomes one notice instead of an exception, gone again once a save works.

    Saves that find the file locked by another program wait in the store's journal
    (``app.storage.pending_writes``): a notice says so, a timer tries them again, and
    ``caught_up()`` is called once all are written."""

    def __init__(self, store: HistoryStore, notices: NoticeArea, caught_up: Callable[[], None] = lambda: None) -> None:
        self.store: HistoryStore | None = store  # None once the window has let go of it
        self.notices = notices
        self._failing = False
        self._caught_up = caught_up
        self.retry_timer = QTimer()
        self.retry_timer.setInterval(RETRY_INTERVAL_MS)
        self.retry_timer.timeout.connect(self.retry)

    def retry(self) -> None:
        """Try the saves that wait again (the timer's tick)."""
        if self.store is None:
            self.retry_timer.stop()
            return
        self.call(self.store.retry_pending)

    def _watch_pending(self) -> None:
        if self.store is not None and self.store.pending_writes:
            self.notices.show_notice(LOCK_NOTICE_KEY, LOCKED_TEXT, WARNING)
            if not self.retry_timer.isActive():
                self.retry_timer.start()
        elif self.retry_timer.isActive():
            self.retry_timer.stop()
            self.notices.clear(LOCK_NOTICE_KEY)
            self._caught_up()

    def call(self, operation: Callable[[], Any], default: Any = None, *, saves: bool = True) -> Any:
        try:
            result = operation()
        except NotSavedYet:  # a read of a row still waiting to be written: the notice says why
            return default
        except HistoryLocked:  # a change that cannot wait in line (switching branch): not now
            self.notices.show_notice(SAVE_NOTICE_KEY, "The chat history is locked by another program; "
                                     "try that again in a moment.", ERROR)
            self._failing = True
            return default
        except (TandemError, sqlite3.Error) as exc:  # StorageError: disk full, read-only, ...
            text = str(exc) if isinstance(exc, TandemError) else f"Chat history error: {exc}"
            self.notices.show_notice(SAVE_NOTICE_KEY, text, ERROR)
            self._failing = True
            self._watch_pending()
            return default
        self._watch_pending()
        if saves and self._failing:
            self._failing = False
            self.notices.clear(SAVE_NOTICE_KEY)
        return result

    def read(self, operation: Callable[[], Any], default: Any = None) -> Any:
        return self.call(operation, default, saves=False)


class HistoryFiles(QObject):
    """Exports the open conversation and imports exported ones; ``import_finished(id | None)``."""

    import_finished = Signal(object)

    def __init__(self, calls: StoreCalls, *, current: Callable[[], int | None], flush: Callable[[], None],
                 imported: Callable[[int], None], notices: NoticeArea, import_bar: QProgressBar,
                 say: Callable[[str, int], None], dialog_parent: QWidget) -> None:
        """``current()`` is the open conversation's id; ``flush()`` commits what still streams;
        ``imported(id)`` opens an imported conversation; ``say(text, ms)`` a passing line."""
        super().__init__(dialog_parent)
        self.calls = calls
        self._current = current
        self._flush = flush
        self._imported = imported
        self.notices = notices
        self.import_bar = import_bar
        self._say = say
        self._dialog_parent = dialog_parent
        self._import: ImportTask | None = None
        import_bar.setObjectName("importProgress")
        import_bar.setMaximumWidth(220)
        import_bar.setFormat("Importing… %p%")
        import_bar.hide()

        self.export_markdown_action = _action("Export conversation as &Markdown…",
                                              "Save this conversation as a Markdown file", self,
                                              lambda: self.export_dialog("markdown"))
        self.export_json_action = _action("Export conversation as &JSON…",
                                          "Save this conversation with token kinds and stats", self,
                                          lambda: self.export_dialog("json"))
        self.import_action = _action("&Import conversation…", "Add a conversation exported as JSON", self,
                                     self.import_dialog)
        self.actions = (self.export_markdown_action, self.export_json_action, self.import_action)
        self.set_has_conversation(False)

    def set_has_conversation(self, has: bool) -> None:
        self.export_markdown_action.setEnabled(has)
        self.export_json_action.setEnabled(has)

    # --- export -----------------------------------------------------------------------------

    def export_dialog(self, fmt: str) -> None:
        if self.calls.store is None or self._current() is None:
            return
        suffix, name_filter = EXPORT_FORMATS[fmt]
        start = Path.home() / (self.suggested_file_name() + suffix)
        path, _ = QFileDialog.getSaveFileName(self._dialog_parent, "Export conversation", str(start), name_filter)
        if path:
            self.export(Path(path), fmt)

    def export(self, path: Path, fmt: str) -> Path | None:
        """Write the open conversation as 'markdown' or 'json'; returns the path written."""
        written = self.export_current(path, fmt)
        if written is not None:
            self._say(f"Conversation exported to {written}", 5000)
        return written

    def export_current(self, path: Path, fmt: str) -> Path | None:
        if fmt not in EXPORT_FORMATS:
            raise ValueError(f"unknown export format {fmt!r}")
        store, current = self.calls.store, self._current()
        if store is None or current is None:
            return None
        self._flush()  # a reply still streaming goes out as far as it got
        conversation = self.calls.read(lambda: store.conversation(current))
        # Markdown: the branch shown; JSON: every branch, and which one is shown.
        markdown = fmt == "markdown"
        messages = self.calls.read(lambda: store.messages(current) if markdown else store.all_messages(current),
                                   default=None)
        leaf = None if markdown else self.calls.read(lambda: store.current_leaf(current))
        if conversation is None or messages is None:
            return None
        text = to_markdown(conversation, messages) if markdown else to_json(conversation, messages, leaf)
        try:
            atomic_write_text(path, text)
        except OSError as exc:
            self._notify(f"Could not export the conversation to {path}: {exc.strerror or exc}")
            return None
        return path

    def suggested_file_name(self) -> str:
        store, current = self.calls.store, self._current()
        conversation = self.calls.read(lambda: store.conversation(current)) if store and current is not None else None
        title = conversation.title if conversation is not None else ""
        return re.sub(r"[^\w\- ]+", "", title).strip()[:60] or "conversation"

    # --- import -----------------------------------------------------------------------------

    @property
    def importing(self) -> bool:
        return self._import is not None

    def import_dialog(self) -> None:
        if self.calls.store is None:
            return
        path, _ = QFileDialog.getOpenFileName(self._dialog_parent, "Import conversation", str(Path.home()),
                                              EXPORT_FORMATS["json"][1])
        if path:
            self.import_file(Path(path))

    def import_file(self, path: Path) -> int | None:
        """Add a conversation exported as JSON and open it, all of it or nothing.

        With a history file the work runs on a thread and this returns None at once:
        ``import_finished`` brings the id (or None) when it is done. An in-memory
        history (its file could not be opened) imports here and returns the id."""
        store = self.calls.store
        if store is None:
            return None
        path = Path(path)
        if self._import is not None:
            self._notify(f"Could not import {path.name}: another import is still running.")
            return None
        self.notices.clear(FILE_NOTICE_KEY)
        if store.path is None:  # in-memory: the only connection is this thread's
            try:
                exported = read_export(path)
            except OSError as exc:
                return self._import_failed(path, f"Could not read {path.name}: {exc.strerror or exc}")
            except TandemError as exc:
                return self._import_failed(path, str(exc))
            conversation_id = self.calls.call(lambda: import_conversation(store, exported), default=None)
            if conversation_id is not None:
                self._import_done(conversation_id, exported.title or path.name)
            else:
                self.import_finished.emit(None)
            return conversation_id
        task = self._import = ImportTask(path, store.path, self)
        task.progressed.connect(self._on_import_progress)
        task.succeeded.connect(self._on_import_succeeded)
        task.failed.connect(self._on_import_failed)
        self.import_bar.setRange(0, 0)  # busy until the first count: reading and checking
        self.import_bar.setToolTip(f"Importing {path.name}")
        self.import_bar.show()
        self.import_action.setEnabled(False)
        task.start()
        return None

    def shutdown(self) -> None:
        if self._import is not None:
            # Rolled back at its next batch; a thread still parsing a big file is left to
            # the process's end, which rolls back its transaction all the same.
            self._import.cancel()
            self._import.wait(IMPORT_WAIT_S)
            self._import = None

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
        if self.calls.store is not None:
            self.import_action.setEnabled(True)
        return task if self.calls.store is not None else None

    def _import_done(self, conversation_id: int, title: str) -> None:
        self._imported(conversation_id)
        self.notices.show_notice(FILE_NOTICE_KEY, f"Imported “{title}”.", INFO)
        self.import_finished.emit(conversation_id)

    def _import_failed(self, path: Path, message: str) -> None:
        self._notify(message if message.startswith("Could not") else f"Could not import {path.name}: {message}")
        self.import_finished.emit(None)
        return None

    def _notify(self, text: str) -> None:
        self.notices.show_notice(FILE_NOTICE_KEY, text, ERROR)


def _action(text: str, tip: str, parent: QObject, slot) -> QAction:
    action = QAction(text, parent)
    action.setToolTip(tip)
    action.triggered.connect(slot)
    return action
