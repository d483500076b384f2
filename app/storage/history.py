"""Chat history in SQLite: conversations, messages with their token kinds, streamed replies.

Durability: WAL journal, ``synchronous=FULL``, every change in one transaction. A reply
being generated is written by a ``ReplyWriter`` at most every ``COMMIT_INTERVAL_S``, so
a crash loses less than that much of it; the next open marks it 'interrupted'.

Threads: a ``HistoryStore`` and its writers belong to the thread that opened the store
(the GUI thread in the app); sqlite3's ``check_same_thread`` enforces it.

Locks: a save waits at most ``BUSY_TIMEOUT_MS`` for another program's lock on the file;
then it waits in the store's journal (``app.storage.pending_writes``) until
``retry_pending`` finds the file free, later saves queued behind it.

A conversation is a tree (schema 3): every message has a parent (None for a first
message), an edited user message is a new sibling of the one it replaces and a
regenerated reply a sibling alternative of the earlier one, so nothing is thrown away.
The conversation remembers the leaf it shows; ``messages`` is the path from the root to
it, ``siblings`` what ‹ 2/3 › steps through, ``switch_branch`` moves the shown leaf.
A parent always has a smaller id than its children, so a path is in id order.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from app.vocabulary import MessageState, TokenKind
from app.storage import paths
from app.storage.errors import ImportCancelled, StorageError
from app.storage.files import move_aside
from app.storage.history_db import Damaged, connect, is_damage, purge_deleted, transaction
from app.storage.pending_writes import (BUSY_TIMEOUT_MS, LOCKED_TEXT, Entry, HistoryLocked, WriteJournal, is_busy,
                                        journaled, reads_pending_ids)

log = logging.getLogger(__name__)
CLOSING_BUSY_TIMEOUT_MS = 5000  # closing: the saves still waiting get one long last try

ROLES = ("user", "assistant", "system")
TOKEN_KINDS = tuple(kind.value for kind in TokenKind)
STATUSES = tuple(state.value for state in MessageState if state is not MessageState.FAILED)  # failed: never stored
COMMIT_INTERVAL_S = 0.5
TITLE_CHARS = 60
IMPORT_BATCH = 2000  # messages between progress reports (and chances to stop) of an import

# One stored token: {"text", "kind"}, plus what the draft proposed ("draft_text",
# "draft_prob") for a corrected one. Histories and exports from before these keys
# spelled them "t", "k", "d", "p"; ``readable_token`` renames those as they are read.
TokenRecord = dict[str, Any]
TOKEN_KEYS = ("text", "kind", "draft_text", "draft_prob")
_SHORT_TOKEN_KEYS = {"t": "text", "k": "kind", "d": "draft_text", "p": "draft_prob"}


def token_record(text: str, kind: str, draft_text: str | None = None,
                 draft_prob: float | None = None) -> TokenRecord:
    """One stored token. ``draft_text``/``draft_prob`` only matter for 'corrected'."""
    if kind not in TOKEN_KINDS:
        raise ValueError(f"unknown token kind {kind!r}")
    record: TokenRecord = {"text": text, "kind": kind}
    if draft_text is not None:
        record["draft_text"] = draft_text
    if draft_prob is not None:
        record["draft_prob"] = draft_prob
    return record


def readable_key(key: Any) -> Any:
    """A token field's readable name, for either spelling of it."""
    return _SHORT_TOKEN_KEYS.get(key, key)


def readable_tokens(records: Any) -> Any:
    """Stored token records with the readable keys, however they were stored; anything
    that is not a record is passed on for the reader to judge."""
    if not isinstance(records, list):
        return records
    return [{readable_key(key): value for key, value in record.items()}
            if isinstance(record, dict) and any(key in _SHORT_TOKEN_KEYS for key in record) else record
            for record in records]


@dataclass(frozen=True)
class ConversationSummary:
    id: int
    title: str  # '' until the first user message names it
    created_at: float  # seconds since the epoch
    updated_at: float
    message_count: int = 0  # in every branch
    preset: str = ""        # the system-prompt preset chosen for this chat ('' for the default)


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    text: str
    # Empty for messages without records (user text, replies from schema v1): show as plain.
    tokens: list[TokenRecord] = field(default_factory=list)
    status: str = MessageState.COMPLETE
    meta: dict[str, Any] = field(default_factory=dict)   # models and settings it came from
    stats: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    parent_id: int | None = None  # the message this one answers or follows; None for a first message


