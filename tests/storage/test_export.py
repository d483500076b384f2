from __future__ import annotations

import json

import pytest

from app.storage.errors import StorageError
from app.storage.export import from_json, import_conversation, to_json, to_markdown
from app.storage.history import HistoryStore, token_record


@pytest.fixture
def store():
    with HistoryStore.open() as opened:
        yield opened


@pytest.fixture
def conversation(store):
    conversation = store.create_conversation()
    store.add_message(conversation, "system", "Be brief.")
    store.add_message(conversation, "user", "Say hi in <b>bold</b> & 日本語")
    writer = store.begin_reply(conversation, {"target": "t.gguf", "draft": "d.gguf", "settings": {"top_k": 40}})
    writer.append([token_record("Hi", "accepted"), token_record(" there", "corrected", " their", 0.3125)])
    writer.finish({"tokens": 3, "tokens_per_second": 51.25, "acceptance": 0.5, "speculative": True,
                   "seconds_saved": 2.125, "speedup": 1.375},
                  tokens=[token_record(" 👋", "bonus")])
    store.add_message(conversation, "user", "Again")
    cut = store.begin_reply(conversation, interval=0.0)
    cut.append([token_record("Hel", "plain")])
    cut.finish(status="stopped")
    return conversation


def test_json_round_trip_keeps_everything(store, conversation):
    summary = store.conversation(conversation)
    messages = store.messages(conversation)

    exported = from_json(to_json(summary, messages))

    assert exported.title == summary.title == "Say hi in <b>bold</b> & 日本語"
    assert (exported.created_at, exported.updated_at) == (summary.created_at, summary.updated_at)
    assert exported.messages == messages
    reply = exported.messages[2]
    assert [t["kind"] for t in reply.tokens] == ["accepted", "corrected", "bonus"]
    assert reply.tokens[1] == {"text": " there", "kind": "corrected", "draft_text": " their", "draft_prob": 0.3125}
    assert reply.meta["draft"] == "d.gguf" and reply.stats["tokens_per_second"] == 51.25


def test_json_is_readable_by_other_tools(store, conversation):
    document = json.loads(to_json(store.conversation(conversation), store.messages(conversation)))
    assert document["format"] == "tandem-conversation" and document["version"] == 2
    assert [m["role"] for m in document["messages"]] == ["system", "user", "assistant", "user", "assistant"]


def test_markdown_has_roles_as_headings_and_the_texts(store, conversation):
    markdown = to_markdown(store.conversation(conversation), store.messages(conversation))
    # The texts' own HTML stays text (escaped): see test_export_hostile.py for how it renders.
    assert markdown.startswith("# Say hi in \\<b\\>bold\\<\\/b\\> \\& 日本語\n")
    assert "## System\n\nBe brief." in markdown
    assert "## User\n\nSay hi in \\<b>bold\\</b> \\& 日本語" in markdown
    assert "## Assistant\n\nHi there 👋" in markdown
    assert "51.2 tokens/s" in markdown and "acceptance 50%" in markdown
    assert "acceptance 50% · 2.1 s saved (1.38×)*" in markdown  # the window's time saved, too
    assert "## Assistant\n\nHel\n\n*reply stopped*" in markdown


def test_an_export_imports_as_a_new_conversation(store, conversation):
    exported = from_json(to_json(store.conversation(conversation), store.messages(conversation)))
    with HistoryStore.open(store.path.with_name("other.sqlite3")) as other:
        copy = import_conversation(other, exported)
        imported = other.messages(copy)
        assert other.conversation(copy).title == exported.title

    def content(message):
        return (message.role, message.text, message.tokens, message.status, message.meta, message.stats)

    assert [content(m) for m in imported] == [content(m) for m in exported.messages]


@pytest.mark.parametrize("text", ["", "{", "[]", '{"format": "something-else"}',
                                  '{"format": "tandem-conversation", "version": 7}',
                                  '{"format": "tandem-conversation", "version": 1, "title": "x"}',
                                  '{"format": "tandem-conversation", "version": 1, "title": "x", "created_at": 1,'
                                  ' "updated_at": 1, "messages": [{"role": "wizard", "text": ""}]}'])
def test_a_bad_export_is_a_storage_error(text):
    with pytest.raises(StorageError):
        from_json(text)
