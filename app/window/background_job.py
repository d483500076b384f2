"""One call of the window's on a plain thread (a library scan, a Hub search, a download):
it can be asked to stop (``cancel``, looked at by the work between its steps), reports
progress through ``progressed`` and its result, or a one-line error, through ``done``,
both queued to the GUI thread."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from PySide6.QtCore import QObject, Signal

log = logging.getLogger(__name__)


class BackgroundJob(QObject):
    progressed = Signal(object, object, object)  # what the work reports: (done, total, name) or (what, done, total)
    done = Signal(object)                        # the result, or the error as one line (a str)

    def __init__(self, work: Callable[["BackgroundJob"], object], parent: QObject | None = None, *,
                 name: str, failure: Callable[[Exception], str]) -> None:
        """``failure``: the line for an exception ``work`` raised (the whole of it goes to the log)."""
        super().__init__(parent)
        self.cancel = threading.Event()
        self._work = work
        self._failure = failure
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait(self, seconds: float) -> bool:
        """True once the thread has ended (within ``seconds``)."""
        self._thread.join(seconds)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            result = self._work(self)
        except Exception as exc:  # noqa: BLE001 - one line for the window, the rest in the log
            log.exception("%s failed", self._thread.name)
            result = self._failure(exc)
        self.done.emit(result)