# Stored parent_id: 0 for a first message; NULL (a row no Tandem of schema 3 wrote, e.g.
# another tool's) follows the message before it, as every message did in a linear chat.
_ROOT = 0
_PARENT = """CASE WHEN m.parent_id IS NULL THEN (
                 SELECT MAX(p.id) FROM messages p WHERE p.conversation_id = m.conversation_id AND p.id < m.id)
             ELSE NULLIF(m.parent_id, 0) END"""
_MESSAGE_COLUMNS = ("m.id, m.conversation_id, m.role, m.text, m.tokens, m.status, m.meta, m.stats, m.created_at, "
                    f"m.updated_at, {_PARENT}")
_KEEP_LEAF = object()  # add_message's default: append to the leaf shown


def _merge_reply_update(last: Entry, args: tuple, kwargs: dict) -> bool:
    """A reply's next update while the last one still waits: one write of the newest text,
    keeping stats and status that either carried."""
    message_id, text, tokens, stats, status = args
    _, _, _, last_stats, last_status = last.args
    last.args = (message_id, text, tokens, last_stats if stats is None else stats,
                 last_status if status is None else status)
    return True


class HistoryStore:
    """All reads and writes of the chat history. Use ``HistoryStore.open()``."""

    def __init__(self, db: sqlite3.Connection, path: Path | None, notice: str | None = None, *,
                 busy_timeout_ms: int = BUSY_TIMEOUT_MS):
        self._db = db
        self.path = path  # None when the history could not be opened and lives in memory
        self.notice = notice  # one line for the user when the file had to be set aside
        self._last_now = 0.0
        self._journal = WriteJournal()
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")

    @property
    def pending_writes(self) -> int:
        """Saves waiting for another program to let go of the file."""
        return len(self._journal)

    def retry_pending(self) -> int:
        """Try the waiting saves again, in order; returns how many still wait."""
        return self._journal.drain()

    def saved_id(self, row_id: int) -> int:
        """The id of a row once its waiting save has run (``row_id`` itself for a saved row)."""
        try:
            return self._journal.real(row_id)
        except StorageError:
            return row_id

    # --- opening ------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path | None = None) -> HistoryStore:
        """Open (creating or upgrading) the history. Never raises for a bad file.

        A damaged file is moved aside and a new history started; a file that can't be
        opened at all (permissions, locked) is left alone and this session runs in memory.
        Either way ``notice`` says what happened.
        """
        path = Path(path) if path is not None else paths.history_db()
        with suppress(OSError):  # if this fails, sqlite3 says why in its own words below
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return cls(connect(path), path)
        except (sqlite3.DatabaseError, Damaged) as exc:
            if not is_damage(exc):
                return cls._in_memory(
                    f"Chat history {path} could not be opened ({exc}); chats from this session will not be saved.")
            problem = exc
        try:
            kept = move_aside(path, companions=("-wal", "-shm"))
            store = cls(connect(path), path)
        except (OSError, sqlite3.DatabaseError, Damaged) as exc:
            return cls._in_memory(
                f"Chat history {path} is unreadable ({problem}) and could not be replaced ({exc}); "
                "chats from this session will not be saved.")
        store.notice = (f"Chat history could not be read ({problem}); it was moved to {kept} "
                        "and a new, empty history was started.")
        return store

    @classmethod
    def open_companion(cls, path: Path) -> HistoryStore:
        """A second connection to a history this process has opened already, for another
        thread (an import): no checks, upgrades or clean-up, the first connection did them,
        and marking 'streaming' replies interrupted here would cut off one being written."""
        db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
        try:
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            return cls(db, Path(path), busy_timeout_ms=30_000)  # off the GUI thread: it may wait
        except BaseException:
            db.close()
            raise

    @classmethod
    def _in_memory(cls, notice: str) -> HistoryStore:
        return cls(connect(Path(":memory:")), None, notice)

    def close(self) -> None:
        if self._journal:
            try:
                self._db.execute(f"PRAGMA busy_timeout = {CLOSING_BUSY_TIMEOUT_MS}")
                self._journal.drain()
            except (StorageError, sqlite3.Error) as exc:
                log.warning("Chat history: a save that waited failed on closing: %s", exc)
            if self._journal:
                log.warning("Chat history %s is still locked by another program: %d saves of this session "
                            "could not be written.", self.path, len(self._journal))
        self._db.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- conversations ------------------------------------------------------------------

    @journaled(makes_row=True)
    def create_conversation(self, title: str = "") -> int:
        now = self._now()
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO conversations (title, created_at, updated_at) VALUES (?, ?, ?)",
                (title.strip(), now, now))
        return cursor.lastrowid

    @reads_pending_ids
    def conversation(self, conversation_id: int) -> ConversationSummary | None:
        rows = self._summaries("c.id = ? AND c.deleted_at IS NULL", (conversation_id,))
        return rows[0] if rows else None

    def list_conversations(self, search: str = "") -> list[ConversationSummary]:
        """Conversations newest first; ``search`` matches titles and message text, any case."""
        needle = search.strip().casefold()
        if not needle:
            return self._summaries("c.deleted_at IS NULL", ())
        return self._summaries(
            """c.deleted_at IS NULL AND (tandem_contains(c.title, :q) OR EXISTS (
                   SELECT 1 FROM messages m
                   WHERE m.conversation_id = c.id AND tandem_contains(m.text, :q)))""",
            {"q": needle})

    @journaled()
    def rename_conversation(self, conversation_id: int, title: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title.strip(), conversation_id))

    @journaled()
    def delete_conversation(self, conversation_id: int) -> None:
        """Hide a conversation; ``restore_conversation`` brings it back until the next open."""
        with self._transaction() as db:
            db.execute("UPDATE conversations SET deleted_at = ? WHERE id = ?", (time.time(), conversation_id))

    @journaled()
    def restore_conversation(self, conversation_id: int) -> None:
        with self._transaction() as db:
            db.execute("UPDATE conversations SET deleted_at = NULL WHERE id = ?", (conversation_id,))

    def purge_deleted(self) -> int:
        """Remove deleted conversations for good; returns how many."""
        with self._transaction() as db:
            return purge_deleted(db)

    # --- messages -----------------------------------------------------------------------

    @journaled()
    def set_preset(self, conversation_id: int, preset: str) -> None:
        """Remember the system-prompt preset this chat uses ('' for the settings' own prompt)."""
        with self._transaction() as db:
            db.execute("UPDATE conversations SET preset = ? WHERE id = ?", (preset, conversation_id))

    @journaled(makes_row=True)
    def add_message(self, conversation_id: int, role: str, text: str, tokens: list[TokenRecord] | None = None,
                    meta: dict[str, Any] | None = None, stats: dict[str, Any] | None = None,
                    status: str = MessageState.COMPLETE, parent_id: Any = _KEEP_LEAF) -> int:
        """Store a whole message after the leaf shown (or under ``parent_id``, None for a
        first message) and show it. A first user message names an untitled conversation."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        now = self._now()
        with self._transaction() as db:
            self._touch(db, conversation_id, now)
            parent = _leaf(db, conversation_id) if parent_id is _KEEP_LEAF else parent_id
            parent = None if parent == _ROOT else parent
            if parent is not None and not db.execute(
                    "SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?", (parent, conversation_id)).fetchone():
                raise StorageError(f"Message {parent} is not in conversation {conversation_id}.")
            cursor = db.execute(
                """INSERT INTO messages (conversation_id, role, text, tokens, status, meta, stats,
                                         created_at, updated_at, parent_id)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (conversation_id, role, text, _dumps(tokens or []), status, _dumps(meta or {}),
                 _dumps(stats or {}), now, now, _ROOT if parent is None else parent))
            db.execute("UPDATE conversations SET current_leaf = ? WHERE id = ?", (cursor.lastrowid, conversation_id))
            if role == "user":
                db.execute("UPDATE conversations SET title = ? WHERE id = ? AND title = ''",
                           (title_from(text), conversation_id))
        return cursor.lastrowid

    @reads_pending_ids
    def messages(self, conversation_id: int, last: int | None = None) -> list[StoredMessage]:
        """The branch shown, from the first message to the shown leaf; with ``last``, only
        that many newest of it."""
        leaf = _leaf(self._db, conversation_id)
        if leaf is None:
            return []
        # Up from the leaf; ``parent_id < id`` holds for every message this code writes,
        # and keeps a hand-edited cycle from looping.
        limit = -1 if last is None else max(0, last)
        rows = self._db.execute(
            f"""WITH RECURSIVE path(id, depth) AS (
                    SELECT ?, 0
                    UNION ALL
                    SELECT {_PARENT}, path.depth + 1 FROM messages m JOIN path ON m.id = path.id
                    WHERE {_PARENT} < m.id AND (? < 0 OR path.depth + 1 < ?))
                SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.id IN (SELECT id FROM path) ORDER BY m.id""",
            (leaf, limit, limit)).fetchall()
        return [_message(r) for r in rows]

    @reads_pending_ids
    def all_messages(self, conversation_id: int) -> list[StoredMessage]:
        """Every message of every branch, parents before children (an export of the tree)."""
        rows = self._db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.conversation_id = ? ORDER BY m.id",
                                (conversation_id,))
        return [_message(r) for r in rows]

    @reads_pending_ids
    def message(self, message_id: int) -> StoredMessage | None:
        row = self._db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.id = ?", (message_id,)).fetchone()
        return _message(row) if row else None

    @reads_pending_ids
    def current_leaf(self, conversation_id: int) -> int | None:
        return _leaf(self._db, conversation_id)

    # --- branches -------------------------------------------------------------------------

    @reads_pending_ids
    def siblings(self, message_id: int) -> list[int]:
        """The ids of ``message_id`` and its alternatives (the same parent), oldest first:
        what ‹ 2/3 › steps through. [] for an unknown message."""
        message = self.message(message_id)
        if message is None:
            return []
        parent = message.parent_id
        # Rows without a stored parent are rare (written before parents were stored); the
        # unary + keeps SQLite on the parent index for them instead of walking the whole
        # conversation, which took 13 ms a message in a 100,000-message chat.
        return [r[0] for r in self._db.execute(
            f"""SELECT id FROM messages WHERE conversation_id = :c AND parent_id = :stored
                UNION SELECT m.id FROM messages m WHERE m.parent_id IS NULL AND +m.conversation_id = :c
                                                  AND {_PARENT} IS :parent
                ORDER BY id""",
            {"c": message.conversation_id, "stored": _ROOT if parent is None else parent, "parent": parent})]

    @reads_pending_ids
    def sibling_position(self, message_id: int) -> tuple[int, int]:
        """(1-based position, count) among its alternatives: (2, 3) reads ‹ 2/3 ›."""
        ids = self.siblings(message_id)
        return (ids.index(message_id) + 1, len(ids)) if message_id in ids else (0, 0)

    @reads_pending_ids
    def switch_branch(self, message_id: int) -> list[StoredMessage]:
        """Show ``message_id``'s branch: the shown leaf becomes its newest descendant
        (following the newest child at each step); returns the branch now shown."""
        with self._transaction() as db:
            row = db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                raise StorageError(f"Message {message_id} is not in the history.")
            leaf = message_id
            while (child := _newest_child(db, row[0], leaf)) is not None:
                leaf = child
            db.execute("UPDATE conversations SET current_leaf = ? WHERE id = ?", (leaf, row[0]))
        return self.messages(row[0])

    @reads_pending_ids
    def show_branch_with(self, conversation_id: int, search: str) -> bool:
        """Search found this chat by text on a branch not shown: show the newest message
        holding it (and its branch). True when the branch shown changed."""
        needle = search.strip().casefold()
        if not needle:
            return False
        hit = self._db.execute("SELECT MAX(id) FROM messages WHERE conversation_id = ? AND tandem_contains(text, ?)",
                               (conversation_id, needle)).fetchone()[0]
        if hit is None or hit in {m.id for m in self.messages(conversation_id)}:
            return False
        self.switch_branch(hit)
        return True

    @journaled(makes_row=True)
    def add_edit(self, message_id: int, text: str) -> int:
        """An edited user message: a new sibling of ``message_id`` (what followed the old
        one stays on its branch), shown now; returns its id. The reply to it comes next."""
        old = self.message(message_id)
        if old is None or old.role != "user":
            raise StorageError(f"Message {message_id} is not a user message in the history.")
        return self.add_message(old.conversation_id, "user", text, parent_id=old.parent_id)

    def begin_alternative(self, reply_id: int, meta: dict[str, Any] | None = None, *,
                          interval: float = COMMIT_INTERVAL_S,
                          clock: Callable[[], float] = time.monotonic) -> ReplyWriter:
        """Regenerate: a new reply beside ``reply_id`` (same parent), the earlier one kept
        as an alternative; the new one is shown."""
        message_id = self._add_alternative(reply_id, meta)
        return ReplyWriter(self, None, message_id, interval=interval, clock=clock)

    @journaled(makes_row=True)
    def _add_alternative(self, reply_id: int, meta: dict[str, Any] | None) -> int:
        old = self.message(reply_id)
        if old is None or old.role != "assistant":
            raise StorageError(f"Message {reply_id} is not a reply in the history.")
        return self.add_message(old.conversation_id, "assistant", "", meta=meta, status=MessageState.STREAMING,
                                parent_id=old.parent_id)

    @journaled(merge=_merge_reply_update)
    def _save_reply(self, message_id: int, text: str, tokens: str, stats: str | None, status: str | None) -> None:
        with self._transaction() as db:
            db.execute("""UPDATE messages SET text = ?, tokens = ?, updated_at = ?,
                              stats = COALESCE(?, stats), status = COALESCE(?, status)
                          WHERE id = ?""", (text, tokens, time.time(), stats, status, message_id))
            if status is not None:  # a finished reply moves its conversation to the top
                db.execute("UPDATE conversations SET updated_at = ? WHERE id = "
                           "(SELECT conversation_id FROM messages WHERE id = ?)", (self._now(), message_id))

    def import_conversation(self, title: str, messages: list[StoredMessage],
                            progress: Callable[[int, int], bool | None] | None = None, *,
                            tree: bool = False, current_leaf: int | None = None, preset: str = "") -> int:
        """Add a whole conversation (an import) in one transaction; returns its id.

        Messages must be checked already (``export_schema``). Without ``tree`` they are a
        chain, in order; with it each ``parent_id`` names an earlier message's ``id`` (as
        exported) and ``current_leaf`` the one shown. ``progress(done, total)``
        is called between batches; returning False stops the import with ImportCancelled,
        and then, as on any error, nothing of it is in the history."""
        total = 2 * len(messages)  # preparing the rows, then writing them
        report = progress or (lambda done, total: None)
        rows = []
        for done, message in enumerate(messages, 1):
            for role_or_status, allowed in ((message.role, ROLES), (message.status, STATUSES)):
                if role_or_status not in allowed:
                    raise ValueError(f"unknown role or status {role_or_status!r}")
            # A reply exported mid-stream will never finish here.
            status = MessageState.INTERRUPTED if message.status == MessageState.STREAMING else message.status
            rows.append((message.role, message.text, _dumps(message.tokens), status, _dumps(message.meta),
                         _dumps(message.stats)))
            if done % IMPORT_BATCH == 0 and report(done, total) is False:
                raise ImportCancelled("The import was stopped; nothing was added.")
        # Rows get ids base+1, base+2, ... in order, so a parent maps to its new id by position.
        position = {message.id: i for i, message in enumerate(messages)} if tree else {}
        if tree and len(position) != len(messages):
            raise ValueError("message ids are not unique")

        def parent_at(i: int) -> int | None:
            if not tree:
                return i - 1 if i else None
            parent = messages[i].parent_id
            if parent is None:
                return None
            if position.get(parent, i) >= i:
                raise ValueError(f"message {messages[i].id} names a parent that does not come before it")
            return position[parent]
        title = title.strip() or next((title_from(m.text) for m in messages if m.role == "user"), "")
        now = self._now()
        parents = [parent_at(i) for i in range(len(messages))]
        leaf = position.get(current_leaf, len(messages) - 1) if tree and current_leaf is not None else len(messages) - 1
        with self._transaction() as db:
            conversation_id = db.execute(
                "INSERT INTO conversations (title, created_at, updated_at, preset) VALUES (?, ?, ?, ?)",
                (title, now, now, preset)).lastrowid
            base = db.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0] + 1  # under the write lock
            for start in range(0, len(rows), IMPORT_BATCH):
                db.executemany(
                    """INSERT INTO messages (id, conversation_id, role, text, tokens, status, meta, stats,
                                             created_at, updated_at, parent_id)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    [(base + i, conversation_id, *rows[i], now, now,
                      _ROOT if parents[i] is None else base + parents[i])
                     for i in range(start, min(start + IMPORT_BATCH, len(rows)))])
                if report(len(rows) + min(start + IMPORT_BATCH, len(rows)), total) is False:
                    raise ImportCancelled("The import was stopped; nothing was added.")
            if messages:
                db.execute("UPDATE conversations SET current_leaf = ? WHERE id = ?", (base + leaf, conversation_id))
        report(total, total)
        return conversation_id

    @journaled()
    def delete_message_and_after(self, message_id: int) -> int:
        """Delete a message and everything that follows it on any branch (a reply that
        failed before its first token); the shown leaf moves to its parent if it was there."""
        with self._transaction() as db:
            message = self.message(message_id)
            if message is None:
                return 0
            conversation_id, parent = message.conversation_id, message.parent_id
            doomed, level = [message_id], [message_id]
            while level:  # one query per generation
                level = [child for node in level for child in _children(db, conversation_id, node)]
                doomed += level
            leaf = _leaf(db, conversation_id)
            for start in range(0, len(doomed), 500):
                chunk = doomed[start:start + 500]
                db.execute(f"DELETE FROM messages WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            if leaf in doomed:
                if parent is None:  # a first message: show the newest first message left, if any
                    parent = db.execute("SELECT MAX(id) FROM messages WHERE conversation_id = ? AND parent_id = 0",
                                        (conversation_id,)).fetchone()[0]
                db.execute("UPDATE conversations SET current_leaf = ? WHERE id = ?", (parent, conversation_id))
            return len(doomed)

    def begin_reply(self, conversation_id: int, meta: dict[str, Any] | None = None, *,
                    parent_id: Any = _KEEP_LEAF, interval: float = COMMIT_INTERVAL_S,
                    clock: Callable[[], float] = time.monotonic) -> ReplyWriter:
        """Start an assistant message (after the leaf shown, or under ``parent_id``) that is
        filled in while it is generated."""
        message_id = self.add_message(conversation_id, "assistant", "", meta=meta, status=MessageState.STREAMING,
                                      parent_id=parent_id)
        return ReplyWriter(self, conversation_id, message_id, interval=interval, clock=clock)

    # --- internals ----------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        if self._journal and not self._journal.running:
            raise HistoryLocked(LOCKED_TEXT)  # not before the saves that wait: they go first
        try:
            with transaction(self._db):
                yield self._db
        except sqlite3.Error as exc:  # disk full, read-only, ...: one line for the user
            if is_busy(exc):
                raise HistoryLocked(LOCKED_TEXT) from exc
            raise StorageError(f"Could not save chat history: {exc}") from exc

    def _touch(self, db: sqlite3.Connection, conversation_id: int, now: float) -> None:
        touched = db.execute("UPDATE conversations SET updated_at = ? WHERE id = ? AND deleted_at IS NULL",
                             (now, conversation_id)).rowcount
        if not touched:
            raise StorageError(f"Conversation {conversation_id} does not exist or was deleted.")

    def _summaries(self, where: str, parameters: Any) -> list[ConversationSummary]:
        rows = self._db.execute(
            f"""SELECT c.id, c.title, c.created_at, c.updated_at,
                       (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id), c.preset
                FROM conversations c WHERE {where}
                ORDER BY c.updated_at DESC, c.id DESC""", parameters)
        return [ConversationSummary(*row) for row in rows]

    def _now(self) -> float:
        # Strictly increasing, so "newest first" holds even within one clock tick.
        self._last_now = max(time.time(), self._last_now + 1e-6)
        return self._last_now


class ReplyWriter:
    """Saves a reply while it streams: buffers tokens, commits at most every ``interval`` seconds.

    Everything not yet committed was produced within the last ``interval`` seconds, which
    bounds what a crash can lose. ``finish`` commits the rest and the final status.
    """

    def __init__(self, store: HistoryStore, conversation_id: int, message_id: int,
                 interval: float = COMMIT_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.clock = clock
        self.conversation_id = conversation_id
        self.message_id = message_id
        self.interval = interval
        self.tokens: list[TokenRecord] = []
        self._text_parts: list[str] = []
        self._dirty = False
        self._finished = False
        self._last_commit = clock()  # the empty row was committed by begin_reply

    @property
    def text(self) -> str:
        return "".join(self._text_parts)

    def append(self, tokens: Iterable[TokenRecord]) -> bool:
        """Add tokens; returns True when this call committed them (and all before) to disk."""
        self._take(tokens)
        if self._dirty and self.clock() - self._last_commit >= self.interval:
            self._write()
            return True
        return False

    def flush(self) -> None:
        """Commit what has streamed so far, whatever the interval."""
        if self._dirty:
            self._write()

    def finish(self, stats: dict[str, Any] | None = None, status: str = MessageState.COMPLETE,
               tokens: Iterable[TokenRecord] = ()) -> None:
        """Commit the last ``tokens``, the stats and the final status ('complete' or 'stopped')."""
        if status not in (MessageState.COMPLETE, MessageState.STOPPED, MessageState.INTERRUPTED):
            raise ValueError(f"a finished reply cannot be {status!r}")
        self._take(tokens)
        self._write(stats=stats or {}, status=status)
        self._finished = True

    def _take(self, tokens: Iterable[TokenRecord]) -> None:
        if self._finished:
            raise RuntimeError("reply already finished")
        for record in tokens:
            self.tokens.append(record)
            self._text_parts.append(record["text"])
            self._dirty = True

    def _write(self, stats: dict[str, Any] | None = None, status: str | None = None) -> None:
        # A failed commit (disk full) is retried at the next interval, not on every token;
        # one that finds the file locked waits in the store's journal (written, in order, later).
        self._last_commit = self.clock()
        self.store._save_reply(self.message_id, self.text, _dumps(self.tokens),
                               None if stats is None else _dumps(stats), status)
        self._dirty = False


def title_from(text: str) -> str:
    """A conversation title from its first message: one line, cut at a word near 60 characters."""
    line = " ".join(text.split())
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[:TITLE_CHARS]
    space = cut.rfind(" ")
    if space > TITLE_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip(" ,.;:") + "…"


def _message(r: tuple) -> StoredMessage:
    return StoredMessage(id=r[0], conversation_id=r[1], role=r[2], text=r[3],
                         tokens=readable_tokens(_loads(r[4], [])),
                         status=r[5], meta=_loads(r[6], {}), stats=_loads(r[7], {}),
                         created_at=r[8], updated_at=r[9] if r[9] is not None else r[8], parent_id=r[10])


def _children(db: sqlite3.Connection, conversation_id: int, message_id: int) -> list[int]:
    """Ids of the messages that follow ``message_id`` (a row with no parent stored
    follows the one just before it)."""
    ids = [r[0] for r in db.execute("SELECT id FROM messages WHERE parent_id = ? AND id > ?", (message_id, message_id))]
    after = db.execute("SELECT id, parent_id FROM messages WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT 1",
                       (conversation_id, message_id)).fetchone()
    if after is not None and after[1] is None:
        ids.append(after[0])
    return ids


def _newest_child(db: sqlite3.Connection, conversation_id: int, message_id: int) -> int | None:
    return max(_children(db, conversation_id, message_id), default=None)


def _leaf(db: sqlite3.Connection, conversation_id: int) -> int | None:
    """The leaf shown; if it is gone (or was never set), the newest message. One that has
    gained followers since (rows another writer added) leads down to the newest of them."""
    row = db.execute(
        """SELECT COALESCE(
               (SELECT m.id FROM messages m JOIN conversations c ON m.id = c.current_leaf
                WHERE c.id = :c AND m.conversation_id = :c),
               (SELECT MAX(id) FROM messages WHERE conversation_id = :c))""", {"c": conversation_id}).fetchone()
    leaf = row[0]
    while leaf is not None and (child := _newest_child(db, conversation_id, leaf)) is not None:
        leaf = child
    return leaf


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _loads(text: str | None, empty: Any) -> Any:
    try:
        return json.loads(text) if text else empty
    except (ValueError, TypeError, RecursionError):
        # One unreadable field should not hide the whole conversation: not JSON, not
        # text at all (another tool's blob), nested past the recursion limit.
        return empty
