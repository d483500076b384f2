"""Read-only message text that grows to fit, leaves wheel scrolling to the chat, and shows corrected tokens' tooltips."""

from __future__ import annotations

import html
import math

from PySide6.QtCore import QEvent, QPointF, Qt, Signal
from PySide6.QtGui import QTextCursor, QTextOption, QWheelEvent
from PySide6.QtWidgets import QAbstractScrollArea, QApplication, QFrame, QSizePolicy, QTextEdit, QToolTip, QWidget

from app.ui.token_style import corrected_tooltip


class MessageText(QTextEdit):
    """Read-only text that grows to fit its content (the chat view scrolls, not each message).

    A click on a link only emits ``link_clicked``: whoever listens asks before anything opens.
    """

    link_clicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setAcceptRichText(False)
        self.setUndoRedoEnabled(False)  # an undo stack per token would only cost memory
        self.setAcceptDrops(False)  # a dropped model file goes on to the window
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self._fit_height()

    def _fit_height(self, *_: object) -> None:
        height = math.ceil(self.document().size().height()) + 2 * self.frameWidth()
        if height != self.height():
            self.setFixedHeight(height)

    def wheelEvent(self, event) -> None:  # noqa: N802
        """The chat scrolls, not the message: the wheel goes to the scroll area around it.

        Handed on explicitly rather than ignored: an ignored wheel event only climbs to
        the parents when it came from the window system, and never from a nested viewport
        whose scroll area claims it."""
        area = self.parentWidget()
        while area is not None and not isinstance(area, QAbstractScrollArea):
            area = area.parentWidget()
        if area is None:
            event.ignore()
            return
        viewport = area.viewport()
        at = viewport.mapFromGlobal(event.globalPosition().toPoint())
        QApplication.sendEvent(viewport, QWheelEvent(
            QPointF(at), event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
            event.modifiers(), event.phase(), event.inverted(), event.source()))
        event.accept()

    def mousePressEvent(self, event) -> None:  # noqa: N802
        self._pressed_at = event.position().toPoint()
        super().mousePressEvent(event)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802
        super().mouseReleaseEvent(event)
        at = event.position().toPoint()
        href = self.anchorAt(at)
        pressed = getattr(self, "_pressed_at", None)
        # A click, not the end of a selection drag that happened to finish on a link.
        if (href and pressed is not None and event.button() == Qt.MouseButton.LeftButton
                and (at - pressed).manhattanLength() < QApplication.startDragDistance()):
            self.link_clicked.emit(href)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        super().mouseMoveEvent(event)
        over_link = bool(self.anchorAt(event.position().toPoint()))
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor if over_link else Qt.CursorShape.IBeamCursor)

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.ToolTip:
            tip = self.tooltip_at(event.pos())
            href = self.anchorAt(event.pos())
            if href:  # where a link leads, before anyone clicks it (escaped: it is model text)
                link = f"{html.escape(href)}<br><i>Click to open (Tandem asks first)</i>"
                tip = (tip.removesuffix("</p>") + "<br>" + link + "</p>" if tip
                       else f"<p style='white-space:pre'>{link}</p>")
            if tip:
                QToolTip.showText(event.globalPos(), tip, self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().viewportEvent(event)

    def tooltip_at(self, pos) -> str | None:
        """The corrected-token tooltip for the character under viewport point ``pos``."""
        point = QPointF(pos.x() + self.horizontalScrollBar().value(), pos.y() + self.verticalScrollBar().value())
        position = self.document().documentLayout().hitTest(point, Qt.HitTestAccuracy.ExactHit)
        if position < 0:
            return None
        cursor = QTextCursor(self.document())
        for start in (position, position - 1):  # the character after the hit, then the one before
            if start < 0 or start >= self.document().characterCount() - 1:
                continue
            cursor.setPosition(start)
            cursor.movePosition(QTextCursor.MoveOperation.NextCharacter, QTextCursor.MoveMode.KeepAnchor)
            tip = corrected_tooltip(cursor.charFormat())
            if tip:
                return tip
        return None
