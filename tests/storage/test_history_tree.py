"""Conversations as trees (schema 3): edit a user message and the old branch stays,
regenerate a reply and the earlier one stays as an alternative, across a restart; the
migration from a version 2 database written here with raw SQL; exports of the tree."""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.storage import paths
from app.storage.errors import ImportRefused, StorageError
from app.storage.export import (conversation_json, conversation_markdown, from_json, import_conversation,
                                to_json)
from app.storage.history import HistoryStore, token_record
from app.storage.schema import SCHEMA_VERSION


def texts(messages) -> list[str]:
    return [m.text for m in messages]


def reply(store: HistoryStore, conversation: int, text: str, *, instead_of: int | None = None,
          stats: dict | None = None) -> int:
    """A streamed reply as the window writes one: begun, appended, finished."""
    writer = (store.begin_alternative(instead_of) if instead_of is not None
              else store.begin_reply(conversation, {"target": "t.gguf"}))
    writer.append([token_record(text, "accepted")])
    writer.finish(stats or {"tokens": 1})
    return writer.message_id


@pytest.fixture
def chat():
    """q1 -> a1 -> q2 -> a2, then a1 regenerated twice and q2 edited."""
    with HistoryStore.open() as store:
        c = store.create_conversation()
        q1 = store.add_message(c, "user", "q1")
        a1 = reply(store, c, "a1")
        q2 = store.add_message(c, "user", "q2")
        a2 = reply(store, c, "a2")
        ids = dict(c=c, q1=q1, a1=a1, q2=q2, a2=a2)
    return ids


def test_regenerate_keeps_the_earlier_reply_as_an_alternative(chat):
    with HistoryStore.open() as store:
        a2b = reply(store, chat["c"], "a2 again", instead_of=chat["a2"], stats={"tokens": 2})
        assert texts(store.messages(chat["c"])) == ["q1", "a1", "q2", "a2 again"]
        assert store.siblings(a2b) == [chat["a2"], a2b]
        assert store.sibling_position(a2b) == (2, 2) and store.sibling_position(chat["a2"]) == (1, 2)
        assert texts(store.switch_branch(chat["a2"])) == ["q1", "a1", "q2", "a2"]
    with HistoryStore.open() as store:  # a restart shows the branch chosen last
        shown = store.messages(chat["c"])
        assert texts(shown) == ["q1", "a1", "q2", "a2"]
        assert store.message(a2b).stats == {"tokens": 2} and store.message(chat["a2"]).stats == {"tokens": 1}
        assert texts(store.switch_branch(a2b)) == ["q1", "a1", "q2", "a2 again"]


def test_an_edited_message_starts_a_branch_and_the_old_one_stays_reachable(chat):
    with HistoryStore.open() as store:
        q2b = store.add_edit(chat["q2"], "q2 edited")
        assert texts(store.messages(chat["c"])) == ["q1", "a1", "q2 edited"]
        a2b = reply(store, chat["c"], "answer to the edit")
        assert store.message(a2b).parent_id == q2b
        assert store.siblings(q2b) == [chat["q2"], q2b]
        # the old branch, with everything that followed it
        assert texts(store.switch_branch(chat["q2"])) == ["q1", "a1", "q2", "a2"]
        # an edit of the very first message is a second first message
        q1b = store.add_edit(chat["q1"], "q1 edited")
        assert texts(store.messages(chat["c"])) == ["q1 edited"] and store.siblings(q1b) == [chat["q1"], q1b]
        assert len(store.all_messages(chat["c"])) == 7
        assert store.conversation(chat["c"]).message_count == 7
    with HistoryStore.open() as store:
        assert texts(store.messages(chat["c"])) == ["q1 edited"]
        # back to the first branch: it descends to the newest leaf below
        assert texts(store.switch_branch(chat["q1"])) == ["q1", "a1", "q2 edited", "answer to the edit"]
        assert store.messages(chat["c"], last=2)[0].text == "q2 edited"


def test_edit_and_regenerate_refuse_the_wrong_kind_of_message(chat):
    with HistoryStore.open() as store:
        with pytest.raises(StorageError):
            store.add_edit(chat["a1"], "a reply is not edited this way")
        with pytest.raises(StorageError):
            store.begin_alternative(chat["q1"])
        with pytest.raises(StorageError):
            store.switch_branch(10_000)
        other = store.create_conversation()
        with pytest.raises(StorageError):  # a parent from another chat
            store.add_message(other, "user", "x", parent_id=chat["q1"])
        assert store.siblings(10_000) == [] and store.sibling_position(10_000) == (0, 0)


