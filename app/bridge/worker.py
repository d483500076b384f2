"""One worker thread owns the models; the UI talks to it through ``EngineClient``.

llama.cpp contexts must stay on the thread that created them, so ``EngineWorker``
lives on its own QThread and does every load and every generation there. The UI
thread only sends requests (queued signals) and sets a ``threading.Event`` to stop.

Tokens come back through a ``TokenMailbox`` rather than one signal per token: the
worker drops events in and signals only when the box goes from empty to
non-empty; the client empties it at most every ``DRAIN_INTERVAL_MS``. A GPU
producing thousands of tokens a second thus costs the UI ~30 repaints a second,
while a slow CPU stream still shows each token as soon as it exists.
"""

from __future__ import annotations

import copy
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

from PySide6.QtCore import QCoreApplication, QElapsedTimer, QObject, QThread, QTimer, Signal, Slot

from app.bridge.models import LoadCancelled, LoadedModels, LoadInfo, Loader, ModelSpec, load_llama_models
from app.engine.prompting.chat import RenderStopped, stop_renders_on
from app.engine.types import SamplingConfig, SpecConfig, Stats, StopReason, TokenEvent
from app.errors import TandemError, one_line  # noqa: F401 — one_line: the engine client tests' too
from app.session.loading import chat_format_names
from app.storage import load_marker

log = logging.getLogger(__name__)

DRAIN_INTERVAL_MS = 33      # at most ~30 token batches (and repaints) per second
STATS_INTERVAL_S = 0.1      # how often a live copy of the stats rides along
PROGRESS_STEP = 0.01        # llama.cpp reports per tensor; the UI needs percent steps


@dataclass(frozen=True)
class GenerationRequest:
    """One reply to produce. ``cancel`` is this request's own stop flag."""

    id: int
    history: tuple[tuple[str, str], ...]  # (role, text), ending with the user's turn
    system_prompt: str = ""
    sampling: SamplingConfig = SamplingConfig()
    spec: SpecConfig = SpecConfig()
    max_tokens: int = 256
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)
    replaced: tuple[str, ...] = ()  # the replies this one replaces (Regenerate), to copy from


@dataclass
class TokenBatch:
    request_id: int
    events: list[TokenEvent]
    stats: Stats | None  # a live snapshot, when one was taken since the last batch


