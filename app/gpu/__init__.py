"""GPU status from NVML. A leaf package: no Qt, no engine imports."""

from app.gpu.monitor import (
    NO_GPU_MESSAGE,
    GpuMonitor,
    GpuSnapshot,
    GpuStatus,
    format_bytes,
    format_used_total,
)

__all__ = [
    "NO_GPU_MESSAGE",
    "GpuMonitor",
    "GpuSnapshot",
    "GpuStatus",
    "format_bytes",
    "format_used_total",
]
