"""Start-up helpers: command-line overrides and the no-display fallback."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.main import build_parser
from app.cli.gui import has_display, settings_overrides

from window.engine_processes import wait_gone
from window_fixtures import tandem_home  # noqa: F401  (autouse: TANDEM_HOME under tmp_path)


def test_only_options_given_on_the_command_line_override_settings(tmp_path):
    model = tmp_path / "target.gguf"
    args = build_parser().parse_args(["--target", str(model), "--n-ctx", "2048"])
    assert settings_overrides(args) == {"target_path": str(model.resolve()), "n_ctx": 2048}
    assert settings_overrides(build_parser().parse_args([])) == {}


def test_gpu_layers_override_applies_to_both_models():
    args = argparse.Namespace(target=None, draft=Path("d.gguf"), drafter="lookup", n_ctx=4096, threads=4,
                              gpu_layers=0)
    overrides = settings_overrides(args)
    assert overrides["target_gpu_layers"] == overrides["draft_gpu_layers"] == 0
    assert overrides["drafter"] == "lookup" and overrides["n_threads"] == 4
    assert overrides["draft_path"].endswith("d.gguf")


def test_no_display_is_detected_on_linux(monkeypatch):
    monkeypatch.setattr("sys.platform", "linux")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    assert not has_display()
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert has_display()


LAUNCH_SCRIPT = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.cli.main import build_parser
from app.cli.gui import launch

app = QApplication(sys.argv[:1])

def close_when_loaded():
    for widget in QApplication.topLevelWidgets():
        client = getattr(widget, "client", None)
        if client is not None and client.info is not None:
            # one load: the window's request joined the one launch asked for before building it
            print("LOADED", client.info.target_name, client.info.draft_name, client._load_id, client.pid, flush=True)
            widget.close()
            return
    QTimer.singleShot(50, close_when_loaded)

QTimer.singleShot(50, close_when_loaded)
sys.exit(launch(build_parser().parse_args(sys.argv[1:])))
"""


def test_launch_opens_the_window_on_qasync_and_exits_cleanly(demo_models, tandem_home, tmp_path):
    """The README's run command, end to end: window, engine process, models, clean exit."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TANDEM_HOME=str(tandem_home))
    result = subprocess.run(
        [sys.executable, "-c", LAUNCH_SCRIPT, "--target", str(demo_models.target), "--draft", str(demo_models.draft),
         "--n-ctx", "512"],
        env=env, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = next(line for line in result.stdout.splitlines() if line.startswith("LOADED "))
    assert loaded.startswith(f"LOADED {demo_models.target.name} {demo_models.draft.name} 1 ")
    engine = int(loaded.split()[-1])  # the engine process launch started before the window
    assert engine and wait_gone(engine, 30)  # and ended with it
    assert "Traceback" not in result.stderr
    saved = json.loads((tandem_home / "config" / "settings.json").read_text(encoding="utf-8"))["settings"]
    assert saved["window_geometry"]  # remembered on close
    assert saved["target_path"] == "" and saved["n_ctx"] == 4096  # command-line choices stay out of the file


FAILING_BUILD_SCRIPT = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox
from app.cli.main import run

app = QApplication(sys.argv[:1])

def read_and_close():
    box = QApplication.activeModalWidget()
    if isinstance(box, QMessageBox):
        print("BOX", box.windowTitle(), "|", box.text().replace("\n", " / "), flush=True)
        copy = next(b for b in box.buttons() if b.text() == "Copy command")
        copy.click()
        print("CLIPBOARD", QApplication.clipboard().text(), flush=True)
        print("OTHER WINDOWS", [w.windowTitle() for w in QApplication.topLevelWidgets()
                                if w.isVisible() and w is not box], flush=True)
        box.done(0)
        return
    QTimer.singleShot(50, read_and_close)

QTimer.singleShot(50, read_and_close)
sys.exit(run([]))  # as `tandem` starts: logging, then the window
"""


def test_a_llama_cpp_build_that_dies_is_explained_in_the_window(tandem_home):
    """No vanished window: the probe's child dies (SIGILL, as on a Xeon with AMX), the app says so."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TANDEM_HOME=str(tandem_home),
               TANDEM_PROBE_SIMULATE_SIGNAL="SIGILL")
    result = subprocess.run([sys.executable, "-c", FAILING_BUILD_SCRIPT], env=env, capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 1, result.stderr[-2000:]
    box = next(line for line in result.stdout.splitlines() if line.startswith("BOX "))
    assert "Tandem cannot run its models" in box and "killed by SIGILL" in box
    assert "installers/setup.py" in box
    clipboard = next(line for line in result.stdout.splitlines() if line.startswith("CLIPBOARD "))
    assert clipboard.removeprefix("CLIPBOARD ").startswith("python3 ") and clipboard.endswith("setup.py")
    assert "OTHER WINDOWS []" in result.stdout  # no chat window that would vanish at the first decode
    errors = [line for line in result.stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(errors) == 1 and "Rebuild it with:" in errors[0] and "Traceback" not in result.stderr
    log = (tandem_home / "log" / "tandem.log").read_text(encoding="utf-8")
    assert "killed by SIGILL" in log  # and the log file has it, for a window started from a menu


CLOSED_AT_ONCE_SCRIPT = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QWidget
from app.bridge.async_glue import run_app

app = QApplication(sys.argv[:1])
window = QWidget()
window.show()
QTimer.singleShot(0, window.close)  # closed in the loop's first turn, before run_app's coroutine runs
print("RESULT", run_app(app), flush=True)
"""


def test_a_window_closed_in_the_loops_first_turn_ends_the_app_cleanly(tmp_path):
    """The models load while the window builds, so a window can be loaded, and closed,
    in the event loop's very first turn: the app still ends with 0, not a traceback."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TANDEM_HOME=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", CLOSED_AT_ONCE_SCRIPT], env=env, capture_output=True, text=True,
                            timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0 and "RESULT 0" in result.stdout, result.stderr[-2000:]
