"""The engine host on a thread of this process, behind the link a front end uses for an
engine process (``app.session.engine_link.Link``): the same host, the same messages, the
same client, without a child process. Tests and tools use it where a scripted loader
stands in for llama.cpp (a process would have to import that loader by path) or where
a child's start-up would dominate what they measure.

The channel is a pair of queues. Every message is pickled on its way, as the process's
channel does, so a message that could not cross a process boundary fails here too, and
neither side shares an object with the other.
"""

from __future__ import annotations

import os
import pickle
import queue
import threading
from typing import Callable

from app.enginehost.host import EngineHost, load_models
from app.session import protocol as p

CLOSE_SECONDS = 10.0  # a clean shutdown's wait for the engine thread
ENDED = "The engine thread ended."


class _Closed:
    """The end-of-channel mark: the reader's ``recv`` raises ``EOFError`` from then on."""


class QueueChannel:
    """One end of an in-process channel with ``multiprocessing.connection``'s ``send``
    and ``recv``."""

    def __init__(self, inbox: queue.Queue, outbox: queue.Queue) -> None:
        self._inbox, self._outbox = inbox, outbox
        self._closed = False

    def send(self, message) -> None:
        if self._closed:
            raise OSError("the channel is closed")
        self._outbox.put(pickle.loads(pickle.dumps(message)))

    def recv(self):
        item = self._inbox.get()
        if isinstance(item, _Closed):
            self._inbox.put(item)  # every later recv ends too
            raise EOFError
        return item

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put(_Closed())


def channel_pair() -> tuple[QueueChannel, QueueChannel]:
    one, other = queue.Queue(), queue.Queue()
    return QueueChannel(one, other), QueueChannel(other, one)


class ThreadLink:
    separate_process = False  # (Link) it shares this process: nothing to kill or restart apart

    def __init__(self, on_message: Callable[[object], None], on_death: Callable[[str], None], *,
                 loader: Callable = load_models) -> None:
        self._on_message, self._on_death = on_message, on_death
        self._loader = loader
        self._lock = threading.Lock()
        self._closing = False
        self._channel: QueueChannel | None = None
        self._engine: threading.Thread | None = None
        self._reader: threading.Thread | None = None
        self.pid = os.getpid()

    def start(self) -> None:
        here, there = channel_pair()
        self._channel = here
        host = EngineHost(there, loader=self._loader, front_end_gone=lambda: None)
        self._engine = threading.Thread(target=self._run_engine, args=(host, there), name="tandem-engine",
                                        daemon=True)
        self._reader = threading.Thread(target=self._read, name="tandem-engine-link", daemon=True)
        self._engine.start()
        self._reader.start()

    def send(self, message) -> None:
        try:
            self._channel.send(message)
        except OSError:
            pass  # closed: as with a process that is gone, the message is dropped

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """End the engine thread cleanly (models freed); no ``on_death``."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self.send(p.Shutdown())
        self._engine.join(timeout)
        self._channel.close()
        self._reader.join(timeout)

    def kill(self) -> None:
        """A thread cannot be killed: the link lets it go (it ends after its current task)
        and reports the death a killed process would."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self.send(p.Shutdown())
        self._channel.close()
        self._on_death(ENDED)

    @staticmethod
    def _run_engine(host: EngineHost, channel: QueueChannel) -> None:
        try:
            host.run()
        finally:
            channel.close()  # the front end's reader sees the end

    def _read(self) -> None:
        p.receive(self._channel, self._on_message)
        with self._lock:
            closing, self._closing = self._closing, True
        if not closing:
            self._on_death(ENDED)


def thread_link(loader: Callable = load_models):
    """A ``StartLink`` (``app.session.engine_link``) for engines on threads loading with ``loader``."""
    return lambda on_message, on_death: ThreadLink(on_message, on_death, loader=loader)
