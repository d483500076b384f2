"""A piece of the window's work run on a plain thread (an import, making a draft): it is
started, can be asked to stop at its next step, and answers through its subclass's
queued Qt signals, so the GUI thread never waits on it."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject


class ThreadTask(QObject):
    """Subclasses write ``_run`` and check ``self._cancel`` between steps."""

    thread_name = "tandem-task"

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, seconds: float) -> bool:
        """True once the thread has ended (within ``seconds``)."""
        self._thread.join(seconds)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        raise NotImplementedError