class TokenMailbox:
    """Thread-safe hand-over of token events from the worker to the UI thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: list[TokenBatch] = []

    def put(self, request_id: int, event: TokenEvent, stats: Stats | None = None) -> bool:
        """Add one event; True when the box was empty (so the reader needs a nudge)."""
        with self._lock:
            was_empty = not self._batches
            if was_empty or self._batches[-1].request_id != request_id:
                self._batches.append(TokenBatch(request_id, [], None))
            batch = self._batches[-1]
            batch.events.append(event)
            if stats is not None:
                batch.stats = stats
            return was_empty

    def take(self) -> list[TokenBatch]:
        with self._lock:
            batches, self._batches = self._batches, []
            return batches


def stats_snapshot(stats: Stats) -> Stats:
    return copy.deepcopy(stats)


class EngineWorker(QObject):
    """Lives on the engine thread. Only ``EngineClient`` should talk to it."""

    progress = Signal(str, float)          # stage, fraction (-1: unknown)
    loaded = Signal(object)                # LoadInfo
    load_failed = Signal(str)
    tokens_ready = Signal()
    finished = Signal(int, object)         # request id, Stats
    failed = Signal(int, str)              # request id, one-line message
    checked = Signal(object)               # SelfTestReport, or a one-line message

    def __init__(self, loader: Loader, mailbox: TokenMailbox, home: QThread) -> None:
        super().__init__()
        self._loader = loader
        self._mailbox = mailbox
        self._home = home
        self._models: LoadedModels | None = None
        # Written by the UI thread: the newest load wanted. An older load still
        # running sees the difference and gives up (llama.cpp's progress callback).
        self.wanted_load = 0

    @Slot(int, object)
    def load(self, load_id: int, spec: ModelSpec) -> None:
        if load_id != self.wanted_load:
            return  # superseded before it started
        self._close_models()
        last = [-1.0, ""]

        def report(stage: str, fraction: float) -> bool:
            if load_id != self.wanted_load:
                return False
            if stage != last[1] or fraction < 0 or fraction - last[0] >= PROGRESS_STEP or fraction >= 1.0:
                last[:] = [fraction, stage]
                self.progress.emit(stage, fraction)
            return True

        # A mark on disk while llama.cpp loads: a start that dies here is not repeated
        # blindly by the next one (app/storage/load_marker.py).
        load_marker.begin(spec.target_path, spec.draft_path)
        try:
            self._models = self._loader(spec, report)
        except LoadCancelled:
            return
        except Exception as exc:  # noqa: BLE001 — any failure becomes one line for the user
            if load_id != self.wanted_load:
                return  # cancelled on purpose; the newer load reports for itself
            if not isinstance(exc, TandemError):
                log.exception("Loading models failed")
            self.load_failed.emit(one_line(exc))
            return
        finally:
            load_marker.finish()  # the process survived the load, however it ended
        if load_id != self.wanted_load:
            self._close_models()
            return
        self.loaded.emit(self._models.info)

    @Slot(object)
    def generate(self, request: GenerationRequest) -> None:
        if self._models is None:
            self.failed.emit(request.id, "No model is loaded; check the model settings.")
            return
        try:
            # The model's chat template runs here, bounded; Stop (and quit) end it too.
            with stop_renders_on(request.cancel):
                prompt = self._models.prompt(request.history, request.system_prompt, request.max_tokens)
        except RenderStopped:
            self.finished.emit(request.id, Stats(stop_reason=StopReason.CANCELLED))
            return
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, TandemError):
                log.exception("Building the prompt failed")
            self.failed.emit(request.id, one_line(exc))
            return
        try:
            generation = self._models.engine.generate(
                prompt.tokens, request.sampling, request.spec, request.max_tokens, request.cancel,
                **self._copy_sources(request))
            generation.stats.left_out = prompt.left_out
            generation.stats.prompt_notice = getattr(prompt, "notice", "")
            snapshot_at = 0.0
            for event in generation:
                now = time.perf_counter()
                snapshot = None
                if now - snapshot_at >= STATS_INTERVAL_S:
                    snapshot, snapshot_at = stats_snapshot(generation.stats), now
                if self._mailbox.put(request.id, event, snapshot):
                    self.tokens_ready.emit()
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, TandemError):
                log.exception("Generation failed")
            self.failed.emit(request.id, one_line(exc))
            return
        self.finished.emit(request.id, stats_snapshot(generation.stats))

    def _copy_sources(self, request: GenerationRequest) -> dict:
        """The session's copy sources (``ChatSession.remember``), with the replies this one
        replaces added; nothing for a session that keeps none."""
        sources = getattr(self._models, "copy_sources", None)
        if sources is None:
            return {}
        if request.replaced:
            self._models.remember(request.replaced)
        return {"copy_sources": sources}

    @Slot(object)
    def run_task(self, task) -> None:
        """``task(models)`` here, where the models live, in turn with the replies (the
        window's local server); ``models`` is None while none is loaded."""
        try:
            task(self._models)
        except Exception:  # noqa: BLE001 — a task's fault must not end the engine thread
            log.exception("An engine task failed")

    @Slot()
    def check(self) -> None:
        """Help → Check speculation: the self-test, here where the models live."""
        if self._models is None or not hasattr(self._models, "self_test"):
            self.checked.emit("No model is loaded; check the model settings.")
            return
        try:
            self.checked.emit(self._models.self_test())
        except Exception as exc:  # noqa: BLE001
            self.checked.emit(one_line(exc))

    @Slot()
    def close(self) -> None:
        self._close_models()
        # Back to the owner's thread before this one ends, so Python may delete us there.
        self.moveToThread(self._home)
        QThread.currentThread().quit()

    def _close_models(self) -> None:
        if self._models is not None:
            models, self._models = self._models, None
            models.close()


class EngineClient(QObject):
    """The UI thread's handle on the engine thread: an ``app.bridge.client.Engine`` (its
    signals are listed there), for tests and tools; the app runs the engine process."""

    separate_process = False  # (app.bridge.client.Engine) the engine shares this process
    load_progress = Signal(str, float)
    loaded = Signal(object)
    load_failed = Signal(str)
    tokens = Signal(int, list, object)
    finished = Signal(int, object)
    failed = Signal(int, str)
    busy_changed = Signal(bool)
    checked = Signal(object)               # SelfTestReport, or a one-line message

    _load_requested = Signal(int, object)
    _generate_requested = Signal(object)
    _check_requested = Signal()
    _close_requested = Signal()
    _task_requested = Signal(object)

    def __init__(self, loader: Loader = load_llama_models, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._mailbox = TokenMailbox()
        self._thread = QThread()
        self._thread.setObjectName("tandem-engine")
        self._worker = EngineWorker(loader, self._mailbox, home=self.thread())
        self._worker.moveToThread(self._thread)
        self._load_requested.connect(self._worker.load)
        self._generate_requested.connect(self._worker.generate)
        self._close_requested.connect(self._worker.close)
        self._check_requested.connect(self._worker.check)
        self._task_requested.connect(self._worker.run_task)
        self._worker.checked.connect(self.checked)
        self._worker.progress.connect(self.load_progress)
        self._worker.loaded.connect(self._on_loaded)
        self._worker.load_failed.connect(self._on_load_failed)
        self._worker.tokens_ready.connect(self._schedule_drain)
        self._worker.finished.connect(self._on_finished)
        self._worker.failed.connect(self._on_failed)

        self._drain_timer = QTimer(self)
        self._drain_timer.setSingleShot(True)
        self._drain_timer.timeout.connect(self._drain)
        self._since_drain = QElapsedTimer()
        self._since_drain.start()

        self._load_ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self._spec: ModelSpec | None = None   # the models loaded or being loaded
        self._info: LoadInfo | None = None
        self._loading = False
        self._active: dict[int, GenerationRequest] = {}
        self._running = True
        self._thread.start()
        app = QCoreApplication.instance()
        if app is not None:
            # A QThread still running when Python tears the app down aborts the process.
            app.aboutToQuit.connect(self.shutdown)

    # --- state ------------------------------------------------------------------------------

    @property
    def spec(self) -> ModelSpec | None:
        return self._spec

    @property
    def info(self) -> LoadInfo | None:
        """What is loaded now (None while loading or after a failed load)."""
        return self._info

    @property
    def loading(self) -> bool:
        return self._loading

    @property
    def busy(self) -> bool:
        return bool(self._active)

    # --- requests ---------------------------------------------------------------------------

    def load(self, spec: ModelSpec) -> None:
        """(Re)load models; a reply in progress is stopped first, an older load abandoned."""
        self.stop()
        load_id = next(self._load_ids)
        self._worker.wanted_load = load_id
        self._spec, self._info, self._loading = spec, None, True
        self._load_requested.emit(load_id, spec)

    def ensure_loaded(self, spec: ModelSpec) -> bool:
        """Load ``spec`` unless it is what is loaded (or loading) already; True if it reloads."""
        if spec == self._spec:
            return False
        self.load(spec)
        return True

    def generate(self, history: Sequence[tuple[str, str]], *, system_prompt: str = "",
                 sampling: SamplingConfig = SamplingConfig(), spec: SpecConfig = SpecConfig(),
                 max_tokens: int = 256, replaced: Sequence[str] = (), chat: int | None = None) -> int:
        """Queue a reply to ``history``; returns the id its signals will carry. ``replaced``:
        the replies it replaces (Regenerate's old reply), for copying repeats to copy from.

        Sent while models load, it waits for them (the worker handles requests in order).
        """
        request = GenerationRequest(id=next(self._request_ids), history=tuple(history),
                                    system_prompt=system_prompt, sampling=sampling, spec=spec,
                                    max_tokens=max_tokens, replaced=tuple(replaced))
        was_busy = self.busy
        self._active[request.id] = request
        self._generate_requested.emit(request)
        if not was_busy:
            self.busy_changed.emit(True)
        return request.id

    def run_on_engine(self, task) -> None:
        """Run ``task(models)`` on the engine thread after what is queued there; callable
        from any thread (the local server's). ``models`` is None while none is loaded."""
        self._task_requested.emit(task)

    def chat_format_names(self) -> tuple[str, ...]:
        """llama.cpp's built-in chat formats (loaded in this process, as the engine is)."""
        return chat_format_names()

    def check_speculation(self) -> None:
        """Run the self-test on the worker thread; the answer comes as ``checked``."""
        self._check_requested.emit()

    def stop(self, request_id: int | None = None) -> None:
        """Ask a reply (default: every reply) to stop; the engine stops within one round."""
        for rid, request in self._active.items():
            if request_id is None or rid == request_id:
                request.cancel.set()

    def shutdown(self) -> None:
        """Stop everything, free the models and join the thread; safe to call twice."""
        if not self._running:
            return
        self._running = False
        self.stop()
        self._worker.wanted_load = -1  # abandons a load in progress
        self._close_requested.emit()
        self._thread.wait()

    # --- from the worker --------------------------------------------------------------------

    @Slot(object)
    def _on_loaded(self, info: LoadInfo) -> None:
        self._info, self._loading = info, False
        self.loaded.emit(info)

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self._loading = False
        self.load_failed.emit(message)

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
        for batch in self._mailbox.take():
            if batch.request_id in self._active:
                self.tokens.emit(batch.request_id, batch.events, batch.stats)

    @Slot(int, object)
    def _on_finished(self, request_id: int, stats: Stats) -> None:
        self._drain()  # the reply's last tokens go out before its end
        self._active.pop(request_id, None)
        self.finished.emit(request_id, stats)
        self._announce_idle()

    @Slot(int, str)
    def _on_failed(self, request_id: int, message: str) -> None:
        self._drain()
        self._active.pop(request_id, None)
        self.failed.emit(request_id, message)
        self._announce_idle()

    def _announce_idle(self) -> None:
        if not self._active:
            self.busy_changed.emit(False)
