"""The chat's reading comfort in the real window: zoom, the side panel and the panes remembered; time saved."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QLabel

from app.storage.settings import LoadedSettings, load_settings
from app.ui.message_view import COMPLETE

from window_fixtures import demo_settings, send_and_wait, wait_loaded
from bridge.fakes import ScriptedLoader, tokens
from .test_history_window import SETTINGS


def test_zoom_side_panel_and_pane_widths_are_remembered(make_window, qtbot):
    window = make_window(SETTINGS, loader=ScriptedLoader(tokens("Some **bold** text")))
    wait_loaded(qtbot, window)
    shortcuts = {s.toString() for s in window.zoom_in_action.shortcuts()}
    assert {"Ctrl+=", "Ctrl++"} <= shortcuts
    assert window.zoom_out_action.shortcuts()[0] == QKeySequence("Ctrl+-")
    assert window.zoom_reset_action.shortcut() == QKeySequence("Ctrl+0")
    reply = send_and_wait(qtbot, window, "hi")
    size = reply.markdown_view.font().pointSizeF()
    window.zoom_in_action.trigger()
    window.zoom_in_action.trigger()
    assert reply.markdown_view.font().pointSizeF() > size
    zoom = window.chat_view.zoom
    widths = window.splitter.sizes()
    widths = [widths[0] + 40, widths[1] - 40]
    window.splitter.setSizes(widths)
    widths = window.splitter.sizes()
    window.side_panel_action.trigger()  # hidden
    assert not window.side_panel.isVisible()
    window.close()

    saved = load_settings().settings
    assert saved.text_zoom == zoom and saved.side_panel_visible is False
    again = make_window(loaded=LoadedSettings(saved.replace(target_path=SETTINGS.target_path), None),
                        loader=ScriptedLoader(tokens("x")))
    assert again.chat_view.zoom == zoom
    assert not again.side_panel_action.isChecked() and not again.side_panel.isVisibleTo(again)
    again.side_panel_action.trigger()
    qtbot.waitUntil(lambda: again.side_panel.isVisible())
    assert again.splitter.sizes()[1] == widths[1]  # the panel's width; the chat takes the rest
    again.zoom_reset_action.trigger()
    assert again.chat_view.zoom == 1.0


def test_a_speculative_reply_on_the_demo_pair_shows_its_time_saved_and_the_chats_total(make_window, demo_models,
                                                                                       qtbot):
    window = make_window(demo_settings(demo_models, max_tokens=8))
    wait_loaded(qtbot, window)
    panel = window.side_panel.stats
    assert panel.chat_saved_label.text() == "—"
    reply = send_and_wait(qtbot, window, "Write a Python function that reverses a string.")
    assert reply.status == COMPLETE and reply.stats.speculative
    assert reply.stats.plain_step_seconds > 0  # measured on the real target, before the reply
    saved = reply.stats.seconds_saved
    assert saved == reply.stats.tokens * reply.stats.plain_step_seconds - reply.stats.seconds
    word = "saved" if saved >= 0 else "lost"
    assert f"s {word} · " in reply.stats_label.text() and "×" in reply.stats_label.text()
    assert panel.saved_label.text().startswith(f"{abs(saved):.1f} s {word}")
    assert panel.chat_saved_label.text() == f"{abs(saved):.1f} s {word} over 1 reply"
    info = window.client.info
    assert info.n_ctx == 1024 and info.n_ctx_train >= 2048  # the demo target's, read from llama.cpp
    used = reply.stats.prompt_tokens + reply.stats.tokens
    assert panel.prompt_label.text() == f"{reply.stats.prompt_tokens:,} tokens"
    assert panel.context_label.text() == (f"{used:,} of 1,024 tokens ({used / 1024:.0%}) "
                                          f"· trained on {info.n_ctx_train:,}")
    window.new_chat()
    assert panel.chat_saved_label.text() == "—"


def test_a_notice_comes_before_the_chat_starts_leaving_exchanges_out(make_window, qtbot):
    from app.session.chat import LoadInfo

    def window_with(n_ctx):
        info = LoadInfo(target_name="scripted.gguf", target_path="/models/scripted.gguf", draft_name="d.gguf",
                        draft_path="/models/d.gguf", drafter="model", speculation_available=True, n_ctx=n_ctx)
        window = make_window(SETTINGS.replace(max_tokens=100),
                             loader=ScriptedLoader(tokens(*["word "] * 10), info=info))
        wait_loaded(qtbot, window)
        send_and_wait(qtbot, window, "hi")
        return window

    roomy = window_with(4096)
    assert not any("earliest exchanges" in label.text() for label in roomy.notices.findChildren(QLabel))
    tight = window_with(140)  # 3 prompt + 10 reply + 100 of room: past 80% of 140
    texts = [label.text() for label in tight.notices.findChildren(QLabel) if label.isVisibleTo(tight)]
    assert any("uses 13 of the model's 140-token context" in text and "earliest exchanges" in text for text in texts)
    tight.new_chat()
    assert not any("earliest exchanges" in label.text() for label in tight.notices.findChildren(QLabel)
                   if label.isVisibleTo(tight))
