"""One path from a choice of models to a loaded ``ChatSession``, for every front end.

Slow (provisioning the demo pair, reading weights): call it off any UI thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from app.drafter_kinds import Needs, needs
from app.engine.gguf.header import shown_name
from app.engine.types import DrafterKind
from app.session.chat import ChatSession, LoadInfo
from app.engine.gguf.memory_plan import AUTO, PairPlan
from app.session.config import ModelSpec
from app.session.fit import FitError, describe, gpu_layers_for_load, plan_files, read_machine, refusal

# (what is happening, done, total) -> False to cancel. total 1.0 for a fraction, a byte
# count for a download, 0 when unknown.
Progress = Callable[[str, float, float], bool | None]


def chat_format_names() -> tuple[str, ...]:
    """llama.cpp's built-in chat formats, by name (for a front end to offer). Asked where
    llama.cpp is: the engine process says them in its ``Ready`` (``app.session.protocol``),
    the engine host calls it."""
    from app.backends.llama.builtin_chat_formats import chat_format_names as names

    return names()


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


@dataclass(frozen=True)
class PlannedLoad:
    plan: PairPlan
    target_layers: int   # what llama.cpp is given (-1: all)
    draft_layers: int


def plan_load(spec: ModelSpec, target: Path, draft: Path | None, *, build_has_gpu: bool) -> PlannedLoad:
    """The memory plan of a load (app/session/fit.py): ``"auto"`` GPU layers become numbers,
    and a pair that cannot fit this machine is refused here, in one line, before llama.cpp
    reads a byte of it. A file that is not a model is left for the load to refuse."""
    machine = read_machine(build_has_gpu=build_has_gpu)
    target_asked = spec.target_gpu_layers if not spec.rpc_workers else (
        -1 if spec.target_gpu_layers == AUTO else spec.target_gpu_layers)  # workers take what the GPU does not
    plan = plan_files(target, draft, n_ctx=spec.n_ctx, machine=machine, target_gpu_layers=target_asked,
                      draft_gpu_layers=spec.draft_gpu_layers, flash_attention=spec.flash_attention)
    if not plan.fits and not spec.rpc_workers:
        raise FitError(f"{shown_name(target)}: {refusal(plan, spec.n_ctx)}")
    return PlannedLoad(plan, gpu_layers_for_load(plan.target, target_asked, machine),
                       gpu_layers_for_load(plan.draft, spec.draft_gpu_layers, machine))


def load_session(spec: ModelSpec, progress: Progress | None = None) -> ChatSession:
    """Provision the demo pair when asked for it, then load with llama.cpp."""
    from app.backends.llama import rpc
    from app.backends.llama.process_setup import system_info
    from app.backends.loader import load_pair

    target, draft = resolve_paths(spec, progress)
    planned = plan_load(spec, target, draft if needs(spec.drafter) is Needs.DRAFT_FILE else None,
                        build_has_gpu=rpc.has_local_gpu())

    def loading(what: str, fraction: float) -> bool | None:
        if progress is None:
            return None
        return progress(f"Loading {what} model", fraction, 1.0)

    pair = load_pair(target, draft, drafter=spec.drafter, n_ctx=spec.n_ctx,
                     target_gpu_layers=planned.target_layers, draft_gpu_layers=planned.draft_layers,
                     n_threads=spec.n_threads, flash_attention=spec.flash_attention, progress=loading,
                     rpc_workers=spec.rpc_workers, tensor_split=spec.tensor_split, through_text=spec.through_text)
    speculating = pair.engine.drafter is not None
    compatibility = pair.compatibility
    # A draft file in use: a draft model, or an EAGLE-3 drafter (run as the target's head).
    drafting_file = pair.draft is not None or (speculating and compatibility is not None and compatibility.reads_target)
    info = LoadInfo(
        # Display names: a file name that is not UTF-8 keeps its bytes visible (\xff).
        target_name=shown_name(target), target_path=str(target),
        draft_name=shown_name(draft) if drafting_file else "",
        draft_path=str(draft) if drafting_file else "",
        drafter=pair.engine.drafter.kind if speculating else DrafterKind.NONE,
        speculation_available=speculating, note=pair.engine.note,
        failed_rule=compatibility.rule if compatibility is not None and not compatibility.ok else None,
        compute=system_info()["backend"], workers=spec.rpc_workers,
        layers=tuple(pair.target.layer_split),
        worker_rtt=rpc.round_trips(spec.rpc_workers) if spec.rpc_workers else (),
        n_ctx=int(pair.target.n_ctx), n_ctx_train=int(pair.target.n_ctx_train),
        memory_plan=describe(planned.plan), planned_gpu_bytes=planned.plan.gpu_bytes,
        planned_bytes=planned.plan.bytes,
        allocated_bytes=sum(b for model in (pair.target, pair.draft) if model is not None
                            for _, _, b in model.buffers),
        gpu_layers=(planned.target_layers, planned.draft_layers))
    session = ChatSession(pair, info)
    session.set_chat_format(spec.chat_format)
    return session
