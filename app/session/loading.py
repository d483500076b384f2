"""One path from a choice of models to a loaded ``ChatSession``, for every front end.

Slow (provisioning the demo pair, reading weights): call it off any UI thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from app.engine.gguf.header import shown_name
from app.engine.types import DrafterKind
from app.session.chat import ChatSession, LoadInfo
from app.session.config import ModelSpec

# (what is happening, done, total) -> False to cancel. total 1.0 for a fraction, a byte
# count for a download, 0 when unknown.
Progress = Callable[[str, float, float], bool | None]


class LoadCancelled(Exception):
    """The progress callback asked to stop (a newer load replaced this one)."""


def resolve_paths(spec: ModelSpec, progress: Progress | None = None) -> tuple[Path, Path | None]:
    """The files to load. The demo draft only goes with the demo target: a chosen target
    without a chosen draft runs without a draft model."""
    if not spec.uses_demo_pair:
        return Path(spec.target_path), Path(spec.draft_path) if spec.draft_path else None
    from app.models.demo import demo_pair

    def report(stage: str, done: int, total: int) -> None:
        if progress is not None and progress(stage, done, total) is False:
            raise LoadCancelled()

    pair = demo_pair(report)
    return pair.target, Path(spec.draft_path) if spec.draft_path else pair.draft


def load_session(spec: ModelSpec, progress: Progress | None = None) -> ChatSession:
    """Provision the demo pair when asked for it, then load with llama.cpp."""
    from app.backends import rpc
    from app.backends.llama_cpp_backend import system_info
    from app.backends.loader import load_pair

    target, draft = resolve_paths(spec, progress)

    def loading(what: str, fraction: float) -> bool | None:
        if progress is None:
            return None
        return progress(f"Loading {what} model", fraction, 1.0)

    pair = load_pair(target, draft, drafter=spec.drafter, n_ctx=spec.n_ctx,
                     target_gpu_layers=spec.target_gpu_layers, draft_gpu_layers=spec.draft_gpu_layers,
                     n_threads=spec.n_threads, flash_attention=spec.flash_attention, progress=loading,
                     rpc_workers=spec.rpc_workers, tensor_split=spec.tensor_split, through_text=spec.through_text)
    speculating = pair.engine.drafter is not None
    compatibility = pair.compatibility
    info = LoadInfo(
        # Display names: a file name that is not UTF-8 keeps its bytes visible (\xff).
        target_name=shown_name(target), target_path=str(target),
        draft_name=shown_name(draft) if pair.draft is not None else "",
        draft_path=str(draft) if pair.draft is not None else "",
        drafter=pair.engine.drafter.kind if speculating else DrafterKind.NONE,
        speculation_available=speculating, note=pair.engine.note,
        failed_rule=compatibility.rule if compatibility is not None and not compatibility.ok else None,
        compute=system_info()["backend"], workers=spec.rpc_workers,
        layers=tuple(getattr(pair.target, "layer_split", ())),
        worker_rtt=rpc.round_trips(spec.rpc_workers) if spec.rpc_workers else (),
        n_ctx=int(getattr(pair.target, "n_ctx", 0) or 0), n_ctx_train=int(getattr(pair.target, "n_ctx_train", 0) or 0))
    session = ChatSession(pair, info)
    session.set_chat_format(spec.chat_format)
    return session
