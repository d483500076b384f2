"""The settings in force, the settings on disk, and the settings dialog.

Command-line overrides apply to this session and are saved only if edited: what is
in force (``settings``) and what is on disk are kept apart, and a change saves only the
fields that changed. The dialog opens with ``open()`` (replies keep streaming), asks
for compatibility checks and remote workers' Tests off the UI thread (``PairChecker``,
``WorkerTester``), and an answer arriving after it closed reaches nothing. ``changed(Settings)`` follows every applied change.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QWidget

from app.bridge.async_glue import MemoryPlanner, PairChecker
from app.errors import TandemError
from app.storage.settings import LoadedSettings, Settings, save_settings
from app.ui.notices import ERROR, NoticeArea
from app.ui.settings_dialog import SettingsDialog
from app.window.worker_test import WorkerTester

SAVE_NOTICE_KEY = "save"


class SettingsController(QObject):
    changed = Signal(object)  # Settings, once in force

    def __init__(self, loaded: LoadedSettings, notices: NoticeArea, *, overrides: dict | None = None,
                 chat_formats: Callable[[], tuple[str, ...]] = tuple, dialog_parent: QWidget) -> None:
        """``chat_formats()``: llama.cpp's built-in chat formats, by name, to offer (the
        engine client's ``chat_format_names``: the window's side never loads llama.cpp)."""
        super().__init__(dialog_parent)
        self._chat_formats = chat_formats
        self._saved = loaded.settings  # what is on disk; command-line overrides stay out of it
        self.settings: Settings = loaded.settings.replace(**(overrides or {}))
        self.notices = notices
        self.dialog: SettingsDialog | None = None  # the open dialog, if any
        self._dialog_parent = dialog_parent
        self._pair_checker = PairChecker(self)
        self._pair_checker.checked.connect(self._show_pair_check)
        self._planner = MemoryPlanner(self)
        self._planner.planned.connect(self._show_plan)
        self._worker_tester = WorkerTester(self)
        self._worker_tester.tested.connect(self._show_worker_test)

    def apply(self, settings: Settings) -> set[str]:
        """Use ``settings`` from now on; saves and returns the names of the fields that changed."""
        changed = {k for k, v in settings.to_dict().items() if getattr(self.settings, k) != v}
        self.settings = settings
        self.save({k: getattr(settings, k) for k in changed})
        self.changed.emit(settings)
        return changed

    def override(self, changes: dict) -> None:
        """Command-line settings from a second start: in force now, saved only if edited
        (as this start's own). A value that is not valid is a notice, nothing more."""
        try:
            settings = self.settings.replace(**changes)
        except (TandemError, TypeError) as exc:
            self.notices.show_notice(SAVE_NOTICE_KEY, f"The settings of a second start were not used: {exc}", ERROR)
            return
        if settings != self.settings:
            self.settings = settings
            self.changed.emit(settings)

    def save(self, changes: dict) -> None:
        """Write ``changes`` over what is on disk (a failure is a notice, never an exception)."""
        if not changes:
            return
        try:
            self._saved = self._saved.replace(**changes)
            save_settings(self._saved)
        except TandemError as exc:
            self.notices.show_notice(SAVE_NOTICE_KEY, str(exc), ERROR)

    def open_dialog(self) -> SettingsDialog:
        """Open the dialog with ``open()`` (not ``exec()``: replies keep streaming); returns it."""
        dialog = SettingsDialog(self.settings, self._dialog_parent, chat_formats=self._chat_formats())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.compatibility_check_requested.connect(self._pair_checker.check)
        dialog.worker_test_requested.connect(self._worker_tester.test)
        dialog.plan_requested.connect(lambda question: self._planner.plan(question, *question))
        dialog.accepted.connect(lambda: self.apply(dialog.settings()))
        dialog.finished.connect(lambda _result: self._forget_dialog(dialog))
        self.dialog = dialog
        dialog.open()
        return dialog

    def _show_pair_check(self, target: str, draft: str, ok: bool, rule: object, reason: str) -> None:
        if self.dialog is not None:
            self.dialog.show_compatibility(target, draft, ok, rule, reason)

    def _show_plan(self, question: object, line: str) -> None:
        if self.dialog is not None:
            self.dialog.show_plan(question, line)

    def _show_worker_test(self, endpoint: str, ok: bool, line: str) -> None:
        if self.dialog is not None:
            self.dialog.show_worker_test(endpoint, ok, line)

    def _forget_dialog(self, dialog: SettingsDialog) -> None:
        # Closed dialogs delete themselves; an answer arriving later must not reach one.
        if self.dialog is dialog:
            self.dialog = None
