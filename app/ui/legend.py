"""The colour key for token kinds, with the switch that turns colouring off."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QTextFormat
from PySide6.QtWidgets import QCheckBox, QGridLayout, QLabel, QWidget

from app.engine.types import TokenKind
from app.ui.token_style import KIND_DESCRIPTIONS, TokenStyle

LEGEND_ORDER = (TokenKind.ACCEPTED, TokenKind.CORRECTED, TokenKind.BONUS, TokenKind.PLAIN)


class TokenLegend(QWidget):
    """One sample word per kind, drawn exactly as the chat view draws that kind."""

    def __init__(self, colours_action: QAction, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.samples: dict[TokenKind, QLabel] = {}
        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setHorizontalSpacing(12)
        layout.setVerticalSpacing(4)
        for i, kind in enumerate(LEGEND_ORDER):
            sample = QLabel(kind.value, self)  # the kind's own name is its label
            sample.setObjectName(f"legend_{kind.value}")
            sample.setTextFormat(Qt.TextFormat.PlainText)
            sample.setToolTip(KIND_DESCRIPTIONS[kind])
            self.samples[kind] = sample
            layout.addWidget(sample, i // 2, i % 2)
        # A check box mirroring the window's action, so menu, shortcut and box stay in step.
        self.toggle = QCheckBox(colours_action.text().replace("&", ""), self)
        self.toggle.setChecked(colours_action.isChecked())
        self.toggle.setToolTip(colours_action.toolTip())
        self.toggle.toggled.connect(lambda on: on != colours_action.isChecked() and colours_action.trigger())
        colours_action.toggled.connect(self.toggle.setChecked)
        layout.addWidget(self.toggle, 2, 0, 1, 2, Qt.AlignmentFlag.AlignLeft)

    def set_style(self, style: TokenStyle) -> None:
        for kind, sample in self.samples.items():
            fmt = style.kind_format(kind)
            font = sample.font()
            font.setUnderline(fmt.fontUnderline())
            font.setBold(True)
            sample.setFont(font)
            colour = fmt.foreground().color().name() if fmt.hasProperty(QTextFormat.Property.ForegroundBrush) else ""
            sample.setStyleSheet(f"color: {colour};" if colour else "")
