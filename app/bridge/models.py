"""What the worker thread loads: a model choice in, a ready-to-chat pair out.

``ModelSpec`` is everything whose change needs a reload; everything else
(speculation on/off, draft lengths, sampling) travels with each message instead,
so it applies to the next reply without touching the loaded weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Protocol, Sequence

from app.engine.chat import conversation_prompt
from app.engine.speculative import Generation
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig
from app.storage.settings import Settings

# (what is happening, fraction done in [0, 1] or -1 when unknown) -> False to cancel
Progress = Callable[[str, float], bool | None]


@dataclass(frozen=True)
class ModelSpec:
    """The models to load. An empty target means the demo pair (provisioned on first use)."""

    target_path: str = ""
    draft_path: str = ""
    drafter: str = "model"  # "model" | "lookup"
    n_ctx: int = 4096
    target_gpu_layers: int = -1
    draft_gpu_layers: int = -1
    n_threads: int = 0
    flash_attention: str = "auto"

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelSpec:
        return cls(target_path=settings.target_path, draft_path=settings.draft_path,
                   drafter=settings.drafter, n_ctx=settings.n_ctx,
                   target_gpu_layers=settings.target_gpu_layers,
                   draft_gpu_layers=settings.draft_gpu_layers, n_threads=settings.n_threads,
                   flash_attention=settings.flash_attention)

    @property
    def uses_demo_pair(self) -> bool:
        return not self.target_path


@dataclass(frozen=True)
class LoadInfo:
    """What got loaded, for the window to show."""

    target_name: str
    target_path: str
    draft_name: str = ""       # '' when no draft model is in use
    draft_path: str = ""
    drafter: str = "none"      # "model", "lookup" or "none"
    speculation_available: bool = False
    note: str = ""             # why there is no speculation, when there is none
    failed_rule: str | None = None  # the compatibility rule a rejected draft failed
    compute: str = "CPU"       # llama.cpp's compute backend


class ChatPrompt(NamedTuple):
    tokens: list[int]
    left_out: int = 0  # earliest messages left out so the conversation fits the context
    notice: str = ""   # one line when the model's chat template failed and ChatML stood in


class Engine(Protocol):
    def generate(self, prompt: Sequence[int], sampling: SamplingConfig, spec: SpecConfig,
                 max_tokens: int, cancel: object) -> Generation: ...


class LoadedModels(Protocol):
    """A loaded pair as the worker uses it; owned by the worker thread alone."""

    info: LoadInfo
    engine: Engine

    def prompt(self, history: Sequence[tuple[str, str]], system_prompt: str, max_tokens: int) -> ChatPrompt: ...

    def close(self) -> None: ...


Loader = Callable[[ModelSpec, Progress], LoadedModels]


class LlamaModels:
    """The real thing: a ``LoadedPair`` from llama.cpp."""

    def __init__(self, pair, info: LoadInfo) -> None:
        self._pair = pair
        self.engine = pair.engine
        self.info = info

    def prompt(self, history: Sequence[tuple[str, str]], system_prompt: str, max_tokens: int) -> ChatPrompt:
        """The conversation as tokens, with room left for a reply of ``max_tokens``."""
        return ChatPrompt(*conversation_prompt(self._pair.target, history, system_prompt, max_tokens))

    def self_test(self):
        """The ``--self-test`` checks on the loaded pair (Help → Check speculation)."""
        from app.gpu.monitor import GpuMonitor
        from app.session.selftest import run_checks

        monitor = GpuMonitor()
        status = monitor.poll()
        monitor.close()
        return run_checks(self._pair, ", ".join(g.name for g in status.gpus) if status.available else "")

    def close(self) -> None:
        self._pair.close()


def load_llama_models(spec: ModelSpec, progress: Progress) -> LlamaModels:
    """Provision the demo pair when asked for it, then load with llama.cpp (slow: worker thread only)."""
    from app.backends.llama_cpp_backend import system_info
    from app.backends.loader import load_pair

    target, draft = resolve_paths(spec, progress)
    pair = load_pair(target, draft, drafter=spec.drafter, n_ctx=spec.n_ctx,
                     target_gpu_layers=spec.target_gpu_layers, draft_gpu_layers=spec.draft_gpu_layers,
                     n_threads=spec.n_threads, flash_attention=spec.flash_attention,
                     progress=lambda what, fraction: progress(f"Loading {what} model", fraction))
    speculating = pair.engine.drafter is not None
    compatibility = pair.compatibility
    info = LoadInfo(
        target_name=Path(target).name, target_path=str(target),
        draft_name=Path(draft).name if pair.draft is not None else "",
        draft_path=str(draft) if pair.draft is not None else "",
        drafter=pair.engine.drafter.kind if speculating else DrafterKind.NONE,
        speculation_available=speculating, note=pair.engine.note,
        failed_rule=compatibility.rule if compatibility is not None and not compatibility.ok else None,
        compute=system_info()["backend"])
    return LlamaModels(pair, info)


def resolve_paths(spec: ModelSpec, progress: Progress) -> tuple[Path, Path | None]:
    """The files to load. Like the CLI: the demo draft only goes with the demo target."""
    if not spec.uses_demo_pair:
        return Path(spec.target_path), Path(spec.draft_path) if spec.draft_path else None
    from app.models.demo import demo_pair

    def report(stage: str, done: int, total: int) -> None:
        if progress(stage, done / total if total else -1.0) is False:
            raise LoadCancelled()

    pair = demo_pair(report)
    return pair.target, Path(spec.draft_path) if spec.draft_path else pair.draft


class LoadCancelled(Exception):
    """A newer load request replaced this one while it ran."""
