"""A scripted engine for widget tests: the real engine host, link and client, no model.

``ScriptedLoader`` stands in for ``load_session``: the engine host on a thread
(``app.enginehost.thread_link``) loads with it, so the window's client talks to the real
host over the real messages while the session it loads only replays tokens.
``scripted_client(loader)`` is that client."""

from __future__ import annotations

import threading
import time
from typing import Sequence

from app.engine.prompting.chat import stop_renders_on
from app.engine.speculation.speculative import Generation
from app.engine.types import SamplingConfig, SpecConfig, Stats, TokenEvent, TokenKind
from app.errors import TandemError
from app.session.chat_types import ChatPrompt, LoadInfo


def tokens(*texts: str, kind: TokenKind = TokenKind.ACCEPTED) -> list[TokenEvent]:
    return [TokenEvent(i, text, kind) for i, text in enumerate(texts)]


class ScriptedEngine:
    """Yields ``events`` (``delay`` seconds apart), honouring the cancel flag; records each call."""

    def __init__(self, events: Sequence[TokenEvent], delay: float = 0.0, error: Exception | None = None) -> None:
        self.events = list(events)
        self.delay = delay
        self.error = error
        self.calls: list[tuple[SamplingConfig, SpecConfig, int]] = []
        self.copy_sources: list[object] = []  # what each call was given to copy from

    def generate(self, prompt: Sequence[int], sampling: SamplingConfig, spec: SpecConfig,
                 max_tokens: int, cancel: threading.Event, copy_sources=None) -> Generation:
        self.calls.append((sampling, spec, max_tokens))
        self.copy_sources.append(copy_sources)
        stats = Stats(prompt_tokens=len(prompt), speculative=spec.enabled)
        return Generation(self._run(max_tokens, cancel, stats), stats)

    def _run(self, max_tokens: int, cancel: threading.Event, stats: Stats):
        started = time.perf_counter()
        for event in self.events[:max_tokens]:
            if cancel.wait(self.delay) if self.delay else cancel.is_set():
                stats.stop_reason = "cancelled"
                return
            if self.error is not None and stats.tokens == len(self.events) // 2:
                raise self.error
            stats.tokens += 1
            stats.rounds += 1
            stats.seconds = time.perf_counter() - started
            yield event
        stats.stop_reason = "eos" if len(self.events) <= max_tokens else "max_tokens"


class ScriptedTarget:
    """A target that keeps no states (the chats' kept states pass it by)."""

    keeps_states = False
    tokens: list[int] = []


class ScriptedModels:
    """A loaded session as the engine host uses one (``app.session.chat.ChatSession``)."""

    def __init__(self, engine: ScriptedEngine, info: LoadInfo | None = None) -> None:
        self.engine = engine
        self.target = ScriptedTarget()
        self.info = info or LoadInfo(target_name="scripted.gguf", target_path="/models/scripted.gguf",
                                     draft_name="scripted-draft.gguf", draft_path="/models/scripted-draft.gguf",
                                     drafter="model", speculation_available=True)
        self.histories: list[tuple[tuple[str, str], ...]] = []
        self.left_out = 0  # what prompt() reports as left out of the context
        self.copy_sources: object = None  # what generate() hands the engine to copy from
        self.remembered: list[str] = []   # the replaced replies generate() was given
        self.closed = False

    def prompt(self, history, system_prompt: str, max_tokens: int, cancel=None) -> ChatPrompt:
        with stop_renders_on(cancel):
            self.histories.append(tuple(history))
            return self.render(history, system_prompt, max_tokens)

    def render(self, history, system_prompt: str, max_tokens: int) -> ChatPrompt:
        return ChatPrompt([1, 2, 3], self.left_out)

    def generate(self, prompt: ChatPrompt, sampling: SamplingConfig, spec: SpecConfig, max_tokens: int,
                 cancel: threading.Event | None = None, *, replaced: Sequence[str] = ()) -> Generation:
        self.remembered.extend(replaced)
        generation = self.engine.generate(prompt.tokens, sampling, spec, max_tokens, cancel or threading.Event(),
                                          copy_sources=self.copy_sources)
        generation.stats.left_out = prompt.left_out
        generation.stats.prompt_notice = prompt.notice
        return generation

    def self_test(self):
        raise TandemError("A scripted engine has no self-test.")

    def close(self) -> None:
        self.closed = True


class ScriptedLoader:
    """A loader for the engine host: every load returns the same scripted models (or raises)."""

    def __init__(self, events: Sequence[TokenEvent] = (), *, delay: float = 0.0,
                 load_error: TandemError | None = None, info: LoadInfo | None = None) -> None:
        self.engine = ScriptedEngine(events, delay)
        self.models = ScriptedModels(self.engine, info)
        self.load_error = load_error
        self.specs = []

    def __call__(self, spec, progress):
        self.specs.append(spec)
        progress("Loading target model", 0.5)
        if self.load_error is not None:
            raise self.load_error
        return self.models


def scripted_client(loader, parent=None):
    """The window's engine client over the engine host on a thread, loading with ``loader``."""
    from app.bridge.engine_process import EngineProcessClient
    from app.enginehost.thread_link import thread_link

    return EngineProcessClient(parent, start_link=thread_link(loader))
