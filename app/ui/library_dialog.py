"""The model library window: the GGUF files found, and for the one chosen as target the
drafts that can speculate for it, best first, each incompatible one with the reason.

Display and emit only: the scan and the draft finder run elsewhere (off the UI thread)
and hand their results to ``show_progress``, ``show_result`` and ``show_drafts``.
One click ("Use this pair") emits the pair; "Check speculation" is offered right after.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QFileDialog, QHBoxLayout, QLabel, QMenu, QProgressBar,
                               QPushButton, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

from app.library.entries import LibraryEntry, parameters_shown, size_shown
from app.ui.chat_format_chooser import ChatFormatChooser

if TYPE_CHECKING:  # what the controller hands over; their modules read the disk and the store
    from app.library.drafts import DraftCandidate
    from app.library.scan import ScanResult

MODEL_COLUMNS = ("Model", "Source", "Architecture", "Parameters", "Quantisation", "Size", "Context", "Status")
DRAFT_COLUMNS = ("Draft", "Verdict", "Size", "Smaller by", "Memory", "Why")  # the reason last: it gets the room
_PATH_ROLE = Qt.ItemDataRole.UserRole
_REFUSED = QBrush(QColor("#8c959f"))

FolderChooser = Callable[[QWidget, str, str], str]  # (parent, caption, start) -> folder or ""


def _qt_folder(parent: QWidget, caption: str, start: str) -> str:
    return QFileDialog.getExistingDirectory(parent, caption, start)


class LibraryDialog(QDialog):
    scan_requested = Signal()
    cancel_requested = Signal()
    folder_added = Signal(str)
    folder_removed = Signal(str)
    target_selected = Signal(str)          # a usable entry's path: the window finds its drafts
    pair_chosen = Signal(str, str)         # target path, draft path
    check_requested = Signal(str, str)     # "Check speculation" for that pair
    chat_format_chosen = Signal(str, str)  # model path, chat format ('' : the file's own template)
    make_draft_requested = Signal(str)     # "Make a draft from this model": the target's path
    make_draft_cancelled = Signal()

    def __init__(self, parent: QWidget | None = None, choose_folder: FolderChooser = _qt_folder) -> None:
        super().__init__(parent)
        self.setWindowTitle("Model library")
        self.resize(900, 620)
        self._choose_folder = choose_folder
        self._entries: dict[str, LibraryEntry] = {}
        self._chosen: tuple[str, str] | None = None

        self.scan_button = QPushButton("Scan", self)
        self.scan_button.clicked.connect(self.scan_requested)
        self.folder_button = QPushButton("Add folder…", self)
        self.folder_button.clicked.connect(self._add_folder)
        self.remove_menu = QMenu(self)
        self.remove_button = QPushButton("Remove folder", self)
        self.remove_button.setToolTip("Stop scanning a folder you added")
        self.remove_button.setMenu(self.remove_menu)
        self.set_folders(())
        self.cancel_button = QPushButton("Stop", self)
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.cancel_button.hide()
        self.progress = QProgressBar(self)
        self.progress.hide()
        self.status = QLabel("", self)
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        top = QHBoxLayout()
        for widget in (self.scan_button, self.folder_button, self.remove_button, self.progress, self.cancel_button):
            top.addWidget(widget)
        top.addStretch(1)

        self.models = self._tree(MODEL_COLUMNS)
        self.models.itemSelectionChanged.connect(self._target_changed)
        self.chat_format = ChatFormatChooser(parent=self)
        self.chat_format.setToolTip("How prompts to the chosen model are written: its own chat template, "
                                    "or one of llama.cpp's built-in formats. Remembered for the file.")
        self.chat_format.chosen.connect(self.chat_format_chosen)
        self.chat_format.setEnabled(False)
        format_row = QHBoxLayout()
        format_row.addWidget(QLabel("Chat format of the chosen model:", self))
        format_row.addWidget(self.chat_format)
        format_row.addStretch(1)
        self.drafts_label = QLabel("Choose a target above to see the drafts that can speculate for it.", self)
        self.drafts_label.setWordWrap(True)
        self.drafts = self._tree(DRAFT_COLUMNS)
        self.drafts.itemSelectionChanged.connect(self._update_buttons)
        self.drafts.itemDoubleClicked.connect(lambda *_: self._use_pair())

        self.use_button = QPushButton("Use this pair", self)
        self.use_button.setDefault(True)
        self.use_button.clicked.connect(self._use_pair)
        self.check_button = QPushButton("Check speculation", self)
        self.check_button.setToolTip("Load the pair and run the self-test: lossless, and how much faster.")
        self.check_button.clicked.connect(self._check)
        self.check_button.hide()
        self.make_draft_button = QPushButton("Make a draft from this model", self)
        self.make_draft_button.setToolTip("Write a 4-bit copy of the chosen model (2-bit if it is already "
                                          "4-bit) into Tandem's data folder and use it as the draft: no "
                                          "download, the same vocabulary.")
        self.make_draft_button.clicked.connect(self._make_draft)
        self.draft_progress = QProgressBar(self)
        self.draft_progress.setRange(0, 1000)
        self.draft_progress.hide()
        self.draft_cancel_button = QPushButton("Cancel", self)
        self.draft_cancel_button.setToolTip("Stop making the draft; nothing is kept")
        self.draft_cancel_button.clicked.connect(self.make_draft_cancelled)
        self.draft_cancel_button.hide()
        self._making = False
        close = QPushButton("Close", self)
        close.clicked.connect(self.reject)
        bottom = QHBoxLayout()
        for widget in (self.make_draft_button, self.draft_progress, self.draft_cancel_button):
            bottom.addWidget(widget)
        bottom.addStretch(1)
        for widget in (self.use_button, self.check_button, close):
            bottom.addWidget(widget)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addWidget(self.models, 3)
        layout.addLayout(format_row)
        layout.addWidget(self.drafts_label)
        layout.addWidget(self.drafts, 2)
        layout.addLayout(bottom)
        self._update_buttons()

    # --- what the window tells it ---------------------------------------------------------

    def set_chat_formats(self, names: Sequence[str], choices: Sequence[Sequence[str]]) -> None:
        """The formats on offer and those chosen per file ([path, name] pairs)."""
        self.chat_format.set_names(names)
        self.chat_format.set_choices(choices)

    def set_folders(self, folders: Sequence[str]) -> None:
        """The folders the user added, offered for removal."""
        self.remove_menu.clear()
        for folder in folders:
            action = self.remove_menu.addAction(folder)
            action.triggered.connect(lambda _checked=False, f=folder: self.folder_removed.emit(f))
        self.remove_button.setEnabled(bool(folders))

    def show_scanning(self) -> None:
        self.progress.setRange(0, 0)
        self.progress.show()
        self.cancel_button.show()
        self.scan_button.setEnabled(False)
        self.status.setText("Looking for models…")

    def show_progress(self, done: int, total: int, name: str) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.status.setText(f"Reading {name} ({done + 1} of {total})" if name else f"{done} of {total} read")

    def show_result(self, result: ScanResult) -> None:
        self.progress.hide()
        self.cancel_button.hide()
        self.scan_button.setEnabled(True)
        selected = self.selected_target()
        self._entries = {e.path: e for e in result.entries}
        self.models.clear()
        for entry in result.entries:
            item = QTreeWidgetItem([
                entry.name, entry.source, entry.architecture or "—",
                parameters_shown(entry.n_parameters) if entry.usable else "—", entry.quantisation or "—",
                size_shown(entry.size), f"{entry.context_length:,}" if entry.context_length else "—",
                "; ".join(entry.notes) if entry.usable else f"refused: {entry.refused}"])
            item.setData(0, _PATH_ROLE, entry.path)
            item.setToolTip(0, entry.path)
            if not entry.usable:
                item.setToolTip(7, entry.refused or "")
                for column in range(len(MODEL_COLUMNS)):
                    item.setForeground(column, _REFUSED)
            self.models.addTopLevelItem(item)
            if entry.path == selected:
                item.setSelected(True)
        usable, refused = len(result.usable), len(result.refused)
        words = [f"{usable} model{'s' if usable != 1 else ''} found"]
        if refused:
            words.append(f"{refused} file{'s' if refused != 1 else ''} refused (see Status)")
        if result.read < len(result.entries):
            words.append(f"{len(result.entries) - result.read} unchanged since the last scan")
        if result.cancelled:
            words.append("stopped before the end")
        where = ", ".join(str(location.path) for location in result.locations)
        self.status.setText(" · ".join(words) + (f". Looked in {where}." if where else ".")
                            + "".join(f" {note}" for note in result.notes))
        for column in range(len(MODEL_COLUMNS) - 1):
            self.models.resizeColumnToContents(column)

    def show_drafts(self, target_path: str, candidates: Sequence[DraftCandidate],
                    plans: Mapping[str, str] | None = None) -> None:
        """``plans``: each draft's memory plan beside the target (app.session.fit.describe)."""
        if target_path != self.selected_target():
            return  # an answer for a target no longer chosen
        self.drafts.clear()
        compatible = [c for c in candidates if c.compatible]
        same = [c for c in compatible if not c.through_text]
        name = self._entries[target_path].name if target_path in self._entries else Path(target_path).name
        self.drafts_label.setText(
            f"Drafts for {name}: {len(same)} compatible" + (
                f", {len(compatible) - len(same)} through text" if len(compatible) > len(same) else "")
            + ("" if same else " — none of the models found shares its vocabulary; one that does not drafts "
               "through text, with acceptance measured, not promised."))
        for candidate in candidates:
            ratio = f"{candidate.size_ratio:.1f}×" if candidate.size_ratio > 0 else "—"
            verdict = ("through text" if candidate.through_text else "compatible") if candidate.compatible \
                else "incompatible"
            plan = (plans or {}).get(candidate.entry.path, "")
            item = QTreeWidgetItem([candidate.entry.name, verdict,
                                    size_shown(candidate.entry.size), ratio, plan, candidate.reason])
            item.setData(0, _PATH_ROLE, candidate.entry.path)
            item.setToolTip(4, plan)
            item.setToolTip(5, candidate.reason)
            if not candidate.compatible:
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsSelectable)
                for column in range(len(DRAFT_COLUMNS)):
                    item.setForeground(column, _REFUSED)
            self.drafts.addTopLevelItem(item)
        if compatible:
            self.drafts.topLevelItem(0).setSelected(True)  # the best one, ready for one click
        for column in range(len(DRAFT_COLUMNS) - 1):
            self.drafts.resizeColumnToContents(column)
        self._update_buttons()

    def offer_check(self, target: str, draft: str) -> None:
        """The pair is set: offer the self-test for it."""
        self._chosen = (target, draft)
        self.check_button.show()
        self.check_button.setFocus()
        self.status.setText("The pair is set. Check speculation runs the self-test on it: "
                            "the same reply with and without the draft, and the speed of each.")

    def show_making_draft(self, text: str) -> None:
        """A draft is being made: the bar and Cancel, and what it needs (``text``)."""
        self._making = True
        self.draft_progress.setValue(0)
        self.draft_progress.show()
        self.draft_cancel_button.show()
        self.status.setText(text)
        self._update_buttons()

    def show_draft_progress(self, fraction: float, stage: str) -> None:
        self.draft_progress.setValue(int(max(0.0, min(1.0, fraction)) * 1000))
        self.draft_progress.setFormat(f"{stage}: %p%")

    def show_draft_finished(self, text: str) -> None:
        """Made, failed or cancelled: ``text`` says which, in one line."""
        self._making = False
        self.draft_progress.hide()
        self.draft_cancel_button.hide()
        self.status.setText(text)
        self._update_buttons()

    # --- reading the selection ------------------------------------------------------------

    def selected_target(self) -> str | None:
        items = self.models.selectedItems()
        return items[0].data(0, _PATH_ROLE) if items else None

    def selected_draft(self) -> str | None:
        items = self.drafts.selectedItems()
        return items[0].data(0, _PATH_ROLE) if items else None

    def select_target(self, path: str) -> None:
        for i in range(self.models.topLevelItemCount()):
            item = self.models.topLevelItem(i)
            item.setSelected(item.data(0, _PATH_ROLE) == path)

    # --- internals ------------------------------------------------------------------------

    def _tree(self, columns: Sequence[str]) -> QTreeWidget:
        tree = QTreeWidget(self)
        tree.setHeaderLabels(list(columns))
        tree.setRootIsDecorated(False)
        tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        tree.setUniformRowHeights(True)
        return tree

    def _target_changed(self) -> None:
        self.drafts.clear()
        path = self.selected_target()
        entry = self._entries.get(path) if path else None
        self.chat_format.set_model(path if entry is not None and entry.usable else "")
        self.chat_format.setEnabled(entry is not None and entry.usable)
        if entry is not None and entry.usable:
            self.drafts_label.setText(f"Looking for drafts for {entry.name}…")
            self.target_selected.emit(path)
        elif entry is not None:
            self.drafts_label.setText(f"{entry.name} cannot be used: {entry.refused}")
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.use_button.setEnabled(bool(self.selected_target() and self.selected_draft()))
        target = self._entries.get(self.selected_target() or "")
        self.make_draft_button.setEnabled(bool(target and target.usable) and not self._making)

    def _make_draft(self) -> None:
        target = self.selected_target()
        if target:
            self.make_draft_requested.emit(target)

    def _use_pair(self) -> None:
        target, draft = self.selected_target(), self.selected_draft()
        if target and draft:
            self.pair_chosen.emit(target, draft)

    def _check(self) -> None:
        if self._chosen:
            self.check_requested.emit(*self._chosen)

    def _add_folder(self) -> None:
        folder = self._choose_folder(self, "Add a folder of GGUF models", str(Path.home()))
        if folder:
            self.folder_added.emit(folder)
