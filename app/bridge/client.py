"""What the window asks of an engine, whichever one it holds.

Two clients implement it: ``app.bridge.engine_process.EngineProcessClient``, the engine
in a process of its own (what the app runs), and ``app.bridge.worker.EngineClient``, the
engine on a thread of this process (tests and tools). The controllers of ``app.window``
are written against this Protocol and import it for their annotations only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.engine.types import SamplingConfig, SpecConfig
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
    """

    load_progress: SignalInstance
    loaded: SignalInstance
    load_failed: SignalInstance
    tokens: SignalInstance
    finished: SignalInstance
    failed: SignalInstance
    busy_changed: SignalInstance
    checked: SignalInstance
    # In a process of its own, the engine can die and be restarted (``died``, ``hung``,
    # ``restart``, ``end_engine``): the window then keeps a controller for that.
    separate_process: bool

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

    def shutdown(self) -> None: ...
