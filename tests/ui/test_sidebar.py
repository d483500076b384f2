from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit

from app.storage.history import ConversationSummary, HistoryStore
from app.ui.sidebar import UNTITLED, ConversationSidebar

CHATS = [
    ConversationSummary(3, "Newest chat", 1000.0, 3000.0, 2),
    ConversationSummary(2, "", 1000.0, 2000.0, 0),
    ConversationSummary(1, "Oldest chat", 1000.0, 1000.0, 4),
]


@pytest.fixture
def sidebar(qtbot) -> ConversationSidebar:
    widget = ConversationSidebar()
    qtbot.addWidget(widget)
    widget.resize(260, 400)
    widget.show()
    return widget


def shown_titles(sidebar: ConversationSidebar) -> list[str]:
    return [sidebar.list.item(row).text() for row in range(sidebar.list.count())]


def click_row(qtbot, sidebar: ConversationSidebar, row: int) -> None:
    rect = sidebar.list.visualItemRect(sidebar.list.item(row))
    qtbot.mouseClick(sidebar.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def test_conversations_are_shown_in_the_given_order_without_echo(qtbot, sidebar):
    with qtbot.assertNotEmitted(sidebar.conversation_selected):
        sidebar.set_conversations(CHATS, current_id=2)
    assert shown_titles(sidebar) == ["Newest chat", UNTITLED, "Oldest chat"]
    assert sidebar.current_id() == 2
    assert not sidebar.empty_label.isVisible()


def test_refreshing_keeps_the_selection(qtbot, sidebar):
    sidebar.set_conversations(CHATS, current_id=1)
    sidebar.set_conversations(list(reversed(CHATS)))
    assert sidebar.current_id() == 1


def test_clicking_a_conversation_selects_it(qtbot, sidebar):
    sidebar.set_conversations(CHATS)
    with qtbot.waitSignal(sidebar.conversation_selected) as selected:
        click_row(qtbot, sidebar, 2)
    assert selected.args == [1]


def test_new_button_asks_for_a_new_chat(qtbot, sidebar):
    with qtbot.waitSignal(sidebar.new_requested):
        qtbot.mouseClick(sidebar.new_button, Qt.MouseButton.LeftButton)


def test_typing_in_search_emits_each_change(qtbot, sidebar):
    with qtbot.waitSignal(sidebar.search_changed, check_params_cb=lambda text: text == "bread"):
        qtbot.keyClicks(sidebar.search_edit, "bread")
    sidebar.set_conversations([])
    assert sidebar.empty_label.isVisible() and "bread" in sidebar.empty_label.text()


def test_delete_key_deletes_and_undo_brings_it_back(qtbot, sidebar):
    sidebar.set_conversations(CHATS, current_id=3)
    sidebar.list.setFocus()
    with qtbot.waitSignal(sidebar.delete_requested) as deleted:
        qtbot.keyClick(sidebar.list, Qt.Key.Key_Delete)
    assert deleted.args == [3]
    assert sidebar.undo_bar.isVisible() and "Newest chat" in sidebar.undo_label.text()

    with qtbot.waitSignal(sidebar.undo_delete_requested) as undone:
        qtbot.mouseClick(sidebar.undo_button, Qt.MouseButton.LeftButton)
    assert undone.args == [3]
    assert not sidebar.undo_bar.isVisible()


def test_the_undo_offer_expires(qtbot, sidebar):
    sidebar.set_conversations(CHATS, current_id=1)
    sidebar._undo_timer.setInterval(50)
    sidebar.delete_current()
    assert sidebar.undo_bar.isVisible()
    qtbot.waitUntil(lambda: not sidebar.undo_bar.isVisible(), timeout=2000)


def test_f2_renames_inline(qtbot, sidebar):
    sidebar.set_conversations(CHATS, current_id=2)
    sidebar.list.setFocus()
    qtbot.keyClick(sidebar.list, Qt.Key.Key_F2)
    editor = sidebar.list.findChild(QLineEdit)
    assert editor is not None and editor.text() == UNTITLED
    editor.selectAll()
    qtbot.keyClicks(editor, "  Bread   recipes ")
    with qtbot.waitSignal(sidebar.rename_requested) as renamed:
        qtbot.keyClick(editor, Qt.Key.Key_Return)
    assert renamed.args == [2, "Bread recipes"]
    assert shown_titles(sidebar)[1] == "Bread recipes"


def test_an_emptied_rename_changes_nothing(qtbot, sidebar):
    sidebar.set_conversations(CHATS, current_id=3)
    sidebar.rename_current()
    editor = sidebar.list.findChild(QLineEdit)
    editor.clear()
    with qtbot.assertNotEmitted(sidebar.rename_requested):
        qtbot.keyClick(editor, Qt.Key.Key_Return)
    assert shown_titles(sidebar)[0] == "Newest chat"


def test_context_menu_offers_rename_and_delete(qtbot, sidebar):
    sidebar.set_conversations(CHATS)
    menu = sidebar.context_menu_for(sidebar.list.item(2))
    actions = {action.text(): action for action in menu.actions()}
    assert set(actions) == {"Rename", "Delete"}
    with qtbot.waitSignal(sidebar.delete_requested) as deleted:
        actions["Delete"].trigger()
    assert deleted.args == [1]


def test_titles_are_never_markup(qtbot, sidebar):
    title = '<b>bold</b> <img src="x.png"> <a href="http://e.x">link</a>'
    sidebar.set_conversations([ConversationSummary(7, title, 0.0, 0.0)], current_id=7)
    item = sidebar.list.item(0)
    assert item.text() == title
    assert "&lt;b&gt;" in item.toolTip() and "<b>bold" not in item.toolTip()
    sidebar.delete_current()
    assert sidebar.undo_label.textFormat() == Qt.TextFormat.PlainText
    assert "<b>bold</b>" in sidebar.undo_label.text()


def test_the_sidebar_drives_a_real_history(qtbot, sidebar, tmp_path):
    """The signals carry what the store needs: a tiny owner wires them the way the window will."""
    store = HistoryStore.open(tmp_path / "history.sqlite3")
    search = [""]

    def refresh(current_id=None):
        sidebar.set_conversations(store.list_conversations(search[0]), current_id)

    def new_chat():
        refresh(store.create_conversation())

    def on_search(text):
        search[0] = text
        refresh()

    sidebar.new_requested.connect(new_chat)
    sidebar.search_changed.connect(on_search)
    sidebar.rename_requested.connect(lambda cid, title: (store.rename_conversation(cid, title), refresh()))
    sidebar.delete_requested.connect(lambda cid: (store.delete_conversation(cid), refresh()))
    sidebar.undo_delete_requested.connect(lambda cid: (store.restore_conversation(cid), refresh(cid)))

    first = store.create_conversation()
    store.add_message(first, "user", "How do I bake sourdough?")
    qtbot.mouseClick(sidebar.new_button, Qt.MouseButton.LeftButton)
    assert shown_titles(sidebar) == [UNTITLED, "How do I bake sourdough?"]

    qtbot.keyClicks(sidebar.search_edit, "SOURDOUGH")
    assert shown_titles(sidebar) == ["How do I bake sourdough?"]
    sidebar.search_edit.clear()

    sidebar.set_conversations(store.list_conversations(), current_id=first)
    sidebar.delete_current()
    assert shown_titles(sidebar) == [UNTITLED]
    qtbot.mouseClick(sidebar.undo_button, Qt.MouseButton.LeftButton)
    assert shown_titles(sidebar) == [UNTITLED, "How do I bake sourdough?"]
    assert sidebar.current_id() == first
    store.close()


def test_renaming_survives_an_owner_that_refreshes_at_once(qtbot, sidebar):
    renamed = []

    def rename_and_refresh(conversation_id, title):
        renamed.append(title)
        sidebar.set_conversations([ConversationSummary(conversation_id, title, 0.0, 9.0)] + CHATS[1:])

    sidebar.rename_requested.connect(rename_and_refresh)
    sidebar.set_conversations(CHATS, current_id=3)
    sidebar.rename_current()
    editor = sidebar.list.findChild(QLineEdit)
    editor.selectAll()
    qtbot.keyClicks(editor, "Fresh title")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: renamed == ["Fresh title"])
    assert shown_titles(sidebar)[0] == "Fresh title" and sidebar.current_id() == 3