def test_deleting_a_reply_removes_only_its_subtree(chat):
    with HistoryStore.open() as store:
        a1b = reply(store, chat["c"], "a1 again", instead_of=chat["a1"])
        store.switch_branch(chat["a2"])
        assert store.delete_message_and_after(a1b) == 1  # not the branch shown
        assert texts(store.messages(chat["c"])) == ["q1", "a1", "q2", "a2"]
        assert store.delete_message_and_after(chat["q2"]) == 2  # the branch shown: its parent is shown
        assert texts(store.messages(chat["c"])) == ["q1", "a1"] and store.current_leaf(chat["c"]) == chat["a1"]


def test_search_finds_text_on_any_branch(chat):
    with HistoryStore.open() as store:
        store.add_edit(chat["q2"], "a second thought about PELICANS")
        store.switch_branch(chat["q2"])  # the pelicans are on a branch not shown
        assert [c.id for c in store.list_conversations("pelicans")] == [chat["c"]]
        assert store.show_branch_with(chat["c"], "pelicans")  # opened from the search: that branch
        assert texts(store.messages(chat["c"]))[-1] == "a second thought about PELICANS"
        assert not store.show_branch_with(chat["c"], "pelicans") and not store.show_branch_with(chat["c"], "")
        assert not store.show_branch_with(chat["c"], "nowhere")


def test_the_chat_remembers_its_preset(chat):
    with HistoryStore.open() as store:
        assert store.conversation(chat["c"]).preset == ""
        store.set_preset(chat["c"], "Pirate")
    with HistoryStore.open() as store:
        assert store.conversation(chat["c"]).preset == "Pirate"


# --- export ------------------------------------------------------------------------------

def test_markdown_is_the_branch_shown_and_json_the_whole_tree(chat):
    with HistoryStore.open() as store:
        reply(store, chat["c"], "a2 again", instead_of=chat["a2"])
        store.set_preset(chat["c"], "Terse")
        markdown = conversation_markdown(store, chat["c"])
        assert "a2 again" in markdown and "\n\na2\n" not in markdown
        text = conversation_json(store, chat["c"])
        document = json.loads(text)
        assert len(document["messages"]) == 5 and document["preset"] == "Terse"
        assert document["current_leaf"] == document["messages"][-1]["id"]

        copy = import_conversation(store, from_json(text))
        assert texts(store.messages(copy)) == ["q1", "a1", "q2", "a2 again"]
        [first, second] = store.siblings(store.messages(copy)[-1].id)
        assert texts(store.switch_branch(first)) == ["q1", "a1", "q2", "a2"]
        assert store.conversation(copy).preset == "Terse"
        assert len(store.all_messages(copy)) == 5


def test_a_version_1_export_still_imports_as_a_chain():
    version_1 = {"format": "tandem-conversation", "version": 1, "title": "old", "created_at": 1.0,
                 "updated_at": 2.0, "messages": [{"role": "user", "text": "a"}, {"role": "assistant", "text": "b"},
                                                 {"role": "user", "text": "c"}]}
    with HistoryStore.open() as store:
        copy = import_conversation(store, from_json(json.dumps(version_1)))
        shown = store.messages(copy)
        assert texts(shown) == ["a", "b", "c"]
        assert [m.parent_id for m in shown] == [None, shown[0].id, shown[1].id]


@pytest.mark.parametrize("change, field", [
    (lambda d: d["messages"][1].update(parent_id=d["messages"][3]["id"]), "messages[1].parent_id"),
    (lambda d: d["messages"][2].update(id=d["messages"][0]["id"]), "messages[2].id"),
    (lambda d: d["messages"][1].update(parent_id=-1), "messages[1].parent_id"),
    (lambda d: d["messages"][1].update(parent_id=d["messages"][1]["id"]), "messages[1].parent_id"),
    (lambda d: d.update(current_leaf=99_999), "current_leaf"),
    (lambda d: d.update(preset=["x"]), "preset"),
])
def test_a_tree_export_that_lies_is_refused_naming_the_field(chat, change, field):
    with HistoryStore.open() as store:
        document = json.loads(conversation_json(store, chat["c"]))
        change(document)
        with pytest.raises(ImportRefused, match=f"Damaged conversation export: {field.replace('[', '.').replace(']', '.')}"):
            from_json(json.dumps(document))


