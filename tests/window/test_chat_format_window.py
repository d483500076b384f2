"""The chat format in the window: a Gemma 3 without a template loads in Gemma's format
with one notice naming it; Settings → Models and the model library choose another per
file, remembered in the settings, and the window reloads with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QWidget

from chat_format_models import write_gemma3

from app.backends.llama.builtin_chat_formats import chat_format_names
from app.storage.settings import Settings, load_settings
from app.ui.chat_format_chooser import FILE_OWN_LABEL
from app.ui.settings_dialog import SettingsDialog
from app.window.library_controller import LibraryController

from window_fixtures import LOAD_TIMEOUT_MS, send_and_wait, wait_loaded
from bridge.fakes import ScriptedLoader, scripted_client


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    return write_gemma3(tmp_path_factory.mktemp("gemma") / "gemma-3-tiny.gguf")


def choose(chooser, name: str) -> None:
    chooser.setCurrentIndex(chooser.findData(name))  # as a click in the list does


def test_the_window_names_the_format_and_settings_choose_another(make_window, qtbot, gemma):
    window = make_window(Settings(target_path=str(gemma), drafter="lookup", speculation=False,
                                  temperature=0.0, max_tokens=2))
    wait_loaded(qtbot, window)
    assert window.client.info.chat_format == "gemma"
    notice = window.notices.notice("chat-format")
    assert notice is not None
    assert notice.text() == f"{gemma.name}: no chat template in the file; using llama.cpp's 'gemma' format."
    reply = send_and_wait(qtbot, window, "hi")
    assert reply.stats.prompt_notice == ""  # said once, at load; not again with each reply

    dialog = window.prefs.open_dialog()
    chooser = dialog.editors["chat_formats"]
    assert chooser.currentText() == FILE_OWN_LABEL and chooser.findData("gemma") > 0
    choose(chooser, "chatml")
    with qtbot.waitSignal(window.client.loaded, timeout=LOAD_TIMEOUT_MS):
        dialog.accept()
    assert window.settings.chat_formats == ((str(gemma), "chatml"),)
    assert load_settings().settings.chat_formats == ((str(gemma), "chatml"),)  # remembered on disk
    assert window.client.info.chat_format == "chatml"
    assert window.notices.notice("chat-format") is None  # the user's own choice needs no notice
    send_and_wait(qtbot, window, "hi")


def test_the_dialog_keeps_a_format_per_file(qtbot):
    settings = Settings(target_path="/m/a.gguf", chat_formats=(("/m/b.gguf", "zephyr"),))
    dialog = SettingsDialog(settings, chat_formats=chat_format_names())
    qtbot.addWidget(dialog)
    chooser = dialog.editors["chat_formats"]
    assert chooser.current_format() == ""
    choose(chooser, "gemma")
    assert dialog.settings().chat_formats == (("/m/b.gguf", "zephyr"), ("/m/a.gguf", "gemma"))
    dialog.editors["target_path"].setText("/m/b.gguf")
    assert chooser.current_format() == "zephyr"
    choose(chooser, "")  # back to the file's own: forgotten
    assert dialog.settings().chat_formats == (("/m/a.gguf", "gemma"),)
    choose(chooser, "vicuna")
    dialog.editors["target_path"].setText("/m/a.gguf")
    assert chooser.current_format() == "gemma"
    dialog.restore_defaults()  # the shown target's choice goes; other files keep theirs
    assert dialog.settings().chat_formats == (("/m/b.gguf", "vicuna"),)
    assert dialog.settings().target_path == ""


def test_a_format_written_by_a_newer_llama_cpp_is_kept_and_shown(qtbot):
    settings = Settings(target_path="/m/a.gguf", chat_formats=(("/m/a.gguf", "future-format"),))
    dialog = SettingsDialog(settings, chat_formats=chat_format_names())
    qtbot.addWidget(dialog)
    assert dialog.editors["chat_formats"].currentText() == "future-format (unknown to this llama.cpp)"
    assert dialog.settings().chat_formats == (("/m/a.gguf", "future-format"),)


def test_the_library_chooses_the_format_of_the_chosen_model(qtbot, tmp_path, gemma, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    parent = QWidget()
    qtbot.addWidget(parent)
    client = scripted_client(ScriptedLoader())
    qtbot.waitUntil(lambda: bool(client.chat_format_names()), timeout=LOAD_TIMEOUT_MS)  # the engine's Ready
    state = {"settings": Settings(library_folders=(str(gemma.parent),))}
    said = []
    controller = LibraryController(client, settings=lambda: state["settings"],
                                   apply=lambda s: state.update(settings=s), check_speculation=lambda: None,
                                   say=lambda text, ms: said.append(text), dialog_parent=parent)
    try:
        dialog = controller.open()
        assert not dialog.chat_format.isEnabled()  # no model chosen yet
        qtbot.waitUntil(lambda: controller.result is not None, timeout=30_000)
        dialog.select_target(str(gemma))
        assert dialog.chat_format.isEnabled() and dialog.chat_format.current_format() == ""
        choose(dialog.chat_format, "gemma")
        assert state["settings"].chat_formats == ((str(gemma), "gemma"),)
        assert said[-1] == f"Chat format of {gemma.name}: llama.cpp's 'gemma'"
        choose(dialog.chat_format, "")
        assert state["settings"].chat_formats == ()
    finally:
        controller.shutdown()
        client.shutdown()
