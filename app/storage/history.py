"""Chat history in SQLite: conversations, messages with their token kinds, streamed replies.

Durability: WAL journal, ``synchronous=FULL``, every change in one transaction. A reply
being generated is written by a ``ReplyWriter`` at most every ``COMMIT_INTERVAL_S``, so
a crash loses less than that much of it; the next open marks it 'interrupted'.

Threads: a ``HistoryStore`` and its writers belong to the thread that opened the store
(the GUI thread in the app); sqlite3's ``check_same_thread`` enforces it.
"""

from __future__ import annotations

import json
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
from app.storage.schema import SCHEMA_VERSION, migrate, schema_version

ROLES = ("user", "assistant", "system")
TOKEN_KINDS = tuple(kind.value for kind in TokenKind)
STATUSES = tuple(state.value for state in MessageState if state is not MessageState.FAILED)  # failed: never stored
COMMIT_INTERVAL_S = 0.5
TITLE_CHARS = 60
IMPORT_BATCH = 2000  # messages between progress reports (and chances to stop) of an import

# SQLite primary result codes that mean the file itself is damaged or not a database;
# anything else (locked, permissions, I/O) may pass, so the file is left where it is.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_SQLITE_HEADER = b"SQLite format 3\x00"

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
    message_count: int = 0


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


class _Damaged(Exception):
    """The file is there but is not a usable Tandem history (reason in the message)."""


