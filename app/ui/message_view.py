"""One chat message: a header with actions, the coloured text, and its own stats.

Model text goes in through ``QTextCursor.insertText`` with a character format,
never through HTML, so ``<b>`` or ``<img src=…>`` in a reply stay literal text.
A reply shows its Markdown formatted (``markdown_view``) with a per-message
"Source" toggle back to the coloured source text; a user's message is always
shown as written.
"""

from __future__ import annotations

from typing import Callable, Iterable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFont, QGuiApplication, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.types import Stats, TokenEvent, TokenKind
from app.vocabulary import MessageState
from app.ui.branch_switcher import BranchSwitcher
from app.ui.stats_format import message_summary
from app.ui.markdown_view import MarkdownBody
from app.ui.message_editor import MessageEditor
from app.ui.message_text import MessageText
from app.ui.token_style import TokenStyle

USER, ASSISTANT = "user", "assistant"
# streaming: tokens still arriving; complete/stopped: done (kept in the conversation);
# failed: an error ended it before any useful text (left out of the conversation);
# interrupted: restored from history, cut off when the app quit mid-reply (kept, marked).
STREAMING, COMPLETE, STOPPED, FAILED, INTERRUPTED = (MessageState.STREAMING, MessageState.COMPLETE,
                                                     MessageState.STOPPED, MessageState.FAILED,
                                                     MessageState.INTERRUPTED)
STATE_LABELS = {STREAMING: "writing…", STOPPED: "stopped", FAILED: "failed", INTERRUPTED: "interrupted"}
STATE_TIPS = {INTERRUPTED: "Tandem (or its engine) stopped before this reply was finished; this is what was saved."}

ReplyAction = tuple[str, str, Callable[["ChatMessage"], None]]  # label, tooltip, handler


