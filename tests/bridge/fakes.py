"""A scripted engine for widget tests: the real worker thread and signals, no model."""

from __future__ import annotations

import threading
import time
from typing import Sequence

from app.bridge.models import ChatPrompt, LoadInfo
from app.engine.speculation.speculative import Generation
from app.engine.types import SamplingConfig, SpecConfig, Stats, TokenEvent, TokenKind
from app.errors import TandemError


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


class ScriptedModels:
    def __init__(self, engine: ScriptedEngine, info: LoadInfo | None = None) -> None:
        self.engine = engine
        self.info = info or LoadInfo(target_name="scripted.gguf", target_path="/models/scripted.gguf",
                                     draft_name="scripted-draft.gguf", draft_path="/models/scripted-draft.gguf",
                                     drafter="model", speculation_available=True)
        self.histories: list[tuple[tuple[str, str], ...]] = []
        self.left_out = 0  # what prompt() reports as left out of the context
        self.closed = False

    def prompt(self, history, system_prompt: str, max_tokens: int) -> ChatPrompt:
        self.histories.append(tuple(history))
        return ChatPrompt([1, 2, 3], self.left_out)

    def close(self) -> None:
        self.closed = True


class ScriptedLoader:
    """A loader for EngineClient: every load returns the same scripted models (or raises)."""

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
