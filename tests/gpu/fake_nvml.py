"""A tiny stand-in for the ``pynvml`` module, for machines without a GPU.

It raises the real pynvml error classes so that the monitor's error handling
is exercised against what the library actually throws.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml


@dataclass
class FakeGpu:
    name: str | bytes
    used: int
    total: int
    utilization: int | None = 0  # None: the card answers NotSupported
    compute: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVMLError_Uninitialized = pynvml.NVMLError_Uninitialized

    def __init__(self, gpus: list[FakeGpu], init_error: BaseException | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.count_error: BaseException | None = None
        self.init_calls = 0
        self.shutdown_calls = 0
        self._initialised = False

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error
        self._initialised = True

    def nvmlShutdown(self) -> None:
        self._require_init()
        self.shutdown_calls += 1
        self._initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        if self.count_error is not None:
            raise self.count_error
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._require_init()
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str | bytes:
        return handle.name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(total=handle.total, used=handle.used, free=handle.total - handle.used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        if handle.utilization is None:
            raise pynvml.NVMLError_NotSupported()
        return SimpleNamespace(gpu=handle.utilization, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.graphics]

    def _require_init(self) -> None:
        if not self._initialised:
            raise pynvml.NVMLError_Uninitialized()


GIB = 1024**3


def two_gpus(pid: int) -> FakeNvml:
    """A workstation: this process on GPU 0; GPU 1 busy with others, no utilisation counter."""
    return FakeNvml(
        [
            FakeGpu(
                name=b"NVIDIA GeForce RTX 4090",
                used=int(3.2 * GIB),
                total=24 * GIB,
                utilization=37,
                compute=[(pid, int(1.1 * GIB)), (pid + 1, GIB)],
            ),
            FakeGpu(
                name="NVIDIA RTX A4000",
                used=2 * GIB,
                total=16 * GIB,
                utilization=None,
                compute=[(pid + 2, 2 * GIB)],
            ),
        ]
    )
