"""‹ 2/3 ›: which of a message's alternatives is shown (an edited user message's
versions, a regenerated reply's), and a step to the one before or after.

Display and emit only: ``stepped`` says -1 or +1; whoever owns the history switches
the branch and calls ``set_position`` with what is shown now. Hidden while there is
only one version.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget


class BranchSwitcher(QWidget):
    stepped = Signal(int)  # -1: the version before, +1: the one after

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("branchSwitcher")
        self.before = QToolButton(self)
        self.before.setText("‹")
        self.before.setAccessibleName("Previous version")
        self.before.setToolTip("Show the previous version")
        self.before.clicked.connect(lambda: self.stepped.emit(-1))
        self.label = QLabel(self)
        self.after = QToolButton(self)
        self.after.setText("›")
        self.after.setAccessibleName("Next version")
        self.after.setToolTip("Show the next version")
        self.after.clicked.connect(lambda: self.stepped.emit(+1))
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        for widget in (self.before, self.label, self.after):
            layout.addWidget(widget)
        self.set_position(1, 1)

    def set_position(self, position: int, count: int) -> None:
        """Show ``position`` of ``count`` (1-based); one version only: nothing to show."""
        self.position, self.count = position, count
        self.label.setText(f"{position}/{count}")
        self.label.setAccessibleName(f"Version {position} of {count}")
        self.before.setEnabled(position > 1)
        self.after.setEnabled(position < count)
        self.setVisible(count > 1)
