"""Read per-GPU memory and utilisation from NVML (``pynvml``, from nvidia-ml-py).

A machine without an NVIDIA driver is normal for this app (it runs on CPU), so
"no NVML" is a status, not an error: it is logged once and every later poll
returns the same calm status. The NVML module is injectable so that tests can
stand in a fake library for a machine with GPUs.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

_log = logging.getLogger(__name__)

NO_GPU_MESSAGE = "No NVIDIA GPU detected (running on CPU)"

# NVML reports "not available" for a process's memory with this sentinel
# (pynvml usually turns it into None, but not every version does).
_NOT_AVAILABLE = 2**64 - 1

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU at one moment. Optional fields are None where NVML cannot tell."""

    index: int
    name: str
    memory_used_bytes: int
    memory_total_bytes: int
    utilization_percent: int | None
    process_memory_bytes: int | None


@dataclass(frozen=True)
class GpuStatus:
    """Everything the GPU panel shows; ``message`` is fit to show as is."""

    available: bool
    message: str
    gpus: tuple[GpuSnapshot, ...] = ()


class GpuMonitor:
    """Polls NVML. Never raises for a missing or failing NVML; see ``poll``.

    Not meant to be shared between threads without the caller's care; a lock
    still guards init/poll/shutdown so that a stray call cannot interleave.
    """

    def __init__(self, nvml: Any = None) -> None:
        self._nvml: Any = nvml
        self._lock = threading.Lock()
        self._started = False
        self._initialised = False  # nvmlInit succeeded, so nvmlShutdown is owed
        self._unavailable: GpuStatus | None = None
        self._last_failure: str | None = None
        self._quiet_errors: set[tuple[str, str]] = set()

    @property
    def available(self) -> bool:
        return self._initialised and self._unavailable is None

    def start(self) -> None:
        """Initialise NVML once; on failure remember a calm status instead."""
        with self._lock:
            self._start_locked()

    def poll(self) -> GpuStatus:
        """Return the current status; starts NVML on first use."""
        with self._lock:
            self._start_locked()
            if self._unavailable is not None:
                return self._unavailable
            return self._read_all()

    def close(self) -> None:
        """Shut NVML down if this monitor initialised it; ``start`` may follow."""
        with self._lock:
            if self._initialised:
                try:
                    self._nvml.nvmlShutdown()
                except self._error_class() as exc:
                    _log.debug("nvmlShutdown failed: %s", exc)
            self._started = False
            self._initialised = False
            self._unavailable = None
            self._last_failure = None

    # -- internals -----------------------------------------------------------

    def _start_locked(self) -> None:
        if self._started:
            return
        self._started = True
        if self._nvml is None:
            try:
                self._nvml = _import_pynvml()
            except ImportError as exc:
                self._become_unavailable(NO_GPU_MESSAGE, f"pynvml not importable: {exc}")
                return
        try:
            self._nvml.nvmlInit()
        except (self._error_class(), OSError) as exc:
            self._become_unavailable(_init_failure_message(self._nvml, exc), f"nvmlInit: {exc}")
            return
        self._initialised = True

    def _become_unavailable(self, message: str, reason: str) -> None:
        # The one log line for a machine without NVML; polls stay silent after it.
        _log.info("GPU monitoring off: %s (%s)", message, reason)
        self._unavailable = GpuStatus(available=False, message=message)

    def _read_all(self) -> GpuStatus:
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
            gpus = tuple(self._snapshot(index) for index in range(count))
        except self._error_class() as exc:
            # A GPU can vanish or hang mid-session; report it, log each new cause once.
            message = f"Could not read GPU status ({exc})"
            if message != self._last_failure:
                _log.info("%s", message)
                self._last_failure = message
            return GpuStatus(available=False, message=message)
        self._last_failure = None
        if not gpus:
            return GpuStatus(available=False, message=NO_GPU_MESSAGE)
        plural = "s" if len(gpus) > 1 else ""
        return GpuStatus(available=True, message=f"{len(gpus)} NVIDIA GPU{plural}", gpus=gpus)

    def _snapshot(self, index: int) -> GpuSnapshot:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = self._optional(nvml.nvmlDeviceGetName, handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        rates = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        return GpuSnapshot(
            index=index,
            name=_decode(name) if name is not None else f"GPU {index}",
            memory_used_bytes=int(memory.used),
            memory_total_bytes=int(memory.total),
            utilization_percent=int(rates.gpu) if rates is not None else None,
            process_memory_bytes=self._process_memory(handle),
        )

    def _process_memory(self, handle: Any) -> int | None:
        """This process's VRAM on one GPU, or None where NVML does not say.

        Inside a container NVML lists host PIDs, so no entry matches and the
        answer is None rather than a wrong number.
        """
        pid = os.getpid()
        per_list: list[int] = []
        for query in (
            self._nvml.nvmlDeviceGetComputeRunningProcesses,
            self._nvml.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            processes = self._optional(query, handle) or ()
            used = [
                int(p.usedGpuMemory)
                for p in processes
                if p.pid == pid and p.usedGpuMemory is not None and p.usedGpuMemory != _NOT_AVAILABLE
            ]
            if used:
                per_list.append(sum(used))
        # A process with both a compute and a graphics context is listed twice
        # with the same allocation; max avoids counting it double.
        return max(per_list) if per_list else None

    def _optional(self, call: Callable[..., Any], *args: Any) -> Any:
        """Run an NVML query whose answer is a nice-to-have (NotSupported on some cards)."""
        try:
            return call(*args)
        except self._error_class() as exc:
            key = (getattr(call, "__name__", repr(call)), type(exc).__name__)
            if key not in self._quiet_errors:
                self._quiet_errors.add(key)
                _log.debug("%s unavailable: %s", key[0], exc)
            return None

    def _error_class(self) -> type[BaseException]:
        error = getattr(self._nvml, "NVMLError", None)
        return error if isinstance(error, type) else _NeverRaised


class _NeverRaised(Exception):
    """Stands in for NVMLError when there is no NVML module to take it from."""


def _import_pynvml() -> ModuleType:
    import pynvml  # deferred: the import itself is harmless, but keep start-up lean

    return pynvml


def _init_failure_message(nvml: Any, exc: BaseException) -> str:
    # No library or no driver is the ordinary CPU-only machine; anything else
    # (permissions, a broken driver) deserves to be named.
    quiet = tuple(
        cls
        for cls in (
            getattr(nvml, "NVMLError_LibraryNotFound", None),
            getattr(nvml, "NVMLError_DriverNotLoaded", None),
        )
        if isinstance(cls, type)
    )
    if isinstance(exc, OSError) or (quiet and isinstance(exc, quiet)):
        return NO_GPU_MESSAGE
    return f"NVIDIA GPU status unavailable ({exc})"


def _decode(name: Any) -> str:
    if isinstance(name, bytes):
        return name.decode("utf-8", errors="replace")
    return str(name)


def _exponent(n: int) -> int:
    exponent = 0
    while abs(n) >= 1024 ** (exponent + 1) and exponent < len(_UNITS) - 1:
        exponent += 1
    return exponent


def format_bytes(n: int) -> str:
    """Binary units with one decimal: ``format_bytes(3_435_973_837) == "3.2 GiB"``."""
    exponent = _exponent(n)
    if exponent == 0:
        return f"{n} B"
    return f"{n / 1024**exponent:.1f} {_UNITS[exponent]}"


def format_used_total(used: int, total: int) -> str:
    """``"3.2 / 24.0 GiB"``: both numbers in the unit that suits the total."""
    exponent = _exponent(total)
    if exponent == 0:
        return f"{used} / {total} B"
    scale = 1024**exponent
    return f"{used / scale:.1f} / {total / scale:.1f} {_UNITS[exponent]}"
