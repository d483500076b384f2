"""Editing a sent message in place (pytest-qt, real widgets offscreen): multi-line and
wrapped, Ctrl+Enter saves, Esc and Cancel put the message back as it was."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTextEdit

from app.ui.chat_view import ChatView
from app.ui.message_editor import MessageEditor

LONG_LINE = "a long line without a break in it " * 20


@pytest.fixture
def message(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(500, 600)
    view.show()
    yield view.add_user_message("First question")  # the view is kept alive while the test runs


def test_edit_opens_in_place_with_the_text_and_focus(message, qtbot):
    editor = message.start_editing()
    assert message.editor is editor and editor.isVisible() and editor.text() == "First question"
    assert not message.text_view.isVisible()  # the box stands where the text was
    assert editor.parent() is message
    qtbot.waitUntil(editor.box.hasFocus, timeout=2000)
    assert editor.save_button.text() == "Save" and editor.cancel_button.text() == "Cancel"


def test_enter_breaks_the_line_and_long_lines_wrap(message, qtbot):
    editor = message.start_editing()
    box = editor.box
    before = box.height()
    qtbot.keyClick(box, Qt.Key.Key_Return)
    qtbot.keyClicks(box, LONG_LINE)
    assert editor.text() == "First question\n" + LONG_LINE  # Enter did not save
    assert box.lineWrapMode() == QTextEdit.LineWrapMode.WidgetWidth
    assert not box.horizontalScrollBar().isVisible() and box.horizontalScrollBar().maximum() == 0
    qtbot.waitUntil(lambda: box.height() > before, timeout=2000)  # it grew with its lines
    assert box.width() <= message.width()


def test_ctrl_enter_saves_the_edited_text(message, qtbot):
    editor = message.start_editing()
    qtbot.keyClicks(editor.box, ", edited")
    with qtbot.waitSignal(message.edit_saved, timeout=2000) as saved:
        qtbot.keyClick(editor.box, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert saved.args == ["First question, edited"]
    assert message.text() == "First question"  # the message itself changes only when it is sent


@pytest.mark.parametrize("how", ["escape", "cancel"])
def test_escape_or_cancel_puts_the_message_back(message, qtbot, how):
    editor = message.start_editing()
    qtbot.keyClicks(editor.box, " and more")
    with qtbot.assertNotEmitted(message.edit_saved):
        if how == "escape":
            qtbot.keyClick(editor.box, Qt.Key.Key_Escape)
        else:
            qtbot.mouseClick(editor.cancel_button, Qt.MouseButton.LeftButton)
    assert message.editor is None
    qtbot.waitUntil(lambda: not message.findChildren(MessageEditor), timeout=2000)  # gone, not just hidden
    assert message.text_view.isVisible() and message.text_view.toPlainText() == "First question"
