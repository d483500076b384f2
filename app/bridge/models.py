"""What the worker thread loads: a model choice in, a ready-to-chat session out.

The loading itself is ``app.session``'s (one path for every front end); this module
only adapts its progress reports to the window's (a fraction, or -1 when unknown) and
names what the worker needs of a loaded session, so tests can hand it a scripted one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, Sequence

from app.engine.speculation.speculative import Generation
from app.engine.types import SamplingConfig, SpecConfig
from app.session.chat import ChatSession
from app.session.chat_types import ChatPrompt, LoadInfo
from app.session.config import ModelSpec
from app.session.loading import LoadCancelled, load_session
from app.session import loading

__all__ = ["ChatPrompt", "LoadCancelled", "LoadInfo", "LoadedModels", "Loader", "ModelSpec", "Progress",
           "load_llama_models", "resolve_paths"]

# (what is happening, fraction done in [0, 1] or -1 when unknown) -> False to cancel
Progress = Callable[[str, float], bool | None]


class Engine(Protocol):
    def generate(self, prompt: Sequence[int], sampling: SamplingConfig, spec: SpecConfig,
                 max_tokens: int, cancel: object) -> Generation: ...


class LoadedModels(Protocol):
    """A loaded pair as the worker uses it (a ``ChatSession``); owned by the worker thread alone."""

    info: LoadInfo
    engine: Engine

    def prompt(self, history: Sequence[tuple[str, str]], system_prompt: str, max_tokens: int) -> ChatPrompt: ...

    def close(self) -> None: ...


Loader = Callable[[ModelSpec, Progress], LoadedModels]


def as_fraction(progress: Progress) -> loading.Progress:
    """The session's (stage, done, total) reports as the window's (stage, fraction)."""
    return lambda stage, done, total: progress(stage, done / total if total else -1.0)


def load_llama_models(spec: ModelSpec, progress: Progress) -> ChatSession:
    """Provision the demo pair when asked for it, then load with llama.cpp (slow: worker thread only)."""
    return load_session(spec, as_fraction(progress))


def resolve_paths(spec: ModelSpec, progress: Progress) -> tuple[Path, Path | None]:
    """The files ``spec`` names (the demo pair provisioned when it names none)."""
    return loading.resolve_paths(spec, as_fraction(progress))
