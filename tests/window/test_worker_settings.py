"""Settings → Hardware → Remote workers: a list with Add, Remove and Test, saved as
``rpc_workers``. Test asks a real ``tandem worker`` on 127.0.0.1 off the GUI thread and
says in one line what it reports and the hello's round trip, or why not."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from app.backends.llama import rpc
from app.storage.settings import load_settings

from window_fixtures import wait_loaded
from bridge.fakes import ScriptedLoader
from .test_main_window import SETTINGS

from rpc_workers import free_port, workers

TEST_TIMEOUT_MS = 60_000  # a hang guard; a closed port answers at once, a live worker in a round trip


@pytest.fixture
def window(make_window, qtbot):
    window = make_window(SETTINGS, loader=ScriptedLoader())
    wait_loaded(qtbot, window)
    return window


def _add(rows, text: str) -> bool:
    rows.entry.setText(text)
    return rows.add_entry()


def test_workers_are_added_removed_and_saved_in_the_settings_spelling(window, qtbot):
    dialog = window.open_settings()
    rows = dialog.editors["rpc_workers"]
    assert rows.endpoints() == [] and not rows.test_button.isEnabled()
    assert _add(rows, " 127.0.0.1:50052 ")
    assert _add(rows, "192.168.1.20:50053")
    assert _add(rows, "gpu-box:7000")
    # A bad address, or one already there, is one line under the list and is not added.
    assert not _add(rows, "192.168.1.20")
    assert rows.result_label.text() == "worker '192.168.1.20' must be written host:port (e.g. 192.168.1.20:50052)"
    assert not _add(rows, "127.0.0.1:50052")
    assert rows.result_label.text() == "worker 127.0.0.1:50052 is already in the list"
    rows.entry.clear()
    rows.list.setCurrentRow(1)
    rows.remove_button.click()
    assert rows.endpoints() == ["127.0.0.1:50052", "gpu-box:7000"]
    with qtbot.waitSignal(window.client.loaded, timeout=10_000):  # the target's devices changed: reload
        dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert window.settings.rpc_workers == "127.0.0.1:50052,gpu-box:7000"
    assert load_settings().settings.rpc_workers == "127.0.0.1:50052,gpu-box:7000"
    reopened = window.open_settings()
    assert reopened.editors["rpc_workers"].endpoints() == ["127.0.0.1:50052", "gpu-box:7000"]
    reopened.reject()


def test_an_address_typed_but_not_added_is_kept_or_refused_by_ok(window, qtbot):
    dialog = window.open_settings()
    rows = dialog.editors["rpc_workers"]
    rows.entry.setText("nonsense")
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert dialog.isVisible() and "must be written host:port" in dialog.error_label.text()
    rows.entry.setText("10.0.0.2:50052")
    with qtbot.waitSignal(window.client.loaded, timeout=10_000):
        dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert window.settings.rpc_workers == "10.0.0.2:50052"


@pytest.mark.skipif(not rpc.available(), reason="this llama.cpp build has no RPC backend")
def test_test_says_what_a_live_worker_reports_and_why_a_closed_port_cannot_be_used(window, qtbot):
    closed = f"127.0.0.1:{free_port()}"
    with workers(1) as (worker,):
        dialog = window.open_settings()
        rows = dialog.editors["rpc_workers"]
        rows.setText(f"{worker.endpoint},{closed}")
        rows.test_button.click()  # nothing selected: every worker
        assert rows.result(worker.endpoint) == f"{worker.endpoint}: testing…"
        qtbot.waitUntil(lambda: "testing" not in rows.result_label.text(), timeout=TEST_TIMEOUT_MS)
        live, dead = rows.result(worker.endpoint), rows.result(closed)
        version = ".".join(map(str, rpc.PROTOCOL))
        assert live.startswith(f"✓ {worker.endpoint}: RPC {version}, 1 device, ") and " free of " in live
        assert "; hello " in live and live.endswith(" ms")
        assert dead.startswith(f"✗ worker {closed} is not there (connection refused)")
        assert rows.result_label.text().splitlines() == [live, dead]  # one line each, in list order
        # A selected row alone is tested again.
        rows.list.setCurrentRow(1)
        rows.test_button.click()
        assert rows.result(closed) == f"{closed}: testing…" and rows.result(worker.endpoint) == live
        qtbot.waitUntil(lambda: "testing" not in rows.result_label.text(), timeout=TEST_TIMEOUT_MS)
        dialog.reject()
