"""The conversation: a scrolling column of messages that follows a streaming reply.

Display only. The window adds messages and feeds token batches; the view keeps
each reply's tokens and stats with it, so colours can be redrawn (theme change,
colours off) and the conversation read back as ``(role, text)`` pairs.
"""

from __future__ import annotations

from typing import Callable, Iterable

from PySide6.QtCore import QEvent, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QFrame, QLabel, QMessageBox, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from app.engine.types import Stats, TokenEvent
from app.ui.message_view import (
    ASSISTANT,
    FAILED,
    STREAMING,
    USER,
    ChatMessage,
    ReplyAction,
)
from app.ui.markdown_render import safe_href
from app.ui.token_style import TokenStyle, is_dark

EMPTY_TEXT = ("Ask anything. The reply is written by the target model; "
              "colours show which tokens the draft model guessed right.")
_BOTTOM_SLACK = 24  # px from the bottom that still counts as "following the reply"
ZOOM_STEPS = (0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.4, 1.6, 1.8, 2.0)  # reading-text scales, Ctrl+= / Ctrl+-

VIEW_STYLE = """
#chatColumn { background: palette(base); }
QFrame#userMessage { background: palette(alternate-base); border: 1px solid palette(midlight); border-radius: 10px; }
QFrame#assistantMessage { background: palette(base); border: 1px solid palette(midlight); border-radius: 10px; }
QLabel#messageRole { font-weight: 600; }
QFrame#userMessage QTextEdit, QFrame#assistantMessage QTextEdit { border: none; background: transparent; padding: 0; }
QFrame#userMessage QTextEdit#messageEditBox { border: 1px solid palette(mid); border-radius: 6px; background: palette(base); padding: 2px; }
QLabel#messageState, QLabel#messageStats { color: palette(placeholder-text); }
QLabel#messageStats[error="true"] { color: #c62828; }
QLabel#emptyChat { color: palette(placeholder-text); font-size: 11pt; }
QFrame#codeBlock { background: palette(alternate-base); border: 1px solid palette(midlight); border-radius: 6px; }
QLabel#codeLanguage { color: palette(placeholder-text); font-size: 8pt; }
"""


