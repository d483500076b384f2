"""The system prompt a chat uses: the one from Settings, or a named preset; and the
dialog that edits the presets.

Display and emit only: whoever owns the chat stores the choice with it and the
presets in the settings (which validate them).
"""

from __future__ import annotations

from typing import Callable, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QLineEdit, QListWidget,
                               QPlainTextEdit, QPushButton, QVBoxLayout, QWidget)

DEFAULT_LABEL = "Settings' system prompt"
EDIT_LABEL = "Edit presets…"
_EDIT = object()  # the combo's last item opens the editor; it is never a choice


class PresetChooser(QWidget):
    preset_chosen = Signal(str)  # a preset's name; '' for the settings' own prompt
    edit_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox(self)
        self.combo.setObjectName("presetChooser")
        self.combo.setToolTip("The system prompt of this chat")
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.combo.activated.connect(self._activated)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        label = QLabel("System prompt:", self)
        label.setBuddy(self.combo)
        layout.addWidget(label)
        layout.addWidget(self.combo)
        self._current = ""
        self.set_presets((), "")

    @property
    def current(self) -> str:
        return self._current

    def set_presets(self, names: Sequence[str], current: str) -> None:
        """List ``names``; show ``current`` (a name no longer there shows the default)."""
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItem(DEFAULT_LABEL, "")
        for name in names:
            self.combo.addItem(name, name)
        self.combo.insertSeparator(self.combo.count())
        self.combo.addItem(EDIT_LABEL, _EDIT)
        self._current = current if current in names else ""
        self.combo.setCurrentIndex(self.combo.findData(self._current))
        self.combo.blockSignals(False)

    def show_current(self, name: str) -> None:
        index = self.combo.findData(name) if name else 0
        self._current = name if index > 0 else ""
        self.combo.setCurrentIndex(max(index, 0))

    def _activated(self, index: int) -> None:
        value = self.combo.itemData(index)
        if value is _EDIT:
            self.combo.setCurrentIndex(max(self.combo.findData(self._current), 0))
            self.edit_requested.emit()
            return
        if value != self._current:
            self._current = value
            self.preset_chosen.emit(value)


class PresetDialog(QDialog):
    """Add, rename, rewrite and remove named system prompts; ``presets()`` is the result."""

    def __init__(self, presets: Sequence[tuple[str, str]], parent: QWidget | None = None, *,
                 check: Callable[[tuple[tuple[str, str], ...]], str] | None = None) -> None:
        """``check(presets)`` returns why they cannot be kept ('' when they can): OK
        stays open, saying so, until it returns ''."""
        super().__init__(parent)
        self.setWindowTitle("System-prompt presets")
        self._check = check
        self.resize(640, 420)
        self._presets = [list(p) for p in presets]
        self.names = QListWidget(self)
        self.name_edit = QLineEdit(self)
        self.name_edit.setPlaceholderText("Name, e.g. Terse")
        self.text_edit = QPlainTextEdit(self)
        self.text_edit.setPlaceholderText("e.g. Answer in one short paragraph.")
        self.add_button = QPushButton("Add", self)
        self.remove_button = QPushButton("Remove", self)
        self.error_label = QLabel("", self)
        self.error_label.setTextFormat(Qt.TextFormat.PlainText)
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #cf222e;")
        self.error_label.hide()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)

        side = QVBoxLayout()
        side.addWidget(self.names, 1)
        row = QHBoxLayout()
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        side.addLayout(row)
        editor = QVBoxLayout()
        editor.addWidget(self.name_edit)
        editor.addWidget(self.text_edit, 1)
        body = QHBoxLayout()
        body.addLayout(side, 1)
        body.addLayout(editor, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(body, 1)
        layout.addWidget(self.error_label)
        layout.addWidget(buttons)

        for name, _text in self._presets:
            self.names.addItem(name)
        self.names.currentRowChanged.connect(self._show_row)
        self.name_edit.textEdited.connect(self._name_edited)
        self.text_edit.textChanged.connect(self._text_edited)
        self.add_button.clicked.connect(self.add_preset)
        self.remove_button.clicked.connect(self.remove_preset)
        self._show_row(-1)
        if self._presets:
            self.names.setCurrentRow(0)

    def presets(self) -> tuple[tuple[str, str], ...]:
        return tuple((name, text) for name, text in self._presets)

    def accept(self) -> None:
        problem = self._check(self.presets()) if self._check is not None else ""
        self.show_error(problem)
        if not problem:
            super().accept()

    def show_error(self, text: str) -> None:
        self.error_label.setText(text)
        self.error_label.setVisible(bool(text))

    def add_preset(self, name: str = "", text: str = "") -> None:
        taken = {n.casefold() for n, _ in self._presets}
        base = name or "New preset"
        name, counter = base, 2
        while name.casefold() in taken:
            name, counter = f"{base} {counter}", counter + 1
        self._presets.append([name, text])
        self.names.addItem(name)
        self.names.setCurrentRow(len(self._presets) - 1)
        self.name_edit.setFocus()
        self.name_edit.selectAll()

    def remove_preset(self) -> None:
        row = self.names.currentRow()
        if 0 <= row < len(self._presets):
            del self._presets[row]
            self.names.takeItem(row)

    def _show_row(self, row: int) -> None:
        has = 0 <= row < len(self._presets)
        for widget in (self.name_edit, self.text_edit, self.remove_button):
            widget.setEnabled(has)
        self.name_edit.setText(self._presets[row][0] if has else "")
        self.text_edit.blockSignals(True)
        self.text_edit.setPlainText(self._presets[row][1] if has else "")
        self.text_edit.blockSignals(False)

    def _name_edited(self, name: str) -> None:
        row = self.names.currentRow()
        if 0 <= row < len(self._presets):
            self._presets[row][0] = name
            self.names.item(row).setText(name)

    def _text_edited(self) -> None:
        row = self.names.currentRow()
        if 0 <= row < len(self._presets):
            self._presets[row][1] = self.text_edit.toPlainText()