class HistoryStore:
    """All reads and writes of the chat history. Use ``HistoryStore.open()``."""

    def __init__(self, db: sqlite3.Connection, path: Path | None, notice: str | None = None):
        self._db = db
        self.path = path  # None when the history could not be opened and lives in memory
        self.notice = notice  # one line for the user when the file had to be set aside
        self._last_now = 0.0

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
            return cls(_connect(path), path)
        except (sqlite3.DatabaseError, _Damaged) as exc:
            if not _is_damage(exc):
                return cls._in_memory(
                    f"Chat history {path} could not be opened ({exc}); chats from this session will not be saved.")
            problem = exc
        try:
            kept = move_aside(path, companions=("-wal", "-shm"))
            store = cls(_connect(path), path)
        except (OSError, sqlite3.DatabaseError, _Damaged) as exc:
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
        except BaseException:
            db.close()
            raise
        return cls(db, Path(path))

    @classmethod
    def _in_memory(cls, notice: str) -> HistoryStore:
        return cls(_connect(Path(":memory:")), None, notice)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- conversations ------------------------------------------------------------------

    def create_conversation(self, title: str = "") -> int:
        now = self._now()
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO conversations (title, created_at, updated_at) VALUES (?, ?, ?)",
                (title.strip(), now, now))
        return cursor.lastrowid

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

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title.strip(), conversation_id))

    def delete_conversation(self, conversation_id: int) -> None:
        """Hide a conversation; ``restore_conversation`` brings it back until the next open."""
        with self._transaction() as db:
            db.execute("UPDATE conversations SET deleted_at = ? WHERE id = ?", (time.time(), conversation_id))

    def restore_conversation(self, conversation_id: int) -> None:
        with self._transaction() as db:
            db.execute("UPDATE conversations SET deleted_at = NULL WHERE id = ?", (conversation_id,))

    def purge_deleted(self) -> int:
        """Remove deleted conversations for good; returns how many."""
        with self._transaction() as db:
            return _purge_deleted(db)

    # --- messages -----------------------------------------------------------------------

    def add_message(self, conversation_id: int, role: str, text: str, tokens: list[TokenRecord] | None = None,
                    meta: dict[str, Any] | None = None, stats: dict[str, Any] | None = None,
                    status: str = MessageState.COMPLETE) -> int:
        """Store a whole message. A first user message names an untitled conversation."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        now = self._now()
        with self._transaction() as db:
            self._touch(db, conversation_id, now)
            cursor = db.execute(
                """INSERT INTO messages (conversation_id, role, text, tokens, status, meta, stats,
                                         created_at, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (conversation_id, role, text, _dumps(tokens or []), status, _dumps(meta or {}),
                 _dumps(stats or {}), now, now))
            if role == "user":
                db.execute("UPDATE conversations SET title = ? WHERE id = ? AND title = ''",
                           (title_from(text), conversation_id))
        return cursor.lastrowid

    def messages(self, conversation_id: int, last: int | None = None) -> list[StoredMessage]:
        """The conversation's messages in order; with ``last``, only that many newest."""
        columns = "id, conversation_id, role, text, tokens, status, meta, stats, created_at, updated_at"
        if last is None:
            rows = self._db.execute(
                f"SELECT {columns} FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        else:
            rows = reversed(self._db.execute(
                f"SELECT {columns} FROM messages WHERE conversation_id = ? ORDER BY id DESC LIMIT ?",
                (conversation_id, max(0, last))).fetchall())
        return [StoredMessage(id=r[0], conversation_id=r[1], role=r[2], text=r[3],
                              tokens=readable_tokens(_loads(r[4], [])),
                              status=r[5], meta=_loads(r[6], {}), stats=_loads(r[7], {}),
                              created_at=r[8], updated_at=r[9] if r[9] is not None else r[8])
                for r in rows]

    def import_conversation(self, title: str, messages: list[StoredMessage],
                            progress: Callable[[int, int], bool | None] | None = None) -> int:
        """Add a whole conversation (an import) in one transaction; returns its id.

        Messages must be checked already (``export_schema``). ``progress(done, total)``
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
        title = title.strip() or next((title_from(m.text) for m in messages if m.role == "user"), "")
        now = self._now()
        with self._transaction() as db:
            conversation_id = db.execute(
                "INSERT INTO conversations (title, created_at, updated_at) VALUES (?, ?, ?)",
                (title, now, now)).lastrowid
            for start in range(0, len(rows), IMPORT_BATCH):
                db.executemany(
                    """INSERT INTO messages (conversation_id, role, text, tokens, status, meta, stats,
                                             created_at, updated_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    [(conversation_id, *row, now, now) for row in rows[start:start + IMPORT_BATCH]])
                if report(len(rows) + min(start + IMPORT_BATCH, len(rows)), total) is False:
                    raise ImportCancelled("The import was stopped; nothing was added.")
        report(total, total)
        return conversation_id

    def delete_message_and_after(self, message_id: int) -> int:
        """Delete a message and every later one in its conversation (Regenerate, edit and resend)."""
        with self._transaction() as db:
            row = db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                return 0
            return db.execute("DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                              (row[0], message_id)).rowcount

    def begin_reply(self, conversation_id: int, meta: dict[str, Any] | None = None, *,
                    interval: float = COMMIT_INTERVAL_S,
                    clock: Callable[[], float] = time.monotonic) -> ReplyWriter:
        """Start an assistant message that is filled in while it is generated."""
        message_id = self.add_message(conversation_id, "assistant", "", meta=meta, status=MessageState.STREAMING)
        return ReplyWriter(self, conversation_id, message_id, interval=interval, clock=clock)

    # --- internals ----------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            with _transaction(self._db):
                yield self._db
        except sqlite3.Error as exc:  # disk full, read-only, ...: one line for the user
            raise StorageError(f"Could not save chat history: {exc}") from exc

    def _touch(self, db: sqlite3.Connection, conversation_id: int, now: float) -> None:
        touched = db.execute("UPDATE conversations SET updated_at = ? WHERE id = ? AND deleted_at IS NULL",
                             (now, conversation_id)).rowcount
        if not touched:
            raise StorageError(f"Conversation {conversation_id} does not exist or was deleted.")

    def _summaries(self, where: str, parameters: Any) -> list[ConversationSummary]:
        rows = self._db.execute(
            f"""SELECT c.id, c.title, c.created_at, c.updated_at,
                       (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id)
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
        # A failed commit (disk full) is retried at the next interval, not on every token.
        self._last_commit = self.clock()
        with self.store._transaction() as db:
            db.execute("""UPDATE messages SET text = ?, tokens = ?, updated_at = ?,
                              stats = COALESCE(?, stats), status = COALESCE(?, status)
                          WHERE id = ?""",
                       (self.text, _dumps(self.tokens), time.time(),
                        None if stats is None else _dumps(stats), status, self.message_id))
            if status is not None:  # a finished reply moves its conversation to the top
                db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?",
                           (self.store._now(), self.conversation_id))
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


def _connect(path: Path) -> sqlite3.Connection:
    """Open, check and upgrade one database; closes it again if any of that fails."""
    _check_header(path)
    db = sqlite3.connect(str(path), timeout=5.0, isolation_level=None)  # transactions are explicit
    try:
        # Judge the file before writing to it (journal_mode rewrites the header): a file
        # set aside should be kept exactly as it was found.
        verdict = db.execute("PRAGMA quick_check").fetchone()[0]  # 'not a database' shows here
        if verdict != "ok":
            raise _Damaged(f"integrity check: {verdict}")
        version = schema_version(db)
        if version > SCHEMA_VERSION:
            raise _Damaged(f"written by a newer Tandem, schema {version}")
        if version == 0 and db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
            raise _Damaged("a database, but not a Tandem history")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")  # a commit is on disk before the call returns
        db.execute("PRAGMA foreign_keys = ON")
        migrate(db)
        with _transaction(db):
            # Only a crash (or a kill) leaves a reply 'streaming' across a restart.
            db.execute("UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'")
            _purge_deleted(db)  # undo only lasts for the session that deleted
        db.create_function("tandem_contains", 2, _contains, deterministic=True)
    except BaseException:
        db.close()
        raise
    return db


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:  # SQLite already rolled back after some errors (e.g. disk full)
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _purge_deleted(db: sqlite3.Connection) -> int:
    db.execute("DELETE FROM messages WHERE conversation_id IN "
               "(SELECT id FROM conversations WHERE deleted_at IS NOT NULL)")
    return db.execute("DELETE FROM conversations WHERE deleted_at IS NOT NULL").rowcount


def _check_header(path: Path) -> None:
    # Judged before SQLite opens the file: on a non-database SQLite discards the -wal
    # beside it when the connection closes, and that file should be set aside intact too.
    try:
        with open(path, "rb") as file:
            header = file.read(len(_SQLITE_HEADER))
    except OSError:
        return  # missing (a new history) or unopenable: sqlite3 reports it in its own words
    if header and header != _SQLITE_HEADER:
        raise _Damaged("file is not a database")


def _is_damage(exc: BaseException) -> bool:
    if isinstance(exc, _Damaged):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def _contains(haystack: str | None, needle: str) -> bool:
    return needle in (haystack or "").casefold()


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _loads(text: str | None, empty: Any) -> Any:
    try:
        return json.loads(text) if text else empty
    except (ValueError, TypeError, RecursionError):
        # One unreadable field should not hide the whole conversation: not JSON, not
        # text at all (another tool's blob), nested past the recursion limit.
        return empty
