"""A formatted reply reopened from the history (real SQLite, the real window) renders as it streamed."""

from __future__ import annotations

from app.ui.message_view import COMPLETE

from window_fixtures import send_and_wait
from .test_history_window import click_row, history_window, settle  # noqa: F401  (a fixture)
from ui.test_markdown_view import COLOURED, signature, words_reply


def test_a_reply_reopened_from_history_renders_the_same(history_window, qtbot):  # noqa: F811
    window, _, store = history_window(words_reply(COLOURED), delay=0.004)  # in several batches
    batches = []
    window.reply_tokens.connect(lambda reply, events: batches.append(len(events)))
    streamed = send_and_wait(qtbot, window, "Show me some Markdown")
    assert streamed.status == COMPLETE and len(batches) > 2
    before = signature(streamed)
    assert [kind for kind, _, _ in before] == ["ProseText", "CodeBlockView", "ProseText"]
    window.new_chat()
    settle(qtbot, window)
    click_row(qtbot, window, 0)
    reopened = window.chat_view.messages()[1]
    assert reopened is not streamed and reopened.text() == streamed.text()
    assert signature(reopened) == before
    reopened.source_button.click()
    assert reopened.text_view.toPlainText() == COLOURED
