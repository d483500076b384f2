"""The engine process's loop: one thread owns the models, another listens, a third speaks.

- The main thread is the engine thread: it loads, builds prompts and writes replies, one
  task at a time, in the order the front end asked (llama.cpp contexts stay on the thread
  that made them). The local server's requests join the same queue.
- The reader thread takes the front end's messages as they come: a ``Stop`` sets the
  reply's cancel event at once (the engine checks it before every round), a newer
  ``Load`` makes an older one give up at its next progress report, a ``Ping`` is
  answered at once with how long the engine has been at one step.
- The ``Outbox`` thread sends: the engine thread never waits on the channel, and tokens
  that pile up while a send is under way leave as one ``Tokens`` batch.

The channel closing means the front end is gone (quit, crashed, killed): the process
ends at once, so nothing is left running.
"""

from __future__ import annotations

import copy
import logging
import os
import queue
import sys
import threading
import time
from typing import Callable

from app.engine.prompting.chat import RenderStopped
from app.engine.types import Stats, StopReason
from app.errors import TandemError, one_line
from app.session import protocol as p
from app.session.chat_states import ChatStates
from app.session.loading import LoadCancelled, chat_format_names, load_session
from app.storage import load_marker, paths

log = logging.getLogger(__name__)

STATS_INTERVAL_S = 0.1      # how often a live copy of the stats rides along
PROGRESS_STEP = 0.01        # llama.cpp reports per tensor; the window needs percent steps
NO_MODEL = "No model is loaded; check the model settings."

# (stage, fraction in [0, 1] or -1) -> False to cancel
Progress = Callable[[str, float], bool | None]


def load_models(spec, progress: Progress):
    """The session layer's load, its (stage, done, total) reports as fractions."""
    return load_session(spec, lambda stage, done, total: progress(stage, done / total if total else -1.0))


def _chat_formats() -> tuple[str, ...]:
    """llama.cpp's built-in chat formats for ``Ready`` (the window offers them); none
    rather than no engine when llama.cpp cannot say (a load then says what is wrong)."""
    try:
        return chat_format_names()
    except Exception:  # noqa: BLE001 — the engine must start to report its failures
        log.exception("llama.cpp's chat formats could not be listed")
        return ()


class Outbox:
    """Messages to the front end, sent in order by a thread of their own."""

    def __init__(self, conn) -> None:
        self._conn = conn
        self._cond = threading.Condition()
        self._items: list = []
        self._sending = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="tandem-engine-send", daemon=True)
        self._thread.start()

    def put(self, message) -> None:
        with self._cond:
            last = self._items[-1] if self._items else None
            if isinstance(message, p.Tokens) and isinstance(last, p.Tokens) and last.request_id == message.request_id:
                last.events.extend(message.events)
                if message.stats is not None:
                    self._items[-1] = p.Tokens(last.request_id, last.events, message.stats)
            else:
                self._items.append(message)
            self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until what was put so far has been sent."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or (not self._items and not self._sending), timeout)

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._items or self._closed)
                if not self._items:
                    return
                items, self._items = self._items, []
                self._sending = True
            try:
                for item in items:
                    self._send(item)
            except (OSError, EOFError, ValueError):
                with self._cond:  # the front end is gone; the reader ends the process
                    self._closed, self._sending, self._items = True, False, []
                    self._cond.notify_all()
                return
            with self._cond:
                self._sending = False
                self._cond.notify_all()

    def _send(self, item) -> None:
        try:
            self._conn.send(item)
        except (OSError, EOFError, ValueError):
            raise
        except Exception as exc:  # noqa: BLE001 — it did not pickle: nothing was written
            log.exception("A %s could not be sent", type(item).__name__)
            if isinstance(item, (p.Tokens, p.Finished, p.Failed)):  # its reply ends, in one line, not never
                self._conn.send(p.Failed(item.request_id, f"The engine could not send its reply: {one_line(exc)}"))


