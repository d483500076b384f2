"""The list of conversations: search, new, select, rename, delete with undo.

Display and emit only: the sidebar never touches the history store. Whoever owns the
store answers the signals and calls ``set_conversations`` with the fresh list. Titles
are user and model text, so everything here shows them as plain text, never markup.
"""

from __future__ import annotations

import html
import time
from typing import Iterable, Protocol

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

UNTITLED = "New chat"
UNDO_SECONDS = 8
_ID_ROLE = Qt.ItemDataRole.UserRole
_TITLE_ROLE = Qt.ItemDataRole.UserRole + 1  # the real title; the shown text may say UNTITLED
_UNDO_TITLE_CHARS = 40


class ConversationRow(Protocol):
    """What the list shows of a stored conversation (``app.storage.history.ConversationSummary``)."""

    id: int
    title: str
    updated_at: float


class ConversationSidebar(QWidget):
    new_requested = Signal()
    conversation_selected = Signal(int)
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    undo_delete_requested = Signal(int)
    search_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._populating = False  # set_conversations must not echo back as user actions
        self._undo_id: int | None = None

        self.new_button = QPushButton("New chat", self)
        self.new_button.setObjectName("newChat")
        self.new_button.clicked.connect(self.new_requested)

        self.search_edit = QLineEdit(self)
        self.search_edit.setObjectName("searchChats")
        self.search_edit.setPlaceholderText("Search chats")
        self.search_edit.setClearButtonEnabled(True)
        self.search_edit.textChanged.connect(self.search_changed)

        self.list = QListWidget(self)
        self.list.setObjectName("conversationList")
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._show_context_menu)
        self.list.currentItemChanged.connect(self._on_current_changed)
        self.list.itemChanged.connect(self._on_item_edited)
        self.list.installEventFilter(self)

        self.empty_label = QLabel(self)
        self.empty_label.setTextFormat(Qt.TextFormat.PlainText)
        self.empty_label.setWordWrap(True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)

        self.undo_bar = QWidget(self)
        self.undo_bar.setObjectName("undoBar")
        self.undo_label = QLabel(self.undo_bar)
        self.undo_label.setTextFormat(Qt.TextFormat.PlainText)
        # A long title must not widen the sidebar.
        self.undo_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.undo_button = QPushButton("Undo", self.undo_bar)
        self.undo_button.clicked.connect(self._undo)
        bar_layout = QHBoxLayout(self.undo_bar)
        bar_layout.setContentsMargins(0, 0, 0, 0)
        bar_layout.addWidget(self.undo_label, 1)
        bar_layout.addWidget(self.undo_button)
        self.undo_bar.hide()
        self._undo_timer = QTimer(self)
        self._undo_timer.setSingleShot(True)
        self._undo_timer.setInterval(UNDO_SECONDS * 1000)
        self._undo_timer.timeout.connect(self._hide_undo)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search_edit)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.empty_label)
        layout.addWidget(self.undo_bar)
        self._update_empty_label()

    # --- what the owner calls -----------------------------------------------------------

    def set_conversations(self, conversations: Iterable[ConversationRow], current_id: int | None = None) -> None:
        """Show ``conversations`` in the given order (newest first); keeps the selection if it can."""
        if current_id is None:
            current_id = self.current_id()
        self._populating = True
        try:
            self.list.clear()
            for conversation in conversations:
                item = _item_for(conversation)
                self.list.addItem(item)
                if conversation.id == current_id:
                    self.list.setCurrentItem(item)
        finally:
            self._populating = False
        self._update_empty_label()

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return None if item is None else item.data(_ID_ROLE)

    def rename_current(self) -> None:
        """Open the inline title editor on the selected conversation."""
        item = self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def delete_current(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self._delete(item)

    def context_menu_for(self, item: QListWidgetItem) -> QMenu:
        menu = QMenu(self)
        rename = menu.addAction("Rename")
        rename.setShortcut("F2")
        rename.triggered.connect(lambda: self.list.editItem(item))
        delete = menu.addAction("Delete")
        delete.setShortcut("Del")
        delete.triggered.connect(lambda: self._delete(item))
        return menu

    # --- reactions ----------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.list and event.type() == QEvent.Type.KeyPress:
            key = event.key()
            if key == Qt.Key.Key_Delete:
                self.delete_current()
                return True
            if key == Qt.Key.Key_F2:  # on every platform, not only where F2 is Qt's edit key
                self.rename_current()
                return True
        return super().eventFilter(watched, event)

    def _show_context_menu(self, position) -> None:
        item = self.list.itemAt(position)
        if item is not None:
            self.context_menu_for(item).exec(self.list.viewport().mapToGlobal(position))

    def _on_current_changed(self, current: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if current is not None and not self._populating:
            self.conversation_selected.emit(current.data(_ID_ROLE))

    def _on_item_edited(self, item: QListWidgetItem) -> None:
        if self._populating:
            return
        old_title = item.data(_TITLE_ROLE)
        new_title = " ".join(item.text().split())
        self._populating = True
        try:
            if not new_title or new_title == (old_title or UNTITLED):
                _show_title(item, old_title)  # an emptied or unchanged edit is no rename
                return
            _show_title(item, new_title)
        finally:
            self._populating = False
        self.rename_requested.emit(item.data(_ID_ROLE), new_title)

    def _delete(self, item: QListWidgetItem) -> None:
        conversation_id = item.data(_ID_ROLE)
        title = item.data(_TITLE_ROLE) or UNTITLED
        if len(title) > _UNDO_TITLE_CHARS:
            title = title[:_UNDO_TITLE_CHARS].rstrip() + "…"
        self._undo_id = conversation_id
        self.undo_label.setText(f"Deleted “{title}”")
        self.undo_bar.show()
        self._undo_timer.start()
        self.delete_requested.emit(conversation_id)

    def _undo(self) -> None:
        conversation_id = self._undo_id
        self._hide_undo()
        if conversation_id is not None:
            self.undo_delete_requested.emit(conversation_id)

    def _hide_undo(self) -> None:
        self._undo_timer.stop()
        self._undo_id = None
        self.undo_bar.hide()

    def _update_empty_label(self) -> None:
        search = self.search_edit.text().strip()
        self.empty_label.setText(f"No chats match “{search}”" if search else "No chats yet")
        self.empty_label.setVisible(self.list.count() == 0)


def _item_for(conversation: ConversationRow) -> QListWidgetItem:
    item = QListWidgetItem()
    item.setData(_ID_ROLE, conversation.id)
    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
    _show_title(item, conversation.title)
    updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation.updated_at))
    # Tooltips guess at rich text, so make it rich on purpose with the title escaped.
    item.setToolTip(f"<p>{html.escape(conversation.title or UNTITLED)}<br>{updated}</p>")
    return item


def _show_title(item: QListWidgetItem, title: str) -> None:
    item.setData(_TITLE_ROLE, title)
    item.setText(title or UNTITLED)
    font = item.font()
    font.setItalic(not title)
    item.setFont(font)
