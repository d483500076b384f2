"""Open the chat window: QApplication, app icon and style, settings, qasync's event loop.

``launch`` starts the engine process as soon as the one-window lock is held and the
llama.cpp build check passed, before it imports the window's own modules: the child's
Python, numpy and llama.cpp load on another core while the window imports and builds,
and the ``Load`` sent meanwhile waits in the link and goes first. So the child's imports
cost no start-up time (``tools/engine_costs.py``: ``process`` against ``late``, the
engine started by the built window).

Without any display to open it on (a Linux SSH session), ``app.cli.main`` starts the
terminal chat instead; ``has_display`` is how it tells.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from app.backends.build_check import BuildCheck, check_llama_build
from app.drafter_kinds import DEFAULT as DEFAULT_DRAFTER
from app.logs import FILE_ONLY

# Command-line model options (app.cli.main) and the defaults they have when not given.
_OVERRIDES = (("target", "target_path", None), ("draft", "draft_path", None), ("drafter", "drafter", DEFAULT_DRAFTER),
              ("n_ctx", "n_ctx", 4096), ("threads", "n_threads", 0), ("gpu_layers", "target_gpu_layers", "auto"),
              ("draft_gpu_layers", "draft_gpu_layers", None), ("flash_attn", "flash_attention", "auto"))


def settings_overrides(args: argparse.Namespace) -> dict:
    """Settings given on the command line; they apply to this session and are saved only if edited."""
    overrides = {}
    for arg, setting, default in _OVERRIDES:
        value = getattr(args, arg, default)
        if value is not None and value != default:
            overrides[setting] = str(Path(value).expanduser().resolve()) if isinstance(value, Path) else value
    if "target_gpu_layers" in overrides and getattr(args, "draft_gpu_layers", None) is None:
        overrides["draft_gpu_layers"] = overrides["target_gpu_layers"]  # -ngl alone sets both, as for the command line's other commands
    return overrides


def chat_format_override(args: argparse.Namespace, settings) -> dict:
    """``--chat-format NAME`` for the target the window will load, as a settings override
    (kept for the file only if the user then edits the settings)."""
    if getattr(args, "chat_format", None) is None:
        return {}
    from app.storage.settings import with_chat_format
    from app.terminal.shared import chat_format

    target = settings_overrides(args).get("target_path", settings.target_path)
    return {"chat_formats": with_chat_format(settings, target, chat_format(args)).chat_formats}


def has_display() -> bool:
    if not sys.platform.startswith("linux"):
        return True
    return any(os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


def launch(args: argparse.Namespace) -> int:
    from PySide6.QtWidgets import QApplication

    from app.storage.paths import APP_NAME
    from app.ui.resources import icon, style_sheet

    QApplication.setApplicationName(APP_NAME)
    QApplication.setDesktopFileName("tandem")  # matches installers/linux's tandem.desktop
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setWindowIcon(icon())
    app.setStyleSheet(style_sheet())
    instance = first_instance(settings_overrides(args))
    if instance is None:
        return 0
    check = check_llama_build()
    if not check.ok:  # a window that vanishes at the first decode helps nobody: say why, and how to mend it
        print(f"tandem: error: {check.message} Rebuild it with: {check.rebuild}", file=sys.stderr)
        logging.getLogger("tandem").error("%s Rebuild: %s", check.message, check.rebuild, extra=FILE_ONLY)
        build_failure_box(check).exec()
        return 1
    # The engine process starts before the window's own modules are imported: its Python,
    # numpy and llama.cpp load on the other core while this one builds the window, so the
    # models start loading as soon as the window asks (start-up as with the engine on a thread).
    from app.bridge.engine_process import EngineProcessClient

    client = EngineProcessClient()
    from app.storage.settings import load_settings

    loaded = load_settings()
    overrides = settings_overrides(args) | chat_format_override(args, loaded.settings)
    start_loading(client, loaded.settings.replace(**overrides))

    from app.bridge.async_glue import run_app
    from app.storage.history import HistoryStore
    from app.window.main_window import MainWindow
    from app.window.single_instance import present

    history = HistoryStore.open()  # never raises: a bad file is set aside, with a notice
    try:
        window = MainWindow(loaded, overrides=overrides, history_store=history, first_run=True, client=client)
        instance.message_received.connect(lambda message: present(window, message))
        window.show()
        return run_app(app)
    finally:
        client.shutdown()  # nothing left running, whatever happened above
        history.close()  # the window has saved its last reply when it closed
        instance.release()


def start_loading(client, settings) -> None:
    """Ask the engine for the models the window will load, before the window is built: the
    load runs while the window imports and builds itself, and the window's own request
    for the same models joins it (``EngineProcessClient.load``). Not when the window would
    not load at once: the first-run screen asks first, and the crash-loop guard refuses
    the pair the last start died loading (the window says so)."""
    from app.models.demo import needs_first_run
    from app.session.config import ModelSpec
    from app.storage import load_marker

    crashed = load_marker.crashed_load()
    if needs_first_run(settings) or (crashed is not None and crashed.matches(settings.target_path,
                                                                             settings.draft_path)):
        return
    try:
        spec = ModelSpec.from_settings(settings)
    except Exception:  # noqa: BLE001 — a setting the window will refuse in its own words
        return
    client.load(spec)


def first_instance(overrides: dict):
    """The one-window lock (``app.window.single_instance``), or None when a Tandem window
    is open already: it was handed ``overrides`` and brought to the front."""
    from app.storage import paths
    from app.window.single_instance import SingleInstance

    instance = SingleInstance(paths.runtime_dir())
    if instance.claim():
        return instance
    if instance.send({"overrides": overrides}):
        print("tandem: Tandem is open already; its window was brought to the front"
              + (" with these settings." if overrides else "."), file=sys.stderr)
        return None
    print("tandem: warning: another Tandem holds the window lock but does not answer; "
          "opening a second window (both load the models).", file=sys.stderr)
    return instance


def build_failure_box(check: BuildCheck):
    """The window's word for a llama.cpp build that dies here, with a button to copy the fix."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication, QMessageBox

    box = QMessageBox(QMessageBox.Icon.Critical, "Tandem cannot run its models",
                      check.message + "\n\nRebuild llama.cpp for this machine with:\n\n" + check.rebuild)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    copy = box.addButton("Copy command", QMessageBox.ButtonRole.ActionRole)
    copy.clicked.disconnect()  # keep the box open after copying
    copy.clicked.connect(lambda: QApplication.clipboard().setText(check.rebuild))
    box.addButton(QMessageBox.StandardButton.Close)
    return box
