"""What to load and how to decode, from settings or command-line values, in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.engine.types import COPY_MIN, DrafterKind, SamplingConfig, SpecConfig
from app.storage.settings import Settings, chat_format_for
from app.worker_address import parse_split, parse_workers


@dataclass(frozen=True)
class ModelSpec:
    """The models to load: everything whose change needs a reload. An empty target means
    the demo pair (provisioned on first use). Speculation, draft lengths and sampling are
    not here: they travel with each reply, so they apply without touching the weights."""

    target_path: str = ""
    draft_path: str = ""
    drafter: DrafterKind = DrafterKind.MODEL
    n_ctx: int = 4096
    target_gpu_layers: int | Literal["auto"] = "auto"  # "auto": planned before loading (app/session/fit.py)
    draft_gpu_layers: int | Literal["auto"] = "auto"
    n_threads: int = 0
    flash_attention: str = "auto"
    chat_format: str = ""   # a llama.cpp built-in chat format for the target; '' its own template
    rpc_workers: tuple[str, ...] = ()     # host:port of llama.cpp RPC workers the target is split over
    tensor_split: tuple[float, ...] = ()  # each device's share of the target's layers; () by free memory
    # A draft of another vocabulary (text_bridge.py): "auto" drafts while it pays, "on" always
    through_text: str = "auto"

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelSpec:
        return cls(target_path=settings.target_path, draft_path=settings.draft_path,
                   drafter=DrafterKind(settings.drafter), n_ctx=settings.n_ctx,
                   target_gpu_layers=settings.target_gpu_layers,
                   draft_gpu_layers=settings.draft_gpu_layers, n_threads=settings.n_threads,
                   flash_attention=settings.flash_attention,
                   chat_format=chat_format_for(settings, settings.target_path),
                   rpc_workers=parse_workers(settings.rpc_workers), tensor_split=parse_split(settings.tensor_split))

    @property
    def uses_demo_pair(self) -> bool:
        return not self.target_path


def sampling_config(settings: Settings) -> SamplingConfig:
    return SamplingConfig(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                          min_p=settings.min_p, seed=None if settings.seed < 0 else settings.seed)


def spec_config(settings: Settings) -> SpecConfig:
    return speculation(settings.speculation, settings.draft_max, settings.draft_min, settings.p_min,
                       copy=settings.copy_repeats, tree=settings.tree)


def speculation(enabled: bool, draft_max, draft_min: int = 1, p_min: float = 0.0, *, copy: bool = True,
                tree: str = "auto") -> SpecConfig:
    """The one mapping of a user's "copy repeated text" on/off to the engine's ``copy_min``."""
    return SpecConfig(enabled=enabled, draft_max=draft_max, draft_min=draft_min, p_min=p_min,
                      copy_min=COPY_MIN if copy else 0, tree=tree)
