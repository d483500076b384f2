"""Local server: serve the window's loaded models through the OpenAI-compatible API.

Widgets only: the switch, the port, the address with a copy button, and the requests
served so far (speed, acceptance, prompt reuse and a bar of their tokens' kinds in the
chat's colours). What the switch does is the window's ``ServerController``'s.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.engine.types import TokenKind
from app.ui.resources import token_palette
from app.ui.token_style import is_dark

COLUMNS = ("#", "Kind", "Tokens", "Tokens/s", "Acceptance", "Prompt reused", "Token kinds")
BAR_WIDTH, BAR_HEIGHT = 96, 12


class ServerDialog(QDialog):
    """Emits ``switched(on, port)``; shown what happened with ``show_state`` and ``add_request``."""

    switched = Signal(bool, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Local server")
        self.enabled = QCheckBox("Serve the loaded models to programs on this computer (OpenAI-compatible API)")
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(8080)
        self.address = QLineEdit()
        self.address.setReadOnly(True)
        self.address.setPlaceholderText("off")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the address")
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.address.text()))
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.requests = QTreeWidget()
        self.requests.setHeaderLabels(list(COLUMNS))
        self.requests.setRootIsDecorated(False)
        self._colours = {kind: QColor(token_palette(is_dark(self.palette()))[kind.value]) for kind in TokenKind}

        address_row = QHBoxLayout()
        address_row.addWidget(self.address)
        address_row.addWidget(self.copy_button)
        form = QFormLayout()
        form.addRow(self.enabled)
        form.addRow("Port", self.port)
        form.addRow("Address", address_row)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(QLabel("Requests served while the window is open:"))
        layout.addWidget(self.requests)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.enabled.toggled.connect(lambda on: self.switched.emit(on, self.port.value()))
        self.resize(720, 420)

    def show_state(self, url: str, message: str = "") -> None:
        """``url`` while serving ('' when off); ``message``: why it is off, or how to use it."""
        serving = bool(url)
        self.enabled.blockSignals(True)
        self.enabled.setChecked(serving)
        self.enabled.blockSignals(False)
        self.port.setEnabled(not serving)
        self.address.setText(url)
        self.copy_button.setEnabled(serving)
        self.status.setText(message)

    def add_request(self, record: dict) -> None:
        kinds = record.get("token_kinds", {})
        item = QTreeWidgetItem([
            str(record.get("arrival", "")), record.get("kind", ""), str(record.get("completion_tokens", 0)),
            f"{record.get('tokens_per_second', 0.0):.1f}",
            f"{record.get('acceptance', 0.0):.0%}" if record.get("speculative") else "off",
            f"{record.get('cached_tokens', 0)}/{record.get('prompt_tokens', 0)}",
            " ".join(f"{k} {n}" for k, n in kinds.items()),
        ])
        item.setIcon(len(COLUMNS) - 1, QIcon(self._kinds_bar(kinds)))
        item.setTextAlignment(2, Qt.AlignmentFlag.AlignRight)
        self.requests.insertTopLevelItem(0, item)  # newest first

    def _kinds_bar(self, kinds: dict) -> QPixmap:
        """The request's tokens as one bar, each kind's share in its chat colour."""
        bar = QPixmap(BAR_WIDTH, BAR_HEIGHT)
        bar.fill(Qt.GlobalColor.transparent)
        total = sum(kinds.values())
        painter = QPainter(bar)
        x = 0.0
        for kind in TokenKind:
            share = kinds.get(kind.value, 0) / total if total else 0.0
            if share:
                painter.fillRect(int(x), 0, max(1, round(share * BAR_WIDTH)), BAR_HEIGHT, self._colours[kind])
                x += share * BAR_WIDTH
        painter.end()
        return bar
