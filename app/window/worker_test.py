"""Settings' Test of a remote worker, off the GUI thread: a worker that does not answer
takes up to ``HELLO_TIMEOUT_S`` to say so, and the dialog stays live meanwhile."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.window.thread_task import ThreadTask
from app.worker_hello import WorkerError, probe


class WorkerTest(ThreadTask):
    """One worker asked: ``done(endpoint, ok, line)``, the line what it reports or why not."""

    done = Signal(str, bool, str)
    thread_name = "tandem-worker-test"

    def __init__(self, endpoint: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.endpoint = endpoint

    def _run(self) -> None:
        try:
            line, ok = probe(self.endpoint).line(), True
        except WorkerError as exc:
            line, ok = str(exc), False
        self.done.emit(self.endpoint, ok, line)


class WorkerTester(QObject):
    """Runs each Test asked for and keeps it until it answers; ``tested`` on the GUI thread."""

    tested = Signal(str, bool, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._running: set[WorkerTest] = set()

    def test(self, endpoint: str) -> None:
        task = WorkerTest(endpoint, self)
        task.done.connect(lambda *answer, task=task: self._answered(task, *answer))
        self._running.add(task)
        task.start()

    def _answered(self, task: WorkerTest, endpoint: str, ok: bool, line: str) -> None:
        self._running.discard(task)
        task.deleteLater()
        self.tested.emit(endpoint, ok, line)