def test_messages_without_parents_export_as_a_chain():
    with HistoryStore.open() as store:
        c = store.create_conversation("t")
        store.add_message(c, "user", "x")
        document = json.loads(to_json(store.conversation(c), store.messages(c)))
    assert "parent_id" not in document["messages"][0] and "current_leaf" not in document


# --- the migration from version 2 --------------------------------------------------------

V2_SCHEMA = """
CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL,
                            updated_at REAL, deleted_at REAL);
CREATE INDEX conversations_by_update ON conversations(updated_at);
CREATE TABLE messages (id INTEGER PRIMARY KEY,
                       conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                       role TEXT NOT NULL, text TEXT NOT NULL, created_at REAL NOT NULL,
                       tokens TEXT NOT NULL DEFAULT '[]', status TEXT NOT NULL DEFAULT 'complete',
                       meta TEXT NOT NULL DEFAULT '{}', stats TEXT NOT NULL DEFAULT '{}', updated_at REAL);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
PRAGMA user_version = 2;
"""


def test_a_version_2_database_becomes_a_tree_without_loss():
    tokens = json.dumps([{"text": "Hi", "kind": "accepted"}, {"text": "!", "kind": "corrected",
                                                            "draft_text": "?", "draft_prob": 0.25}])
    with sqlite3.connect(str(paths.history_db())) as db:
        db.executescript(V2_SCHEMA)
        db.executemany("INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
                       [(1, "Two turns", 10.0, 40.0, None), (2, "Interleaved", 11.0, 41.0, None),
                        (3, "Empty", 12.0, 12.0, None)])
        rows = [(1, 1, "user", "hello", 10.0, "[]", "complete", "{}", "{}", 10.0),
                (2, 2, "user", "other chat", 11.0, "[]", "complete", "{}", "{}", 11.0),
                (3, 1, "assistant", "Hi!", 20.0, tokens, "complete", '{"target": "t.gguf"}', '{"tokens": 2}', 21.0),
                (4, 1, "user", "again", 30.0, "[]", "complete", "{}", "{}", 30.0),
                (5, 2, "assistant", "cut", 31.0, "[]", "streaming", "{}", "{}", 31.0),
                (6, 1, "assistant", "bye", 40.0, "[]", "stopped", "{}", "{}", 40.0)]
        db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.close()

    with HistoryStore.open() as store:
        assert store.notice is None
        first = store.messages(1)
        assert [(m.id, m.parent_id, m.text, m.status) for m in first] == [
            (1, None, "hello", "complete"), (3, 1, "Hi!", "complete"), (4, 3, "again", "complete"),
            (6, 4, "bye", "stopped")]
        assert first[1].tokens[1] == {"text": "!", "kind": "corrected", "draft_text": "?", "draft_prob": 0.25}
        assert (first[1].meta, first[1].stats, first[1].updated_at) == ({"target": "t.gguf"}, {"tokens": 2}, 21.0)
        assert [(m.id, m.parent_id, m.status) for m in store.messages(2)] == [(2, None, "complete"),
                                                                             (5, 2, "interrupted")]
        assert store.messages(3) == [] and store.current_leaf(1) == 6
        assert [c.title for c in store.list_conversations()] == ["Interleaved", "Two turns", "Empty"]
        # and it is a tree now
        reply(store, 1, "bye again", instead_of=6)
        assert store.sibling_position(6) == (1, 2)
    with sqlite3.connect(str(paths.history_db())) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


def test_rows_written_without_a_parent_follow_the_message_before_them():
    """Another tool's rows in a schema 3 history: read as the chain they were meant as."""
    with HistoryStore.open() as store:
        c = store.create_conversation("by hand")
        first = store.add_message(c, "user", "mine")
        for role, text in (("assistant", "theirs"), ("user", "theirs too")):
            store._db.execute("INSERT INTO messages (conversation_id, role, text, created_at) VALUES (?, ?, ?, 0)",
                              (c, role, text))
        shown = store.messages(c)
        assert texts(shown) == ["mine", "theirs", "theirs too"]
        assert [m.parent_id for m in shown] == [None, first, shown[1].id]
        assert store.siblings(shown[1].id) == [shown[1].id]
        assert texts(store.switch_branch(first)) == ["mine", "theirs", "theirs too"]
        assert store.delete_message_and_after(shown[1].id) == 2 and texts(store.messages(c)) == ["mine"]
