from __future__ import annotations

import sqlite3
import threading

import pytest

from app.storage import paths
from app.storage.errors import StorageError
from app.storage.history import HistoryStore, StoredMessage, token_record
from app.storage.schema import SCHEMA_VERSION


@pytest.fixture
def store():
    with HistoryStore.open() as opened:
        yield opened


def raw(path=None) -> sqlite3.Connection:
    """A second, independent connection: it sees only what was committed."""
    return sqlite3.connect(str(path or paths.history_db()))


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_new_history_is_empty_wal_and_current(store):
    assert store.notice is None and store.path == paths.history_db()
    assert store.list_conversations() == []
    with raw() as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3


def test_conversations_are_listed_newest_first(store):
    first = store.create_conversation("first")
    second = store.create_conversation("second")
    assert [c.id for c in store.list_conversations()] == [second, first]
    store.add_message(first, "user", "back to the first one")
    assert [c.id for c in store.list_conversations()] == [first, second]
    assert store.conversation(first).message_count == 1


def test_title_defaults_to_the_first_user_message(store):
    conversation = store.create_conversation()
    assert store.conversation(conversation).title == ""
    store.add_message(conversation, "system", "You are terse.")
    store.add_message(conversation, "user", "  How do\n I   bake bread?  ")
    store.add_message(conversation, "user", "And cake?")
    assert store.conversation(conversation).title == "How do I bake bread?"


def test_long_first_message_gives_a_trimmed_title(store):
    conversation = store.create_conversation()
    store.add_message(conversation, "user", "word " * 40)
    title = store.conversation(conversation).title
    assert title.endswith("…") and len(title) <= 61 and title.startswith("word word")


def test_an_explicit_title_is_kept_and_rename_changes_it(store):
    conversation = store.create_conversation("Recipes")
    store.add_message(conversation, "user", "bread?")
    assert store.conversation(conversation).title == "Recipes"
    store.rename_conversation(conversation, "  Baking  ")
    assert store.conversation(conversation).title == "Baking"


def test_search_matches_titles_and_text_in_any_case(store):
    bread = store.create_conversation("Bread")
    store.add_message(bread, "user", "How long to knead?")
    street = store.create_conversation("Directions")
    store.add_message(street, "assistant", "Turn left at the Straße.")
    store.create_conversation("Unrelated")

    assert [c.id for c in store.list_conversations("bREAD")] == [bread]
    assert [c.id for c in store.list_conversations("KNEAD")] == [bread]
    assert [c.id for c in store.list_conversations("strasse")] == [street]  # casefold, not just ASCII
    assert store.list_conversations("100%") == []  # no LIKE wildcards leak through
    assert len(store.list_conversations("   ")) == 3


def test_delete_hides_and_restore_brings_back(store):
    kept = store.create_conversation("kept")
    doomed = store.create_conversation("doomed")
    store.add_message(doomed, "user", "hello")

    store.delete_conversation(doomed)
    assert [c.id for c in store.list_conversations()] == [kept]
    assert store.conversation(doomed) is None
    assert store.list_conversations("hello") == []

    store.restore_conversation(doomed)
    assert {c.id for c in store.list_conversations()} == {kept, doomed}
    assert store.messages(doomed)[0].text == "hello"


def test_deleted_conversations_are_purged_on_next_open():
    with HistoryStore.open() as store:
        doomed = store.create_conversation("doomed")
        store.add_message(doomed, "user", "bye")
        store.delete_conversation(doomed)
    with HistoryStore.open() as store:
        store.restore_conversation(doomed)
        assert store.list_conversations() == []
    with raw() as db:
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


def test_messages_keep_tokens_meta_and_stats_across_reopen():
    tokens = [token_record("Hel", "accepted"), token_record("lo", "corrected", draft_text="p", draft_prob=0.25),
              token_record(" 🌍", "bonus"), token_record("!", "plain")]
    meta = {"target": "SmolLM2 F32", "draft": "SmolLM2 Q4_1", "settings": {"temperature": 0.0}}
    stats = {"tokens": 4, "acceptance": 0.5}
    with HistoryStore.open() as store:
        conversation = store.create_conversation()
        store.add_message(conversation, "user", "Hi")
        reply = store.add_message(conversation, "assistant", "Hello 🌍!", tokens=tokens, meta=meta, stats=stats)
    with HistoryStore.open() as store:
        question, answer = store.messages(conversation)
    assert (question.role, question.text, question.tokens) == ("user", "Hi", [])
    assert answer == StoredMessage(id=reply, conversation_id=conversation, role="assistant", text="Hello 🌍!",
                                   tokens=tokens, status="complete", meta=meta, stats=stats,
                                   created_at=answer.created_at, updated_at=answer.updated_at,
                                   parent_id=question.id)


