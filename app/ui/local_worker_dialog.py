"""File → Local worker…: this machine served to another machine's Tandem as a llama.cpp
RPC worker (``tandem worker``), started and stopped from the window.

Widgets only: the port, whether other machines may use it (with the warning that the
protocol has no password), Start/Stop, and once running its address with a Copy button,
its devices and their free memory as the worker printed them. What Start and Stop do is
the window's ``LocalWorkerController``'s.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
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
    QVBoxLayout,
    QWidget,
)

REMOTE_WARNING = ("Anyone who can reach this port can use this machine's device and read what is sent to it: "
                  "llama.cpp's RPC has no password. Allow it only on a network you trust.")


def _plain_label(parent: QWidget, name: str) -> QLabel:
    label = QLabel(parent)
    label.setObjectName(name)
    label.setTextFormat(Qt.TextFormat.PlainText)  # the worker's own words
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class LocalWorkerDialog(QDialog):
    """Emits ``start_requested(port, allow_remote)`` and ``stop_requested``; told what
    happened with ``show_starting``, ``show_running`` and ``show_stopped``."""

    start_requested = Signal(int, bool)
    stop_requested = Signal()

    def __init__(self, port: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Local worker")
        intro = QLabel("Serve this machine's GPU (else its CPU) to Tandem or llama.cpp on another machine, "
                       "which adds it under Settings → Hardware → Remote workers.", self)
        intro.setWordWrap(True)
        self.port = QSpinBox(self)
        self.port.setRange(1, 65535)
        self.port.setValue(port)
        self.allow_remote = QCheckBox("Let other machines use it (listen on all addresses)", self)
        self.warning = _plain_label(self, "remoteWarning")
        self.warning.setText(REMOTE_WARNING)
        self.warning.setStyleSheet("color: #9a6700;")
        self.start_button = QPushButton("Start", self)
        self.stop_button = QPushButton("Stop", self)
        for button in (self.start_button, self.stop_button):
            button.setAutoDefault(False)
        self.address = QLineEdit(self)
        self.address.setObjectName("workerAddress")
        self.address.setReadOnly(True)
        self.copy_button = QPushButton("Copy", self)
        self.copy_button.setAutoDefault(False)
        self.copy_button.setToolTip("Copy the address, for the other machine's Remote workers")
        self.devices = _plain_label(self, "workerDevices")
        self.status = _plain_label(self, "workerStatus")

        address_row = QHBoxLayout()
        address_row.addWidget(self.address, 1)
        address_row.addWidget(self.copy_button)
        switch_row = QHBoxLayout()
        switch_row.addWidget(self.start_button)
        switch_row.addWidget(self.stop_button)
        switch_row.addStretch(1)
        form = QFormLayout()
        form.addRow("Port", self.port)
        form.addRow("", self.allow_remote)
        form.addRow("", self.warning)
        form.addRow("", switch_row)
        form.addRow("Address", address_row)
        form.addRow("Serves", self.devices)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(buttons)

        self.start_button.clicked.connect(lambda: self.start_requested.emit(self.port.value(),
                                                                            self.allow_remote.isChecked()))
        self.stop_button.clicked.connect(self.stop_requested)
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.address.text()))
        self.allow_remote.toggled.connect(self.warning.setVisible)
        self.warning.setVisible(False)
        self.show_stopped()

    def show_starting(self) -> None:
        self._set_running(None)
        self.status.setText("Starting the worker…")

    def show_running(self, address: str, devices: list[str], remote: bool) -> None:
        self._set_running(True)
        self.address.setText(address)
        self.devices.setText("\n".join(devices))
        self.status.setText("Running until Stop or until Tandem quits"
                            + (": other machines can use it." if remote else "; only this machine can use it."))

    def show_stopped(self, line: str = "") -> None:
        """``line``: why it stopped, when it was not Stop."""
        self._set_running(False)
        self.address.clear()
        self.devices.clear()
        self.status.setText(line)
        self.status.setStyleSheet("color: #cf222e;" if line else "")

    def _set_running(self, running: bool | None) -> None:
        """None: starting."""
        self.status.setStyleSheet("")
        idle = running is False
        for widget in (self.port, self.allow_remote, self.start_button):
            widget.setEnabled(idle)
        self.stop_button.setEnabled(not idle)
        self.copy_button.setEnabled(running is True)
