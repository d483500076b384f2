"""One Tandem window per user: a second start hands its arguments to the first and ends.

Two windows would each load the models (twice the memory, both fighting for the same
cores) and write the same history. The first start holds a lock file in the user's
runtime folder and listens on a local socket beside it; a later start finds the lock
taken, sends its command-line settings (model files, say) over the socket, and ends
once the first answers. The first brings its window to the front and applies them.
A first start that does not answer (hung, or just starting) gets a warning, and the
second window opens after all: better two windows than none.

In detail: ``app.cli.gui.launch`` claims a ``QLockFile`` in the user's runtime folder
(``paths.runtime_dir()``) and listens on a ``QLocalServer`` beside it. A second start
finds the lock taken, sends its command-line settings as one JSON line, waits for
``ok``, and ends; the first applies them for the session
(``SettingsController.override``, saved only if edited) and raises its window. A lock
whose process died is stale and taken over, however old.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QWidget

ANSWER_MS = 5000        # how long a second start waits for the first to answer
CONNECT_TRIES = 5       # the first may hold the lock a moment before it listens
MAX_MESSAGE_BYTES = 1 << 16
_SOCKET_PATH_MAX = 100  # AF_UNIX paths are limited to ~108 bytes


def server_name(folder: Path) -> str:
    """The socket's name: a path in ``folder`` where it fits, else a name of its hash
    (Qt makes that a pipe on Windows, a socket in the temporary folder elsewhere)."""
    path = folder / "window.sock"
    if sys.platform != "win32" and len(str(path).encode()) < _SOCKET_PATH_MAX:
        return str(path)
    return "tandem-" + hashlib.sha256(str(folder).encode("utf-8", "replace")).hexdigest()[:16]


class SingleInstance(QObject):
    """``claim()`` makes this start the first (or not); the first gets ``message_received(dict)``."""

    message_received = Signal(dict)

    def __init__(self, folder: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = server_name(folder)
        self._lock = QLockFile(str(folder / "window.lock"))
        self._lock.setStaleLockTime(0)  # stale only when its process is gone, however old
        self._server: QLocalServer | None = None

    def claim(self) -> bool:
        """True when this is the first start (it now listens); False when one runs already."""
        if not self._lock.tryLock(0):
            return False
        QLocalServer.removeServer(self.name)  # a socket left by a crash; the lock says it is ours
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        server.newConnection.connect(self._accept)
        if not server.listen(self.name):
            self._lock.unlock()  # no socket: behave as if alone, and let the next start try
            return True
        self._server = server
        return True

    def send(self, message: dict) -> bool:
        """Hand ``message`` to the first start; True once it has answered."""
        data = json.dumps(message).encode("utf-8") + b"\n"
        for _ in range(CONNECT_TRIES):
            socket = QLocalSocket()
            socket.connectToServer(self.name)
            if socket.waitForConnected(ANSWER_MS // CONNECT_TRIES):
                socket.write(data)
                socket.waitForBytesWritten(ANSWER_MS)
                answered = socket.waitForReadyRead(ANSWER_MS) and bytes(socket.readAll().data()).startswith(b"ok")
                socket.disconnectFromServer()
                return answered
            socket.abort()
        return False

    def release(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            server.deleteLater()  # its sockets may still be answering: not deleted under them
        self._lock.unlock()

    def _accept(self) -> None:
        while self._server is not None and self._server.hasPendingConnections():
            socket = self._server.nextPendingConnection()
            socket.readyRead.connect(self._read_sender)

    def _read_sender(self) -> None:
        socket = self.sender()
        if isinstance(socket, QLocalSocket):
            self._read(socket)

    def _read(self, socket: QLocalSocket) -> None:
        buffer = bytes(socket.property("tandemBuffer") or b"") + bytes(socket.readAll().data())
        if b"\n" not in buffer:
            if len(buffer) > MAX_MESSAGE_BYTES:
                socket.abort()
            else:
                socket.setProperty("tandemBuffer", buffer)
            return
        line = buffer.split(b"\n", 1)[0]
        try:
            message = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            message = None
        if not isinstance(message, dict):
            socket.abort()  # not another Tandem: nothing to do
            return
        socket.write(b"ok\n")
        socket.flush()
        socket.disconnectFromServer()  # the server owns it: it goes with the server
        self.message_received.emit(message)


def present(window: QWidget, message: dict) -> None:
    """A second start's message: its settings in force for this session (models load
    if they changed), and the window in front."""
    overrides = message.get("overrides")
    if isinstance(overrides, dict) and overrides:
        window.prefs.override(overrides)
    if window.isMinimized():
        window.showNormal()
    window.show()
    window.raise_()
    window.activateWindow()
