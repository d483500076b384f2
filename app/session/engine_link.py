"""A front end's end of the engine process: start it, talk to it, hear it die.

``EngineLink.start`` returns at once: the child (``python -m app --engine ADDRESS``)
imports and connects back while the front end builds itself, and what is sent before
it has connected waits and goes first. Messages from the engine arrive on the link's
reader thread (``on_message``); when the channel closes without ``close()`` having been
asked for, ``on_death`` gets one line saying why (``app.session.engine_death``).

The channel is ``multiprocessing.connection`` on a Unix socket in a private folder (a
named pipe on Windows) with a random key the child reads on stdin. The engine's stderr
(llama.cpp's log) goes to ``engine.log`` in the log folder, where its last words are
read back after a death.

Quit sends ``Shutdown``, waits ``CLOSE_SECONDS`` (10 s), then kills. A front end that
dies leaves nothing running: the engine's reader sees end-of-file and exits at once
(on Linux the child also asks for ``PR_SET_PDEATHSIG``, ``app/enginehost/main.py``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Client, Listener
from pathlib import Path
from typing import Callable, Protocol

from app.session import protocol as p
from app.session.engine_death import death_line, log_tail, oom_kills

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
LOG_NAME = "engine.log"
LOG_LIMIT = 4_000_000      # bytes: past this the log starts over at the next start
CLOSE_SECONDS = 10.0       # a clean shutdown's wait before the engine is killed


class Link(Protocol):
    """A front end's end of one engine: ``EngineLink`` (a process of its own, what the app
    runs) or ``app.enginehost.thread_link.ThreadLink`` (the same host on a thread of this
    process, for tests and tools). Messages arrive on the link's own thread."""

    pid: int                 # the engine's process (this one's, for a thread)
    separate_process: bool   # it can die, hang and be killed without taking the front end

    def start(self) -> None: ...

    def send(self, message) -> None: ...

    def close(self, timeout: float = ...) -> None: ...

    def kill(self) -> None: ...


# (on_message, on_death) -> a link, not yet started
StartLink = Callable[[Callable[[object], None], Callable[[str], None]], Link]


def process_link(env: dict | None = None) -> StartLink:
    """Links to engines in processes of their own, started with ``env`` (None: this one's)."""
    return lambda on_message, on_death: EngineLink(on_message, on_death, env=env)


def engine_command(address) -> list[str]:
    if getattr(sys, "frozen", False):  # the bundle's executable is the interpreter
        return [sys.executable, p.ENGINE_FLAG, str(address)]
    return [sys.executable, "-m", "app", p.ENGINE_FLAG, str(address)]


def engine_log() -> Path:
    from app.storage import paths

    return paths.log_dir() / LOG_NAME


class EngineLink:
    separate_process = True

    def __init__(self, on_message: Callable[[object], None], on_death: Callable[[str], None], *,
                 env: dict | None = None) -> None:
        self._on_message = on_message
        self._on_death = on_death
        self._env = env
        self._lock = threading.Lock()
        self._conn = None
        self._pending: list = []
        self._closing = False
        self._killed_here = False
        self.process: subprocess.Popen | None = None
        self.pid = 0
        self._log_path = engine_log()
        self._log_start = 0
        self._oom_at_start = 0
        self._reader: threading.Thread | None = None
        self.death: str | None = None  # the line, once the engine died

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        key = os.urandom(32)
        self._listener = Listener(authkey=key)
        env = dict(os.environ if self._env is None else self._env)
        env["GGML_NO_BACKTRACE"] = "1"  # an abort says its line and goes; no debugger attached
        if not getattr(sys, "frozen", False):
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        log_file = self._open_log()
        self._oom_at_start = oom_kills()
        try:
            self.process = subprocess.Popen(engine_command(self._listener.address), stdin=subprocess.PIPE,
                                            stdout=subprocess.DEVNULL, stderr=log_file or subprocess.DEVNULL,
                                            env=env)
        finally:
            if log_file is not None:
                log_file.close()
        self.pid = self.process.pid
        try:
            self.process.stdin.write(key.hex().encode("ascii") + b"\n")
            self.process.stdin.close()
        except OSError:
            pass  # it died already: the reader reports it
        self._reader = threading.Thread(target=self._run, name="tandem-engine-link", daemon=True)
        self._reader.start()
        threading.Thread(target=self._unblock_accept_on_exit, name="tandem-engine-watch", daemon=True).start()

    def send(self, message) -> None:
        """Send ``message`` (any thread); before the engine has connected it waits its turn.
        To an engine that is gone it is dropped: its death is reported on its own."""
        with self._lock:
            if self._conn is None:
                if not self._closing:
                    self._pending.append(message)
                return
            try:
                self._conn.send(message)
            except (OSError, ValueError):
                pass

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """End the engine cleanly (models freed), killing it after ``timeout``; no ``on_death``."""
        with self._lock:
            if self._closing:
                return
            connected = self._conn is not None
        self.send(p.Shutdown())
        with self._lock:
            self._closing = True
        if self.process is None:
            return
        try:
            self.process.wait(timeout if connected else 0.5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._drop_conn()
        if self._reader is not None:
            self._reader.join(5)

    def kill(self) -> None:
        """End a hung engine from here; its death is reported as such."""
        if self.alive:
            self._killed_here = True
            self.process.kill()

    # --- the reader thread ----------------------------------------------------------------------

    def _run(self) -> None:
        conn = None
        try:
            conn = self._listener.accept()
        except Exception:  # noqa: BLE001 — the child died before it connected (or a stranger knocked)
            conn = None
        finally:
            self._listener.close()
        if conn is not None:
            with self._lock:
                self._conn = conn
                pending, self._pending = self._pending, []
                try:
                    for message in pending:
                        conn.send(message)
                except (OSError, ValueError):
                    pass
            p.receive(conn, self._on_message)
        self._drop_conn()
        code = self.process.wait()
        with self._lock:
            closing = self._closing
            self._closing = True  # nothing more is sent to this engine
        if closing:
            return
        lines = log_tail(self._log_path, self._log_start)
        self.death = death_line(code, lines, oom=oom_kills() > self._oom_at_start, ended_here=self._killed_here)
        log.warning("%s", self.death)
        self._on_death(self.death)

    def _unblock_accept_on_exit(self) -> None:
        """A child that dies before it connects would leave ``accept`` waiting forever."""
        self.process.wait()
        with self._lock:
            connected = self._conn is not None
        if not connected:
            try:
                Client(self._listener.address, authkey=b"-").close()
            except Exception:  # noqa: BLE001 — refused, as it should be, or already closed
                pass

    def _drop_conn(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass

    def _open_log(self):
        try:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            mode = "ab" if self._log_path.is_file() and self._log_path.stat().st_size < LOG_LIMIT else "wb"
            stream = open(self._log_path, mode)  # noqa: SIM115 — handed to the child, closed here after
            self._log_start = stream.seek(0, os.SEEK_END)
            return stream
        except OSError:
            return None