class ChatMessage(QFrame):
    """A user message or an assistant reply. A reply keeps its tokens and its stats."""

    copied = Signal()
    finished = Signal()  # finish() or fail(): the reply's stats are final

    link_clicked = Signal(str)  # a safe href in the formatted reply; the chat view asks first
    version_stepped = Signal(int)  # ‹ or ›: -1 or +1 among this message's versions
    edit_saved = Signal(str)       # Save in the in-place editor; whoever asked closes it

    def __init__(self, role: str, style: TokenStyle, actions: Iterable[ReplyAction] = (),
                 parent: QWidget | None = None, *, markdown: bool = True, text_scale: float = 1.0) -> None:
        super().__init__(parent)
        self.role = role
        self.setObjectName("userMessage" if role == USER else "assistantMessage")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.events: list[TokenEvent] = []
        self.stats: Stats | None = None
        self.status = COMPLETE if role == USER else STREAMING
        self.error = ""
        self.request_id: int | None = None  # the engine request producing it, while it streams
        self.versions: BranchSwitcher | None = None  # ‹ 2/3 ›, made when a second version exists
        self.editor: MessageEditor | None = None     # in place of the text while it is edited
        self._style = style
        self._plain_text: list[str] = []

        self.role_label = QLabel("You" if role == USER else "Assistant", self)
        self.role_label.setObjectName("messageRole")
        self.state_label = QLabel(self)
        self.state_label.setObjectName("messageState")
        self.state_label.setTextFormat(Qt.TextFormat.PlainText)
        self.copy_button = self._tool_button("Copy", "Copy this message's text", self.copy_to_clipboard)
        # Owned by the message, so it dies with it (a bare singleShot could outlive the button).
        self._copy_feedback = QTimer(self)
        self._copy_feedback.setSingleShot(True)
        self._copy_feedback.setInterval(1500)
        self._copy_feedback.timeout.connect(lambda: self.copy_button.setText("Copy"))
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setSpacing(4)
        header.addWidget(self.role_label)
        header.addWidget(self.state_label)
        header.addStretch(1)
        self._header = header
        self.action_buttons: dict[str, QToolButton] = {}
        if role == ASSISTANT:
            for label, tooltip, handler in actions:
                self.add_action(label, tooltip, handler)
        header.addWidget(self.copy_button)

        # The source view (coloured tokens as written) is kept in step lazily: while the
        # formatted view shows, it catches up only when shown or read (``text_view``).
        self._source = MessageText(self)
        self._source_synced = 0  # events drawn into it
        self._base_font = QFont(self._source.font())
        self.markdown_view: MarkdownBody | None = None
        self.source_button: QToolButton | None = None
        if role == ASSISTANT and markdown:
            self.markdown_view = MarkdownBody(style, self)
            self.markdown_view.link_clicked.connect(self.link_clicked)
            self.source_button = self._tool_button("Source", "Show this reply's Markdown source",
                                                   lambda: self.set_show_source(self.source_button.isChecked()))
            self.source_button.setCheckable(True)
            header.insertWidget(header.indexOf(self.copy_button), self.source_button)
            self._source.setVisible(False)
        self.set_text_scale(text_scale)
        self.stats_label = QLabel(self)
        self.stats_label.setObjectName("messageStats")
        self.stats_label.setTextFormat(Qt.TextFormat.PlainText)
        self.stats_label.setWordWrap(True)
        self.stats_label.setVisible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        layout.addLayout(header)
        layout.addWidget(self._source)
        if self.markdown_view is not None:
            layout.addWidget(self.markdown_view)
        layout.addWidget(self.stats_label)
        self._show_state()

    # --- content ------------------------------------------------------------------------------

    def text(self) -> str:
        return "".join(self._plain_text)

    @property
    def text_view(self) -> MessageText:
        """The source view: the text as written, coloured by token kind (brought up to date)."""
        self._sync_source()
        return self._source

    @property
    def showing_source(self) -> bool:
        return self.markdown_view is None or self.markdown_view.isHidden()

    def set_show_source(self, show: bool) -> None:
        """Show the Markdown source (coloured tokens as written) or the formatted reply."""
        if self.markdown_view is None:
            return
        if show:
            self._sync_source()
        self._source.setVisible(show)
        self.markdown_view.setVisible(not show)
        if self.source_button is not None:
            self.source_button.setChecked(show)
            self.source_button.setText("Formatted" if show else "Source")
            self.source_button.setToolTip("Show this reply formatted" if show
                                          else "Show this reply's Markdown source")

    def set_text_scale(self, scale: float) -> None:
        """Zoom: reading text at ``scale`` times its normal size (a touch above UI text)."""
        font = QFont(self._base_font)
        font.setPointSizeF(self._base_font.pointSizeF() * 1.12 * scale)
        self._source.setFont(font)
        if self.markdown_view is not None:
            self.markdown_view.setFont(font)
            self.markdown_view.refont()

    def set_plain_text(self, text: str) -> None:
        """A user message (or a reply restored without token kinds)."""
        self.append_events([TokenEvent(-1, text, TokenKind.PLAIN)])

    def append_events(self, events: list[TokenEvent]) -> None:
        self.events.extend(events)
        self._plain_text.extend(e.text for e in events)
        if self.markdown_view is not None:
            self.markdown_view.append(events)
        if self.showing_source:
            self._sync_source()

    def finish(self, stats: Stats | None, status: MessageState = COMPLETE) -> None:
        self.stats = stats
        self.status = status
        self.request_id = None
        if self.markdown_view is not None:
            self.markdown_view.finish()
        self._show_state()
        self.finished.emit()

    def fail(self, message: str) -> None:
        self.error = message
        self.status = FAILED if not self.text() else STOPPED
        self.request_id = None
        if self.markdown_view is not None:
            self.markdown_view.finish()
        self._show_state()
        self.finished.emit()

    def restyle(self, style: TokenStyle) -> None:
        """Re-render with other colours (theme change, colours on/off); the text stays."""
        self._style = style
        self._source.clear()
        self._source_synced = 0
        if self.showing_source:
            self._sync_source()
        if self.markdown_view is not None:
            self.markdown_view.restyle(style)

    def set_versions(self, position: int, count: int) -> None:
        """Show ‹ position/count › (hidden for a single version)."""
        if self.versions is None:
            if count <= 1:
                return
            self.versions = BranchSwitcher(self)
            self.versions.stepped.connect(self.version_stepped)
            self._header.insertWidget(self._header.indexOf(self.state_label) + 1, self.versions)
        self.versions.set_position(position, count)

    def add_action(self, label: str, tooltip: str, handler: Callable[[ChatMessage], None]) -> QToolButton:
        button = self._tool_button(label, tooltip, lambda: handler(self))
        copy_at = self._header.indexOf(self.copy_button)
        self._header.insertWidget(copy_at if copy_at >= 0 else self._header.count(), button)
        self.action_buttons[label] = button
        return button

    def start_editing(self) -> MessageEditor:
        """Edit the text in place (Save emits ``edit_saved``; Cancel or Esc puts it back)."""
        if self.editor is None:
            self.editor = MessageEditor(self.text(), self)
            self.editor.cancelled.connect(self.stop_editing)
            self.editor.saved.connect(self.edit_saved)
            layout = self.layout()
            layout.insertWidget(layout.indexOf(self._source) + 1, self.editor)
            self._source.hide()
            self.editor.show()
            for button in self.action_buttons.values():
                button.setEnabled(False)
        self.editor.focus()
        return self.editor

    def stop_editing(self) -> None:
        if self.editor is None:
            return
        editor, self.editor = self.editor, None
        editor.hide()
        editor.deleteLater()
        self._source.setVisible(self.showing_source)
        for button in self.action_buttons.values():
            button.setEnabled(True)

    def copy_to_clipboard(self) -> None:
        QGuiApplication.clipboard().setText(self.text())
        self.copy_button.setText("Copied")
        self._copy_feedback.start()
        self.copied.emit()

    # --- internals ----------------------------------------------------------------------------

    def _sync_source(self) -> None:
        if self._source_synced < len(self.events):
            self._insert(self.events[self._source_synced:])
            self._source_synced = len(self.events)

    def _insert(self, events: list[TokenEvent]) -> None:
        cursor = QTextCursor(self._source.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()  # one layout pass per batch, not per token
        run: list[str] = []
        run_kind: TokenKind | None = None
        style = self._style
        for event in events:
            if not event.text:
                continue  # part of a character; its completing token carries it
            if event.kind is TokenKind.CORRECTED:
                if run:
                    cursor.insertText("".join(run), style.kind_format(run_kind))
                    run, run_kind = [], None
                _insert_corrected(cursor, event, style)
            elif event.draft_source:  # drafted through text: its own format carries the draft's tokens
                if run:
                    cursor.insertText("".join(run), style.kind_format(run_kind))
                    run, run_kind = [], None
                cursor.insertText(event.text, style.format_for(event))
            elif event.kind is run_kind:
                run.append(event.text)
            else:
                if run:
                    cursor.insertText("".join(run), style.kind_format(run_kind))
                run, run_kind = [event.text], event.kind
        if run:
            cursor.insertText("".join(run), style.kind_format(run_kind))
        cursor.endEditBlock()

    def _show_state(self) -> None:
        state = STATE_LABELS.get(self.status, "")
        self.state_label.setText(state)
        self.state_label.setToolTip(STATE_TIPS.get(self.status, ""))
        self.state_label.setVisible(bool(state))
        parts = []
        if self.stats is not None and self.role == ASSISTANT:
            parts.append(message_summary(self.stats))
        if self.error:
            parts.append(self.error)
        self.stats_label.setText("\n".join(parts))
        self.stats_label.setVisible(bool(parts))
        self.stats_label.setProperty("error", bool(self.error))

    def _tool_button(self, label: str, tooltip: str, slot: Callable[[], None]) -> QToolButton:
        button = QToolButton(self)
        button.setText(label)
        button.setToolTip(tooltip)
        button.setAutoRaise(True)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.clicked.connect(slot)
        return button


def _insert_corrected(cursor: QTextCursor, event: TokenEvent, style: TokenStyle) -> None:
    """A corrected token, underlined from its first visible character (" word", not "_word")."""
    fmt = style.format_for(event)
    body = event.text.lstrip()
    lead = event.text[: len(event.text) - len(body)]
    if lead and body:
        bare = type(fmt)(fmt)
        bare.setFontUnderline(False)
        cursor.insertText(lead, bare)
        cursor.insertText(body, fmt)
    else:
        cursor.insertText(event.text, fmt)
