from __future__ import annotations

import logging
import os
import sys

import pynvml
import pytest
from .fake_nvml import GIB, FakeGpu, FakeNvml, two_gpus

from app.gpu.monitor import (
    NO_GPU_MESSAGE,
    GpuMonitor,
    GpuSnapshot,
    format_bytes,
    format_used_total,
)

LOGGER = "app.gpu.monitor"


@pytest.fixture
def no_real_nvml() -> None:
    """Skip on a machine where NVML works: these tests are about its absence."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return
    pynvml.nvmlShutdown()
    pytest.skip("an NVIDIA driver is present")


# -- the real library on a machine without a driver ---------------------------


def test_real_nvml_absent_is_a_calm_status_logged_once(no_real_nvml, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    monitor = GpuMonitor()
    monitor.start()
    first = monitor.poll()
    records_after_first_poll = len(caplog.records)

    second = monitor.poll()
    third = monitor.poll()
    monitor.close()

    assert first.available is False
    assert first.message == NO_GPU_MESSAGE
    assert first.gpus == ()
    assert second == third == first
    assert records_after_first_poll == 1
    assert caplog.records[0].levelno <= logging.INFO
    assert len(caplog.records) == records_after_first_poll, "polling must not repeat the log line"


def test_poll_without_start_initialises_lazily(no_real_nvml):
    status = GpuMonitor().poll()
    assert not status.available
    assert status.message == NO_GPU_MESSAGE


def test_missing_pynvml_module_is_the_same_calm_status(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    monitor = GpuMonitor()
    assert monitor.poll().message == NO_GPU_MESSAGE
    monitor.poll()
    monitor.close()
    assert len(caplog.records) == 1


def test_real_nvml_with_a_driver_reports_every_gpu():
    # The counterpart of the tests above, for machines that do have a GPU.
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pytest.skip("no NVIDIA driver here")
    expected = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()

    monitor = GpuMonitor()
    status = monitor.poll()
    monitor.close()
    assert status.available
    assert len(status.gpus) == expected
    for gpu in status.gpus:
        assert isinstance(gpu.name, str) and gpu.name
        assert 0 <= gpu.memory_used_bytes <= gpu.memory_total_bytes


# -- NVML present, through a fake library --------------------------------------


def test_unsupported_counter_is_logged_once_at_debug(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    monitor = GpuMonitor(nvml=two_gpus(os.getpid()))
    for _ in range(3):
        monitor.poll()
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_two_gpus_are_reported_with_this_process_share():
    monitor = GpuMonitor(nvml=two_gpus(os.getpid()))
    status = monitor.poll()

    assert status.available
    assert status.message == "2 NVIDIA GPUs"
    assert status.gpus == (
        GpuSnapshot(
            index=0,
            name="NVIDIA GeForce RTX 4090",  # came as bytes
            memory_used_bytes=int(3.2 * GIB),
            memory_total_bytes=24 * GIB,
            utilization_percent=37,
            process_memory_bytes=int(1.1 * GIB),
        ),
        GpuSnapshot(
            index=1,
            name="NVIDIA RTX A4000",
            memory_used_bytes=2 * GIB,
            memory_total_bytes=16 * GIB,
            utilization_percent=None,  # NotSupported on this card
            process_memory_bytes=None,  # only other processes listed
        ),
    )


def test_init_once_and_shutdown_once():
    nvml = two_gpus(os.getpid())
    monitor = GpuMonitor(nvml=nvml)
    monitor.start()
    monitor.start()
    monitor.poll()
    monitor.poll()
    monitor.close()
    monitor.close()
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_close_without_successful_init_does_not_shut_down():
    nvml = FakeNvml([], init_error=pynvml.NVMLError_DriverNotLoaded())
    monitor = GpuMonitor(nvml=nvml)
    status = monitor.poll()
    monitor.close()
    assert status.message == NO_GPU_MESSAGE
    assert nvml.shutdown_calls == 0


def test_unexpected_init_error_is_named_not_raised():
    nvml = FakeNvml([], init_error=pynvml.NVMLError_NoPermission())
    status = GpuMonitor(nvml=nvml).poll()
    assert not status.available
    assert "Insufficient Permissions" in status.message


def test_no_devices_is_the_no_gpu_message():
    status = GpuMonitor(nvml=FakeNvml([])).poll()
    assert (status.available, status.message) == (False, NO_GPU_MESSAGE)


def test_process_listed_as_compute_and_graphics_is_counted_once():
    pid = os.getpid()
    gpu = FakeGpu("GPU", used=GIB, total=8 * GIB, compute=[(pid, GIB // 2)], graphics=[(pid, GIB // 2)])
    status = GpuMonitor(nvml=FakeNvml([gpu])).poll()
    assert status.gpus[0].process_memory_bytes == GIB // 2


def test_process_memory_not_reported_by_driver_is_none():
    # Windows WDDM and some containers list the process without a number.
    gpu = FakeGpu("GPU", used=GIB, total=8 * GIB, compute=[(os.getpid(), None)])
    status = GpuMonitor(nvml=FakeNvml([gpu])).poll()
    assert status.gpus[0].process_memory_bytes is None


def test_gpu_lost_mid_session_reports_and_logs_once_then_recovers(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    nvml = two_gpus(os.getpid())
    monitor = GpuMonitor(nvml=nvml)
    assert monitor.poll().available
    caplog.clear()

    nvml.count_error = pynvml.NVMLError_GpuIsLost()
    lost = monitor.poll()
    monitor.poll()
    assert not lost.available
    assert "GPU is lost" in lost.message
    assert [r.getMessage() for r in caplog.records] == [lost.message]

    nvml.count_error = None
    assert monitor.poll().available


# -- formatting ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (int(1.5 * 1024**2), "1.5 MiB"),
        (int(3.2 * GIB), "3.2 GiB"),
        (80 * GIB, "80.0 GiB"),
        (2 * 1024**4, "2.0 TiB"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_format_used_total_shares_the_total_unit():
    assert format_used_total(int(3.2 * GIB), 24 * GIB) == "3.2 / 24.0 GiB"
    assert format_used_total(300 * 1024**2, 24 * GIB) == "0.3 / 24.0 GiB"
