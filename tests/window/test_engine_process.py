"""The window survives its engine: llama.cpp in a process of its own, on the real demo pair.

Each test runs the real window (offscreen) with a real engine process, and ends that
engine the ways llama.cpp's can end: ``kill -9`` in the middle of a reply, a SIGABRT
from inside the engine mid-reply (a test-only hook that calls ``os.abort()``, as a
GGML_ASSERT does), killed while loading, hung. Each time the window stays, says what
happened in one line, keeps what it showed (the reply marked interrupted), and after
Restart the next reply works. No engine process outlives its window.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PySide6.QtWidgets import QDialogButtonBox, QPushButton

from app.session import protocol
from app.storage import load_marker
from app.ui.message_view import COMPLETE, INTERRUPTED

from window_fixtures import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, demo_settings, wait_loaded
from .engine_processes import children_of, needs_proc, running, wait_gone

pytestmark = needs_proc
ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Tell me a long story about a lighthouse keeper."
# A fresh engine's first reply, on a machine shared with other jobs, can take a minute or
# two (threads tuned, caches warmed): a hang guard, not a speed limit.
FIRST_REPLY_TIMEOUT_MS = 600_000


def send_and_wait(qtbot, window, text: str):
    with qtbot.waitSignal(window.reply_finished, timeout=FIRST_REPLY_TIMEOUT_MS) as blocker:
        window.send(text)
    return blocker.args[0]


@pytest.fixture
def hooks(monkeypatch):
    """Test-only faults for the engines started from now on (read from the environment)."""
    def set_hooks(**values):
        monkeypatch.setenv(protocol.TEST_HOOKS, "1")
        for name, value in values.items():
            monkeypatch.setenv(getattr(protocol, name), str(value))

    def clear():
        for name in ("TEST_ABORT_AFTER", "TEST_HANG_AFTER", "TEST_HANG_LOADING"):
            monkeypatch.delenv(getattr(protocol, name), raising=False)

    set_hooks.clear = clear
    return set_hooks


@pytest.fixture
def engine_window(make_window, demo_models, qtbot):
    def make(wait=True, **changes):
        window = make_window(demo_settings(demo_models, **{"max_tokens": 12, **changes}))
        assert hasattr(window.client, "died")  # the engine process, not a thread in the window
        if wait:
            wait_loaded(qtbot, window)
        return window

    return make


def restart_button(window) -> QPushButton:
    notice = window.notices.notice("engine")
    assert notice is not None
    return next(b for b in notice.findChildren(QPushButton) if b.text() == "Restart engine")


def wait_dead(qtbot, window) -> str:
    qtbot.waitUntil(lambda: window.client.death is not None, timeout=FIRST_REPLY_TIMEOUT_MS)
    return window.client.death


def assert_next_reply_works_after_restart(qtbot, window, old_pid: int) -> None:
    restart_button(window).click()
    assert window.load_banner.isVisible()  # the progress bar, as at a start
    wait_loaded(qtbot, window)
    assert window.client.pid != old_pid and running(window.client.pid)
    assert window.notices.notice("engine") is None
    reply = send_and_wait(qtbot, window, "Hi")
    assert reply.status == COMPLETE and reply.text().strip()


def test_kill_9_mid_reply_keeps_the_chat_and_restart_works(engine_window, qtbot, hooks):
    hooks(TEST_HANG_AFTER=4)  # the reply stops moving after 4 tokens, so it is mid-reply when killed
    window = engine_window()
    pid = window.client.pid
    reply = window.send(PROMPT)
    qtbot.waitUntil(lambda: len(reply.events) >= 4, timeout=FIRST_REPLY_TIMEOUT_MS)
    shown = reply.text()
    assert window.client.busy

    os.kill(pid, signal.SIGKILL)
    line = wait_dead(qtbot, window)

    assert line == "The engine crashed (SIGKILL)"
    assert window.isVisible()
    assert reply.status == INTERRUPTED and reply.text() == shown and shown
    assert [m.role for m in window.chat_view.messages()] == ["user", "assistant"]
    assert window.notices.notice("engine").text().startswith("The engine crashed (SIGKILL). The chat is kept")
    assert not window.client.busy and not window.composer.button.isEnabled()
    assert window.model_label.text() == "Engine stopped"
    assert wait_gone(pid, 5)
    hooks.clear()
    assert_next_reply_works_after_restart(qtbot, window, pid)
    assert reply.text() == shown  # still on screen, as it was


def test_an_abort_inside_the_engine_mid_reply_is_one_line_with_its_last_words(engine_window, qtbot, hooks):
    hooks(TEST_ABORT_AFTER=3)
    window = engine_window()
    pid = window.client.pid
    with qtbot.waitSignal(window.reply_finished, timeout=FIRST_REPLY_TIMEOUT_MS) as finished:
        reply = window.send(PROMPT)
    assert finished.args[0] is reply and reply.status == INTERRUPTED
    assert len(reply.events) == 3 and reply.text()  # every token shown before the abort stays

    line = window.client.death
    assert line == "The engine crashed (SIGABRT: tandem test hook: abort after 3 tokens)"
    assert line in window.notices.notice("engine").text()
    assert window.isVisible()
    hooks.clear()
    assert_next_reply_works_after_restart(qtbot, window, pid)
    assert window.chat_view.messages()[1] is reply and reply.status == INTERRUPTED


def test_an_engine_killed_while_loading_is_not_loaded_again_until_asked(engine_window, qtbot, hooks, tandem_home):
    hooks(TEST_HANG_LOADING=1)  # the load stops at its first progress report
    window = engine_window(wait=False)
    pid = window.client.pid
    mark = tandem_home / "data" / f"loading-{pid}.json"
    qtbot.waitUntil(mark.exists, timeout=LOAD_TIMEOUT_MS)
    assert window.client.loading

    os.kill(pid, signal.SIGKILL)
    wait_dead(qtbot, window)

    # The crash-loop guard's rule: no retry, one line, the settings open.
    qtbot.waitUntil(lambda: window._settings_dialog is not None, timeout=10_000)
    notice = window.notices.notice("load")
    assert notice is not None and notice.text().startswith(
        "The engine crashed (SIGKILL) while loading SmolLM2-135M-Instruct.F32.gguf and ")
    assert "not loaded again" in notice.text()
    assert window.notices.notice("engine") is None
    assert window.client.info is None and not window.client.loading
    assert load_marker.crashed_load() is not None

    hooks.clear()
    window._settings_dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()  # the user's retry
    wait_loaded(qtbot, window)
    assert window.client.pid != pid and load_marker.crashed_load() is None
    reply = send_and_wait(qtbot, window, "Hi")
    assert reply.status == COMPLETE and reply.text().strip()


def test_a_hung_engine_is_found_by_the_heartbeat_and_can_be_ended(engine_window, qtbot, hooks):
    hooks(TEST_HANG_AFTER=2)
    window = engine_window()
    pid = window.client.pid
    reply = window.send(PROMPT)
    qtbot.waitUntil(lambda: len(reply.events) == 2, timeout=FIRST_REPLY_TIMEOUT_MS)
    window.client.hang_seconds = 2.0  # a minute in the app; a slow prompt on a busy machine is not a hang
    qtbot.waitUntil(lambda: window.notices.notice("engine") is not None, timeout=FIRST_REPLY_TIMEOUT_MS)
    notice = window.notices.notice("engine")
    assert "no progress" in notice.text()
    end = next(b for b in notice.findChildren(QPushButton) if b.text() == "End engine")

    end.click()
    assert wait_dead(qtbot, window) == "The engine was ended from here"
    assert reply.status == INTERRUPTED and len(reply.events) == 2
    assert wait_gone(pid, 5)
    window.client.hang_seconds = type(window.client).hang_seconds
    hooks.clear()
    assert_next_reply_works_after_restart(qtbot, window, pid)


def test_stop_ends_a_reply_and_quitting_leaves_nothing_running(engine_window, qtbot):
    window = engine_window(max_tokens=400)
    pid = window.client.pid
    reply = window.send(PROMPT)
    qtbot.waitUntil(lambda: len(reply.events) >= 2, timeout=FIRST_REPLY_TIMEOUT_MS)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.stop()
    assert reply.status.value == "stopped"
    assert running(pid)
    window.close()
    assert wait_gone(pid, 15)
    assert children_of(os.getpid()) == [] or pid not in children_of(os.getpid())


def test_after_the_engine_is_killed_nothing_of_it_runs(engine_window, qtbot):
    window = engine_window()
    pid = window.client.pid
    os.kill(pid, signal.SIGKILL)
    wait_dead(qtbot, window)
    assert not running(pid) and children_of(pid) == []
    window.close()
    assert pid not in children_of(os.getpid())


WINDOW = textwrap.dedent("""
    import sys
    from PySide6.QtWidgets import QApplication
    from app.storage.settings import LoadedSettings, Settings
    from app.window.main_window import MainWindow

    app = QApplication([])
    settings = Settings(target_path=sys.argv[1], draft_path=sys.argv[2], n_ctx=1024, max_tokens=16)
    window = MainWindow(LoadedSettings(settings, None))
    window.show()
    def loaded(info):
        print(window.client.pid, "llama_cpp" in sys.modules, flush=True)
    window.client.loaded.connect(loaded)
    if len(sys.argv) > 3:
        window.client.loaded.connect(lambda info: window.close())
    app.exec()
