"""Saves that wait their turn while another program holds the chat history locked.

A second Tandem, a backup tool or a SQLite browser may hold the history's write lock
for as long as it likes. The window's store runs on the GUI thread, so it must not
wait SQLite's busy timeout there: it waits a moment (``BUSY_TIMEOUT_MS``), and a save
that still finds the file locked joins this journal instead of failing. The journal
keeps the saves in order and runs them when asked (``drain``: the window asks on a
timer), so nothing is lost and nothing is written out of order: while any save waits,
every later one queues behind it.

A queued save that makes a row (a conversation, a message) returns a ``PendingId`` at
once: a negative int that stands for the row's id. Passed back to the store (a reply's
updates, the next message of a new conversation), it is replaced by the real id when
the save runs; a read of a row not written yet raises ``NotSavedYet``.

In the window, ``StoreCalls`` (``app/window/history_files.py``) turns ``NotSavedYet``
into the read's default, shows one notice while saves wait, tries them again every
``RETRY_INTERVAL_MS`` and tells the history controller when they are written (it swaps
its pending ids for the real ones). A change that cannot wait in line (switching branch)
raises ``HistoryLocked`` and is refused with a notice while saves wait; closing gives
them one last, longer try (``history.CLOSING_BUSY_TIMEOUT_MS``).
"""

from __future__ import annotations

import functools
import sqlite3
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from app.storage.errors import StorageError

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # SQLite's primary result codes
BUSY_TIMEOUT_MS = 100  # how long one save on the GUI thread may wait for the lock
LOCKED_TEXT = ("The chat history is locked by another program; Tandem keeps this chat and will retry "
               "saving it until the file is free.")


class HistoryLocked(StorageError):
    """Another connection holds the history's write lock."""


class NotSavedYet(StorageError):
    """A read named a row whose save is still waiting in the journal."""


class PendingId(int):
    """The id of a row whose save waits in the journal (negative: never a real id)."""


def is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


@dataclass
class Entry:
    run: Callable[..., Any]
    args: tuple
    kwargs: dict
    pending: PendingId | None = None
    key: Any = None  # entries with the same key may be merged (a reply's successive updates)
    extra: dict = field(default_factory=dict)


class WriteJournal:
    def __init__(self) -> None:
        self._entries: deque[Entry] = deque()
        self._resolved: dict[int, int] = {}
        self._failed: set[int] = set()
        self._issued = 0
        self._running = False

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def running(self) -> bool:
        return self._running

    def real(self, value: Any) -> Any:
        """``value`` with a pending id replaced by its row's id (NotSavedYet until written)."""
        if not isinstance(value, PendingId):
            return value
        if value in self._resolved:
            return self._resolved[value]
        if value in self._failed:
            raise StorageError("An earlier save of this chat failed, so this one cannot be made.")
        raise NotSavedYet("This message is not saved yet: the chat history is locked by another program.")

    def submit(self, run: Callable[..., Any], args: tuple, kwargs: dict, *, makes_row: bool,
               key: Any = None, merge: Callable[[Entry, tuple, dict], bool] | None = None) -> Any:
        """Run a save now, or queue it behind those waiting (or when the file is locked)."""
        if self._running:  # a save inside a save (add_edit adds a message): part of it
            return self._call(run, args, kwargs)
        if self._entries:
            last = self._entries[-1]
            if merge is not None and key is not None and last.key == key and merge(last, args, kwargs):
                return None
            return self._queue(run, args, kwargs, makes_row, key)
        try:
            return self._call(run, args, kwargs)
        except HistoryLocked:
            return self._queue(run, args, kwargs, makes_row, key)

    def drain(self) -> int:
        """Run the waiting saves in order until one finds the file locked; returns how many
        still wait. A save that fails otherwise is dropped and its error raised."""
        while self._entries:
            entry = self._entries[0]
            try:
                result = self._call(entry.run, entry.args, entry.kwargs)
            except HistoryLocked:
                break
            except BaseException:
                self._entries.popleft()
                if entry.pending is not None:
                    self._failed.add(entry.pending)
                raise
            self._entries.popleft()
            if entry.pending is not None:
                self._resolved[entry.pending] = result
        return len(self._entries)

    def _call(self, run: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        real_args = tuple(self.real(a) for a in args)
        real_kwargs = {k: self.real(v) for k, v in kwargs.items()}
        running, self._running = self._running, True
        try:
            return run(*real_args, **real_kwargs)
        finally:
            self._running = running

    def _queue(self, run: Callable[..., Any], args: tuple, kwargs: dict, makes_row: bool, key: Any) -> Any:
        pending = None
        if makes_row:
            self._issued += 1
            pending = PendingId(-self._issued)
        self._entries.append(Entry(run, args, kwargs, pending, key))
        return pending


def journaled(makes_row: bool = False, merge: Callable[[Entry, tuple, dict], bool] | None = None):
    """A store method that saves: it waits in the store's ``_journal`` while the file is
    locked; ``makes_row``: it returns the new row's id (a ``PendingId`` while it waits);
    ``merge`` may fold it into the save waiting last for the same first argument."""
    def wrap(method):
        @functools.wraps(method)
        def save(self, *args, **kwargs):
            key = (method.__name__, args[0]) if merge is not None and args else None
            return self._journal.submit(functools.partial(method, self), args, kwargs, makes_row=makes_row,
                                        key=key, merge=merge)
        return save
    return wrap


def reads_pending_ids(method):
    """A read whose ids may be pending: the real ones are passed (NotSavedYet until written)."""
    @functools.wraps(method)
    def read(self, *args, **kwargs):
        real = self._journal.real
        return method(self, *(real(a) for a in args), **{k: real(v) for k, v in kwargs.items()})
    return read
