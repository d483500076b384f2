"""An import of a conversation export, run off the GUI thread.

Reading, parsing and checking a shared export, then writing it, can take seconds for
a long chat (100,000 messages); on the GUI thread that froze the window. Here a plain
thread does all of it on its own SQLite connection (sqlite3 connections stay on their
thread) and reports back through queued Qt signals: progress for the window's bar, then
the new conversation's id or one line saying why nothing was imported.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.errors import TandemError
from app.storage.errors import ImportCancelled
from app.storage.export import import_conversation, read_export
from app.storage.history import HistoryStore
from app.window.thread_task import ThreadTask

log = logging.getLogger(__name__)


class ImportTask(ThreadTask):
    """One import: ``start()``, then ``progressed``… and ``succeeded`` or ``failed``;
    ``cancel()`` stops it at the next batch, and what was written so far is rolled back."""

    progressed = Signal(int, int)   # done, total
    succeeded = Signal(int, str)    # the new conversation's id, its title
    failed = Signal(str)            # one line; '' when it was cancelled
    thread_name = "tandem-import"

    def __init__(self, source: Path, history: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.source = Path(source)
        self.history = Path(history)

    def _progress(self, done: int, total: int) -> bool:
        self.progressed.emit(done, total)
        return not self._cancel.is_set()

    def _run(self) -> None:
        try:
            exported = read_export(self.source)
            if self._cancel.is_set():
                raise ImportCancelled("The import was stopped; nothing was added.")
            store = HistoryStore.open_companion(self.history)
            try:
                conversation_id = import_conversation(store, exported, self._progress)
            finally:
                store.close()
        except ImportCancelled:
            self.failed.emit("")
        except TandemError as exc:  # refused (the first bad field), or the history's own error
            self.failed.emit(str(exc))
        except OSError as exc:
            self.failed.emit(f"Could not read {self.source.name}: {exc.strerror or exc}")
        except sqlite3.Error as exc:
            self.failed.emit(f"Could not save the imported conversation: {exc}")
        except Exception as exc:  # noqa: BLE001 — a thread's failure must reach the window as a line
            log.exception("Importing %s failed", self.source)
            self.failed.emit(f"Could not import {self.source.name}: {type(exc).__name__}: {exc}")
        else:
            self.succeeded.emit(conversation_id, exported.title)
