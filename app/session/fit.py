"""Will a pair fit: its memory planned onto this machine's GPU and RAM before loading.

One place for every front end: ``tandem fit``, the loads of ``generate``, ``chat``,
``serve``, ``bench`` and the window (``resolve_gpu_layers``), and what the first-run
screen, the library and the settings show (``describe``). The arithmetic is in
``app/engine/gguf/memory_plan.py``; this module reads the headers and the machine:

- the free memory of each NVIDIA GPU, from NVML (``app.gpu.monitor``); without one,
  no GPU (a GPU build without NVML, Metal or ROCm, keeps llama.cpp's own "all layers");
- a simulated GPU of a given free size: ``tandem fit --gpu-memory 8GiB``, or
  ``TANDEM_GPU_MEMORY`` for every front end (how a plan is tried on a machine without
  one; llama.cpp then runs the planned layers on the CPU as usual);
- the system memory available (``MemAvailable`` on Linux).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from app.system_memory import available_ram
from app.engine.errors import EngineError
from app.engine.gguf.context_shape import context_shape
from app.engine.gguf.memory_estimate import MemoryEstimate, estimate_memory, windowed
from app.engine.gguf.memory_plan import AUTO, GpuLayers, ModelPlan, PairPlan, plan_with_context
from app.engine.gguf.model_file import ModelFile, open_model_file

GPU_MEMORY_ENV = "TANDEM_GPU_MEMORY"
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class FitError(EngineError):
    """A pair that cannot fit this machine, said in one line before anything loads."""


def parse_size(text: str) -> int:
    """``"8GiB"``, ``"8g"``, ``"512 MiB"``, ``"1.5G"`` or a byte count, in bytes (binary
    units: a GPU's memory is counted in them). Raises ValueError with a reason."""
    match = _SIZE.fullmatch(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (e.g. 8GiB, 512MiB or a number of bytes)")
    value = float(match.group(1)) * _UNIT[match.group(2).lower()]
    if value > 1 << 60:
        raise ValueError(f"{text!r} is larger than any GPU")
    return int(value)


@dataclass(frozen=True)
class Machine:
    """The memory a plan may use."""

    device: str       # "NVIDIA GeForce RTX 4070", "simulated GPU", or "CPU"
    gpu_free: int     # bytes free on the GPU(s); 0: none to plan for
    ram_free: int     # bytes of system memory available
    unmeasured_gpu: bool = False  # a GPU build with no NVML: its memory cannot be read

    @property
    def has_gpu(self) -> bool:
        return self.gpu_free > 0


def read_machine(gpu_memory: int | None = None, *, build_has_gpu: bool = False, nvml: object = None) -> Machine:
    """This machine's free GPU and system memory. ``gpu_memory``: plan for a GPU with that
    much free instead (else ``TANDEM_GPU_MEMORY``, else NVML). ``build_has_gpu``: llama.cpp
    was built for a GPU (CUDA, Metal, ...), whose memory NVML may not see. ``nvml``: the
    NVML module (None: pynvml; tests stand in one for a GPU this machine lacks)."""
    ram = available_ram()
    if gpu_memory is None and os.environ.get(GPU_MEMORY_ENV, "").strip():
        try:
            gpu_memory = parse_size(os.environ[GPU_MEMORY_ENV])
        except ValueError:
            gpu_memory = None  # a stray variable is ignored, not fatal
    if gpu_memory is not None:
        return Machine("simulated GPU", gpu_memory, ram) if gpu_memory > 0 else Machine("CPU", 0, ram)
    from app.gpu.monitor import GpuMonitor

    monitor = GpuMonitor(nvml)
    try:
        status = monitor.poll()
    finally:
        monitor.close()
    if status.available and status.gpus:
        free = sum(max(0, g.memory_total_bytes - g.memory_used_bytes) for g in status.gpus)
        names = status.gpus[0].name + (f" and {len(status.gpus) - 1} more" if len(status.gpus) > 1 else "")
        return Machine(names, free, ram)
    return Machine("CPU", 0, ram, unmeasured_gpu=build_has_gpu)


def estimate_for(model: ModelFile, n_ctx: int, *, draft: bool, flash_attention: str = "auto",
                 gpu: bool = False, tensors: list | None = None) -> MemoryEstimate:
    """A model's memory with the context Tandem would create for it at ``n_ctx``;
    ``tensors``: ``all_tensors(model)``, when the caller has read them already."""
    shape = context_shape(model.memory_kind, model.architecture, model.file_type, n_ctx, draft=draft,
                          flash=flash_attention, gpu=gpu, windowed=windowed(model.hparams))
    return estimate_memory(all_tensors(model) if tensors is None else tensors, model.hparams, model.n_vocab, shape, memory_kind=model.memory_kind)


def all_tensors(model: ModelFile) -> list:
    """The tensors of every part of a split model (``name-00001-of-00003.gguf``: llama.cpp
    loads the others beside the first), each part's header checked as the first's was."""
    from app.engine.gguf.header import scan_header
    from app.library.entries import split_parts

    tensors = list(model.header.tensors)
    if model.parts_read:
        return tensors
    for part in (split_parts(model.resolved) or [])[1:]:
        header, _ = scan_header(part, lambda _key: False, name=part)
        tensors += header.tensors
    return tensors


def plan_files(target: str | Path | ModelFile, draft: str | Path | ModelFile | None, *, n_ctx: int,
               machine: Machine, target_gpu_layers: GpuLayers = AUTO, draft_gpu_layers: GpuLayers = AUTO,
               flash_attention: str = "auto") -> PairPlan:
    """The plan for ``target`` and ``draft`` (None: the target alone) on ``machine``.
    Raises ModelFileError for a file that is not a model."""
    target = open_model_file(target)
    draft = open_model_file(draft) if draft is not None else None
    gpu = machine.has_gpu and machine.device != "simulated GPU"
    # Each file's tensors read once (a split model's other parts are headers to walk), not
    # once for every context the plan tries
    target_tensors = all_tensors(target)
    draft_tensors = all_tensors(draft) if draft is not None else None

    def estimates(n: int) -> tuple[MemoryEstimate, MemoryEstimate | None]:
        return (estimate_for(target, n, draft=False, flash_attention=flash_attention, gpu=gpu, tensors=target_tensors),
                estimate_for(draft, n, draft=True, flash_attention=flash_attention, gpu=gpu, tensors=draft_tensors)
                if draft is not None else None)

    return plan_with_context(estimates, n_ctx, gpu_free=machine.gpu_free, ram_free=machine.ram_free,
                             device=machine.device, target_layers=target_gpu_layers, draft_layers=draft_gpu_layers)


def gpu_layers_for_load(plan_part: ModelPlan | None, asked: GpuLayers, machine: Machine) -> int:
    """The number a load gives llama.cpp (-1: all) for one model of a plan."""
    if asked != AUTO:
        return int(asked)
    if machine.unmeasured_gpu:
        return -1  # a GPU whose memory cannot be read: llama.cpp's own default, every layer
    if plan_part is None or not machine.has_gpu:
        return 0
    return plan_part.gpu_layers


def refusal(plan: PairPlan, n_ctx: int) -> str:
    """The one line that refuses a pair that does not fit (``plan.fits`` is False)."""
    what = "the pair" if plan.draft is not None else "the model"
    if plan.gpu_free and plan.gpu_bytes > plan.gpu_free:
        return (f"the GPU layers asked for put {gb(plan.gpu_bytes)} on the GPU, which has {gb(plan.gpu_free)} "
                "free; set the GPU layers to auto, or fewer")
    where = (f"{gb(plan.gpu_free)} free on the GPU and {gb(plan.ram_free)} of system memory"
             if plan.gpu_free else f"{gb(plan.ram_free)} of system memory available")
    line = f"{what} needs {gb(plan.bytes)} at a {n_ctx:,}-token context; this machine has {where}"
    if plan.smaller_context:
        return f"{line}; it would fit at a {plan.smaller_context:,}-token context"
    if plan.draft is not None:
        return f"{line}; try a smaller draft, a smaller quantisation or no draft"
    return f"{line}; try a smaller quantisation of the model"


def describe(plan: PairPlan) -> str:
    """One line for a person: "fits on the GPU: 7.9 of 11.2 GB", "28 of 40 target layers
    on the GPU", "runs on the CPU (1.2 GB of 20.1 GB)", or what does not fit."""
    if not plan.fits and plan.gpu_free and plan.gpu_bytes > plan.gpu_free:
        return f"does not fit: {gb(plan.gpu_bytes)} asked for on the GPU, which has {gb(plan.gpu_free)} free"
    if not plan.fits:
        line = f"does not fit: needs {gb(plan.bytes)}"
        return line + (f"; fits at a {plan.smaller_context:,}-token context" if plan.smaller_context else "")
    if not plan.gpu_free:
        return f"runs on the CPU: {gb(plan.bytes)} of {gb(plan.ram_free)} of memory"
    if not plan.gpu_bytes:
        return (f"runs on the CPU: not one layer fits the GPU's {gb(plan.gpu_free)} "
                f"({gb(plan.bytes)} of {gb(plan.ram_free)} of memory)")
    if all(m.whole for m in plan.models):
        return f"fits on the GPU: {gb(plan.gpu_bytes)} of {gb(plan.gpu_free)}"
    parts = []
    for name, m in (("target", plan.target), ("draft", plan.draft)):
        if m is None or m.whole:
            continue
        # As llama.cpp counts them: the output head is the last layer (for a large vocabulary
        # the dearest, with the logits' scratch)
        parts.append(f"{m.gpu_layers} of {m.layers + 1} {name} layers on the GPU")
    if plan.draft is not None and plan.draft.whole:
        parts.append("the draft wholly")
    return "; ".join(parts) + f" ({gb(plan.gpu_bytes)} of {gb(plan.gpu_free)})"


def gb(n: int) -> str:
    """Bytes in decimal gigabytes, as memory is sold and shown: "7.9 GB" (MB below 1 GB)."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def plan_line(target: str, draft: str, *, n_ctx: int, target_gpu_layers: GpuLayers = AUTO,
              draft_gpu_layers: GpuLayers = AUTO, flash_attention: str = "auto") -> str:
    """``describe`` of the plan for the paths a front end holds ('' target: the demo pair,
    when it is on disk; '' draft: none), prefixed "Memory: "; a file that cannot be read
    is said in the line, never raised. Reads headers and NVML: call it off the UI thread."""
    from app.errors import TandemError

    if not target:
        # The demo pair's facts and files, not its provisioning (which reaches llama.cpp):
        # this runs on the window's side.
        from app.models.demo_facts import MEMORY_BYTES
        from app.models.demo_files import is_provisioned, provisioned_paths

        if not is_provisioned():
            machine = read_machine()
            where = (f"fits on the GPU ({gb(machine.gpu_free)} free)" if machine.gpu_free > MEMORY_BYTES * 1.2
                     else f"runs on the CPU ({gb(machine.ram_free)} of memory available)")
            return f"Memory: the demo pair needs {gb(MEMORY_BYTES)} with its caches; {where}"
        demo_target, demo_draft = provisioned_paths()
        target, draft = str(demo_target), draft or str(demo_draft)
    try:
        plan = plan_files(target, draft or None, n_ctx=n_ctx, machine=read_machine(),
                          target_gpu_layers=target_gpu_layers, draft_gpu_layers=draft_gpu_layers,
                          flash_attention=flash_attention)
    except TandemError as exc:
        return f"Memory: not planned ({exc})"
    return "Memory: " + describe(plan)
