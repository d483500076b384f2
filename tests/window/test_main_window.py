"""The chat window with a scripted engine: keys, Send/Stop, settings, notices, drag and drop."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from app.session.chat_types import LoadInfo
from app.engine.errors import ModelFileError
from app.engine.types import COPY_MIN, TokenEvent, TokenKind
from app.gpu.monitor import NO_GPU_MESSAGE
from app.storage import paths
from app.storage.settings import Settings, load_settings
from app.ui.message_view import COMPLETE, STOPPED

from window_fixtures import REPLY_TIMEOUT_MS, send_and_wait, wait_loaded
from bridge.fakes import ScriptedLoader, tokens

SETTINGS = Settings(target_path="/models/scripted.gguf", draft_path="/models/scripted-draft.gguf")


@pytest.fixture
def scripted(make_window, qtbot):
    """A loaded window whose engine replies with ``loader.engine.events``."""

    def make(events=tokens("Hello", " there", "!"), *, delay=0.0, settings=SETTINGS, **kwargs):
        loader = ScriptedLoader(events, delay=delay, **kwargs)
        window = make_window(settings, loader=loader)
        wait_loaded(qtbot, window)
        return window, loader

    return make


def test_enter_sends_and_shift_enter_breaks_the_line(scripted, qtbot):
    window, loader = scripted()
    edit = window.composer.edit
    qtbot.keyClicks(edit, "first line")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "second line")
    assert window.chat_view.messages() == []
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    user, reply = window.chat_view.messages()
    assert user.text() == "first line\nsecond line"
    assert reply.text() == "Hello there!" and reply.status == COMPLETE
    assert edit.toPlainText() == ""
    assert loader.models.histories == [(("user", "first line\nsecond line"),)]


def test_send_becomes_stop_and_escape_stops(scripted, qtbot):
    window, _ = scripted(tokens(*["tok "] * 2000), delay=0.005)
    button = window.composer.button
    assert button.text() == "Send"
    reply = window.send("go on and on")
    qtbot.waitUntil(lambda: len(reply.events) >= 3, timeout=REPLY_TIMEOUT_MS)
    assert button.text() == "Stop" and window.stop_action.isEnabled()
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.chat_view, Qt.Key.Key_Escape)
    assert reply.status == STOPPED and reply.stats.stop_reason == "cancelled"
    assert len(reply.events) < 2000
    assert "stopped" in reply.stats_label.text()
    assert button.text() == "Send" and not window.stop_action.isEnabled()


def test_stop_button_stops_the_reply(scripted, qtbot):
    window, _ = scripted(tokens(*["tok "] * 2000), delay=0.005)
    reply = window.send("go")
    qtbot.waitUntil(lambda: len(reply.events) >= 1, timeout=REPLY_TIMEOUT_MS)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.composer.button, Qt.MouseButton.LeftButton)
    assert reply.status == STOPPED


def test_ctrl_n_starts_a_new_chat(scripted, qtbot):
    window, _ = scripted()
    send_and_wait(qtbot, window, "hi")
    assert len(window.chat_view.messages()) == 2
    with qtbot.waitSignal(window.conversation_cleared, timeout=5000):
        qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.chat_view.messages() == []
    assert window.chat_view.empty_label.isVisible()


def test_regenerate_replaces_the_last_reply(scripted, qtbot):
    window, loader = scripted()
    first = send_and_wait(qtbot, window, "hi")
    loader.engine.events = tokens("Another", " answer")
    with qtbot.waitSignal(window.reply_removed, timeout=5000) as removed, \
            qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as finished:
        qtbot.keyClick(window, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert removed.args[0] is first
    assert [m.text() for m in window.chat_view.messages()] == ["hi", "Another answer"]
    assert finished.args[0].text() == "Another answer"
    assert loader.models.histories[-1] == (("user", "hi"),)


def test_markup_through_the_whole_signal_path_stays_literal(scripted, qtbot):
    markup = ["<b>bold</b>", " <img src=x>", ' <a href="https://example.com">link</a>']
    window, _ = scripted([TokenEvent(i, t, TokenKind.ACCEPTED) for i, t in enumerate(markup)])
    reply = send_and_wait(qtbot, window, "<i>user markup</i>")
    assert reply.text_view.toPlainText() == "".join(markup)
    assert "<img" not in reply.text_view.document().toHtml()
    assert window.chat_view.messages()[0].text_view.toPlainText() == "<i>user markup</i>"


def test_reply_stats_stay_with_the_message_and_fill_the_panel(scripted, qtbot):
    window, _ = scripted()
    reply = send_and_wait(qtbot, window, "hi")
    assert reply.stats.tokens == 3
    assert reply.stats_label.text().startswith("3 tokens")
    panel = window.side_panel.stats
    assert panel.tokens_label.text() == "3"
    assert panel.target_label.text() == "scripted.gguf"
    assert panel.speculation_label.text() == "on"


def test_speculation_and_sampling_changes_apply_to_the_next_message_without_reload(scripted, qtbot):
    window, loader = scripted()
    send_and_wait(qtbot, window, "one")
    window.apply_settings(window.settings.replace(speculation=False, draft_max=3, temperature=0.3, max_tokens=7,
                                                  copy_repeats=False))
    assert not window.client.loading
    send_and_wait(qtbot, window, "two")
    (_, first_spec, _), (sampling, spec, max_tokens) = loader.engine.calls
    assert first_spec.enabled and not spec.enabled
    assert first_spec.copy_min == COPY_MIN and spec.copy_min == 0  # copying repeats is on by default
    assert spec.draft_max == 3 and sampling.temperature == 0.3 and max_tokens == 7
    assert len(loader.specs) == 1  # loaded once


def test_speculation_toggle_in_the_toolbar(scripted, qtbot):
    window, loader = scripted()
    window.speculation_action.trigger()
    assert window.settings.speculation is False
    assert load_settings().settings.speculation is False  # saved
    send_and_wait(qtbot, window, "hi")
    assert loader.engine.calls[-1][1].enabled is False
    assert window.side_panel.stats.speculation_label.text().startswith("off")
    assert len(loader.specs) == 1


def test_model_setting_changes_reload(scripted, qtbot):
    window, loader = scripted()
    with qtbot.waitSignal(window.client.loaded, timeout=10_000):
        window.apply_settings(window.settings.replace(n_ctx=2048))
    with qtbot.waitSignal(window.client.loaded, timeout=10_000):
        window.apply_settings(window.settings.replace(draft_path="/models/other-draft.gguf"))
    assert [(s.n_ctx, s.draft_path) for s in loader.specs] == [
        (4096, "/models/scripted-draft.gguf"), (2048, "/models/scripted-draft.gguf"),
        (2048, "/models/other-draft.gguf")]


def test_settings_round_trip_through_the_dialog(scripted, qtbot):
    window, loader = scripted()
    dialog = window.open_settings()
    editors = dialog.editors
    editors["temperature"].setValue(0.35)
    editors["top_k"].setValue(12)
    editors["draft_max"].setValue(4)
    editors["speculation"].setChecked(False)
    editors["seed"].setText("1234")
    editors["system_prompt"].setPlainText("Be <brief>.")
    editors["n_threads"].setValue(3)
    with qtbot.waitSignal(window.client.loaded, timeout=10_000):  # threads changed: reload
        dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    expected = SETTINGS.replace(temperature=0.35, top_k=12, draft_max=4, speculation=False, seed=1234,
                                system_prompt="Be <brief>.", n_threads=3)
    assert window.settings == expected
    saved = load_settings().settings
    assert saved.replace(window_geometry="") == expected
    reopened = window.open_settings()
    assert reopened.settings() == expected
    assert reopened.editors["draft_max"].text() == "4 tokens"
    reopened.editors["draft_max"].setValue(0)
    assert reopened.settings().draft_max == "auto"
    reopened.reject()
    assert loader.specs[-1].n_threads == 3


def test_settings_dialog_restores_defaults_but_keeps_the_window_state(scripted, qtbot):
    window, _ = scripted(settings=SETTINGS.replace(temperature=1.5, show_colours=False))
    dialog = window.open_settings()
    dialog.restore_defaults()
    result = dialog.settings()
    assert result.temperature == Settings().temperature and result.target_path == ""
    assert result.show_colours is False  # not on the dialog: left alone
    dialog.reject()


def test_corrupt_settings_file_gives_defaults_and_a_notice(make_window, qtbot, tandem_home):
    settings_file = paths.settings_file()
    settings_file.write_text("{ this is not json", encoding="utf-8")
    window = make_window(loaded=load_settings(), loader=ScriptedLoader())
    notice = window.notices.notice("settings")
    assert notice is not None and notice.isVisible()
    assert "could not be used" in notice.text() and "not valid JSON" in notice.text()
    assert window.settings == Settings()
    assert not settings_file.exists() and list(settings_file.parent.glob("settings.json.bad-*"))
    notice.close_button.click()
    assert window.notices.notice("settings") is None


def test_an_incompatible_draft_is_named_and_chatting_goes_on(scripted, qtbot):
    info = LoadInfo(target_name="t.gguf", target_path="/t.gguf", drafter="none", speculation_available=False,
                    note="Draft is incompatible with target: tokenizer types differ ('gpt2', 'llama')",
                    failed_rule="vocab_type")
    window, _ = scripted(tokens("plain", kind=TokenKind.PLAIN), info=info)
    notice = window.notices.notice("draft")
    assert notice is not None and "vocab_type" in notice.text() and "tokenizer types differ" in notice.text()
    assert "without speculation" in notice.text()
    assert window.side_panel.stats.speculation_label.text().startswith("unavailable: Draft is incompatible")
    assert send_and_wait(qtbot, window, "hi").status == COMPLETE


def test_a_failed_load_is_a_notice_and_sending_waits_for_a_model(make_window, qtbot):
    loader = ScriptedLoader(load_error=ModelFileError("missing.gguf: no such file"))
    window = make_window(SETTINGS, loader=loader)
    qtbot.waitUntil(lambda: window.notices.notice("load") is not None, timeout=10_000)
    assert "missing.gguf: no such file" in window.notices.notice("load").text()
    assert not window.composer.button.isEnabled()
    window.composer.set_text("hello")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    assert window.chat_view.messages() == []
    assert window.composer.text() == "hello"  # kept for when a model loads


def _drop(target, path: str) -> bool:
    """Drag ``path`` over ``target`` and drop it there, as Qt delivers it (up to a widget that takes drops)."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(path)])
    enter = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False
    drop = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, drop)
    return True


