"""Where the user types: Enter sends, Shift+Enter breaks the line, Send turns into Stop."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QSizePolicy, QWidget

MIN_LINES, MAX_LINES = 2, 8


def model_files(mime: QMimeData) -> list[str]:
    """Local .gguf files in a drag, in order."""
    return [url.toLocalFile() for url in mime.urls()
            if url.isLocalFile() and url.toLocalFile().lower().endswith(".gguf")]


class PromptEdit(QPlainTextEdit):
    """A multi-line input whose Enter means "send" (Shift+Enter: new line)."""

    submitted = Signal()
    models_dropped = Signal(list)  # [path]

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTabChangesFocus(True)
        self.setPlaceholderText("Message the model — Enter sends, Shift+Enter adds a line")
        self.document().contentsChanged.connect(self.updateGeometry)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            modifiers = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
            if modifiers == Qt.KeyboardModifier.NoModifier:
                self.submitted.emit()
                return
            if modifiers & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
                return
        super().keyPressEvent(event)

    # A dropped model file is for the window (target or draft?), not text to paste here.
    def dragEnterEvent(self, event) -> None:  # noqa: N802
        if model_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event) -> None:  # noqa: N802
        if model_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragMoveEvent(event)

    def dropEvent(self, event) -> None:  # noqa: N802
        files = model_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.models_dropped.emit(files)
        else:
            super().dropEvent(event)

    def sizeHint(self) -> QSize:  # noqa: N802 — grow with the text, up to MAX_LINES
        lines = max(MIN_LINES, min(MAX_LINES, self.document().blockCount()))
        height = self.fontMetrics().lineSpacing() * lines + 2 * (self.frameWidth() + 6)
        return QSize(super().sizeHint().width(), height)


class Composer(QWidget):
    """Emits ``send_requested(text)`` and ``stop_requested()``; the window decides what they do."""

    send_requested = Signal(str)
    stop_requested = Signal()
    models_dropped = Signal(list)  # [path] of .gguf files dropped on the input

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = PromptEdit(self)
        self.edit.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self.edit.submitted.connect(self._send)
        self.edit.models_dropped.connect(self.models_dropped)
        self.button = QPushButton("Send", self)
        self.button.setObjectName("sendButton")
        self.button.setDefault(False)
        self.button.setAutoDefault(False)
        self.button.setMinimumWidth(88)
        self.button.clicked.connect(self._clicked)
        self._generating = False
        self._ready = True

        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        self._update_button()

    @property
    def generating(self) -> bool:
        return self._generating

    def set_generating(self, generating: bool) -> None:
        self._generating = generating
        self._update_button()

    @property
    def ready(self) -> bool:
        return self._ready

    def set_ready(self, ready: bool) -> None:
        """False when no model could be loaded: typing is fine, sending is not."""
        self._ready = ready
        self._update_button()

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)

    def focus(self) -> None:
        self.edit.setFocus(Qt.FocusReason.OtherFocusReason)

    def _clicked(self) -> None:
        if self._generating:
            self.stop_requested.emit()
        else:
            self._send()

    def _send(self) -> None:
        text = self.edit.toPlainText().strip()
        if self._generating or not self._ready or not text:
            return  # Enter while a reply streams does nothing; Stop is explicit
        self.edit.clear()
        self.send_requested.emit(text)

    def _update_button(self) -> None:
        self.button.setText("Stop" if self._generating else "Send")
        self.button.setEnabled(self._generating or self._ready)
        self.button.setToolTip("Stop the reply (Esc)" if self._generating else "Send (Enter)")
        self.button.setProperty("stop", self._generating)
        self.button.style().unpolish(self.button)
        self.button.style().polish(self.button)