class ChatView(QScrollArea):
    style_changed = Signal(object)  # TokenStyle: colours switched or the theme changed
    zoom_changed = Signal(float)    # the reading-text scale
    replies_changed = Signal()      # a reply finished, came or went: totals over the chat may differ

    def __init__(self, parent: QWidget | None = None, *, show_colours: bool = True,
                 markdown: bool = True, zoom: float = 1.0) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._column = QWidget()
        self._column.setObjectName("chatColumn")
        self._column.setStyleSheet(VIEW_STYLE)
        self._layout = QVBoxLayout(self._column)
        self._layout.setContentsMargins(16, 16, 16, 16)
        self._layout.setSpacing(12)
        self.empty_label = QLabel(EMPTY_TEXT, self._column)
        self.empty_label.setObjectName("emptyChat")
        self.empty_label.setWordWrap(True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        self._layout.addWidget(self.empty_label)
        self._layout.addStretch(1)
        self.setWidget(self._column)

        self._messages: list[ChatMessage] = []
        self._reply_actions: list[ReplyAction] = []
        self._user_actions: list[ReplyAction] = []
        self._show_colours = show_colours
        self._markdown = markdown
        self._zoom = _nearest_step(zoom)
        self.token_style = TokenStyle(is_dark(self.palette()), show_colours)
        self._follow = True
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._note_scroll)
        bar.rangeChanged.connect(self._keep_following)

    # --- messages -----------------------------------------------------------------------------

    def messages(self) -> list[ChatMessage]:
        return list(self._messages)

    def add_user_message(self, text: str) -> ChatMessage:
        message = self._add(ChatMessage(USER, self.token_style, text_scale=self._zoom))
        message.set_plain_text(text)
        for label, tooltip, handler in self._user_actions:
            message.add_action(label, tooltip, handler)
        return message

    def add_reply(self, events: Iterable[TokenEvent] = (), stats: Stats | None = None,
                  status: str = STREAMING) -> ChatMessage:
        """A reply: streaming by default; with ``events`` and a final status, one restored whole."""
        message = self._add(ChatMessage(ASSISTANT, self.token_style, self._reply_actions,
                                        markdown=self._markdown, text_scale=self._zoom))
        message.link_clicked.connect(self.open_link)
        message.finished.connect(self.replies_changed)
        events = list(events)
        if events:
            message.append_events(events)
        if status != STREAMING:
            message.finish(stats, status)
        return message

    def append_tokens(self, message: ChatMessage, events: list[TokenEvent]) -> None:
        message.append_events(events)

    def remove_message(self, message: ChatMessage) -> None:
        self._messages.remove(message)
        self._layout.removeWidget(message)
        message.deleteLater()
        self.empty_label.setVisible(not self._messages)
        if message.role == ASSISTANT:
            self.replies_changed.emit()

    def time_saved_total(self) -> tuple[float | None, int]:
        """Seconds speculation saved over the chat's replies that have the figure, and how many do."""
        saved = [m.stats.seconds_saved for m in self._messages
                 if m.role == ASSISTANT and m.stats is not None and m.stats.seconds_saved is not None]
        return (sum(saved) if saved else None), len(saved)

    def remove_from(self, message: ChatMessage) -> list[ChatMessage]:
        """Remove ``message`` and every message after it (an edit, a switch of branch);
        returns them, in order."""
        gone = self._messages[self._messages.index(message):]
        for item in gone:
            self.remove_message(item)
        return gone

    def clear(self) -> None:
        for message in list(self._messages):
            self.remove_message(message)
        self._follow = True

    def last_reply(self) -> ChatMessage | None:
        return next((m for m in reversed(self._messages) if m.role == ASSISTANT), None)

    def history(self, upto: ChatMessage | None = None) -> list[tuple[str, str]]:
        """The conversation as the model sees it: (role, text), failed replies left out.

        With ``upto``, only the messages before it.
        """
        turns = []
        for message in self._messages:
            if message is upto:
                break
            if message.role == ASSISTANT and (message.status in (FAILED, STREAMING) or not message.text()):
                continue
            turns.append((message.role, message.text()))
        return turns

    def add_user_action(self, label: str, tooltip: str, handler: Callable[[ChatMessage], None]) -> None:
        """A button on every user message, present and future (Edit)."""
        self._user_actions.append((label, tooltip, handler))
        for message in self._messages:
            if message.role == USER:
                message.add_action(label, tooltip, handler)

    def add_reply_action(self, label: str, tooltip: str, handler: Callable[[ChatMessage], None]) -> None:
        """A button on every reply, present and future (Regenerate, Compare, ...)."""
        self._reply_actions.append((label, tooltip, handler))
        for message in self._messages:
            if message.role == ASSISTANT:
                message.add_action(label, tooltip, handler)

    @property
    def markdown(self) -> bool:
        return self._markdown

    def set_markdown(self, markdown: bool) -> None:
        """Replies added from now on show formatted (True) or as coloured source."""
        self._markdown = markdown

    # --- links --------------------------------------------------------------------------------

    def open_link(self, href: str) -> bool:
        """A link in a reply was clicked: only http(s)/mailto, and only after the user agrees."""
        url = safe_href(href)
        if url is None:
            return False
        answer = QMessageBox.question(
            self, "Open link?",
            f"The reply links to:\n\n{url}\n\nOpen it in your browser?",
            QMessageBox.StandardButton.Open | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel)
        if answer != QMessageBox.StandardButton.Open:
            return False
        return QDesktopServices.openUrl(QUrl(url))

    # --- zoom ---------------------------------------------------------------------------------

    @property
    def zoom(self) -> float:
        return self._zoom

    def set_zoom(self, zoom: float) -> None:
        zoom = _nearest_step(zoom)
        if zoom != self._zoom:
            self._zoom = zoom
            for message in self._messages:
                message.set_text_scale(zoom)
            self.zoom_changed.emit(zoom)

    def zoom_in(self) -> None:
        self.set_zoom(ZOOM_STEPS[min(len(ZOOM_STEPS) - 1, ZOOM_STEPS.index(self._zoom) + 1)])

    def zoom_out(self) -> None:
        self.set_zoom(ZOOM_STEPS[max(0, ZOOM_STEPS.index(self._zoom) - 1)])

    def reset_zoom(self) -> None:
        self.set_zoom(1.0)

    # --- colours ------------------------------------------------------------------------------

    @property
    def show_colours(self) -> bool:
        return self._show_colours

    def set_show_colours(self, show: bool) -> None:
        if show != self._show_colours:
            self._show_colours = show
            self._restyle()

    def wheelEvent(self, event) -> None:  # noqa: N802
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:  # Ctrl+wheel zooms, as in a browser
            delta = event.angleDelta().y()
            if delta:
                self.zoom_in() if delta > 0 else self.zoom_out()
            event.accept()
            return
        super().wheelEvent(event)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and is_dark(self.palette()) != self.token_style.dark:
            self._restyle()

    def _restyle(self) -> None:
        self.token_style = TokenStyle(is_dark(self.palette()), self._show_colours)
        for message in self._messages:
            if message.role == ASSISTANT:
                message.restyle(self.token_style)
        self.style_changed.emit(self.token_style)

    # --- internals ----------------------------------------------------------------------------

    def _add(self, message: ChatMessage) -> ChatMessage:
        self._messages.append(message)
        self._layout.insertWidget(self._layout.count() - 1, message)  # above the stretch
        self.empty_label.setVisible(False)
        self._follow = True
        return message

    def _note_scroll(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - _BOTTOM_SLACK

    def _keep_following(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)


def _nearest_step(zoom: float) -> float:
    return min(ZOOM_STEPS, key=lambda step: abs(step - zoom))
