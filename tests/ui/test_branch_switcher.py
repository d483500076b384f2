from PySide6.QtCore import Qt

from app.ui.branch_switcher import BranchSwitcher


def test_steps_between_versions(qtbot):
    switcher = BranchSwitcher()
    qtbot.addWidget(switcher)
    assert switcher.isHidden()  # one version: nothing to switch
    switcher.set_position(2, 3)
    assert not switcher.isHidden() and switcher.label.text() == "2/3"
    with qtbot.waitSignal(switcher.stepped, timeout=1000) as step:
        qtbot.mouseClick(switcher.before, Qt.MouseButton.LeftButton)
    assert step.args == [-1]
    with qtbot.waitSignal(switcher.stepped, timeout=1000) as step:
        qtbot.mouseClick(switcher.after, Qt.MouseButton.LeftButton)
    assert step.args == [1]
    switcher.set_position(3, 3)
    assert switcher.before.isEnabled() and not switcher.after.isEnabled()
    switcher.set_position(1, 3)
    assert not switcher.before.isEnabled() and switcher.after.isEnabled()


def test_a_message_shows_its_versions_and_the_view_edits_from_one(qtbot):
    from app.ui.chat_view import ChatView

    view = ChatView()
    qtbot.addWidget(view)
    edited = []
    view.add_user_action("Edit", "Edit and resend", edited.append)
    first = view.add_user_message("q1")
    reply = view.add_reply(status="complete")
    second = view.add_user_message("q2")
    assert "Edit" in first.action_buttons and "Edit" in second.action_buttons
    assert "Edit" not in reply.action_buttons
    qtbot.mouseClick(second.action_buttons["Edit"], Qt.MouseButton.LeftButton)
    assert edited == [second]

    assert reply.versions is None
    reply.set_versions(1, 1)
    assert reply.versions is None  # one version: no switcher at all
    reply.set_versions(2, 3)
    assert reply.versions.label.text() == "2/3"
    with qtbot.waitSignal(reply.version_stepped, timeout=1000) as step:
        qtbot.mouseClick(reply.versions.before, Qt.MouseButton.LeftButton)
    assert step.args == [-1]

    assert view.remove_from(reply) == [reply, second] and view.messages() == [first]
