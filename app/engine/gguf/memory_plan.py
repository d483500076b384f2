"""Where a target and its draft go: how many layers of each on the GPU, before loading.

The order is the one speculation wants (docs/using.md, "Will my pair fit"):

1. the draft wholly on the GPU first: it runs several times a round, and a draft
   step waiting on the CPU costs more than a target layer there;
2. then as many target layers as fit, keeping a margin for the driver and the
   desktop (a tenth of the free memory, at most ``MARGIN_MOST``);
3. whatever is not on the GPU must fit in system memory; if the pair does not fit
   both together at this context, the plan says at which smaller context it would.

A number of GPU layers the user chose is kept as it is (-1: all); ``"auto"`` is
planned. Pure arithmetic on ``MemoryEstimate``: the front ends read the free memory
(``app/session/fit.py``) and show the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from app.engine.gguf.memory_estimate import MemoryEstimate

AUTO = "auto"
MARGIN_MOST = 1 << 30    # llama.cpp's --fit keeps 1 GiB free; on a small budget a tenth of it
MARGIN_SHARE = 0.10
SMALLEST_CONTEXT = 512   # a plan never suggests a context smaller than this

GpuLayers = int | Literal["auto"]


@dataclass(frozen=True)
class ModelPlan:
    """One model's part of a plan."""

    estimate: MemoryEstimate
    gpu_layers: int          # layers on the GPU as llama.cpp counts them (n_layers + 1: all, the head too)
    asked: GpuLayers         # what the setting said

    @property
    def layers(self) -> int:
        return self.estimate.n_layers

    @property
    def whole(self) -> bool:
        return self.gpu_layers > self.layers

    @property
    def gpu_bytes(self) -> int:
        return self.estimate.gpu_bytes(self.gpu_layers)

    @property
    def ram_bytes(self) -> int:
        return self.estimate.ram_bytes(self.gpu_layers)

    @property
    def bytes(self) -> int:
        return self.estimate.bytes


@dataclass(frozen=True)
class PairPlan:
    target: ModelPlan
    draft: ModelPlan | None
    device: str              # the GPU planned for, or "CPU"
    gpu_free: int            # its free memory (0: none)
    ram_free: int            # system memory available
    fits: bool
    smaller_context: int | None = None  # where it does not fit: the largest context that would (None: none)

    @property
    def models(self) -> tuple[ModelPlan, ...]:
        return (self.target,) if self.draft is None else (self.target, self.draft)

    @property
    def gpu_bytes(self) -> int:
        return sum(m.gpu_bytes for m in self.models) if self.gpu_free else 0

    @property
    def ram_bytes(self) -> int:
        return sum(m.ram_bytes for m in self.models) if self.gpu_free else sum(m.bytes for m in self.models)

    @property
    def bytes(self) -> int:
        return sum(m.bytes for m in self.models)


def margin(gpu_free: int) -> int:
    return min(MARGIN_MOST, int(gpu_free * MARGIN_SHARE))


def plan_pair(target: MemoryEstimate, draft: MemoryEstimate | None, *, gpu_free: int, ram_free: int,
              device: str = "GPU", target_layers: GpuLayers = AUTO, draft_layers: GpuLayers = AUTO) -> PairPlan:
    """Place ``target`` and ``draft`` (their estimates at the context wanted) on a GPU with
    ``gpu_free`` bytes free (0: no GPU) and ``ram_free`` bytes of system memory."""
    budget = max(0, gpu_free - margin(gpu_free)) if gpu_free else 0
    draft_plan = None
    if draft is not None:
        draft_plan = _place(draft, draft_layers, budget)
        budget -= draft_plan.gpu_bytes if gpu_free else 0
    target_plan = _place(target, target_layers, max(0, budget))
    plan = PairPlan(target=target_plan, draft=draft_plan, device=device if gpu_free else "CPU",
                    gpu_free=gpu_free, ram_free=ram_free, fits=False)
    on_gpu_ok = not gpu_free or plan.gpu_bytes <= gpu_free
    return replace(plan, fits=on_gpu_ok and plan.ram_bytes <= ram_free)


def _place(estimate: MemoryEstimate, asked: GpuLayers, budget: int) -> ModelPlan:
    if asked != AUTO:
        return ModelPlan(estimate, estimate.offloaded(int(asked)), asked)
    # Layers go to the GPU from the last one down (llama.cpp's order); the most that fit.
    most = estimate.n_layers + 1
    chosen = 0
    for g in range(most, 0, -1):
        if estimate.gpu_bytes(g) <= budget:
            chosen = g
            break
    return ModelPlan(estimate, chosen, asked)


def plan_with_context(estimate_at: Callable[[int], tuple[MemoryEstimate, MemoryEstimate | None]], n_ctx: int,
                      **budget) -> PairPlan:
    """``plan_pair`` at ``n_ctx``; where the pair does not fit, also the largest context
    (a power of two, down to ``SMALLEST_CONTEXT``) at which it would. ``estimate_at(n)``: the
    target's and the draft's estimates at a context of n tokens."""
    plan = plan_pair(*estimate_at(n_ctx), **budget)
    if plan.fits:
        return plan
    n = 1 << max(0, (n_ctx - 1).bit_length() - 1)  # the powers of two below it, largest first
    while n >= SMALLEST_CONTEXT:
        if plan_pair(*estimate_at(n), **budget).fits:
            return replace(plan, smaller_context=n)
        n //= 2
    return plan
