"""What the window asks of its engine: every member it uses, declared here.

``app.bridge.engine_process.EngineProcessClient`` implements it, over a link to the
engine host in a process of its own (what the app runs) or on a thread (tests and
tools, ``app.enginehost.thread_link``). The controllers of ``app.window`` are written
against this Protocol and import it for their annotations only; none asks a client
what it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.engine.types import SamplingConfig, SpecConfig
    from app.session import protocol as p
    from app.session.chat_types import LoadInfo
    from app.session.config import ModelSpec


class Engine(Protocol):
    """Signals (all on the UI thread):

      load_progress(stage, fraction)   fraction in [0, 1], or -1 when unknown
      loaded(LoadInfo) / load_failed(message)
      tokens(request_id, [TokenEvent], Stats | None)  coalesced; Stats is a live snapshot
      finished(request_id, Stats)      after the last ``tokens`` of that request
      failed(request_id, message)
      busy_changed(bool)               a reply is being generated
      checked(SelfTestReport | message)
      died(line)                       the engine is gone, in one line (``load`` starts a fresh one)
      hung(seconds)                    no progress for that long; hung(0) when it moves again
      serving(url, error)              the local server's state
      served(record)                   a request the local server served
    """

    load_progress: SignalInstance
    loaded: SignalInstance
    load_failed: SignalInstance
    tokens: SignalInstance
    finished: SignalInstance
    failed: SignalInstance
    busy_changed: SignalInstance
    checked: SignalInstance
    died: SignalInstance
    hung: SignalInstance
    serving: SignalInstance
    served: SignalInstance
    # An engine apart (a process of its own) can die, hang and be restarted on its own:
    # the window then keeps a controller for that. One on a thread goes with the window.
    separate_process: bool
    died_loading: bool   # the last death came while models loaded

    @property
    def alive(self) -> bool: ...

    @property
    def spec(self) -> ModelSpec | None: ...

    @property
    def info(self) -> LoadInfo | None: ...

    @property
    def loading(self) -> bool: ...

    @property
    def busy(self) -> bool: ...

    def load(self, spec: ModelSpec) -> None: ...

    def ensure_loaded(self, spec: ModelSpec) -> bool: ...

    def generate(self, history: Sequence[tuple[str, str]], *, system_prompt: str = "",
                 sampling: SamplingConfig = ..., spec: SpecConfig = ..., max_tokens: int = 256,
                 replaced: Sequence[str] = (), chat: int | None = None) -> int:
        """``chat``: the history's id of the chat it answers (its cache is kept on disk
        while others use the engine, where the engine can); None for other requests."""
        ...

    def check_speculation(self) -> None: ...

    def chat_format_names(self) -> tuple[str, ...]:
        """llama.cpp's built-in chat formats, by name, for the window to offer: asked of the
        engine (its process's ``Ready``), never of a llama.cpp loaded on the window's side."""
        ...

    def stop(self, request_id: int | None = None) -> None: ...

    def serve(self, host: str, port: int, *, sampling: SamplingConfig, spec: SpecConfig,
              max_tokens_limit: int) -> p.Serving:
        """Start the local server beside the engine; its address, or why not."""
        ...

    def stop_serving(self) -> None: ...

    def restart(self) -> None:
        """A fresh engine, the old one ended first."""
        ...

    def end_engine(self) -> None:
        """End an engine that stopped answering: it dies as any other death does."""
        ...

    def shutdown(self) -> None: ...