def test_bad_arguments_are_refused(store):
    with pytest.raises(StorageError):
        store.add_message(12345, "user", "nobody home")
    conversation = store.create_conversation()
    with pytest.raises(ValueError):
        store.add_message(conversation, "robot", "beep")
    with pytest.raises(ValueError):
        token_record("x", "guessed")


def test_a_streamed_reply_commits_at_most_every_interval(store):
    clock = FakeClock()
    conversation = store.create_conversation()
    store.add_message(conversation, "user", "Count")
    writer = store.begin_reply(conversation, {"target": "t"}, clock=clock)

    def on_disk():
        with raw() as db:
            return db.execute("SELECT text, status FROM messages WHERE id = ?", (writer.message_id,)).fetchone()

    assert on_disk() == ("", "streaming")
    clock.now += 0.2
    assert writer.append([token_record("one", "accepted")]) is False
    clock.now += 0.29
    assert writer.append([token_record(" two", "accepted")]) is False
    assert on_disk() == ("", "streaming")  # nothing written between commits
    clock.now += 0.01
    assert writer.append([token_record(" three", "bonus")]) is True
    assert on_disk() == ("one two three", "streaming")
    clock.now += 0.1
    assert writer.append([token_record(" four", "plain")]) is False

    writer.finish({"tokens": 4}, tokens=[token_record(".", "plain")])

    [_, reply] = store.messages(conversation)
    assert (reply.text, reply.status, reply.stats) == ("one two three four.", "complete", {"tokens": 4})
    assert [t["kind"] for t in reply.tokens] == ["accepted", "accepted", "bonus", "plain", "plain"]
    with pytest.raises(RuntimeError):
        writer.append([token_record("late", "plain")])


def test_a_finished_reply_moves_its_conversation_to_the_top(store):
    older = store.create_conversation("older")
    newer = store.create_conversation("newer")
    writer = store.begin_reply(older)
    store.add_message(newer, "user", "meanwhile")
    writer.finish(status="stopped")
    assert store.list_conversations()[0].id == older
    assert store.messages(older)[0].status == "stopped"


def test_a_reply_left_streaming_is_interrupted_on_reopen():
    with HistoryStore.open() as store:
        conversation = store.create_conversation()
        writer = store.begin_reply(conversation, interval=0.0)
        writer.append([token_record("Half a", "accepted")])
        writer.append([token_record(" sentence", "accepted")])
        assert store.messages(conversation)[0].status == "streaming"
    with HistoryStore.open() as store:
        [reply] = store.messages(conversation)
    assert (reply.status, reply.text) == ("interrupted", "Half a sentence")


def test_regenerate_deletes_the_reply_and_what_follows(store):
    conversation = store.create_conversation()
    store.add_message(conversation, "user", "q1")
    reply = store.add_message(conversation, "assistant", "a1")
    store.add_message(conversation, "user", "q2")
    other = store.create_conversation()
    store.add_message(other, "user", "untouched")

    assert store.delete_message_and_after(reply) == 2
    assert [m.text for m in store.messages(conversation)] == ["q1"]
    assert [m.text for m in store.messages(other)] == ["untouched"]
    assert store.delete_message_and_after(reply) == 0


V1_SCHEMA = """
CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES conversations(id),
                       role TEXT NOT NULL, text TEXT NOT NULL, created_at REAL NOT NULL);
PRAGMA user_version = 1;
"""


