"""The library in the window: a real scan of a folder tree written here runs off the UI
thread, the drafts for a target arrive, one click sets the pair in the settings and the
recent pairs, and Check speculation waits for the pair to load."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QWidget

from library.library_tree import build_folder, build_home, model

from app.storage.settings import Settings
from app.window.library_controller import LibraryController

from bridge.fakes import ScriptedLoader, scripted_client

TARGET = "bigco/Big-7B-GGUF/Big-7B-Q8_0.gguf"
TIMEOUT_MS = 30_000


class Holder:
    def __init__(self):
        self.settings = Settings()
        self.applied: list[Settings] = []

    def apply(self, settings: Settings) -> None:
        self.settings = settings
        self.applied.append(settings)


@pytest.fixture
def library(qtbot, tmp_path, monkeypatch):
    home = build_home(tmp_path)
    folder = build_folder(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    parent = QWidget()
    qtbot.addWidget(parent)
    client = scripted_client(ScriptedLoader())
    holder = Holder()
    checks = []
    controller = LibraryController(client, settings=lambda: holder.settings, apply=holder.apply,
                                   check_speculation=lambda: checks.append(True), say=lambda text, ms: None,
                                   dialog_parent=parent)
    yield controller, holder, checks, folder, client
    controller.shutdown()
    client.shutdown()


def entry(controller, name):
    return next(e for e in controller.result.entries if e.name == name)


def test_scan_drafts_pair_and_check(qtbot, library):
    controller, holder, checks, folder, client = library
    dialog = controller.open()
    qtbot.waitUntil(lambda: controller.result is not None, timeout=TIMEOUT_MS)
    assert dialog.models.topLevelItemCount() == 9  # the user folder is not added yet
    with qtbot.waitSignal(dialog.models.itemSelectionChanged, timeout=TIMEOUT_MS):
        dialog.select_target(entry(controller, TARGET).path)
    qtbot.waitUntil(lambda: dialog.drafts.topLevelItemCount() > 0, timeout=TIMEOUT_MS)
    assert dialog.drafts.topLevelItem(0).text(0) == "tiny:latest"

    dialog.use_button.click()
    target, tiny = entry(controller, TARGET).path, entry(controller, "tiny:latest").path
    assert (holder.settings.target_path, holder.settings.draft_path, holder.settings.drafter) == (target, tiny, "model")
    assert holder.settings.recent_pairs == ((target, tiny),)
    assert not dialog.check_button.isHidden()
    dialog.check_button.click()
    assert checks == [True]  # nothing loading: at once

    controller._fill_recent()
    [recent] = controller.recent_menu.actions()
    assert "Big-7B-Q8_0.gguf" in recent.text() and "sha256-" in recent.text()


def test_an_added_folder_is_remembered_and_scanned(qtbot, library):
    controller, holder, checks, folder, client = library
    dialog = controller.open()
    qtbot.waitUntil(lambda: controller.result is not None, timeout=TIMEOUT_MS)
    controller.result = None
    dialog.folder_added.emit(str(folder))
    assert holder.settings.library_folders == (str(folder),)
    qtbot.waitUntil(lambda: controller.result is not None, timeout=TIMEOUT_MS)
    assert dialog.models.topLevelItemCount() == 14
    assert any(e.name == "garbage.gguf" and e.refused for e in controller.result.entries)
    [remove] = dialog.remove_menu.actions()
    assert remove.text() == str(folder) and dialog.remove_button.isEnabled()
    controller.result = None
    remove.trigger()
    assert holder.settings.library_folders == () and not dialog.remove_button.isEnabled()
    qtbot.waitUntil(lambda: controller.result is not None, timeout=TIMEOUT_MS)
    assert dialog.models.topLevelItemCount() == 9


def test_a_target_chosen_by_hand_outside_every_place_finds_its_drafts(qtbot, library, tmp_path):
    controller, holder, checks, folder, client = library
    loose = model(tmp_path / "loose" / "Big-Loose-F16.gguf", padding=50_000)
    dialog = controller.open(target=str(loose))
    qtbot.waitUntil(lambda: dialog.drafts.topLevelItemCount() > 0, timeout=TIMEOUT_MS)
    assert dialog.selected_target() == str(loose)
    assert dialog.drafts.topLevelItem(0).text(0) == "tiny:latest"


def test_check_speculation_waits_for_the_pair_to_load(qtbot, library):
    controller, holder, checks, folder, client = library
    from app.session.config import ModelSpec

    client.load(ModelSpec.from_settings(Settings(target_path="/models/t.gguf")))
    assert client.loading
    controller.check_pair("/models/t.gguf", "/models/d.gguf")
    assert checks == []
    qtbot.waitUntil(lambda: checks == [True], timeout=TIMEOUT_MS)


def test_a_pair_set_anywhere_joins_the_recent_pairs_once(library):
    controller, holder, checks, folder, client = library
    controller.remember_pair(Settings(target_path="/m/t.gguf", draft_path="/m/d.gguf"))
    assert holder.settings.recent_pairs == (("/m/t.gguf", "/m/d.gguf"),)
    count = len(holder.applied)
    controller.remember_pair(holder.settings)  # already first: nothing to save
    controller.remember_pair(holder.settings.replace(temperature=0.1))  # not a change of models
    controller.remember_pair(Settings())  # the demo pair: no paths to remember
    controller.remember_pair(Settings(target_path="/m/t.gguf", draft_path="/m/d.gguf", drafter="lookup"))
    assert len(holder.applied) == count