def test_dropping_a_gguf_asks_target_or_draft_and_reloads(scripted, qtbot, tmp_path, monkeypatch):
    window, loader = scripted()
    dropped = tmp_path / "Other-Draft.Q4_0.gguf"
    dropped.write_bytes(b"GGUF")
    asked = []
    monkeypatch.setattr(window, "ask_model_role", lambda path: asked.append(path) or "draft")
    with qtbot.waitSignal(window.client.loaded, timeout=10_000):
        assert _drop(window, str(dropped))
    assert asked == [str(dropped)]
    assert window.settings.draft_path == str(dropped) and window.settings.drafter == "model"
    assert loader.specs[-1].draft_path == str(dropped)

    monkeypatch.setattr(window, "ask_model_role", lambda path: None)  # cancelled: nothing changes
    assert _drop(window, str(tmp_path / "target.gguf"))
    assert window.settings.target_path == SETTINGS.target_path
    assert not _drop(window, str(tmp_path / "notes.txt"))


def test_a_gguf_dropped_on_the_input_or_a_message_reaches_the_window(scripted, qtbot, tmp_path, monkeypatch):
    window, _ = scripted()
    reply = send_and_wait(qtbot, window, "hi")
    asked = []
    monkeypatch.setattr(window, "ask_model_role", lambda path: asked.append(path))
    assert _drop(window.composer.edit.viewport(), str(tmp_path / "a.gguf"))
    assert _drop(reply.text_view.viewport(), str(tmp_path / "b.gguf"))
    assert asked == [str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")]
    assert window.composer.text() == ""  # no file URL pasted into the input


def test_window_remembers_its_geometry(make_window, qtbot):
    window = make_window(SETTINGS, loader=ScriptedLoader())
    window.resize(780, 560)  # the offscreen screen is 800x600
    window.close()
    saved = json.loads(paths.settings_file().read_text(encoding="utf-8"))["settings"]["window_geometry"]
    assert saved
    again = make_window(loaded=load_settings(), loader=ScriptedLoader())
    assert (again.width(), again.height()) == (780, 560)
    assert again.minimumWidth() >= 700 and again.minimumHeight() >= 480


def test_gpu_panel_shows_the_calm_no_gpu_line(make_window, qtbot):
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    window = make_window(SETTINGS, loader=ScriptedLoader())
    label = window.side_panel.gpu.message_label
    qtbot.waitUntil(lambda: label.text() == NO_GPU_MESSAGE, timeout=10_000)
    assert label.isVisible()
    assert window.notices.notice("gpu") is None


def test_gpu_panel_in_the_window_with_nvml_present(make_window, qtbot):
    import os

    from app.bridge.gpu_poller import GpuPoller
    from app.gpu.monitor import GpuMonitor

    from gpu.fake_nvml import two_gpus

    poller = GpuPoller(GpuMonitor(nvml=two_gpus(os.getpid())), interval_ms=50)
    window = make_window(SETTINGS, loader=ScriptedLoader(), gpu_poller=poller)
    panel = window.side_panel.gpu
    qtbot.waitUntil(lambda: len(panel.rows) == 2, timeout=10_000)
    assert panel.rows[0].name_label.text() == "NVIDIA GeForce RTX 4090"
    assert "this app: 1.1 GiB" in panel.rows[0].details_label.text()
    window.close()
    assert not poller.running


def test_colour_toggle_reaches_view_legend_and_settings(scripted, qtbot):
    window, _ = scripted()
    reply = send_and_wait(qtbot, window, "hi")
    window.colours_action.trigger()
    assert not window.chat_view.show_colours
    assert window.side_panel.legend.samples[TokenKind.ACCEPTED].styleSheet() == ""
    assert not window.side_panel.legend.toggle.isChecked()
    assert load_settings().settings.show_colours is False
    window.side_panel.legend.toggle.click()  # and back on from the legend's own box
    assert window.chat_view.show_colours and window.colours_action.isChecked()
    assert load_settings().settings.show_colours is True
    assert reply.text_view.toPlainText() == "Hello there!"
