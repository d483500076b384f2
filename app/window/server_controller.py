"""Local server from the window: ``tandem serve``'s API beside the engine
(``app/enginehost/serving.py``), its requests run with the models the window loaded
(never a second load), in turn with the chat's replies; started and stopped by message,
each request served told back (``served``).

Off at every start (serving is a choice made each time); the port a start from the
dialog used is remembered (``Settings.server_port``). The dialog (``ServerDialog``)
shows the address with a copy button and each request served while the window is open
(speed, acceptance, prompt reuse, its tokens' kinds in the chat's colours).
"""

from __future__ import annotations

from collections import deque

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

from app.errors import TandemError
from app.server.worker import RECENT_REQUESTS
from app.ui.server_dialog import ServerDialog

HOST = "127.0.0.1"  # the window serves this computer only: no API key to manage


class ServerController(QObject):
    served = Signal(dict)  # a request record, on the UI thread

    def __init__(self, client, settings, *, dialog_parent: QWidget, save=None) -> None:
        """``settings()``: the Settings in force (their sampling and speculation are the defaults);
        ``save(changes)`` keeps the port of a start from the dialog for the next session."""
        super().__init__(dialog_parent)
        self._client = client
        self._settings = settings
        self._save = save
        self._dialog_parent = dialog_parent
        self._recent: deque[dict] = deque(maxlen=RECENT_REQUESTS)  # what it served, as it said
        client.served.connect(self._remember)
        self.url = ""
        self.port = settings().server_port
        self.dialog: ServerDialog | None = None
        self.action = QAction("&Local server…", dialog_parent)
        self.action.setToolTip("Serve the loaded models through an OpenAI-compatible API on this computer")
        self.action.triggered.connect(self.open_dialog)
        self.actions = (self.action,)

    def start(self, port: int) -> str:
        from app.session.config import sampling_config, spec_config

        settings = self._settings()
        if self._client.info is None:
            raise TandemError("Load a model first: the server uses the window's models.")
        answer = self._client.serve(HOST, port, sampling=sampling_config(settings), spec=spec_config(settings),
                                    max_tokens_limit=settings.n_ctx)
        if answer.error:
            raise TandemError(answer.error)
        self.url, self.port = answer.url, port
        return self.url

    def stop(self) -> None:
        if self.url:
            self.url = ""
            self._client.stop_serving()

    def engine_died(self) -> None:
        """The server went with the engine: off, as at a start."""
        self.url = ""
        if self.dialog is not None:
            self._show(self.dialog, "The local server stopped with the engine.")

    def _remember(self, record: dict) -> None:
        self._recent.append(record)
        self.served.emit(record)

    def open_dialog(self) -> ServerDialog:
        dialog = ServerDialog(self._dialog_parent)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.port.setValue(self.port)
        for record in self._recent:
            dialog.add_request(record)
        dialog.switched.connect(self._switch)
        self.served.connect(dialog.add_request)
        dialog.finished.connect(lambda _result: self._forget(dialog))
        self.dialog = dialog
        self._show(dialog)
        dialog.open()
        return dialog

    def _switch(self, on: bool, port: int) -> None:
        message = ""
        try:
            if on:
                self.start(port)
                if self._save is not None:
                    self._save({"server_port": port})
            else:
                self.stop()
        except TandemError as exc:
            message = str(exc)
        if self.dialog is not None:
            self._show(self.dialog, message)

    def _show(self, dialog: ServerDialog, message: str = "") -> None:
        if not message and self.url:
            message = (f"Point an OpenAI-compatible tool at {self.url} (any API key). Requests wait their turn "
                       "with the chat's replies.")
        dialog.show_state(self.url, message)

    def _forget(self, dialog: ServerDialog) -> None:
        try:
            self.served.disconnect(dialog.add_request)
        except (RuntimeError, TypeError):
            pass
        if self.dialog is dialog:
            self.dialog = None
