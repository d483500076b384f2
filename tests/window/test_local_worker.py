"""File → Local worker…: the window starts a real ``tandem worker`` child on 127.0.0.1,
shows its address (with Copy) and what it serves, and the child ends at Stop, at the
window's close, and, the window gone without a word, when its stdin closes."""

from __future__ import annotations

import os
import subprocess

import pytest
from PySide6.QtWidgets import QApplication

from app.backends.llama import rpc
from app.window.local_worker import worker_command

from window_fixtures import wait_loaded
from bridge.fakes import ScriptedLoader
from .test_main_window import SETTINGS

from rpc_workers import READY_WITHIN_S, ROOT, Worker, free_port, tandem_env

pytestmark = pytest.mark.skipif(not rpc.available(), reason="this llama.cpp build has no RPC backend")
START_TIMEOUT_MS = int(READY_WITHIN_S * 1000)  # a hang guard for a child's start, not a speed


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def window(make_window, qtbot):
    window = make_window(SETTINGS, loader=ScriptedLoader())
    wait_loaded(qtbot, window)
    return window


def _start(window, qtbot, port: int):
    dialog = window.local_worker.open_dialog()
    dialog.port.setValue(port)
    dialog.start_button.click()
    assert not dialog.start_button.isEnabled() and dialog.stop_button.isEnabled()
    qtbot.waitUntil(lambda: bool(window.local_worker.address) or not window.local_worker.running, timeout=START_TIMEOUT_MS)
    return dialog


def test_the_dialog_starts_a_worker_that_answers_shows_and_copies_its_address_and_stop_ends_it(window, qtbot):
    assert window.local_worker.action in window.menuBar().actions()[0].menu().actions()
    port = free_port()
    dialog = _start(window, qtbot, port)
    controller = window.local_worker
    address = f"127.0.0.1:{port}"
    assert dialog.address.text() == address == controller.address, controller.last_error
    assert "CPU" in dialog.devices.text() and " free of " in dialog.devices.text()
    assert "only this machine" in dialog.status.text()
    qtbot.waitUntil(lambda: _answers(address), timeout=START_TIMEOUT_MS)  # the port is bound after the banner
    assert rpc.check_worker(address) == rpc.PROTOCOL
    dialog.copy_button.click()
    assert QApplication.clipboard().text() == address
    pid = controller.pid
    dialog.stop_button.click()
    assert not controller.running and _gone(pid)
    assert dialog.address.text() == "" and dialog.start_button.isEnabled() and dialog.status.text() == ""
    with pytest.raises(rpc.WorkerError, match="is not there"):
        rpc.hello(address)


def _answers(address: str) -> bool:
    try:
        rpc.hello(address)
        return True
    except rpc.WorkerError:
        return False


def test_closing_the_window_ends_the_worker(window, qtbot):
    _start(window, qtbot, free_port())
    pid = window.local_worker.pid
    assert pid and not _gone(pid)
    window.close()
    assert _gone(pid)


def test_a_port_in_use_is_one_line_in_the_dialog(window, qtbot):
    taken = Worker(free_port())
    try:
        taken.wait_ready()
        dialog = _start(window, qtbot, taken.port)
        assert not window.local_worker.running
        line = dialog.status.text()
        assert line.startswith(f"cannot listen on 127.0.0.1:{taken.port}") and "\n" not in line, line
        assert dialog.start_button.isEnabled()
    finally:
        taken.kill()


def test_other_machines_need_the_box_ticked_and_are_warned():
    dialog_command = worker_command(50052, allow_remote=False)
    assert "--allow-remote" not in dialog_command and "--host" not in dialog_command
    assert worker_command(50052, allow_remote=True)[-3:] == ["--host", "0.0.0.0", "--allow-remote"]


def test_the_warning_shows_with_the_box(window, qtbot):
    dialog = window.local_worker.open_dialog()
    assert not dialog.warning.isVisible()
    dialog.allow_remote.setChecked(True)
    assert dialog.warning.isVisible() and "Anyone who can reach this port" in dialog.warning.text()
    dialog.reject()


def test_a_worker_whose_stdin_closes_ends_so_a_crashed_window_leaves_none():
    port = free_port()
    child = subprocess.Popen(worker_command(port, allow_remote=False) + ["--threads", "1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=tandem_env(), cwd=ROOT)
    try:
        for line in child.stdout:
            if line.strip().startswith("use it:"):
                break
        assert child.poll() is None
        child.stdin.close()  # what the window's death does to it
        assert child.wait(timeout=READY_WITHIN_S) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
