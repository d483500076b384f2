"""File → Local worker…: ``tandem worker`` as a child process of the window, started and
stopped from its dialog (``LocalWorkerDialog``).

The child is the same command as in a terminal, with one flag more: it ends when its
stdin closes, so a window that crashed leaves no worker behind; Stop and the window's
quit end it at once. What it serves and its free memory are read from the banner it
prints; its address is shown once the banner is complete.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

from app.ui.local_worker_dialog import LocalWorkerDialog
from app.worker_address import DEFAULT_PORT
from app.worker_address import UNTIL_STDIN_CLOSES

ROOT = Path(__file__).resolve().parents[2]
STOP_WAIT_MS = 10_000  # after a polite stop, before the kill: a worker holds nothing to save


def worker_command(port: int, allow_remote: bool) -> list[str]:
    args = ["worker", "--port", str(port), UNTIL_STDIN_CLOSES]
    if allow_remote:
        args += ["--host", "0.0.0.0", "--allow-remote"]
    if getattr(sys, "frozen", False):  # the bundle's executable is the interpreter
        return [sys.executable, *args]
    return [sys.executable, "-m", "app", *args]


def lan_address() -> str:
    """This machine's address on its network (the one a default route leaves by), for the
    other machine to type; none found (no network): its host name."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # a UDP "connect" sends nothing: it only picks the route
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


class LocalWorkerController(QObject):
    changed = Signal()  # started, running, or stopped

    def __init__(self, *, dialog_parent: QWidget) -> None:
        super().__init__(dialog_parent)
        self._dialog_parent = dialog_parent
        self.process: QProcess | None = None
        self.dialog: LocalWorkerDialog | None = None
        self.port = DEFAULT_PORT
        self.remote = False
        self.address = ""            # host:port once running
        self.devices: list[str] = []  # "CPU - … , 7.6 GiB free of 15.5 GiB", as the worker said
        self.last_error = ""          # why it ended, when it was not Stop
        self._banner: list[str] = []
        self._partial = b""
        self.action = QAction("Local &worker…", dialog_parent)
        self.action.setToolTip("Serve this machine's GPU or CPU to another machine's Tandem (llama.cpp RPC)")
        self.action.triggered.connect(self.open_dialog)
        self.actions = (self.action,)

    @property
    def running(self) -> bool:
        return self.process is not None

    @property
    def pid(self) -> int:
        return int(self.process.processId()) if self.process is not None else 0

    def open_dialog(self) -> LocalWorkerDialog:
        if self.dialog is not None:
            self.dialog.raise_()
            return self.dialog
        dialog = LocalWorkerDialog(self.port, self._dialog_parent)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.start_requested.connect(self.start)
        dialog.stop_requested.connect(self.stop)
        dialog.finished.connect(lambda _result: self._forget_dialog(dialog))
        self.dialog = dialog
        self._show()
        dialog.open()
        return dialog

    def start(self, port: int, allow_remote: bool) -> None:
        if self.process is not None:
            return
        self.port, self.remote = port, allow_remote
        self.address, self.devices, self.last_error = "", [], ""
        self._banner, self._partial = [], b""
        process = QProcess(self)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        env = QProcessEnvironment.systemEnvironment()
        if not getattr(sys, "frozen", False):
            env.insert("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), env.value("PYTHONPATH")])))
        process.setProcessEnvironment(env)
        process.readyReadStandardOutput.connect(self._read)
        process.finished.connect(self._ended)
        process.errorOccurred.connect(self._failed_to_start)
        command = worker_command(port, allow_remote)
        self.process = process
        process.start(command[0], command[1:])  # stdin stays open: its end is the worker's
        self._show()

    def stop(self) -> None:
        """End the worker and wait until it has gone (the window's quit calls this too)."""
        process = self.process
        if process is None:
            return
        self.process = None  # its end is Stop's, not a failure
        for signal in (process.readyReadStandardOutput, process.finished, process.errorOccurred):
            signal.disconnect()
        process.closeWriteChannel()  # the worker's own way out (--until-stdin-closes)
        if not process.waitForFinished(STOP_WAIT_MS):
            process.kill()
            process.waitForFinished(-1)
        process.deleteLater()
        self.address, self.devices = "", []
        self._show()

    # --- the child's words ----------------------------------------------------------------------

    def _read(self) -> None:
        if self.process is None:
            return
        data = self._partial + bytes(self.process.readAllStandardOutput())
        *lines, self._partial = data.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").rstrip()
            self._banner.append(line)
            if line.strip().startswith("device:"):
                self.devices.append(line.strip()[len("device:"):].strip())
            if line.strip().startswith("use it:") and not self.address:
                self.address = f"{lan_address() if self.remote else '127.0.0.1'}:{self.port}"
                self._show()

    def _ended(self, code: int, _status) -> None:
        if self.process is None:
            return
        self._read()
        errors = [line for line in self._banner if line.startswith("tandem: error:")]
        self.last_error = (errors[-1].removeprefix("tandem: error:").strip() if errors
                           else f"The worker ended (exit code {code}).")
        self.process.deleteLater()
        self.process = None
        self.address, self.devices = "", []
        self._show()

    def _failed_to_start(self, error) -> None:
        if self.process is not None and error == QProcess.ProcessError.FailedToStart:
            self.last_error = f"The worker could not be started: {self.process.errorString()}"
            self.process.deleteLater()
            self.process = None
            self._show()

    def _show(self) -> None:
        self.changed.emit()
        if self.dialog is None:
            return
        if self.process is None:
            self.dialog.show_stopped(self.last_error)
        elif self.address:
            self.dialog.show_running(self.address, self.devices, self.remote)
        else:
            self.dialog.show_starting()

    def _forget_dialog(self, dialog: LocalWorkerDialog) -> None:
        if self.dialog is dialog:
            self.dialog = None
