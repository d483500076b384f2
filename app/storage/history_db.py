"""Opening one chat-history database: judged before it is written to, upgraded, cleaned.

A history file is someone's data: a file that is not a database, fails SQLite's
integrity check, was written by a newer Tandem or is another program's database is
``Damaged`` (``HistoryStore.open`` sets it aside and starts a new one); anything else
SQLite refuses (locked, permissions) leaves the file where it is (``is_damage``).
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from app.storage.schema import SCHEMA_VERSION, migrate, schema_version

# SQLite primary result codes that mean the file itself is damaged or not a database;
# anything else (locked, permissions, I/O) may pass, so the file is left where it is.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_SQLITE_HEADER = b"SQLite format 3\x00"


class Damaged(Exception):
    """The file is there but is not a usable Tandem history (reason in the message)."""


def connect(path: Path) -> sqlite3.Connection:
    """Open, check and upgrade one database; closes it again if any of that fails."""
    _check_header(path)
    db = sqlite3.connect(str(path), timeout=5.0, isolation_level=None)  # transactions are explicit
    try:
        # Judge the file before writing to it (journal_mode rewrites the header): a file
        # set aside should be kept exactly as it was found.
        verdict = db.execute("PRAGMA quick_check").fetchone()[0]  # 'not a database' shows here
        if verdict != "ok":
            raise Damaged(f"integrity check: {verdict}")
        version = schema_version(db)
        if version > SCHEMA_VERSION:
            raise Damaged(f"written by a newer Tandem, schema {version}")
        if version == 0 and db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
            raise Damaged("a database, but not a Tandem history")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")  # a commit is on disk before the call returns
        db.execute("PRAGMA foreign_keys = ON")
        migrate(db)
        with transaction(db):
            # Only a crash (or a kill) leaves a reply 'streaming' across a restart.
            db.execute("UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'")
            purge_deleted(db)  # undo only lasts for the session that deleted
        db.create_function("tandem_contains", 2, _contains, deterministic=True)
    except BaseException:
        db.close()
        raise
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:  # SQLite already rolled back after some errors (e.g. disk full)
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def purge_deleted(db: sqlite3.Connection) -> int:
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
        raise Damaged("file is not a database")


def is_damage(exc: BaseException) -> bool:
    if isinstance(exc, Damaged):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def _contains(haystack: str | None, needle: str) -> bool:
    return needle in (haystack or "").casefold()
