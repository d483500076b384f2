"""The chat history's SQLite schema, as the list of steps that built it.

``PRAGMA user_version`` records how many steps a database has had. A new database runs
every step from zero, so fresh and upgraded databases are built by the same code and the
upgrade path is exercised on every first start, not only on users' old files.
Append steps; never edit one that has shipped.
"""

from __future__ import annotations

import sqlite3

MIGRATIONS: list[tuple[str, ...]] = [
    # 0 -> 1: the first release kept conversations and plain-text messages.
    (
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL
        )""",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL,
            text TEXT NOT NULL,
            created_at REAL NOT NULL
        )""",
        "CREATE INDEX messages_by_conversation ON messages(conversation_id, id)",
    ),
    # 1 -> 2: token kinds (so colouring reopens), reply status (streaming / interrupted),
    # the models and settings behind a reply, its stats; updated_at orders the sidebar and
    # deleted_at makes a delete undoable. Old replies have no token records: shown plain.
    (
        "ALTER TABLE conversations ADD COLUMN updated_at REAL",
        """UPDATE conversations SET updated_at = COALESCE(
            (SELECT MAX(created_at) FROM messages WHERE conversation_id = conversations.id),
            created_at)""",
        "ALTER TABLE conversations ADD COLUMN deleted_at REAL",
        "CREATE INDEX conversations_by_update ON conversations(updated_at)",
        "ALTER TABLE messages ADD COLUMN tokens TEXT NOT NULL DEFAULT '[]'",
        "ALTER TABLE messages ADD COLUMN status TEXT NOT NULL DEFAULT 'complete'",
        "ALTER TABLE messages ADD COLUMN meta TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE messages ADD COLUMN stats TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE messages ADD COLUMN updated_at REAL",
        "UPDATE messages SET updated_at = created_at",
    ),
    # 2 -> 3: conversations become trees. A message has a parent (an edited user message
    # is a sibling of the one it replaces, a regenerated reply a sibling alternative);
    # the conversation remembers the leaf it shows, and the system-prompt preset it uses.
    # A linear chat becomes a chain, each message the child of the one before it.
    (
        "ALTER TABLE messages ADD COLUMN parent_id INTEGER",
        # 0 marks a first message: NULL is left for rows written without one (see history.py).
        """UPDATE messages SET parent_id = COALESCE((
            SELECT MAX(p.id) FROM messages p
            WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id), 0)""",
        "CREATE INDEX messages_by_parent ON messages(parent_id)",
        "ALTER TABLE conversations ADD COLUMN current_leaf INTEGER",
        "UPDATE conversations SET current_leaf = (SELECT MAX(id) FROM messages WHERE conversation_id = conversations.id)",
        "ALTER TABLE conversations ADD COLUMN preset TEXT NOT NULL DEFAULT ''",
    ),
]

SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite3.Connection, target: int = SCHEMA_VERSION) -> None:
    """Bring ``db`` (autocommit mode) up to ``target``, one transaction per step.

    A crash between steps leaves a database at a valid earlier version, which the next
    start carries on from.
    """
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            # Read inside the write lock: another Tandem may have just run this step.
            version = schema_version(db)
            if version >= target:
                db.execute("ROLLBACK")
                return
            for statement in MIGRATIONS[version]:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
