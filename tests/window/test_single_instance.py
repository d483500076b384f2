"""One Tandem window per user: a second start, a real second process, hands its settings
to the open window (which comes to the front and loads them) and ends; a lock left by
a process that died does not keep the next start out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.storage import paths
from app.storage.settings import Settings
from app.window.single_instance import SingleInstance, present

from window_fixtures import wait_loaded
from bridge.fakes import ScriptedLoader, tokens

ROOT = Path(__file__).parents[2]
START_TIMEOUT_S = 120  # a whole second Tandem starting on a loaded machine: a hang guard


def child_env() -> dict:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    return env


def test_a_second_claim_in_the_same_folder_is_refused_until_the_first_lets_go(qapp, tmp_path):
    first, second = SingleInstance(tmp_path), SingleInstance(tmp_path)
    assert first.claim()
    assert not second.claim()
    first.release()
    assert second.claim()
    second.release()


def test_a_lock_left_by_a_process_that_died_does_not_keep_the_next_start_out(qapp, tmp_path):
    script = ("import os, sys; from pathlib import Path; from PySide6.QtCore import QCoreApplication; "
              "from app.window.single_instance import SingleInstance; app = QCoreApplication([]); "
              "held = SingleInstance(Path(sys.argv[1])); os._exit(0 if held.claim() else 3)")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=child_env(), timeout=START_TIMEOUT_S)
    assert done.returncode == 0 and (tmp_path / "window.lock").exists()  # left behind, as by a crash
    again = SingleInstance(tmp_path)
    assert again.claim()
    again.release()


def test_a_second_start_hands_its_model_to_the_open_window_and_ends(make_window, qtbot, tmp_path):
    loader = ScriptedLoader(tokens("Hi"))
    window = make_window(Settings(target_path="/models/first.gguf"), loader=loader)
    wait_loaded(qtbot, window)
    instance = SingleInstance(paths.runtime_dir())
    assert instance.claim()
    instance.message_received.connect(lambda message: present(window, message))
    target = tmp_path / "second.gguf"
    try:
        with qtbot.waitSignal(instance.message_received, timeout=START_TIMEOUT_S * 1000) as received:
            child = subprocess.Popen([sys.executable, "-m", "app", "--target", str(target)], env=child_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, err = child.communicate(timeout=START_TIMEOUT_S)
    finally:
        instance.release()
    assert child.returncode == 0, err
    assert "open already" in err and "brought to the front" in err
    assert received.args[0]["overrides"]["target_path"] == str(target.resolve())
    assert window.settings.target_path == str(target.resolve())  # in force for this session...
    qtbot.waitUntil(lambda: loader.specs[-1].target_path == str(target.resolve()), timeout=10_000)  # ...and loading
    assert window.isVisible()
    assert not (paths.config_dir() / "settings.json").exists() or \
        "second.gguf" not in (paths.config_dir() / "settings.json").read_text()  # not saved unasked
