"""Poll a GpuMonitor about once a second on its own thread.

NVML calls are usually quick but can stall for seconds on a GPU in trouble, so
they never run on the UI thread. A worker object lives on a QThread and owns a
QTimer there; results come back to the UI thread as queued signals.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer, Signal, Slot

from app.gpu.monitor import GpuMonitor, GpuStatus


class _PollWorker(QObject):
    polled = Signal(object)  # GpuStatus

    def __init__(self, monitor: GpuMonitor, interval_ms: int, home: QThread) -> None:
        super().__init__()
        self._monitor = monitor
        self._interval_ms = interval_ms
        self._home = home
        self._timer: QTimer | None = None

    @Slot()
    def begin(self) -> None:
        # Created here, not in __init__, so that the timer belongs to the worker thread.
        self._timer = QTimer(self)
        self._timer.setInterval(self._interval_ms)
        self._timer.timeout.connect(self._poll)
        self._timer.start()
        self._poll()

    @Slot()
    def end(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._monitor.close()
        # Hand ourselves (and the stopped timer) back before the thread ends, so
        # that Python may delete us from the UI thread without Qt complaining.
        self.moveToThread(self._home)
        QThread.currentThread().quit()

    @Slot()
    def _poll(self) -> None:
        self.polled.emit(self._monitor.poll())


class GpuPoller(QObject):
    """Emits ``status_changed(GpuStatus)`` on the owner's thread, once per poll.

    The poller owns the monitor's NVML session: ``start`` initialises NVML on
    the worker thread and ``stop`` shuts it down and joins the thread.
    """

    status_changed = Signal(object)  # GpuStatus
    _stop_requested = Signal()

    def __init__(
        self,
        monitor: GpuMonitor | None = None,
        interval_ms: int = 1000,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._monitor = monitor if monitor is not None else GpuMonitor()
        self._interval_ms = interval_ms
        self._thread: QThread | None = None
        self._worker: _PollWorker | None = None
        app = QCoreApplication.instance()
        if app is not None:
            # A running QThread destroyed at exit aborts the process; this
            # covers an owner that forgets to call stop().
            app.aboutToQuit.connect(self.stop)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        thread = QThread()
        thread.setObjectName("gpu-poller")
        worker = _PollWorker(self._monitor, self._interval_ms, home=self.thread())
        worker.moveToThread(thread)
        thread.started.connect(worker.begin)
        worker.polled.connect(self._relay)
        self._stop_requested.connect(worker.end)
        self._thread, self._worker = thread, worker
        thread.start()

    def stop(self) -> None:
        """Stop polling and wait for the thread; safe to call twice."""
        thread, worker = self._thread, self._worker
        if thread is None or worker is None:
            return
        self._thread = self._worker = None  # _relay drops anything still queued
        self._stop_requested.emit()  # queued: runs worker.end on its own thread
        thread.wait()
        self._stop_requested.disconnect(worker.end)
        worker.polled.disconnect(self._relay)

    @Slot(object)
    def _relay(self, status: GpuStatus) -> None:
        if self._thread is not None:
            self.status_changed.emit(status)
