"""Edit and branch in the window: Edit on a user message opens it for editing in place
(``ChatMessage.start_editing``); Save sends the edited text again (what followed stays
on its branch), Regenerate keeps the earlier reply as an
alternative, and ‹ 2/3 › on a message steps between its versions.

The history store keeps the tree (``HistoryStore.add_edit``, ``begin_alternative``,
``siblings``, ``switch_branch``); the history controller records each reply in the branch shown.
The reply to an edit or a regenerated reply is asked for the branch now shown, so the
engine reuses the KV cache of the prefix they share and evaluates only the new suffix
(the reply's figures say how much was reused).
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from app.ui.chat_view import ChatView
from app.ui.message_view import ChatMessage
from app.window.chat_controller import ChatController
from app.window.history_controller import HistoryController

EDIT_LABEL = "Edit"
EDIT_TIP = "Edit this message and send it again; the earlier version and its replies stay (‹ 1/2 ›)"
BUSY = "Wait for the reply to finish (or stop it) first."
_CONNECTED = "tandemVersionsConnected"  # a dynamic property: its ‹ › already lead here
_EDIT_CONNECTED = "tandemEditConnected"    # its in-place editor's Save already leads here


class BranchController(QObject):
    def __init__(self, history: HistoryController, chat: ChatController, chat_view: ChatView, *,
                 say: Callable[[str, int], None], dialog_parent: QWidget) -> None:
        super().__init__(dialog_parent)
        self.history = history
        self.chat = chat
        self.chat_view = chat_view
        self._say = say
        chat_view.add_user_action(EDIT_LABEL, EDIT_TIP, self.edit)
        history.conversation_shown.connect(self.show_versions)
        chat.reply_started.connect(self._set_versions)  # the history has begun its row by now
        self.show_versions()  # the history may have opened a conversation already

    def edit(self, message: ChatMessage) -> None:
        """Open ``message`` for editing in place; its Save sends the new text (``save_edit``)."""
        if self.chat.busy:
            self._say(BUSY, 4000)
            return
        if not message.property(_EDIT_CONNECTED):
            message.setProperty(_EDIT_CONNECTED, True)
            message.edit_saved.connect(lambda text, m=message: self.save_edit(m, text))
        message.start_editing()

    def save_edit(self, message: ChatMessage, text: str) -> ChatMessage | None:
        """Save in the editor: ``text`` in place of ``message``, and a reply; returns the reply.
        While a reply runs the editor stays open; unchanged or empty text just closes it."""
        if self.chat.busy:
            self._say(BUSY, 4000)
            return None
        message.stop_editing()
        if not text.strip() or text.strip() == message.text():
            return None
        return self.resend(message, text.strip())

    def resend(self, message: ChatMessage, text: str) -> ChatMessage | None:
        """``text`` as a new version of the user message ``message``, and a reply to it."""
        if self.chat.busy or message not in self.chat_view.messages():
            return None
        stored = self.history.stored_id(message)
        self.history.forget(self.chat_view.remove_from(message))
        edited = self.chat_view.add_user_message(text)
        store = self.history.store
        if stored is not None and store is not None:
            new_id = self.history.call(lambda: store.add_edit(stored, text))
            if new_id is not None:
                self.history.remember(edited, new_id)
        else:  # never saved (no history, or its save failed): an ordinary message
            self.chat.user_message_added.emit(edited)
        self._set_versions(edited)
        return self.chat.start_reply()

    def step(self, message: ChatMessage, delta: int) -> bool:
        """‹ or ›: show the version of ``message`` before or after it, and its branch."""
        if self.chat.busy:
            self._say(BUSY, 4000)
            return False
        stored, store = self.history.stored_id(message), self.history.store
        if stored is None or store is None:
            return False
        versions = self.history.read(lambda: store.siblings(stored), default=[]) or []
        if stored not in versions or not 0 <= versions.index(stored) + delta < len(versions):
            return False
        chosen = versions[versions.index(stored) + delta]
        if self.history.call(lambda: store.switch_branch(chosen)) is None:
            return False
        self.history.reopen()
        return True

    def show_versions(self) -> None:
        for message in self.chat_view.messages():
            self._set_versions(message)

    def _set_versions(self, message: ChatMessage) -> None:
        stored, store = self.history.stored_id(message), self.history.store
        if stored is None or store is None:
            return
        position, count = self.history.read(lambda: store.sibling_position(stored), default=(0, 0)) or (0, 0)
        if count:
            message.set_versions(position, count)
        if not message.property(_CONNECTED):
            message.setProperty(_CONNECTED, True)
            message.version_stepped.connect(lambda delta, m=message: self.step(m, delta))
