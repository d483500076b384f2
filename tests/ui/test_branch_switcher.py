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
