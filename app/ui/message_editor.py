"""Editing a sent message in place: a wrapped, multi-line box with Save and Cancel.

Ctrl+Enter saves, Esc cancels, Enter breaks the line (a message may hold code). The
window's own Esc (Stop) and Ctrl+Enter do not see these keys while the box has focus.
A widget only: it emits ``saved(text)`` or ``cancelled()``; the message decides.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor, QTextOption
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QSizePolicy, QTextEdit, QVBoxLayout, QWidget

MAX_LINES = 16  # taller texts scroll inside the box rather than push the chat away
SAVE_TIP = "Send this instead (Ctrl+Enter); the earlier version and its replies stay (‹ 1/2 ›)"
CANCEL_TIP = "Keep the message as it was (Esc)"


def _is_save(event: QKeyEvent) -> bool:
    modifiers = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
    return (event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
            and modifiers == Qt.KeyboardModifier.ControlModifier)


class EditBox(QTextEdit):
    """Plain text, wrapped at the box's width, as tall as its text (up to ``MAX_LINES``)."""

    save_pressed = Signal()
    cancel_pressed = Signal()

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageEditBox")
        self.setAcceptRichText(False)
        self.setTabChangesFocus(True)
        self.setAcceptDrops(False)  # a dropped model file goes on to the window
        self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setPlainText(text)
        self.moveCursor(QTextCursor.MoveOperation.End)
        self.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self._fit_height()

    def _fit_height(self, *_: object) -> None:
        frame = 2 * self.frameWidth()
        most = self.fontMetrics().lineSpacing() * MAX_LINES + frame
        least = self.fontMetrics().lineSpacing() * 2 + frame
        height = max(least, min(most, math.ceil(self.document().size().height()) + frame))
        if height != self.height():
            self.setFixedHeight(height)

    def resizeEvent(self, event) -> None:  # noqa: N802 — a new width wraps differently
        super().resizeEvent(event)
        self._fit_height()

    def event(self, event: QEvent) -> bool:
        # Claimed before the window's shortcuts (Esc is Stop there) see them.
        if event.type() == QEvent.Type.ShortcutOverride and (
                _is_save(event) or event.key() == Qt.Key.Key_Escape):
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        if _is_save(event):
            self.save_pressed.emit()
        elif event.key() == Qt.Key.Key_Escape:
            self.cancel_pressed.emit()
        else:
            super().keyPressEvent(event)


class MessageEditor(QFrame):
    saved = Signal(str)
    cancelled = Signal()

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageEditor")
        self.box = EditBox(text, self)
        self.box.save_pressed.connect(self._save)
        self.box.cancel_pressed.connect(self.cancelled)
        self.save_button = QPushButton("Save", self)
        self.save_button.setToolTip(SAVE_TIP)
        self.save_button.setDefault(True)
        self.save_button.clicked.connect(self._save)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setToolTip(CANCEL_TIP)
        self.cancel_button.clicked.connect(self.cancelled)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addStretch(1)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.save_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.box)
        layout.addLayout(buttons)

    def text(self) -> str:
        return self.box.toPlainText()

    def focus(self) -> None:
        self.box.setFocus(Qt.FocusReason.OtherFocusReason)

    def _save(self) -> None:
        self.saved.emit(self.text())