""")


def window_process(demo_models, tandem_home, *quit_when_loaded):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(tandem_home), QT_QPA_PLATFORM="offscreen")
    return subprocess.Popen([sys.executable, "-c", WINDOW, str(demo_models.target), str(demo_models.draft),
                             *quit_when_loaded], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)


def test_a_killed_window_leaves_no_engine_behind(demo_models, tandem_home):
    window = window_process(demo_models, tandem_home)
    try:
        pid_text, llama_in_window = window.stdout.readline().split()
        engine = int(pid_text)
        assert llama_in_window == "False"  # the window never loaded llama.cpp: one copy of the models
        assert running(engine)
        window.kill()
        window.wait(30)
        assert wait_gone(engine, 30)  # the engine saw its channel close and ended
        assert load_marker.crashed_load() is None  # and no death was assumed
    finally:
        window.kill()
        window.wait()


def test_a_window_that_quits_ends_its_engine(demo_models, tandem_home):
    window = window_process(demo_models, tandem_home, "quit")
    try:
        engine = int(window.stdout.readline().split()[0])
        assert window.wait(60) == 0
        assert wait_gone(engine, 30)
    finally:
        window.kill()
        window.wait()


def test_the_settings_offer_llama_cpps_chat_formats_as_the_engine_process_said_them(engine_window, qtbot):
    window = engine_window()
    assert "chatml" in window.client.chat_format_names()  # from its Ready: the window never asks llama.cpp
    dialog = window.prefs.open_dialog()
    assert dialog.editors["chat_formats"].findData("chatml") > 0
    dialog.reject()
