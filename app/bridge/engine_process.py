"""The window's handle on the engine: the one ``app.bridge.client.Engine``. The engine runs
in a process of its own (``app.enginehost``), so the window outlives it; tests and tools
may give it a link to the same host on a thread (``app.enginehost.thread_link``).

The link's reader thread drops the engine's messages in a mailbox and nudges the UI
thread only when the box goes from empty to non-empty; the UI thread empties it at most
every ``DRAIN_INTERVAL_MS`` and merges a reply's token batches, so a fast stream costs
~30 repaints a second.

Beyond the signals every engine has (``app.bridge.client.Engine``):
  died(line)           the engine is gone, in one line; replies in progress end first
                       (the chat marks them interrupted); ``load`` starts a fresh engine
  hung(seconds)        the engine has made no progress (or not answered) for that long;
                       ``end_engine`` ends it; hung(0) when it moves again
  serving(url, error)  the local server's state; served(record): a request it served
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Sequence

from PySide6.QtCore import QCoreApplication, QElapsedTimer, QObject, QTimer, Signal, Slot

from app.engine.types import SamplingConfig, SpecConfig
from app.session import protocol as p
from app.session.chat_types import LoadInfo
from app.session.config import ModelSpec
from app.session.engine_link import Link, StartLink, process_link

DRAIN_INTERVAL_MS = 33      # at most ~30 token batches (and repaints) per second
HEARTBEAT_MS = 1000
SERVE_SECONDS = 20.0        # the local server's start, at most


class EngineProcessClient(QObject):
    load_progress = Signal(str, float)
    loaded = Signal(object)
    load_failed = Signal(str)
    tokens = Signal(int, list, object)
    finished = Signal(int, object)
    failed = Signal(int, str)
    busy_changed = Signal(bool)
    checked = Signal(object)
    died = Signal(str)
    hung = Signal(float)
    serving = Signal(str, str)
    served = Signal(dict)
    _arrived = Signal()

    hang_seconds = 60.0  # no progress for this long while busy or loading: a hung engine

    def __init__(self, parent: QObject | None = None, *, env: dict | None = None,
                 start_link: StartLink | None = None) -> None:
        """``env``: the engine process's environment (None: this one's); ``start_link``:
        another kind of engine (default: a process started with ``env``)."""
        super().__init__(parent)
        self._start_link = start_link or process_link(env)
        self._box: list = []
        self._box_lock = threading.Lock()
        self._arrived.connect(self._schedule_drain)
        self._drain_timer = QTimer(self)
        self._drain_timer.setSingleShot(True)
        self._drain_timer.timeout.connect(self._drain)
        self._since_drain = QElapsedTimer()
        self._since_drain.start()
        self._heartbeat = QTimer(self)
        self._heartbeat.setInterval(HEARTBEAT_MS)
        self._heartbeat.timeout.connect(self._beat)

        self._load_ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self._pings = itertools.count(1)
        self._load_id = 0
        self._spec: ModelSpec | None = None
        self._info: LoadInfo | None = None
        self._loading = False
        self._active: set[int] = set()
        self._checking = False
        self._running = True
        self._served_answer: p.Serving | None = None
        self._served_event = threading.Event()
        self._chat_formats: tuple[str, ...] = ()  # llama.cpp's, as the engine's Ready said them
        self.death: str | None = None       # the last death's line, until a fresh engine starts
        self.died_loading = False            # that death came while models loaded
        self._hung_reported = False
        self._link: Link | None = None
        self._start_engine()
        # (Engine) an engine apart can die, hang and restart: the window keeps a controller for that
        self.separate_process = self._link.separate_process
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)

    # --- state ------------------------------------------------------------------------------

    @property
    def spec(self) -> ModelSpec | None:
        return self._spec

    @property
    def info(self) -> LoadInfo | None:
        return self._info

    @property
    def loading(self) -> bool:
        return self._loading

    @property
    def busy(self) -> bool:
        return bool(self._active)

    @property
    def alive(self) -> bool:
        return self._link is not None and self.death is None

    @property
    def pid(self) -> int:
        return self._link.pid if self._link is not None else 0

    def chat_format_names(self) -> tuple[str, ...]:
        """llama.cpp's built-in chat formats, as the engine process said them when it
        started (``Ready``): the window's side never loads llama.cpp to ask. () until then."""
        return self._chat_formats

    # --- requests ---------------------------------------------------------------------------

    def load(self, spec: ModelSpec) -> None:
        """(Re)load models, in a fresh engine if the last one died. The very load under way
        is not begun again: the app's start asks for it before the window is built."""
        if spec == self._spec and self._loading and self.alive:
            return
        self.stop()
        if not self.alive:
            self._start_engine()
        self._load_id = next(self._load_ids)
        self._spec, self._info, self._loading = spec, None, True
        self._link.send(p.Load(self._load_id, spec))

    def ensure_loaded(self, spec: ModelSpec) -> bool:
        if spec == self._spec and self.alive:
            return False
        self.load(spec)
        return True

    def generate(self, history: Sequence[tuple[str, str]], *, system_prompt: str = "",
                 sampling: SamplingConfig = SamplingConfig(), spec: SpecConfig = SpecConfig(),
                 max_tokens: int = 256, replaced: Sequence[str] = (), chat: int | None = None) -> int:
        request_id = next(self._request_ids)
        was_busy = self.busy
        self._active.add(request_id)
        if not was_busy:
            self.busy_changed.emit(True)
        if not self.alive:
            QTimer.singleShot(0, lambda: self._on_failed(p.Failed(request_id, "The engine is not running: "
                                                                  "restart it (Chat → Restart engine).")))
        else:
            self._link.send(p.Generate(request_id, tuple(history), system_prompt, sampling, spec, max_tokens,
                                       tuple(replaced), chat))
        return request_id

    def check_speculation(self) -> None:
        if not self.alive:
            QTimer.singleShot(0, lambda: self.checked.emit("The engine is not running."))
            return
        self._checking = True
        self._link.send(p.Check())

    def stop(self, request_id: int | None = None) -> None:
        if self._active and self.alive:
            self._link.send(p.Stop(request_id))

    def serve(self, host: str, port: int, *, sampling: SamplingConfig, spec: SpecConfig,
              max_tokens_limit: int) -> p.Serving:
        """Start the local server in the engine; waits for its answer (its address, or why not)."""
        return self._serve_call(p.Serve(host, port, sampling, spec, max_tokens_limit))

    def stop_serving(self) -> None:
        if self.alive:
            self._serve_call(p.StopServing())

    def _serve_call(self, message) -> p.Serving:
        if not self.alive:
            return p.Serving(error="The engine is not running.")
        self._served_event.clear()
        self._link.send(message)
        if not self._served_event.wait(SERVE_SECONDS):
            return p.Serving(error="The engine did not answer.")
        return self._served_answer or p.Serving()

    def restart(self) -> None:
        """A fresh engine (the old one ended first); the caller loads what it wants in it."""
        self._end_link()
        self._info, self._loading = None, False
        self._start_engine()

    def end_engine(self) -> None:
        """End an engine that stopped answering: it dies as any other death does."""
        if self._link is not None:
            self._link.kill()

    def shutdown(self) -> None:
        """End the engine cleanly and leave nothing running; safe to call twice."""
        if not self._running:
            return
        self._running = False
        self._heartbeat.stop()
        self._end_link()

    # --- the engine's messages --------------------------------------------------------------

    def _start_engine(self) -> None:
        self.death, self.died_loading, self._hung_reported = None, False, False
        self._pong_at = time.monotonic()
        self._stuck = 0.0
        link = self._start_link(lambda message: self._post(link, message),
                                lambda line: self._post(link, p.Died(line)))
        self._link = link
        link.start()
        self._heartbeat.start()

    def _end_link(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()
        self._active.clear()

    def _post(self, link: Link, message) -> None:
        """On the link's thread: into the box, and a nudge when the box was empty."""
        if isinstance(message, p.Serving):
            self._served_answer = message
            self._served_event.set()
        with self._box_lock:
            was_empty = not self._box
            self._box.append((link, message))
        if was_empty:
            self._arrived.emit()

    @Slot()
    def _schedule_drain(self) -> None:
        if self._drain_timer.isActive():
            return
        wait = DRAIN_INTERVAL_MS - self._since_drain.elapsed()
        if wait <= 0:
            self._drain()
        else:
            self._drain_timer.start(wait)

    @Slot()
    def _drain(self) -> None:
        self._drain_timer.stop()
        self._since_drain.restart()
        with self._box_lock:
            items, self._box = self._box, []
        current = [message for link, message in items if link is self._link]  # an old engine's are gone
        for message in p.merge_tokens(current):
            self._dispatch(message)

    def _dispatch(self, message) -> None:
        if isinstance(message, p.Tokens):
            if message.request_id in self._active:
                self.tokens.emit(message.request_id, message.events, message.stats)
        elif isinstance(message, p.Finished):
            if self._active_done(message.request_id):
                self.finished.emit(message.request_id, message.stats)
                self._announce_idle()
        elif isinstance(message, p.Failed):
            self._on_failed(message)
        elif isinstance(message, p.LoadProgress):
            if message.load_id == self._load_id:
                self.load_progress.emit(message.stage, message.fraction)
        elif isinstance(message, p.Loaded):
            if message.load_id == self._load_id:
                self._info, self._loading = message.info, False
                self.loaded.emit(message.info)
        elif isinstance(message, p.LoadFailed):
            if message.load_id == self._load_id:
                self._loading = False
                self.load_failed.emit(message.message)
        elif isinstance(message, p.Ready):
            self._chat_formats = message.chat_formats
        elif isinstance(message, p.Pong):
            self._pong_at, self._stuck = time.monotonic(), message.stuck_seconds
        elif isinstance(message, p.Checked):
            self._checking = False
            self.checked.emit(message.result)
        elif isinstance(message, p.Serving):
            self.serving.emit(message.url, message.error)
        elif isinstance(message, p.Served):
            self.served.emit(message.record)
        elif isinstance(message, p.Died):
            self._on_death(message.line)

    def _on_failed(self, message: p.Failed) -> None:
        if self._active_done(message.request_id):
            self.failed.emit(message.request_id, message.message)
            self._announce_idle()

    def _active_done(self, request_id: int) -> bool:
        if request_id not in self._active:
            return False
        self._active.discard(request_id)
        return True

    def _on_death(self, line: str) -> None:
        self._heartbeat.stop()
        self.death, self.died_loading = line, self._loading
        self._info, self._loading = None, False
        self.died.emit(line)  # the chat ends its replies as interrupted, with what they showed
        active, self._active = sorted(self._active), set()
        for request_id in active:  # the requests of others (a Compare run) end as failed
            self.failed.emit(request_id, line)
        if self._checking:
            self._checking = False
            self.checked.emit(line)
        if active:
            self.busy_changed.emit(False)

    def _announce_idle(self) -> None:
        if not self._active:
            self.busy_changed.emit(False)

    @Slot()
    def _beat(self) -> None:
        if not self.alive:
            return
        self._link.send(p.Ping(next(self._pings)))
        silent = time.monotonic() - self._pong_at
        stuck = max(self._stuck, silent - HEARTBEAT_MS / 1000)
        working = self.busy or self._loading
        if (working or silent > self.hang_seconds) and stuck > self.hang_seconds:
            if not self._hung_reported:
                self._hung_reported = True
                self.hung.emit(stuck)
        elif self._hung_reported:
            self._hung_reported = False
            self.hung.emit(0.0)  # it moves again
