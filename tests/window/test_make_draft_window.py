""""Make a draft from this model" in the window (offscreen, real widgets, the real
quantizer in its child): in the model library and on the first-run screen, a progress
bar and Cancel while it runs off the GUI thread, then the pair is set with the made
draft (which the library then offers first); Cancel keeps nothing."""

from __future__ import annotations

import os

import pytest
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.session.config import ModelSpec
from app.storage import made_drafts, paths
from app.storage.settings import Settings
from app.ui.notices import NoticeArea
from app.window.first_run_controller import FirstRunController
from app.window.library_controller import LibraryController

from bridge.fakes import ScriptedLoader, scripted_client

TIMEOUT_MS = 300_000  # a real quantizer run and trial load on a shared machine


class Holder:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.applied: list[Settings] = []

    def apply(self, settings: Settings) -> None:
        self.settings = settings
        self.applied.append(settings)


@pytest.fixture
def target_folder(tmp_path, demo_models, monkeypatch):
    """A user folder holding (a link to) the demo's Q4_1 model, the target to make a draft of."""
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    for name in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "target.gguf").symlink_to(demo_models.draft)
    return folder


@pytest.fixture
def library(qtbot, target_folder):
    parent = QWidget()
    qtbot.addWidget(parent)
    client = scripted_client(ScriptedLoader())
    holder = Holder(Settings(library_folders=(str(target_folder),)))
    holder.checks = 0

    def check() -> None:
        holder.checks += 1

    controller = LibraryController(client, settings=lambda: holder.settings, apply=holder.apply,
                                   check_speculation=check, say=lambda text, ms: None,
                                   dialog_parent=parent)
    yield controller, holder
    controller.shutdown()
    client.shutdown()


def _choose_target(qtbot, controller, dialog, target: str) -> None:
    qtbot.waitUntil(lambda: controller.result is not None, timeout=TIMEOUT_MS)
    dialog.select_target(target)
    qtbot.waitUntil(dialog.make_draft_button.isEnabled, timeout=TIMEOUT_MS)


def drafts_folder_files() -> list[str]:
    return sorted(p.name for p in paths.drafts_dir().iterdir() if p.suffix in (".gguf", ".part"))


def test_make_a_draft_in_the_library_then_the_pair_is_set(qtbot, library, target_folder):
    controller, holder = library
    dialog = controller.open()
    target = str(target_folder / "target.gguf")
    _choose_target(qtbot, controller, dialog, target)
    progress: list[int] = []
    dialog.draft_progress.valueChanged.connect(progress.append)
    dialog.make_draft_button.click()
    assert dialog.draft_progress.isVisible() and dialog.draft_cancel_button.isVisible()
    assert not dialog.make_draft_button.isEnabled()  # one at a time
    qtbot.waitUntil(lambda: "disk space" in dialog.status.text() or controller.draft_task is None,
                    timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: holder.settings.draft_path != "", timeout=TIMEOUT_MS)
    made = holder.settings.draft_path
    assert holder.settings.target_path == target and holder.settings.drafter == "model"
    assert os.path.dirname(made) == str(paths.drafts_dir()) and os.path.isfile(made)
    assert progress and max(progress) > 0 and progress == sorted(progress)
    assert dialog.draft_progress.isHidden() and dialog.draft_cancel_button.isHidden()
    assert [d.draft for d in made_drafts.made_for(target)] == [made]
    assert holder.checks == 1  # its speed-up measured (Check speculation) once the pair is in
    # The rescan lists it, and it is the first draft offered for its target.
    qtbot.waitUntil(lambda: controller.result is not None and any(e.path == made for e in controller.result.entries),
                    timeout=TIMEOUT_MS)
    dialog.select_target("")
    dialog.select_target(target)
    qtbot.waitUntil(lambda: dialog.drafts.topLevelItemCount() > 0, timeout=TIMEOUT_MS)
    first = dialog.drafts.topLevelItem(0)
    assert first.text(5).startswith("made from this model (Q2_K)") and first.text(4).startswith("runs on the CPU")  # the target is already 4-bit


def test_cancel_in_the_library_keeps_nothing(qtbot, library, target_folder):
    controller, holder = library
    dialog = controller.open()
    _choose_target(qtbot, controller, dialog, str(target_folder / "target.gguf"))
    dialog.make_draft_button.click()
    dialog.draft_cancel_button.click()  # at once: the child is killed at its first poll
    qtbot.waitUntil(lambda: controller.draft_task is None, timeout=TIMEOUT_MS)
    assert "cancelled" in dialog.status.text() and "nothing was kept" in dialog.status.text()
    assert dialog.draft_progress.isHidden() and dialog.make_draft_button.isEnabled()
    assert holder.settings.draft_path == "" and drafts_folder_files() == []


class Chooser:
    def __init__(self, answer: str):
        self.answer = answer

    def __call__(self, parent, caption, start, filters):
        return self.answer


def _first_run(qtbot, target: str):
    parent = QWidget()
    qtbot.addWidget(parent)
    column = QVBoxLayout(parent)
    chat, composer = QWidget(parent), QWidget(parent)
    column.addWidget(chat)
    column.addWidget(composer)
    client = scripted_client(ScriptedLoader())
    holder = Holder(Settings())
    holder.checks = 0

    def check() -> None:
        holder.checks += 1

    controller = FirstRunController(client, notices=NoticeArea(parent), layout=column, hidden=[chat, composer],
                                    settings=lambda: holder.settings, apply=holder.apply, load=lambda: None,
                                    open_library=lambda path: None, parent=parent, check_speculation=check)
    screen = controller.start()
    screen._choose_file = Chooser(target)
    return controller, screen, holder, client


def test_first_run_makes_a_draft_from_a_model_you_have(qtbot, target_folder):
    target = str(target_folder / "target.gguf")
    controller, screen, holder, client = _first_run(qtbot, target)
    try:
        screen.make_draft_button.click()
        assert not screen.draft_progress.isHidden() and not screen.draft_cancel_button.isHidden()
        qtbot.waitUntil(lambda: holder.settings.draft_path != "", timeout=TIMEOUT_MS)
        assert holder.settings.target_path == target and holder.settings.drafter == "model"
        assert os.path.isfile(holder.settings.draft_path)
        assert "loading" in screen.status.text() and screen.draft_progress.isHidden()
        assert holder.checks == 0  # not before the pair is in
        # The window loads what was applied (a scripted engine here): then the speed-up
        # the made draft gives is measured and shown (Check speculation), once.
        client.load(ModelSpec(target_path=holder.settings.target_path, draft_path=holder.settings.draft_path))
        qtbot.waitUntil(lambda: controller.screen is None, timeout=TIMEOUT_MS)
        assert holder.checks == 1
    finally:
        client.shutdown()


def test_first_run_cancel_keeps_nothing(qtbot, target_folder):
    controller, screen, holder, client = _first_run(qtbot, str(target_folder / "target.gguf"))
    try:
        screen.make_draft_button.click()
        screen.draft_cancel_button.click()
        qtbot.waitUntil(lambda: controller.draft_task is None, timeout=TIMEOUT_MS)
        assert "cancelled" in screen.status.text() and screen.make_draft_button.isEnabled()
        assert holder.applied == [] and drafts_folder_files() == []
    finally:
        client.shutdown()
