"""Shows a GpuStatus: per GPU its name, a VRAM bar, utilisation and this app's share.

Display only: the panel never talks to NVML; a GpuPoller feeds ``show_status``.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QVBoxLayout, QWidget

from app.gpu.monitor import GpuSnapshot, GpuStatus, format_bytes, format_used_total

_MIB = 1024 * 1024


class _GpuRow(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name_label = QLabel(self)
        self.name_label.setObjectName("gpuName")
        font = self.name_label.font()
        font.setBold(True)
        self.name_label.setFont(font)
        self.memory_bar = QProgressBar(self)
        self.memory_bar.setObjectName("gpuMemory")
        self.memory_bar.setTextVisible(True)
        self.details_label = QLabel(self)
        self.details_label.setObjectName("gpuDetails")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.name_label)
        layout.addWidget(self.memory_bar)
        layout.addWidget(self.details_label)

    def show_snapshot(self, gpu: GpuSnapshot) -> None:
        self.name_label.setText(gpu.name)
        # QProgressBar holds a 32-bit int: count MiB, not bytes.
        self.memory_bar.setRange(0, max(1, gpu.memory_total_bytes // _MIB))
        self.memory_bar.setValue(min(gpu.memory_used_bytes, gpu.memory_total_bytes) // _MIB)
        text = format_used_total(gpu.memory_used_bytes, gpu.memory_total_bytes)
        self.memory_bar.setFormat(text)
        self.memory_bar.setToolTip(
            f"VRAM used: {gpu.memory_used_bytes:,} of {gpu.memory_total_bytes:,} bytes"
        )
        self.details_label.setText(_details(gpu))


def _details(gpu: GpuSnapshot) -> str:
    if gpu.utilization_percent is None:
        parts = ["utilisation: n/a"]
    else:
        parts = [f"utilisation: {gpu.utilization_percent} %"]
    if gpu.process_memory_bytes is not None:
        parts.append(f"this app: {format_bytes(gpu.process_memory_bytes)}")
    return " · ".join(parts)


class GpuPanel(QWidget):
    """One row per GPU, or one calm line when there is none to show."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message_label = QLabel("Checking for GPUs…", self)
        self.message_label.setObjectName("gpuMessage")
        self.message_label.setWordWrap(True)
        self._rows: list[_GpuRow] = []
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.addWidget(self.message_label)
        self._status: GpuStatus | None = None
        # The memory plan the models were loaded with, against what NVML then reports.
        self.plan_label = QLabel("", self)
        self.plan_label.setObjectName("gpuPlan")
        self.plan_label.setWordWrap(True)
        self.plan_label.hide()
        self._layout.addWidget(self.plan_label)
        self._plan: tuple[str, int, int] | None = None  # (plan line, planned GPU bytes, llama.cpp's bytes)

    @property
    def status(self) -> GpuStatus | None:
        return self._status

    @property
    def rows(self) -> tuple[_GpuRow, ...]:
        return tuple(self._rows)

    def show_status(self, status: GpuStatus) -> None:
        self._status = status
        gpus = status.gpus if status.available else ()
        self._resize_rows(len(gpus))
        for row, gpu in zip(self._rows, gpus):
            row.show_snapshot(gpu)
        self.message_label.setText(status.message)
        self.message_label.setVisible(not gpus)
        self._show_plan_line()

    def show_plan(self, line: str, planned_gpu_bytes: int, allocated_bytes: int) -> None:
        """The plan a load followed (``LoadInfo.memory_plan``), compared with what llama.cpp
        allocated and, on a GPU, with what NVML says this app uses."""
        self._plan = (line, planned_gpu_bytes, allocated_bytes) if line else None
        self._show_plan_line()

    def _show_plan_line(self) -> None:
        if self._plan is None:
            self.plan_label.hide()
            return
        line, planned_gpu, allocated = self._plan
        parts = [f"Planned: {line}"]
        if allocated:
            parts.append(f"llama.cpp allocated {format_bytes(allocated)}")
        status = self._status
        used = [g.process_memory_bytes for g in status.gpus] if status is not None and status.available else []
        if planned_gpu and used and all(u is not None for u in used):
            parts.append(f"NVML: this app uses {format_bytes(sum(used))} of the {format_bytes(planned_gpu)} "
                         "planned on the GPU")
        self.plan_label.setText(" · ".join(parts))
        self.plan_label.show()

    @property
    def plan_text(self) -> str:
        return self.plan_label.text() if self._plan is not None else ""

    def _resize_rows(self, count: int) -> None:
        # Rows are reused across polls so the panel does not flicker every second.
        while len(self._rows) > count:
            row = self._rows.pop()
            self._layout.removeWidget(row)
            row.deleteLater()
        while len(self._rows) < count:
            row = _GpuRow(self)
            self._layout.addWidget(row)
            self._rows.append(row)
