"""Calm, dismissible one-line notices above the conversation (never a modal error box).

Each notice has a key, so "the draft is incompatible" replaces its older self
after a reload instead of stacking up.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

INFO, WARNING, ERROR = "info", "warning", "error"

NOTICE_STYLE = """
QFrame#notice { border-radius: 8px; border: 1px solid palette(mid); background: palette(alternate-base); }
QFrame#notice[level="warning"] { border-color: #d29922; }
QFrame#notice[level="error"] { border-color: #cf222e; }
"""


class Notice(QFrame):
    def __init__(self, key: str, text: str, level: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        self.setObjectName("notice")
        self.setProperty("level", level)
        self.label = QLabel(text, self)
        self.label.setTextFormat(Qt.TextFormat.PlainText)  # paths, reasons and token texts
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_button = QToolButton(self)
        self.close_button.setText("✕")
        self.close_button.setToolTip("Dismiss")
        self.close_button.setAutoRaise(True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)

    def add_button(self, text: str, clicked) -> QPushButton:
        """A button beside the text, for the one thing to do about it (e.g. Restart engine)."""
        button = QPushButton(text, self)
        button.clicked.connect(clicked)
        self.layout().insertWidget(self.layout().count() - 1, button, 0, Qt.AlignmentFlag.AlignTop)
        return button

    @property
    def level(self) -> str:
        return self.property("level")

    def text(self) -> str:
        return self.label.text()


class NoticeArea(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setStyleSheet(NOTICE_STYLE)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self._notices: dict[str, Notice] = {}
        self.setVisible(False)

    def show_notice(self, key: str, text: str, level: str = INFO) -> Notice:
        self.clear(key)
        notice = Notice(key, text, level, self)
        notice.close_button.clicked.connect(lambda: self.clear(key))
        self._notices[key] = notice
        self._layout.addWidget(notice)
        self.setVisible(True)
        return notice

    def clear(self, key: str) -> None:
        notice = self._notices.pop(key, None)
        if notice is not None:
            self._layout.removeWidget(notice)
            notice.deleteLater()
        self.setVisible(bool(self._notices))

    def notice(self, key: str) -> Notice | None:
        return self._notices.get(key)

    def texts(self) -> list[str]:
        return [n.text() for n in self._notices.values()]
