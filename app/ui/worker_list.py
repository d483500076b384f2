"""Settings → Hardware → Remote workers: the llama.cpp RPC workers the target is split
over, one host:port a row, with Add, Remove and Test.

Display and emit only: Test emits ``test_requested(endpoint)`` for each worker chosen
(the selected rows, else all), and the window's answer comes back through
``show_test``, one line a worker. The value is the settings' own spelling,
``host:port,host:port`` (``text``/``setText``).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.worker_address import DEFAULT_PORT, MAX_WORKERS, AddressError, parse_endpoint

LIST_ROWS = 4  # the list's height, in rows: room for a few workers before it scrolls


class WorkerList(QWidget):
    test_requested = Signal(str)  # a host:port to ask what it is

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = QListWidget(self)
        self.list.setObjectName("workerRows")
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setMaximumHeight(self.fontMetrics().lineSpacing() * (LIST_ROWS + 1) + 8)
        self.entry = QLineEdit(self)
        self.entry.setObjectName("workerEntry")
        self.entry.setPlaceholderText(f"host:port, e.g. 192.168.1.20:{DEFAULT_PORT}")
        self.entry.setClearButtonEnabled(True)
        self.add_button = QPushButton("Add", self)
        self.remove_button = QPushButton("Remove", self)
        self.test_button = QPushButton("Test", self)
        self.test_button.setToolTip("Ask each selected worker (else every one) what it serves, "
                                    "and time the round trip")
        for button in (self.add_button, self.remove_button, self.test_button):
            button.setAutoDefault(False)  # Enter in the entry is not the dialog's OK
        self.result_label = QLabel(self)
        self.result_label.setObjectName("workerTest")
        self.result_label.setTextFormat(Qt.TextFormat.PlainText)  # a worker's words, not markup
        self.result_label.setWordWrap(True)
        self.result_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.result_label.hide()
        self._results: dict[str, str] = {}  # endpoint -> its last test's line, in the order tested

        entry_row = QHBoxLayout()
        entry_row.addWidget(self.entry, 1)
        entry_row.addWidget(self.add_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.test_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list)
        layout.addLayout(entry_row)
        layout.addLayout(buttons)
        layout.addWidget(self.result_label)

        self.add_button.clicked.connect(self.add_entry)
        self.entry.returnPressed.connect(self.add_entry)
        self.remove_button.clicked.connect(self.remove_selected)
        self.test_button.clicked.connect(self.test)
        self.list.itemSelectionChanged.connect(self._update_enabled)
        self._update_enabled()

    # --- the value ------------------------------------------------------------------------------

    def endpoints(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def text(self) -> str:
        """The settings' spelling. An address typed but not added counts too (Enter in a
        dialog is its OK): if it is not one, the settings say so in one line."""
        pending = [self.entry.text().strip()] if self.entry.text().strip() else []
        return ",".join(self.endpoints() + [p for p in pending if p not in self.endpoints()])

    def setText(self, text: str) -> None:  # noqa: N802 — reads like the Qt widgets around it
        self.list.clear()
        self.entry.clear()
        for part in (p.strip() for p in (text or "").split(",")):
            if part:
                self.list.addItem(part)
        self._update_enabled()

    # --- editing --------------------------------------------------------------------------------

    def add_entry(self) -> bool:
        """Add the typed address (a bad one is one line under the list); True once added."""
        typed = self.entry.text().strip()
        if not typed:
            return False
        try:
            endpoint = parse_endpoint(typed)
            if endpoint in self.endpoints():
                raise AddressError(f"worker {endpoint} is already in the list")
            if self.list.count() >= MAX_WORKERS:
                raise AddressError(f"at most {MAX_WORKERS} workers (llama.cpp's limit)")
        except AddressError as exc:
            self._say(str(exc), ok=False)
            return False
        self.list.addItem(endpoint)
        self.entry.clear()
        self._say("")
        self._update_enabled()
        return True

    def remove_selected(self) -> None:
        for item in self.list.selectedItems():
            self._results.pop(item.text(), None)
            self.list.takeItem(self.list.row(item))
        self._show_results()
        self._update_enabled()

    # --- Test -----------------------------------------------------------------------------------

    def test(self) -> None:
        chosen = [item.text() for item in self.list.selectedItems()] or self.endpoints()
        for endpoint in chosen:
            self._results.pop(endpoint, None)
            self._results[endpoint] = f"{endpoint}: testing…"
        self._show_results()
        for endpoint in chosen:
            self.test_requested.emit(endpoint)

    def show_test(self, endpoint: str, ok: bool, line: str) -> None:
        """The window's answer for ``endpoint``: what it reports, or why not (one line)."""
        if endpoint not in self._results:
            return  # removed since
        self._results[endpoint] = ("✓ " if ok else "✗ ") + line
        self._show_results()

    def result(self, endpoint: str) -> str:
        return self._results.get(endpoint, "")

    def _show_results(self) -> None:
        self._say("\n".join(self._results[e] for e in self.endpoints() if e in self._results))

    def _say(self, text: str, ok: bool = True) -> None:
        self.result_label.setText(text)
        self.result_label.setStyleSheet("" if ok else "color: #cf222e;")
        self.result_label.setVisible(bool(text))

    def _update_enabled(self) -> None:
        self.remove_button.setEnabled(bool(self.list.selectedItems()))
        self.test_button.setEnabled(self.list.count() > 0)
