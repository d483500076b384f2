"""The banner above the chat while models load (and, on first run, while the demo pair is fetched)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QProgressBar, QVBoxLayout, QWidget


class LoadBanner(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("loadBanner")
        self.label = QLabel("Loading models…", self)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.bar = QProgressBar(self)
        self.bar.setObjectName("loadProgress")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 4)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)
        self.hide()  # until a load runs: the first-run screen loads nothing until asked

    def show_progress(self, stage: str, fraction: float) -> None:
        self.label.setText(stage + "…")
        if fraction < 0:
            self.bar.setRange(0, 0)  # busy indicator: size unknown
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(round(fraction * 1000))
