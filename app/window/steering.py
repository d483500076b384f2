"""The parts of the window that let the user steer (issue: conversations you can steer
and models you already have), each its own controller, installed in one place so the
window's own assembly only creates and places them:

- ``LibraryController``: File → Model library…, File → Recent pairs;
- ``HubController``: File → Get models… (the Hugging Face Hub);
- ``BranchController``: Edit on user messages, ‹ 2/3 › on versions (with a history);
- ``PresetController``: the per-chat system-prompt chooser in the toolbar;
- ``FirstRunController``: the first-run screen in place of the chat on a first start.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QBoxLayout, QToolBar

from app.window.branch_controller import BranchController
from app.window.first_run_controller import FirstRunController
from app.window.hub_controller import HubController
from app.window.library_controller import LibraryController
from app.window.preset_controller import PresetController


@dataclass
class Steering:
    library: LibraryController
    hub: HubController
    presets: PresetController
    first_run: FirstRunController
    branches: BranchController | None  # only with a history to keep the versions in

    @property
    def file_actions(self) -> tuple:
        return (*self.library.actions, *self.hub.actions)

    def shutdown(self) -> None:
        self.library.shutdown()
        self.hub.shutdown()


def install_steering(window, column: QBoxLayout, toolbar: QToolBar) -> Steering:
    """Create the controllers for ``window`` (a MainWindow with its chat, history, help,
    models and settings built) and place their widgets: the preset chooser at the end of
    ``toolbar``, the first-run screen (when started) in ``column``."""
    say = window.statusBar().showMessage
    library = LibraryController(window.client, settings=lambda: window.settings, apply=window.apply_settings,
                                check_speculation=window.help.check_speculation, say=say, dialog_parent=window)
    hub = HubController(settings=lambda: window.settings, apply=window.apply_settings, use_pair=library.use_pair,
                        say=say, dialog_parent=window)
    presets = PresetController(window.chat, window.history, settings=lambda: window.settings,
                               apply=window.apply_settings, dialog_parent=window)
    toolbar.addSeparator()
    toolbar.addWidget(presets.chooser)
    window.settings_changed.connect(lambda _settings: presets.refresh())
    window.settings_changed.connect(library.remember_pair)
    branches = (BranchController(window.history, window.chat, window.chat_view, say=say, dialog_parent=window)
                if window.history is not None else None)
    first_run = FirstRunController(window.client, notices=window.notices, layout=column,
                                   hidden=[window.chat_view, window.composer], settings=lambda: window.settings,
                                   apply=window.apply_settings, load=lambda: window.models.load(force=True),
                                   open_library=lambda target: library.open(target), parent=window,
                                   check_speculation=window.help.check_speculation, open_hub=hub.open)
    return Steering(library, hub, presets, first_run, branches)
