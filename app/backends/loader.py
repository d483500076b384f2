"""Load a target, a drafter and check they belong together; build the engine.

Every model file is trial-loaded in a child process before its first load here
(``app.backends.model_check``; a pass is remembered, so later loads cost a few
``stat`` calls): a file that makes llama.cpp abort ends as a ModelFileError.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from app.backends.drafter_factories import Built, DrafterLoad, LoadProgress, checked
from app.backends.llama import rpc
from app.backends.head_files import compact_head_for
from app.backends.llama.backend import LlamaBackend
from app.backends.model_check import require_model_runs
from app.drafter_kinds import KindSpec, Needs, needs, runs_as, spec_of
from app.engine.errors import EngineError
from app.engine.gguf.meta import Compatibility, pair_verdict
from app.engine.gguf.model_file import ModelFile, open_model_file
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.speculation.text_bridge import BridgeMode
from app.engine.types import SPECULATION_OFF, DrafterKind


@dataclass
class LoadedPair:
    engine: SpeculativeEngine
    target: LlamaBackend
    draft: LlamaBackend | None
    compatibility: Compatibility | None

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()


def check_pair(target: str | Path | ModelFile, draft: str | Path | ModelFile, *, trial: bool = True) -> Compatibility:
    """Can ``draft`` speculate for ``target``, token for token or through text (another
    vocabulary)? Usable only if both files also survive a trial load (``trial``); a file
    that does not raises ModelFileError."""
    target, draft = open_model_file(target), open_model_file(draft)
    result = pair_verdict(target.metadata, draft.metadata)
    if result.ok and trial:
        require_model_runs(target)
        require_model_runs(draft)
    return result


def load_pair(target_path: str | Path, draft_path: str | Path | None = None, *,
              drafter: DrafterKind = DrafterKind.MODEL, n_ctx: int = 4096, target_gpu_layers: int = -1,
              draft_gpu_layers: int = -1, n_threads: int = 0, flash_attention: str = "auto",
              progress: LoadProgress | None = None, rpc_workers: tuple[str, ...] = (),
              tensor_split: tuple[float, ...] = (), through_text: BridgeMode = "auto") -> LoadedPair:
    """Load the models. An incompatible draft is not loaded: the engine runs plain and says why.

    ``rpc_workers`` (host:port): the target's offloaded layers go to their devices, then
    to this machine's GPUs, shared as ``tensor_split`` says; the draft stays here.
    A draft of another vocabulary drafts through text (``TextBridge``), in ``through_text``
    mode: "auto" lets its policy turn it off where it does not pay, "on" always drafts.

    The drafter is the kind ``app/drafter_kinds.py`` declares for ``drafter``, or for a
    draft file's architecture (an ``eagle3`` file named as the draft model runs as
    ``EAGLE3``), built by that kind's factory once the target is loaded. A target that
    ships an MTP head drafts with it when no draft model is named, or when ``drafter`` is
    ``MTP``; a head this llama.cpp cannot run (``mtp_head_problem``, judged from the
    header, before llama.cpp could abort on it) leaves the engine plain, saying why."""
    report = progress or (lambda what, fraction: None)
    # Each file resolved and its header read once; the pair check, the trial load and the
    # backend all take the same ModelFile.
    target_path = open_model_file(target_path)
    draft_file = open_model_file(draft_path) if draft_path and needs(drafter) is Needs.DRAFT_FILE else None
    compatibility = None
    if draft_file is not None:
        compatibility = check_pair(target_path, draft_file, trial=False)  # each is tried before it loads
    head, head_note = own_head(target_path, drafter, bool(draft_path))
    # The kind that runs: the target's head where it drafts, else what a draft file declares.
    kind = DrafterKind.MTP if head else runs_as(drafter, draft_file.metadata.architecture) if draft_file else drafter
    devices = target_devices(rpc_workers, tensor_split)  # a worker not there: one line, before any load
    # A float head drafting on this CPU drafts from a compact copy (head_files.py); the
    # target then leaves its own MTP blocks unloaded.
    compact = None
    if head and not rpc_workers and (target_gpu_layers == 0 or not rpc.has_local_gpu()):
        compact = compact_head_for(target_path, lambda f: report("compact MTP head", f))
    target = _load_target(target_path, devices, rpc_workers, tensor_split, n_ctx=n_ctx,
                          n_gpu_layers=target_gpu_layers, n_threads=n_threads, flash_attention=flash_attention,
                          progress=checked(target_path, "target", report), load_mtp=head and compact is None)
    try:
        spec = spec_of(kind)
        if head_note:
            built = Built(None, note=head_note)
        elif spec is None:
            built = Built(None, note=SPECULATION_OFF)
        else:
            built = factory(spec)(DrafterLoad(target, draft_file, compatibility, compact, draft_gpu_layers, n_threads,
                                              flash_attention, through_text, report))
    except BaseException:
        target.close()
        raise
    return LoadedPair(SpeculativeEngine(target, built.drafter, note=built.note), target, built.draft, compatibility)


def factory(spec: KindSpec) -> Callable[[DrafterLoad], Built]:
    """The function ``spec.factory`` names ("module:function")."""
    module, _, name = spec.factory.partition(":")
    return getattr(importlib.import_module(module), name)


def own_head(target: ModelFile, drafter: DrafterKind, draft_named: bool) -> tuple[bool, str]:
    """(draft with the target's own MTP head, why not where it was asked for). Asked for
    with ``DrafterKind.MTP``; chosen without asking for a target that has one when no
    draft model is named (a named draft wins: the user chose it)."""
    meta = target.metadata
    ready = meta.mtp_layers > 0 and meta.mtp_problem is None
    if drafter == DrafterKind.MTP:
        return (True, "") if ready else (False, meta.mtp_problem or "the target has no MTP head")
    if drafter == DrafterKind.MODEL and not draft_named and meta.mtp_layers > 0 and meta.mtp_problem:
        return False, meta.mtp_problem  # the head it would have drafted with, and why it does not
    return drafter == DrafterKind.MODEL and not draft_named and ready, ""


def target_devices(workers: tuple[str, ...], split: tuple[float, ...]) -> list[rpc.Device] | None:
    """The devices the target's offloaded layers go to: the workers' (each checked, then
    connected), then this machine's GPUs, as llama.cpp's --rpc orders them. None without
    workers: llama.cpp's own choice of this machine's devices."""
    if not workers:
        return None
    devices = rpc.connect(workers) + rpc.offload_devices()
    if len(split) > len(devices):
        names = ", ".join(d.endpoint or d.name for d in devices)
        raise rpc.WorkerError(f"the tensor split has {len(split)} shares for {len(devices)} devices ({names})")
    return devices


def _load_target(path: str | Path, devices: list[rpc.Device] | None, workers: tuple[str, ...],
                 split: tuple[float, ...], **options) -> LlamaBackend:
    """The target, its layers on ``devices``; a worker too small for its share is one line naming it."""
    if devices is None:
        return LlamaBackend(path, tensor_split=split, **options)
    try:
        return LlamaBackend(path, devices=devices, tensor_split=split, **options)
    except EngineError as exc:
        line = rpc.allocation_failure(str(exc), workers)
        if line is None:
            raise
        raise rpc.WorkerError(line) from None
