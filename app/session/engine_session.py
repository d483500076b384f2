"""The engine process for a front end without an event loop (``tandem chat``): load, reply
as a stream of token events, stop, and a death raised as ``EngineDied`` (one line), after
which ``restart`` gives a fresh engine.
"""

from __future__ import annotations

import itertools
import queue
from typing import Callable, Iterator, Sequence

from app.engine.types import SamplingConfig, SpecConfig, Stats, TokenEvent
from app.errors import TandemError
from app.session import protocol as p
from app.session.chat_types import LoadInfo
from app.session.config import ModelSpec
from app.session.engine_link import Link, StartLink, process_link


class EngineDied(TandemError):
    """The engine process ended; the message says how, in one line."""


class EngineSession:
    def __init__(self, env: dict | None = None, *, start_link: StartLink | None = None) -> None:
        """``env``: the engine process's environment (None: this one's); ``start_link``:
        another kind of engine (default: a process started with ``env``)."""
        self._start_link = start_link or process_link(env)
        self._ids = itertools.count(1)
        self._messages: queue.Queue = queue.Queue()
        self._link: Link | None = None
        self.stats: Stats | None = None   # the last reply's figures
        self._current = 0
        self.start()

    def start(self) -> None:
        self._messages = messages = queue.Queue()  # a dead engine's words stay in its own queue
        self._link = self._start_link(messages.put, lambda line: messages.put(p.Died(line)))
        self._link.start()

    def restart(self) -> None:
        self.close()
        self.start()

    @property
    def pid(self) -> int:
        return self._link.pid if self._link is not None else 0

    def load(self, spec: ModelSpec, progress: Callable[[str, float, float], object] | None = None) -> LoadInfo:
        """Load ``spec``; a failed load raises its one line, an engine death ``EngineDied``."""
        load_id = next(self._ids)
        self._link.send(p.Load(load_id, spec))
        while True:
            message = self._next()
            if isinstance(message, p.LoadProgress) and progress is not None:
                progress(message.stage, max(message.fraction, 0.0), 1.0 if message.fraction >= 0 else 0.0)
            elif isinstance(message, p.Loaded) and message.load_id == load_id:
                return message.info
            elif isinstance(message, p.LoadFailed) and message.load_id == load_id:
                raise TandemError(message.message)

    def reply(self, history: Sequence[tuple[str, str]], sampling: SamplingConfig, spec: SpecConfig,
              max_tokens: int, *, system_prompt: str = "", chat: int | None = None) -> Iterator[TokenEvent]:
        """The reply's token events as they come; ``stats`` is set when it ends. Stopping it
        (``stop``) lets the stream run out within a round."""
        request_id = self._current = next(self._ids)
        self.stats = None
        self._link.send(p.Generate(request_id, tuple(history), system_prompt, sampling, spec, max_tokens,
                                   chat=chat))
        yield from self._stream(request_id)

    def reply_rest(self) -> Iterator[TokenEvent]:
        """After ``stop``: what is left of the reply being written (within a round), to its end."""
        if self._current and self.stats is None:
            yield from self._stream(self._current)

    def _stream(self, request_id: int) -> Iterator[TokenEvent]:
        while True:
            message = self._next()
            if isinstance(message, p.Tokens) and message.request_id == request_id:
                yield from message.events
            elif isinstance(message, p.Finished) and message.request_id == request_id:
                self.stats = message.stats
                return
            elif isinstance(message, p.Failed) and message.request_id == request_id:
                raise TandemError(message.message)

    def stop(self) -> None:
        self._link.send(p.Stop())

    def close(self) -> None:
        if self._link is not None:
            link, self._link = self._link, None
            link.close()

    def _next(self):
        message = self._messages.get()
        if isinstance(message, p.Died):
            raise EngineDied(message.line)
        return message
