"""File → Get models…: find a model on the Hugging Face Hub, see whether it fits before
downloading it, download it with progress, and load it.

Display and emit only: the window's ``HubController`` searches, plans and downloads off
the UI thread and hands the answers to ``show_*``. Errors (offline, a missing
repository, a failed download) are one line in the dialog, never a message box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QDialog, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QTreeWidget,
                               QTreeWidgetItem, QVBoxLayout, QWidget)

from app.hub.files import size_text

COLUMNS = ("Model", "Quantisation", "Size", "Note")
_CHOICE_ROLE = Qt.ItemDataRole.UserRole


@dataclass(frozen=True)
class Listed:
    """A row the user can choose: a pick (target and draft named) or one file."""

    name: str
    quant: str
    size: str
    note: str
    choice: object   # handed back in ``chosen`` as it is


@dataclass(frozen=True)
class ListedRepo:
    name: str
    note: str
    choice: object   # chosen as a whole: its best quantisation for this machine
    files: tuple[Listed, ...]


class GetModelsDialog(QDialog):
    search_requested = Signal(str)
    chosen = Signal(object)          # a Listed.choice: plan it
    download_requested = Signal()
    cancel_requested = Signal()
    load_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Get models")
        self.resize(860, 600)
        layout = QVBoxLayout(self)

        row = QHBoxLayout()
        self.query = QLineEdit(self)
        self.query.setPlaceholderText("Search the Hugging Face Hub: qwen, llama, gemma …")
        self.query.returnPressed.connect(self._search)
        self.search_button = QPushButton("&Search", self)
        self.search_button.clicked.connect(self._search)
        row.addWidget(self.query, 1)
        row.addWidget(self.search_button)
        layout.addLayout(row)

        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)

        self.results = QTreeWidget(self)
        self.results.setHeaderLabels(COLUMNS)
        self.results.setColumnWidth(0, 380)
        self.results.itemSelectionChanged.connect(self._selected)
        self.results.itemActivated.connect(lambda _item, _col: self.download_requested.emit()
                                           if self.download_button.isEnabled() else None)
        layout.addWidget(self.results, 1)

        self.plan = QLabel("Choose a pick or a file to see whether it fits this computer.", self)
        self.plan.setWordWrap(True)
        self.plan.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.plan)

        self.progress = QProgressBar(self)
        self.progress.setVisible(False)
        layout.addWidget(self.progress)

        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.download_button = QPushButton("&Download", self)
        self.download_button.setEnabled(False)
        self.download_button.clicked.connect(self.download_requested)
        self.cancel_button = QPushButton("C&ancel download", self)
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.load_button = QPushButton("&Load", self)
        self.load_button.setEnabled(False)
        self.load_button.clicked.connect(self.load_requested)
        close = QPushButton("Close", self)
        close.clicked.connect(self.reject)
        for button in (self.download_button, self.cancel_button, self.load_button, close):
            buttons.addWidget(button)
        layout.addLayout(buttons)

    # --- emitting -------------------------------------------------------------------------

    def _search(self) -> None:
        text = self.query.text().strip()
        self.search_requested.emit(text)

    def _selected(self) -> None:
        items = self.results.selectedItems()
        choice = items[0].data(0, _CHOICE_ROLE) if items else None
        self.download_button.setEnabled(False)
        self.load_button.setEnabled(False)
        if choice is not None:
            self.chosen.emit(choice)

    # --- showing --------------------------------------------------------------------------

    def show_searching(self, text: str) -> None:
        self.status.setText(f"Searching the Hub for “{text}”…" if text else "Tandem's picks")
        self.search_button.setEnabled(False)

    def show_results(self, picks: Sequence[Listed], repos: Sequence[ListedRepo], note: str = "") -> None:
        self.search_button.setEnabled(True)
        self.results.clear()
        if picks:
            group = QTreeWidgetItem(["Tandem's picks", "", "", "pairs chosen for common GPU sizes"])
            group.setFlags(group.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            self.results.addTopLevelItem(group)
            for pick in picks:
                group.addChild(self._item(pick))
            group.setExpanded(True)
        for repo in repos:
            item = QTreeWidgetItem([repo.name, "", "", repo.note])
            item.setData(0, _CHOICE_ROLE, repo.choice)
            item.setToolTip(0, "Choose the repository for the best quantisation that fits this computer")
            self.results.addTopLevelItem(item)
            for listed in repo.files:
                item.addChild(self._item(listed))
            item.setExpanded(len(repos) <= 3)
        self.status.setText(note or (f"{len(repos)} repositor{'y' if len(repos) == 1 else 'ies'} on the Hub" if repos else ""))

    def _item(self, listed: Listed) -> QTreeWidgetItem:
        item = QTreeWidgetItem([listed.name, listed.quant, listed.size, listed.note])
        item.setData(0, _CHOICE_ROLE, listed.choice)
        return item

    def show_error(self, text: str) -> None:
        """One line where the answer would be: offline, a missing repository, a refusal."""
        self.search_button.setEnabled(True)
        self.status.setText(text)

    def show_planning(self, text: str) -> None:
        self.plan.setText(f"Reading the header of {text} from the Hub…")
        self.download_button.setEnabled(False)

    def show_plan(self, text: str, can_download: bool, already_here: bool = False) -> None:
        self.plan.setText(text)
        self.download_button.setEnabled(can_download)
        self.download_button.setText("&Download" if not already_here else "&Verify")
        self.load_button.setEnabled(already_here)

    def show_progress(self, what: str, done: float, total: float) -> None:
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.download_button.setEnabled(False)
        self.results.setEnabled(False)
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * done / total) if total else 0)
        self.progress.setFormat(f"{what}: {size_text(int(done))} of {size_text(int(total))}" if total > 1 else what)

    def show_downloaded(self, text: str) -> None:
        self._download_ended(text)
        self.load_button.setEnabled(True)
        self.load_button.setFocus()

    def show_download_failed(self, text: str) -> None:
        self._download_ended(text)
        self.download_button.setEnabled(True)
        self.download_button.setText("&Download again")

    def _download_ended(self, text: str) -> None:
        self.cancel_button.setVisible(False)
        self.results.setEnabled(True)
        self.progress.setVisible(False)
        self.status.setText(text)
