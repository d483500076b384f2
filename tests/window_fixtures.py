"""Shared by the tests that build widgets or a window (tests/ui, tests/window, tests/bridge,
tests/cli/test_gui.py, tests/tools/test_stream_bench.py): they run without a display, and never
touch the user's own settings or history.

A folder's conftest.py imports ``tandem_home`` (autouse) and ``make_window`` from here; a
lone test file elsewhere imports ``tandem_home`` into itself. The session-wide pieces
(``check_caches``, ``qasync_loop``) live in tests/conftest.py, so there is one of each per run.
"""

from __future__ import annotations

import os
import shutil

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

LOAD_TIMEOUT_MS = 60_000    # the machine is shared: generous, but a hang still fails
REPLY_TIMEOUT_MS = 120_000


# What Tandem remembers of the child-process checks (a passed llama.cpp build probe, the
# model files that survived a trial load). Each pass is keyed by the files' paths, sizes,
# modification times and the build, so one test's pass holds for every test: shared,
# they spare each real-model window test the same children again (~2 s each here).
_CHECK_CACHES = ("llama-build-check.json", "model-checks.json")


@pytest.fixture(autouse=True)
def tandem_home(tmp_path, monkeypatch, check_caches):
    """Every path from app.storage.paths lands under this test's tmp_path (the check
    caches above aside: copied in before the test, and back after it)."""
    home = tmp_path / "tandem-home"
    monkeypatch.setenv("TANDEM_HOME", str(home))
    cache = home / "cache"
    cache.mkdir(parents=True)
    for name in _CHECK_CACHES:
        if (check_caches / name).is_file():
            shutil.copyfile(check_caches / name, cache / name)
    yield home
    for name in _CHECK_CACHES:
        if (cache / name).is_file():
            shutil.copyfile(cache / name, check_caches / name)


def demo_settings(demo_models, **changes):
    """The real demo pair, greedy and short, so replies are quick and repeatable."""
    from app.storage.settings import Settings

    values = dict(target_path=str(demo_models.target), draft_path=str(demo_models.draft),
                  temperature=0.0, n_ctx=1024, max_tokens=32)
    values.update(changes)
    return Settings(**values)


@pytest.fixture
def make_window(qtbot, qasync_loop):
    """Build a MainWindow: the real engine process by default, or the engine host on a
    thread loading with ``loader=`` (tests/bridge/fakes.py)."""
    from bridge.fakes import scripted_client

    from app.storage.settings import LoadedSettings, Settings
    from app.window.main_window import MainWindow

    windows = []

    def make(settings=None, *, loader=None, notice=None, loaded=None, **window_options):
        loaded = loaded or LoadedSettings(settings or Settings(), notice)
        # A real load with no target would provision the demo pair into tmp_path.
        assert loader is not None or loaded.settings.target_path, "give the real engine model paths"
        client = scripted_client(loader) if loader is not None else None
        window = MainWindow(loaded, client=client, **window_options)
        qtbot.addWidget(window)
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.close()


def wait_loaded(qtbot, window) -> None:
    qtbot.waitUntil(lambda: window.client.info is not None, timeout=LOAD_TIMEOUT_MS)


def send_and_wait(qtbot, window, text: str):
    """Send ``text`` and return the finished reply."""
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        window.send(text)
    return blocker.args[0]