class TestHooks:
    """Test-only faults, read from the environment, honoured only with ``TANDEM_TEST_HOOKS=1``."""

    def __init__(self, environ=os.environ) -> None:
        on = environ.get(p.TEST_HOOKS) == "1"
        self.abort_after = _count(environ.get(p.TEST_ABORT_AFTER)) if on else 0
        self.hang_after = _count(environ.get(p.TEST_HANG_AFTER)) if on else 0
        self.hang_loading = on and environ.get(p.TEST_HANG_LOADING) == "1"
        self.loader = environ.get(p.TEST_LOADER, "") if on else ""
        self.once = environ.get(p.TEST_ONCE, "") if on else ""

    def fires(self) -> bool:
        """Whether a fault fires now: always, or with ``TEST_ONCE`` only the first time."""
        if not self.once:
            return True
        try:
            with open(self.once, "x"):
                return True
        except OSError:
            return False

    def load_function(self) -> Callable | None:
        """The loader a test or a bench names (``file.py:function``), e.g. a synthetic stream."""
        if not self.loader:
            return None
        import importlib.util

        path, _, name = self.loader.rpartition(":")
        spec = importlib.util.spec_from_file_location("tandem_test_loader", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return getattr(module, name)


def _count(value: str | None) -> int:
    try:
        return max(0, int(value or "0"))
    except ValueError:
        return 0


class EngineHost:
    def __init__(self, conn, loader: Callable = load_models, hooks: TestHooks | None = None, *,
                 front_end_gone: Callable[[], None] | None = None) -> None:
        """``front_end_gone``: what happens when the channel closes (default: the process
        ends at once, ``parent_gone``; an engine on a thread ends its loop instead)."""
        self.conn = conn
        self._front_end_gone = front_end_gone or parent_gone
        self.out = Outbox(conn)
        self._hooks = hooks or TestHooks()
        self._loader = self._hooks.load_function() or loader
        self._tasks: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._cancels: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self.session = None
        # Each chat's cache, kept on disk while another uses the engine (app/session/chat_states.py).
        self.chat_states = ChatStates(paths.chat_states_dir())
        self.wanted_load = 0       # written by the reader: the newest load asked for
        self._step_at: float | None = None  # when the engine thread last made progress (None: idle)
        from app.enginehost.serving import EngineServer

        self.server = EngineServer(self)

    # --- the engine thread --------------------------------------------------------------------

    def end(self) -> None:
        """End the engine thread's loop after what is queued (any thread)."""
        self._tasks.put(None)

    def run(self) -> int:
        self.out.put(p.Ready(os.getpid(), _chat_formats()))
        threading.Thread(target=self._read, name="tandem-engine-read", daemon=True).start()
        try:
            while (task := self._tasks.get()) is not None:
                self._step_at = time.monotonic()
                try:
                    task()
                except Exception:  # noqa: BLE001 — one task's fault must not end the engine
                    log.exception("An engine task failed")
                finally:
                    self._step_at = None
        finally:
            self.server.stop()
            self._close_models()
            self.out.close()
        return 0

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on the engine thread after what is queued (any thread)."""
        self._tasks.put(task)

    def progressed(self) -> None:
        self._step_at = time.monotonic()

    def _load(self, message: p.Load) -> None:
        load_id, spec = message.load_id, message.spec
        if load_id != self.wanted_load:
            return  # superseded before it started
        self._close_models()
        last = [-1.0, ""]

        def report(stage: str, fraction: float) -> bool:
            self.progressed()
            if self._hooks.hang_loading and self._hooks.fires():
                threading.Event().wait()  # a test's hung load: only a kill ends it
            if load_id != self.wanted_load:
                return False
            if stage != last[1] or fraction < 0 or fraction - last[0] >= PROGRESS_STEP or fraction >= 1.0:
                last[:] = [fraction, stage]
                self.out.put(p.LoadProgress(load_id, stage, fraction))
            return True

        # The crash-loop guard's mark (app/storage/load_marker.py), under this process's id:
        # an engine that dies loading leaves it, and the window does not load these again.
        load_marker.begin(spec.target_path, spec.draft_path)
        try:
            session = self._loader(spec, report)
        except LoadCancelled:
            return
        except Exception as exc:  # noqa: BLE001 — any failure becomes one line for the user
            if load_id == self.wanted_load:
                if not isinstance(exc, TandemError):
                    log.exception("Loading models failed")
                self.out.put(p.LoadFailed(load_id, one_line(exc)))
            return
        finally:
            load_marker.finish()
        if load_id != self.wanted_load:
            session.close()
            return
        self.session = session
        self.out.put(p.Loaded(load_id, session.info))

    def _generate(self, message: p.Generate) -> None:
        rid = message.request_id
        with self._lock:
            cancel = self._cancels.setdefault(rid, threading.Event())
        try:
            self._reply(message, cancel)
        finally:
            with self._lock:
                self._cancels.pop(rid, None)

    def _reply(self, message: p.Generate, cancel: threading.Event) -> None:
        rid, session = message.request_id, self.session
        if session is None:
            self.out.put(p.Failed(rid, NO_MODEL))
            return
        try:
            prompt = session.prompt(message.history, message.system_prompt, message.max_tokens, cancel)
        except RenderStopped:
            self.out.put(p.Finished(rid, Stats(stop_reason=StopReason.CANCELLED)))
            return
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, TandemError):
                log.exception("Building the prompt failed")
            self.out.put(p.Failed(rid, one_line(exc)))
            return
        abort_after, hang_after = self._hooks.abort_after, self._hooks.hang_after
        self.chat_states.before(session.target, message.chat, prompt.tokens)
        try:
            generation = session.generate(prompt, message.sampling, message.spec, message.max_tokens, cancel,
                                          replaced=message.replaced)
            snapshot_at, count = 0.0, 0
            for event in generation:
                now = time.perf_counter()
                self._step_at = time.monotonic()
                snapshot = None
                if now - snapshot_at >= STATS_INTERVAL_S:
                    snapshot, snapshot_at = copy.deepcopy(generation.stats), now
                self.out.put(p.Tokens(rid, [event], snapshot))
                count += 1
                if abort_after and count == abort_after and self._hooks.fires():
                    self._test_abort(count)
                if hang_after and count == hang_after and self._hooks.fires():
                    self.out.flush()
                    threading.Event().wait()  # a test's hung decode: only a kill ends it
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, TandemError):
                log.exception("Generation failed")
            self.out.put(p.Failed(rid, one_line(exc)))
            return
        self.out.put(p.Finished(rid, copy.deepcopy(generation.stats)))

    def _test_abort(self, count: int) -> None:
        self.out.flush()  # what the window has shown is what the test checks stays
        sys.stderr.write(f"tandem test hook: abort after {count} tokens\n")
        sys.stderr.flush()
        os.abort()

    def _check(self) -> None:
        if self.session is None:
            self.out.put(p.Checked(NO_MODEL))
            return
        self.lend_cache()  # the check decodes its own prompts
        try:
            self.out.put(p.Checked(self.session.self_test()))
        except Exception as exc:  # noqa: BLE001
            self.out.put(p.Checked(one_line(exc)))

    def lend_cache(self) -> None:
        """Before something that is not a chat's reply uses the cache (a served request):
        the chat it holds goes to disk first."""
        if self.session is not None:
            self.chat_states.before(self.session.target, None, ())

    def _close_models(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            self.chat_states.save_held(session.target)
            self.chat_states.release()
            session.close()

    # --- the reader thread --------------------------------------------------------------------

    def _read(self) -> None:
        p.receive(self.conn, self._handle)
        self._front_end_gone()

    def _handle(self, message) -> None:
        if isinstance(message, p.Ping):
            step = self._step_at
            self.out.put(p.Pong(message.seq, time.monotonic() - step if step is not None else 0.0))
        elif isinstance(message, p.Stop):
            with self._lock:
                cancels = [event for rid, event in self._cancels.items()
                           if message.request_id is None or rid == message.request_id]
            for event in cancels:
                event.set()
        elif isinstance(message, p.Generate):
            with self._lock:
                self._cancels.setdefault(message.request_id, threading.Event())
            self.submit(lambda: self._generate(message))
        elif isinstance(message, p.Load):
            self.wanted_load = message.load_id
            self.submit(lambda: self._load(message))
        elif isinstance(message, p.Check):
            self.submit(self._check)
        elif isinstance(message, p.Serve):
            threading.Thread(target=self.server.start, args=(message,), daemon=True).start()
        elif isinstance(message, p.StopServing):
            threading.Thread(target=self.server.stop, kwargs={"report": True}, daemon=True).start()
        elif isinstance(message, p.Shutdown):
            self.wanted_load = -1  # abandons a load in progress
            self._handle(p.Stop())
            self.server.cancel_all()
            self.end()


def parent_gone() -> None:
    """The front end is gone: end now (a load's mark removed, so no crash is assumed)."""
    load_marker.finish()
    os._exit(0)
