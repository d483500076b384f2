"""The engine process as the window shows it: its death, a hang, and Restart engine.

When the engine dies the window stays: one line says what happened (the signal,
llama.cpp's last words, or that memory ran out), the chat keeps every reply (the one
being written ends as *interrupted*: ``ChatController.interrupt``), and **Restart
engine** loads the same models in a fresh engine with the progress bar. An engine that
died while loading is the crash-loop guard's (``ModelLoading.refuse_crashed_load``): no
retry, the settings open. A hung engine (no progress for a minute, by the heartbeat) can
be ended from its notice.
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction

from app.ui.notices import ERROR, WARNING, NoticeArea
from app.window.model_loading import LOAD_NOTICE_KEY, ModelLoading

ENGINE_NOTICE_KEY = "engine"


class EngineController(QObject):
    def __init__(self, client, models: ModelLoading, notices: NoticeArea, *, say, on_death=(),
                 parent: QObject | None = None) -> None:
        """``on_death``: more to do when the engine dies (the local server is gone with it)."""
        super().__init__(parent)
        self.client = client
        self.models = models
        self.notices = notices
        self._say = say
        self._on_death = list(on_death)
        self.restart_action = QAction("Restart &engine", parent)
        self.restart_action.setToolTip("Start the engine again and load the models in it")
        self.restart_action.triggered.connect(self.restart)
        self.actions = (self.restart_action,)
        self._hang_notice = None
        client.died.connect(self._died)
        client.hung.connect(self._hung)

    def restart(self) -> None:
        """A fresh engine, and the models the settings name loaded in it (with the progress bar)."""
        self.notices.clear(ENGINE_NOTICE_KEY)
        self.client.restart()
        self.models.load(force=True)

    def _died(self, line: str) -> None:
        for callback in self._on_death:
            callback()
        self.models.show_engine_gone()
        if self.client.died_loading and self.models.refuse_crashed_load(line):
            self.notices.clear(ENGINE_NOTICE_KEY)
            return  # the guard said it, and opened the settings
        self.notices.clear(LOAD_NOTICE_KEY)
        notice = self.notices.show_notice(
            ENGINE_NOTICE_KEY, f"{line}. The chat is kept; Restart engine loads the models again.", ERROR)
        notice.add_button("Restart engine", self.restart)
        self._say(line, 8000)

    def _hung(self, seconds: float) -> None:
        if not self.client.alive:
            return
        if seconds <= 0:  # it moves again: the offer to end it goes
            if self._hang_notice is not None and self.notices.notice(ENGINE_NOTICE_KEY) is self._hang_notice:
                self.notices.clear(ENGINE_NOTICE_KEY)
            self._hang_notice = None
            return
        notice = self.notices.show_notice(
            ENGINE_NOTICE_KEY, f"The engine has made no progress for {seconds:.0f} s: llama.cpp may be stuck. "
                               "End it to restart it (the chat is kept).", WARNING)
        notice.add_button("End engine", self.client.end_engine)
        self._hang_notice = notice
