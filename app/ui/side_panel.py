"""The right-hand column: colour key, reply figures, models, GPU memory."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.ui.gpu_panel import GpuPanel
from app.ui.legend import TokenLegend
from app.ui.stats_panel import StatsPanel

SIDE_STYLE = """
QLabel#sectionTitle { font-weight: 600; color: palette(placeholder-text); letter-spacing: 1px; }
QLabel#caption { color: palette(placeholder-text); }
"""


def _section_title(text: str, parent: QWidget) -> QLabel:
    label = QLabel(text.upper(), parent)
    label.setObjectName("sectionTitle")
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * 0.85)
    label.setFont(font)
    return label


class SidePanel(QScrollArea):
    def __init__(self, colours_action: QAction, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidePanel")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget()
        body.setStyleSheet(SIDE_STYLE)
        self.legend = TokenLegend(colours_action, body)
        self.stats = StatsPanel(body)
        self.gpu = GpuPanel(body)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(14, 14, 14, 14)
        layout.setSpacing(8)
        for title, widget in (("Reply", self.stats), ("Token colours", self.legend), ("GPU", self.gpu)):
            layout.addWidget(_section_title(title, body))
            layout.addWidget(widget)
            layout.addSpacing(10)
        layout.addStretch(1)
        self.setWidget(body)
        self.setMinimumWidth(250)
