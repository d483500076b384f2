"""The vocabularies are types, stored as their values, and read back from stored text."""

from __future__ import annotations

import json

from app.engine.speculation.detokenize import visible
from app.engine.types import DrafterKind, Stats, StopReason, TokenKind
from app.vocabulary import MessageState


def test_a_stop_reason_is_stored_as_its_value_and_read_back_as_itself():
    stats = Stats(tokens=3, stop_reason=StopReason.CANCELLED)
    stored = json.loads(json.dumps(stats.to_dict()))
    assert stored["stop_reason"] == "cancelled"
    assert Stats(stop_reason=stored["stop_reason"]).stop_reason is StopReason.CANCELLED


def test_a_running_or_unknown_stop_reason_reads_as_none():
    assert Stats().stop_reason is None and Stats().to_dict()["stop_reason"] == ""
    assert Stats(stop_reason="").stop_reason is None           # how older records say "none"
    assert Stats(stop_reason="exploded").stop_reason is None   # a hand-edited history


def test_values_are_the_words_the_settings_and_the_history_already_hold():
    assert [kind.value for kind in TokenKind] == ["accepted", "corrected", "bonus", "plain"]
    assert DrafterKind("lookup") is DrafterKind.LOOKUP and f"{DrafterKind.MODEL}" == "model"
    assert MessageState("interrupted") is MessageState.INTERRUPTED


def test_history_validates_with_the_same_tables():
    from app.storage.export_schema import STATUSES as IMPORTED_STATUSES
    from app.storage.export_schema import TOKEN_KINDS as IMPORTED_KINDS
    from app.storage.history import STATUSES, TOKEN_KINDS

    assert TOKEN_KINDS == IMPORTED_KINDS == tuple(kind.value for kind in TokenKind)
    assert STATUSES == IMPORTED_STATUSES and "failed" not in STATUSES  # a failed reply is never stored


def test_visible_shows_edges_line_breaks_tabs_and_carriage_returns():
    assert visible(" a\n") == "“ a↵”"
    assert visible("\t\r") == "“⇥␍”"
    assert visible("") == "“”"
