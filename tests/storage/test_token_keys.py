"""Stored tokens have readable keys; histories and exports from before them still read.

Before, a token was stored as {"t", "k", "d", "p"}. Those records stay in people's
history files and in exports they keep, so every reader takes both spellings and
hands on the readable one.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.storage import paths
from app.storage.errors import ImportRefused
from app.storage.export import from_json, import_conversation
from app.storage.history import HistoryStore, readable_tokens, token_record

OLD = [{"t": "Hel", "k": "accepted"}, {"t": "lo", "k": "corrected", "d": "p", "p": 0.25}, {"t": "!", "k": "plain"}]
READABLE = [token_record("Hel", "accepted"), token_record("lo", "corrected", "p", 0.25), token_record("!", "plain")]


def test_new_records_spell_their_keys_out():
    assert token_record("lo", "corrected", "p", 0.25) == {"text": "lo", "kind": "corrected", "draft_text": "p",
                                                          "draft_prob": 0.25}


def test_a_history_written_with_the_short_keys_reads_with_the_readable_ones():
    with HistoryStore.open() as store:
        conversation = store.create_conversation("old")
        reply = store.add_message(conversation, "assistant", "Hello!", tokens=READABLE)
    with sqlite3.connect(str(paths.history_db())) as db:  # as an older Tandem stored it
        db.execute("UPDATE messages SET tokens = ? WHERE id = ?", (json.dumps(OLD), reply))
    with HistoryStore.open() as store:
        [stored] = store.messages(conversation)
    assert stored.tokens == READABLE


def test_records_that_are_not_records_are_left_for_the_reader_to_judge():
    assert readable_tokens("garbage") == "garbage"
    assert readable_tokens(["x", {"t": 5}, None]) == ["x", {"text": 5}, None]


def _export(tokens) -> str:
    return json.dumps({"format": "tandem-conversation", "version": 1, "title": "t", "created_at": 1.0,
                       "updated_at": 2.0, "messages": [{"role": "assistant", "text": "Hello!", "tokens": tokens}]})


def test_an_export_with_the_short_keys_imports_with_the_readable_ones():
    with HistoryStore.open() as store:
        conversation = import_conversation(store, from_json(_export(OLD)))
        [stored] = store.messages(conversation)
    assert stored.tokens == READABLE


def test_a_refusal_names_the_field_as_the_file_spells_it():
    with pytest.raises(ImportRefused, match=r"tokens\[0\]\.draft_prob must be from 0 to 1"):
        from_json(_export([{"text": "a", "kind": "corrected", "draft_prob": 7}]))
    with pytest.raises(ImportRefused, match=r"tokens\[0\]\.p must be from 0 to 1"):
        from_json(_export([{"t": "a", "k": "corrected", "p": 7}]))
    with pytest.raises(ImportRefused, match=r"tokens\[0\] names a field twice"):
        from_json(_export([{"t": "a", "text": "a"}]))
