"""The library window over a real scan of a folder tree written here: models listed with
their facts, refused files with the reason, the drafts for a chosen target best first,
one click sets the pair and "Check speculation" is offered."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from library.library_tree import build_folder, build_home

from app.library.drafts import find_drafts
from app.library.scan import library_locations, scan_library
from app.ui.library_dialog import LibraryDialog

TARGET = "bigco/Big-7B-GGUF/Big-7B-Q8_0.gguf"


@pytest.fixture
def scanned(tmp_path):
    home, folder = build_home(tmp_path), build_folder(tmp_path)
    return scan_library(library_locations([folder], environ={}, home=home), use_cache=False)


def row(tree, name):
    return next(tree.topLevelItem(i) for i in range(tree.topLevelItemCount()) if tree.topLevelItem(i).text(0) == name)


def test_models_and_refusals_are_listed(qtbot, scanned):
    dialog = LibraryDialog()
    qtbot.addWidget(dialog)
    dialog.show_scanning()
    dialog.show_progress(3, 14, "tiny:latest")
    assert dialog.progress.maximum() == 14 and "tiny:latest" in dialog.status.text()
    dialog.show_result(scanned)
    assert dialog.models.topLevelItemCount() == len(scanned.entries) and not dialog.progress.isVisible()
    tiny = row(dialog.models, "tiny:latest")
    assert [tiny.text(i) for i in (1, 2, 3, 6)] == ["Ollama", "llama", "8", "2,048"]
    garbage = row(dialog.models, "garbage.gguf")
    assert garbage.text(7).startswith("refused: ") and "declares" in garbage.text(7)
    assert "4 files refused" in dialog.status.text()


def test_one_click_sets_the_best_pair_then_offers_the_check(qtbot, scanned):
    dialog = LibraryDialog()
    qtbot.addWidget(dialog)
    dialog.show_result(scanned)
    target = next(e for e in scanned.entries if e.name == TARGET)
    with qtbot.waitSignal(dialog.target_selected, timeout=1000) as asked:
        dialog.select_target(target.path)
    assert asked.args == [target.path]
    dialog.show_drafts(target.path, find_drafts(target, scanned.entries))
    assert dialog.drafts.topLevelItem(0).text(0) == "tiny:latest" and dialog.selected_draft()
    assert "compatible" in dialog.drafts_label.text() and "3 through text" in dialog.drafts_label.text()
    diff = row(dialog.drafts, "org/Diff-GGUF/diff.gguf")
    assert diff.text(1) == "through text" and "token 10 differs" in diff.text(5)
    assert dialog.drafts.topLevelItem(0).text(3).endswith("×")
    assert diff.flags() & Qt.ItemFlag.ItemIsSelectable  # another vocabulary drafts through text

    with qtbot.waitSignal(dialog.pair_chosen, timeout=1000) as chosen:
        qtbot.mouseClick(dialog.use_button, Qt.MouseButton.LeftButton)
    tiny = next(e for e in scanned.entries if e.name == "tiny:latest")
    assert chosen.args == [target.path, tiny.path]
    dialog.offer_check(target.path, tiny.path)
    assert not dialog.check_button.isHidden()
    with qtbot.waitSignal(dialog.check_requested, timeout=1000) as check:
        qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
    assert check.args == [target.path, tiny.path]


def test_a_refused_target_says_why_and_asks_for_no_drafts(qtbot, scanned):
    dialog = LibraryDialog()
    qtbot.addWidget(dialog)
    dialog.show_result(scanned)
    garbage = next(e for e in scanned.entries if e.name == "garbage.gguf")
    with qtbot.assertNotEmitted(dialog.target_selected):
        dialog.select_target(garbage.path)
    assert "cannot be used" in dialog.drafts_label.text() and not dialog.use_button.isEnabled()


def test_drafts_for_a_target_no_longer_chosen_are_ignored(qtbot, scanned):
    dialog = LibraryDialog()
    qtbot.addWidget(dialog)
    dialog.show_result(scanned)
    target = next(e for e in scanned.entries if e.name == TARGET)
    dialog.show_drafts(target.path, find_drafts(target, scanned.entries))  # nothing chosen
    assert dialog.drafts.topLevelItemCount() == 0


def test_add_folder(qtbot, tmp_path):
    dialog = LibraryDialog(choose_folder=lambda parent, caption, start: str(tmp_path))
    qtbot.addWidget(dialog)
    with qtbot.waitSignal(dialog.folder_added, timeout=1000) as added:
        qtbot.mouseClick(dialog.folder_button, Qt.MouseButton.LeftButton)
    assert added.args == [str(tmp_path)]