def test_a_version_1_database_opens_without_loss():
    with raw() as db:
        db.executescript(V1_SCHEMA)
        db.execute("INSERT INTO conversations VALUES (1, 'Old chat', 1000.0), (2, 'Empty one', 3000.0)")
        db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)", [
            (1, 1, "user", "Ça va ? 🙂", 1001.0),
            (2, 1, "assistant", "Très bien.\n<b>literal</b>", 2002.0),
        ])
    db.close()

    with HistoryStore.open() as store:
        assert store.notice is None
        assert [(c.id, c.title, c.updated_at) for c in store.list_conversations()] == [
            (2, "Empty one", 3000.0), (1, "Old chat", 2002.0)]
        question, answer = store.messages(1)
        assert (question.text, answer.text) == ("Ça va ? 🙂", "Très bien.\n<b>literal</b>")
        assert (answer.status, answer.tokens, answer.stats, answer.created_at) == ("complete", [], {}, 2002.0)
        # and the upgraded file takes new-style messages
        store.add_message(1, "assistant", "ok", tokens=[token_record("ok", "plain")])
    with raw() as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def assert_set_aside(store: HistoryStore, original: bytes) -> None:
    [kept] = paths.data_dir().glob("history.sqlite3.bad-*")
    assert kept.read_bytes() == original
    assert store.notice and str(kept) in store.notice and "\n" not in store.notice
    assert store.path == paths.history_db() and store.list_conversations() == []
    store.create_conversation("life goes on")  # the fresh history works
    assert len(store.list_conversations()) == 1


def test_a_garbage_file_is_moved_aside_and_history_starts_empty():
    garbage = bytes(range(256)) * 64
    paths.history_db().write_bytes(garbage)
    with HistoryStore.open() as store:
        assert_set_aside(store, garbage)


def test_a_truncated_database_is_moved_aside():
    with HistoryStore.open() as store:
        for n in range(40):
            conversation = store.create_conversation(f"chat {n}")
            store.add_message(conversation, "user", f"message {n} " + "x" * 3000)
    whole = paths.history_db().read_bytes()
    truncated = whole[: len(whole) // 2]
    paths.history_db().write_bytes(truncated)
    with HistoryStore.open() as store:
        assert_set_aside(store, truncated)


def test_a_database_from_a_newer_tandem_is_set_aside_not_damaged():
    with raw() as db:
        db.execute("CREATE TABLE future (x)")
        db.execute("PRAGMA user_version = 99")
    db.close()
    original = paths.history_db().read_bytes()
    with HistoryStore.open() as store:
        assert "newer" in store.notice
        assert_set_aside(store, original)


def test_a_foreign_database_is_set_aside():
    with raw() as db:
        db.execute("CREATE TABLE bookmarks (url TEXT)")
    db.close()
    original = paths.history_db().read_bytes()
    with HistoryStore.open() as store:
        assert_set_aside(store, original)


def test_wal_companions_move_with_the_bad_file():
    paths.history_db().write_bytes(b"not a database at all" * 100)
    wal = paths.history_db().with_name("history.sqlite3-wal")
    wal.write_bytes(b"stale wal")
    with HistoryStore.open() as store:
        [kept] = paths.data_dir().glob("history.sqlite3.bad-*[0-9]")
        assert kept.with_name(kept.name + "-wal").read_bytes() == b"stale wal"
        assert store.list_conversations() == []


def test_an_unopenable_path_runs_in_memory_and_touches_nothing():
    paths.history_db().mkdir()  # a directory where the file should be
    with HistoryStore.open() as store:
        assert store.path is None and "will not be saved" in store.notice
        conversation = store.create_conversation("still usable")
        store.add_message(conversation, "user", "hi")
        assert store.list_conversations()[0].title == "still usable"
    assert paths.history_db().is_dir()
    assert list(paths.data_dir().glob("*.bad-*")) == []


def test_the_store_belongs_to_the_thread_that_opened_it(store):
    errors = []

    def elsewhere():
        try:
            store.list_conversations()
        except sqlite3.ProgrammingError as exc:
            errors.append(exc)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert len(errors) == 1


def test_a_full_disk_is_a_storage_error_and_streaming_recovers(store):
    conversation = store.create_conversation()
    writer = store.begin_reply(conversation, interval=0.0)
    writer.append([token_record("saved", "plain")])
    # SQLite's page limit is a real "database or disk is full", without filling a disk.
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StorageError, match="full"):
        writer.append([token_record("x" * 200_000, "plain")])
    assert store.messages(conversation)[0].text == "saved"  # the failed commit left no trace

    store._db.execute("PRAGMA max_page_count = 1073741823")
    writer.finish()
    assert store.messages(conversation)[0].text == "saved" + "x" * 200_000
