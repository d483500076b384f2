from __future__ import annotations

import os

import pynvml
import pytest
from PySide6.QtWidgets import QProgressBar

from gpu.fake_nvml import two_gpus  # the shared fake NVML

from app.bridge.gpu_poller import GpuPoller
from app.gpu.monitor import NO_GPU_MESSAGE, GpuMonitor
from app.ui.gpu_panel import GpuPanel


def _nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.fixture
def panel(qtbot) -> GpuPanel:
    widget = GpuPanel()
    qtbot.addWidget(widget)
    widget.show()
    return widget


@pytest.mark.skipif(_nvml_works(), reason="an NVIDIA driver is present")
def test_real_absent_nvml_shows_one_calm_line(panel):
    monitor = GpuMonitor()
    panel.show_status(monitor.poll())
    monitor.close()

    assert panel.message_label.isVisible()
    assert panel.message_label.text() == NO_GPU_MESSAGE
    assert panel.findChildren(QProgressBar) == []


def test_fake_gpus_show_name_vram_utilisation_and_own_share(panel):
    monitor = GpuMonitor(nvml=two_gpus(os.getpid()))
    panel.show_status(monitor.poll())

    assert not panel.message_label.isVisible()
    first, second = panel.rows
    assert first.name_label.text() == "NVIDIA GeForce RTX 4090"
    assert first.memory_bar.text() == "3.2 / 24.0 GiB"
    assert first.details_label.text() == "utilisation: 37 % · this app: 1.1 GiB"
    assert second.name_label.text() == "NVIDIA RTX A4000"
    assert second.memory_bar.text() == "2.0 / 16.0 GiB"
    assert second.details_label.text() == "utilisation: n/a"
    assert second.memory_bar.value() == 2 * 1024  # MiB, so 80 GiB cards fit an int


def test_rows_follow_the_status_and_back_to_the_message(panel):
    nvml = two_gpus(os.getpid())
    monitor = GpuMonitor(nvml=nvml)
    panel.show_status(monitor.poll())
    first_row = panel.rows[0]

    panel.show_status(monitor.poll())
    assert panel.rows[0] is first_row, "rows are reused between polls"

    nvml.gpus.pop()
    panel.show_status(monitor.poll())
    assert len(panel.rows) == 1

    nvml.count_error = pynvml.NVMLError_GpuIsLost()
    panel.show_status(monitor.poll())
    assert panel.rows == ()
    assert panel.message_label.isVisible()
    assert "GPU is lost" in panel.message_label.text()


def test_poller_emits_off_the_ui_thread_and_stops_cleanly(qtbot, panel):
    nvml = two_gpus(os.getpid())
    poller = GpuPoller(GpuMonitor(nvml=nvml), interval_ms=50)
    poller.status_changed.connect(panel.show_status)

    with qtbot.waitSignal(poller.status_changed, timeout=5000) as blocker:
        poller.start()
    assert blocker.args[0].available
    assert len(panel.rows) == 2

    # A few timer ticks, then a stop that joins the thread and shuts NVML down.
    qtbot.waitSignals([poller.status_changed] * 2, timeout=5000)
    poller.stop()
    assert not poller.running
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)

    with qtbot.assertNotEmitted(poller.status_changed, wait=200):
        pass
    poller.stop()  # a second stop is harmless


def test_poller_runs_monitor_on_a_worker_thread(qtbot):
    import threading

    seen: list[int] = []

    class RecordingMonitor(GpuMonitor):
        def poll(self):
            seen.append(threading.get_ident())
            return super().poll()

    poller = GpuPoller(RecordingMonitor(nvml=two_gpus(os.getpid())), interval_ms=50)
    with qtbot.waitSignal(poller.status_changed, timeout=5000):
        poller.start()
    poller.stop()
    assert seen and threading.get_ident() not in seen


def test_poller_can_restart_after_stop(qtbot):
    nvml = two_gpus(os.getpid())
    poller = GpuPoller(GpuMonitor(nvml=nvml), interval_ms=50)
    for _ in range(2):
        with qtbot.waitSignal(poller.status_changed, timeout=5000):
            poller.start()
        poller.stop()
    assert (nvml.init_calls, nvml.shutdown_calls) == (2, 2)
