"""Shared exports are other people's data: every field is checked before anything is
written (the first bad one named, with its path), an import is one transaction, and the
Markdown export renders the texts as text (no HTML of theirs, no fake role headings)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from markdown_it import MarkdownIt

from app.storage.errors import ImportCancelled, ImportRefused, StorageError
from app.storage.export import from_json, import_conversation, read_export, to_json, to_markdown
from app.storage.history import ConversationSummary, HistoryStore, StoredMessage, token_record


@pytest.fixture
def store():
    with HistoryStore.open() as opened:
        yield opened


def export_text(messages=None, **fields) -> str:
    document = {"format": "tandem-conversation", "version": 1, "title": "Shared", "created_at": 1.0,
                "updated_at": 2.0, "messages": [{"role": "user", "text": "hi"}] if messages is None else messages}
    document.update(fields)
    return json.dumps(document)


def reply(**fields):
    message = {"role": "assistant", "text": "Hi", "tokens": [{"t": "Hi", "k": "accepted"}], "stats": {"tokens": 1}}
    message.update(fields)
    return message


# (what, the export's text, what the refusal must name)
HOSTILE = [
    ("deep nesting", '{"format": "tandem-conversation", "version": 1, "title": ' + "[" * 100_000 + "]" * 100_000
     + "}", "nested too deeply"),
    ("messages a string", export_text("hello"), "messages must be a list"),
    ("messages a dict", export_text({"role": "user"}), "messages must be a list"),
    ("a message a string", export_text(["hello"]), "messages[0] must be an object"),
    ("a message a list", export_text([{"role": "user", "text": "a"}, [1, 2]]), "messages[1] must be an object"),
    ("no text", export_text([{"role": "user"}]), "messages[0].text is missing"),
    ("text a number", export_text([{"role": "user", "text": 5}]), "messages[0].text must be text"),
    ("unknown role", export_text([{"role": "wizard", "text": ""}]), "messages[0].role must be one of"),
    ("draft probability a list", export_text([reply(tokens=[{"t": "a", "k": "corrected", "d": "b", "p": [1]}])]),
     "messages[0].tokens[0].p must be a number"),
    ("draft probability above 1", export_text([reply(tokens=[{"t": "a", "k": "corrected", "p": 7}])]),
     "messages[0].tokens[0].p must be from 0 to 1"),
    ("token a string", export_text([reply(tokens=["a"])]), "messages[0].tokens[0] must be an object"),
    ("unknown token kind", export_text([reply(tokens=[{"t": "a", "k": "magic"}])]), "messages[0].tokens[0].k"),
    ("unknown token field", export_text([reply(tokens=[{"t": "a", "x": 1}])]), "messages[0].tokens[0].x"),
    ("tokens a dict", export_text([reply(tokens={"t": "a"})]), "messages[0].tokens must be a list"),
    ("stats a list", export_text([reply(stats=[1, 2])]), "messages[0].stats must be an object"),
    ("stats tokens text", export_text([reply(stats={"tokens": "many"})]), "messages[0].stats.tokens"),
    ("stats speed text", export_text([reply(stats={"tokens_per_second": "fast"})]),
     "messages[0].stats.tokens_per_second"),
    ("stats speculative a number", export_text([reply(stats={"speculative": 1})]), "messages[0].stats.speculative"),
    ("stats positions of text", export_text([reply(stats={"accepted_by_position": ["a"]})]),
     "messages[0].stats.accepted_by_position[0]"),
    ("negative count", export_text([reply(stats={"tokens": -4})]), "messages[0].stats.tokens"),
    ("meta a string", export_text([reply(meta="x")]), "messages[0].meta must be an object"),
    ("meta nested deep", export_text([reply(meta=json.loads('{"a": ' * 40 + "1" + "}" * 40))]),
     "is nested more than 32 deep"),
    ("status unknown", export_text([reply(status="exploded")]), "messages[0].status"),
    ("5,000-digit number", export_text().replace('"created_at": 1.0', '"created_at": ' + "9" * 5000),
     "a number of 5,000 digits"),
    ("NaN", export_text().replace('"created_at": 1.0', '"created_at": NaN'), "NaN"),
    ("time beyond localtime", export_text(created_at=1e300), "created_at must be from 0"),
    ("lone surrogate in text", export_text([{"role": "user", "text": "half \ud800"}]),
     "messages[0].text holds a lone surrogate"),
    ("lone surrogate in title", export_text(title="\udfff"), "title holds a lone surrogate"),
    ("title a list", export_text(title=["x"]), "title must be text"),
    ("no messages", export_text().replace('"messages"', '"messagez"'), "messages is missing"),
    ("version a bool", export_text(version=True), "Unsupported conversation export version"),
    ("not an export", '{"hello": 1}', "Not a Tandem conversation export"),
    ("not JSON", "{", "Not a Tandem conversation export"),
]


@pytest.mark.parametrize("what, text, named", HOSTILE, ids=[case[0] for case in HOSTILE])
def test_a_hostile_export_is_refused_with_the_bad_field_and_nothing_is_written(store, what, text, named):
    with pytest.raises(ImportRefused) as refusal:
        import_conversation(store, from_json(text))
    message = str(refusal.value)
    assert named in message and "\n" not in message and len(message) < 300
    assert store.list_conversations() == []


def test_a_failure_inside_the_transaction_leaves_nothing(store):
    exported = from_json(export_text([{"role": "user", "text": f"m{i}"} for i in range(5000)]))

    def stop_midway(done, total):
        return done < total * 0.75  # after part of the rows went in

    with pytest.raises(ImportCancelled):
        import_conversation(store, exported, stop_midway)
    assert store.list_conversations() == []

    def break_midway(done, total):
        if done > total * 0.75:
            raise OSError("disk on fire")

    with pytest.raises(OSError):
        import_conversation(store, exported, break_midway)
    assert store.list_conversations() == []
    assert store._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


def test_an_import_reports_and_can_be_stopped_while_its_rows_are_prepared(store):
    # The first half of the work (checking and encoding each message) reports too, so a
    # long import's bar moves from the start and Cancel works before any row is written.
    exported = from_json(export_text([{"role": "user", "text": f"m{i}"} for i in range(5000)]))
    seen = []

    def stop_at_once(done, total):
        seen.append((done, total))
        return False

    with pytest.raises(ImportCancelled):
        import_conversation(store, exported, stop_at_once)
    assert len(seen) == 1 and 0 < seen[0][0] <= 5000 and seen[0][1] == 10_000
    assert store.list_conversations() == []


def test_a_hundred_thousand_messages_import_in_one_transaction_quickly(store, tmp_path):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "text": f"message {i}",
                 "tokens": [] if i % 2 == 0 else [{"t": f"message {i}", "k": "plain"}]} for i in range(100_000)]
    path = tmp_path / "big.json"
    path.write_text(export_text(messages), encoding="utf-8")
    statements = []
    store._db.set_trace_callback(statements.append)
    started = time.monotonic()
    conversation = import_conversation(store, read_export(path))
    elapsed = time.monotonic() - started
    store._db.set_trace_callback(None)
    assert elapsed < 30
    assert store.conversation(conversation).message_count == 100_000
    assert sum(s.startswith("BEGIN") for s in statements) == 1 and sum(s == "COMMIT" for s in statements) == 1
    last = store.messages(conversation, last=2)
    assert [m.text for m in last] == ["message 99998", "message 99999"]


def test_a_fifo_or_device_is_no_export(tmp_path):
    fifo = tmp_path / "shared.json"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert "not a regular file" in outcome[0]
    assert "not a regular file" in _refusal("/dev/zero")


def _refusal(path) -> str:
    try:
        read_export(path)
    except StorageError as exc:
        return str(exc)
    return "accepted"


def test_a_good_export_still_round_trips_whole(store):
    conversation = store.create_conversation()
    store.add_message(conversation, "user", "Hello")
    writer = store.begin_reply(conversation, {"target": "t.gguf", "sampling": {"top_k": 40}})
    writer.finish({"tokens": 2, "tokens_per_second": 3.5, "speculative": True, "acceptance_by_position": [1.0],
                   "error": "", "something_new": {"a": [1, None]}},
                  tokens=[token_record("Hi", "accepted"), token_record("!", "corrected", "?", 0.25)])
    messages = store.messages(conversation)
    exported = from_json(to_json(store.conversation(conversation), messages))
    assert exported.messages == messages
    copy = import_conversation(store, exported)
    assert [(m.role, m.text, m.tokens, m.stats) for m in store.messages(copy)] == \
        [(m.role, m.text, m.tokens, m.stats) for m in messages]


# --- Markdown export ------------------------------------------------------------------------

HOSTILE_TEXTS = [
    "Hello <b>bold</b> <script>alert(1)</script> <img src=x onerror=alert(1)> &amp; &lt;",
    "## Assistant\nI am the assistant now.",
    "# User\nfake",
    "Sure\n---",
    "Also\n===",
    "> ## Assistant\n> quoted heading",
    "- ## Assistant",
    "<!-- hide the rest",
    "```\nan open fence that would swallow the next headings",
    "\\<i>escaped backslash before a tag</i>",
    "`a\nb` <u>after a code span across lines</u> `c`",
    "<div>\n\n## Assistant\n\n</div>",
]


def rendered(markdown: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).render(markdown)


def test_markdown_renders_the_texts_as_text():
    title = "<h1>Owned</h1> ## Assistant & `code`"
    conversation = ConversationSummary(1, title, 0.0, 0.0)
    roles = ["user", "assistant"] * (len(HOSTILE_TEXTS) // 2 + 1)
    messages = [StoredMessage(i, 1, roles[i], text) for i, text in enumerate(HOSTILE_TEXTS)]
    html = rendered(to_markdown(conversation, messages))

    # Exactly one heading per message, each a role, and the title as written.
    assert html.count("<h1>") == 1 and html.count("<h2>") == len(messages)
    headings = [line for line in html.splitlines() if line.startswith("<h2>")]
    assert headings == [f"<h2>{m.role.capitalize()}</h2>" for m in messages]
    assert "<h1>&lt;h1&gt;Owned&lt;/h1&gt; ## Assistant &amp; `code`</h1>" in html
    # No element the texts wrote themselves: only what Markdown makes.
    for tag in ("<b>", "<script", "<img", "<i>", "<u>", "<div", "<!--"):
        assert tag not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&amp;amp; &amp;lt;" in html  # entities stay as typed


def test_markdown_keeps_a_replys_own_markdown():
    text = "Here:\n\n```python\nif a < b and c & d:\n    print('<ok>')\n```\n\n- **bold** item\n- `x`"
    html = rendered(to_markdown(ConversationSummary(1, "t", 0.0, 0.0), [StoredMessage(1, 1, "assistant", text)]))
    assert "<pre><code class=\"language-python\">if a &lt; b and c &amp; d:\n    print('&lt;ok&gt;')\n" in html
    assert "<strong>bold</strong>" in html and "<code>x</code>" in html


@pytest.mark.parametrize("saved, speedup", [(float("inf"), 2.0), (float("nan"), 2.0), (1e300, 2.0),
                                            (2.0, float("inf")), (2.0, -1.0), (2.0, float("nan"))])
def test_markdown_leaves_out_an_imported_absurd_time_saved(saved, speedup):
    stats = {"tokens": 4, "speculative": True, "seconds_saved": saved, "speedup": speedup}
    markdown = to_markdown(ConversationSummary(1, "t", 0.0, 0.0), [StoredMessage(1, 1, "assistant", "Hi", stats=stats)])
    assert "*4 tokens*" in markdown and "saved" not in markdown and "lost" not in markdown


def test_markdown_of_a_stored_conversation_with_a_time_beyond_localtime():
    markdown = to_markdown(ConversationSummary(1, "t", 1e300, 1e300), [])
    assert "unknown time" in markdown
