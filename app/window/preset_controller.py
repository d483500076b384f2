"""System-prompt presets in the window: the chooser in the toolbar says which prompt this
chat uses (the settings' own, or a named preset), the choice is stored with the chat,
and the next reply is asked with it. The presets themselves live in the settings."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QWidget

from app.storage.errors import InvalidSettingError
from app.storage.settings import Settings, preset_text
from app.ui.preset_chooser import PresetChooser, PresetDialog
from app.window.chat_controller import ChatController
from app.window.history_controller import HistoryController


class PresetController(QObject):
    def __init__(self, chat: ChatController, history: HistoryController | None, *,
                 settings: Callable[[], Settings], apply: Callable[[Settings], None],
                 dialog_parent: QWidget) -> None:
        super().__init__(dialog_parent)
        self.chat = chat
        self.history = history
        self._settings = settings
        self._apply = apply
        self._parent = dialog_parent
        self._unsaved = False  # chosen before the chat had a row to keep it in
        self.dialog: PresetDialog | None = None
        self.chooser = PresetChooser(dialog_parent)
        self.chooser.preset_chosen.connect(self._chosen)
        self.chooser.edit_requested.connect(self.edit_presets)
        chat.system_prompt = self.system_prompt
        chat.conversation_cleared.connect(lambda: self.chooser.show_current(""))
        chat.user_message_added.connect(self._save_pending)  # after the history made the chat's row
        self.refresh()
        if history is not None:
            history.conversation_shown.connect(self._shown)
            self._shown()  # the history may have opened a conversation already

    def system_prompt(self) -> str:
        """What the next reply is asked with: the chosen preset's text, else the settings'."""
        settings = self._settings()
        text = preset_text(settings, self.chooser.current) if self.chooser.current else None
        return settings.system_prompt if text is None else text

    def refresh(self) -> None:
        """The presets as the settings have them now (after an edit, a settings change)."""
        names = [name for name, _ in self._settings().system_prompt_presets]
        self.chooser.set_presets(names, self.chooser.current)

    def choose(self, name: str) -> None:
        self.chooser.show_current(name)
        self._chosen(self.chooser.current)

    def edit_presets(self) -> PresetDialog:
        dialog = PresetDialog(self._settings().system_prompt_presets, self._parent, check=self._problem)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._keep(dialog.presets()))
        self.dialog = dialog
        dialog.open()
        return dialog

    def _problem(self, presets) -> str:
        try:
            self._settings().replace(system_prompt_presets=presets)
        except InvalidSettingError as exc:
            return str(exc)
        return ""

    def _keep(self, presets) -> None:
        self._apply(self._settings().replace(system_prompt_presets=presets))
        self.refresh()

    def _chosen(self, name: str) -> None:
        conversation = self.history.current_id if self.history is not None else None
        if conversation is None:
            self._unsaved = True
            return
        store = self.history.store
        if store is not None:
            self.history.call(lambda: store.set_preset(conversation, name))
        self._unsaved = False

    def _save_pending(self, _message) -> None:
        if self._unsaved:
            self._chosen(self.chooser.current)

    def _shown(self) -> None:
        store, conversation = self.history.store, self.history.current_id
        if store is None or conversation is None:
            return
        summary = self.history.read(lambda: store.conversation(conversation))
        self.chooser.show_current(summary.preset if summary is not None else "")
        self._unsaved = False
