"""A fenced code block drawn: its language, a Copy button that copies exactly the code,
and the code in token colours (colours off: Pygments' highlighting)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QGuiApplication, QTextCharFormat, QTextCursor, QTextOption
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.ui.markdown_formats import LIST_INDENT, QUOTE_INDENT, Formats, monospace_font
from app.ui.markdown_blocks import CodeBlock
from app.ui.message_text import MessageText


class CodeBlockView(QWidget):
    """A fenced code block: its language, a Copy button that copies exactly the code, the code;
    inside a list item or a quote, indented under that item's text (``show_block``)."""

    copied = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.code = ""
        self.language = ""
        self._highlighted = False
        self.panel = QFrame(self)  # the framed box; this widget's margin is the block's indent
        self.panel.setObjectName("codeBlock")
        self.panel.setFrameShape(QFrame.Shape.StyledPanel)
        self.language_label = QLabel(self.panel)
        self.language_label.setObjectName("codeLanguage")
        self.language_label.setTextFormat(Qt.TextFormat.PlainText)
        self.copy_button = QToolButton(self.panel)
        self.copy_button.setObjectName("copyCode")
        self.copy_button.setText("Copy")
        self.copy_button.setToolTip("Copy this code")
        self.copy_button.setAutoRaise(True)
        self.copy_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.copy_button.clicked.connect(self.copy_code)
        self.text_view = MessageText(self.panel)
        self.text_view.setObjectName("codeText")
        self.text_view.setWordWrapMode(QTextOption.WrapMode.WrapAnywhere)
        header = QHBoxLayout()
        header.setContentsMargins(6, 2, 2, 0)
        header.addWidget(self.language_label)
        header.addStretch(1)
        header.addWidget(self.copy_button)
        inside = QVBoxLayout(self.panel)
        inside.setContentsMargins(4, 2, 4, 4)
        inside.setSpacing(0)
        inside.addLayout(header)
        inside.addWidget(self.text_view)
        self._outside = QHBoxLayout(self)
        self._outside.setContentsMargins(0, 0, 0, 0)
        self._outside.addWidget(self.panel)

    @property
    def indent(self) -> int:
        return self._outside.contentsMargins().left()

    def copy_code(self) -> None:
        QGuiApplication.clipboard().setText(self.code)
        self.copy_button.setText("Copied")
        self.copied.emit()

    def set_font_from(self, font: QFont) -> None:
        self.text_view.setFont(monospace_font(font))

    def show_block(self, block: CodeBlock, formats: Formats) -> None:
        """Draw ``block``; when it only grew (a streaming fence) and is token-coloured, append the rest."""
        # Under a list item's text, as the prose's list indent puts it (and a quote's margin).
        self._outside.setContentsMargins(block.lists * LIST_INDENT + block.quote * QUOTE_INDENT, 0, 0, 0)
        highlight = not formats.style.coloured
        grew = (not highlight and not self._highlighted and block.language == self.language
                and block.code.startswith(self.code))
        if not grew:
            self.text_view.clear()
            self.code = ""
        self.language = block.language
        self.language_label.setText(block.language or "code")
        cursor = QTextCursor(self.text_view.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        if highlight:
            for text, fmt in highlighted(block.code, block.language, formats.style.dark):
                cursor.insertText(text, fmt)
        else:
            skip = len(self.code)
            for run in block.runs:
                if skip >= len(run.text):
                    skip -= len(run.text)
                    continue
                cursor.insertText(run.text[skip:], formats.for_run(run))
                skip = 0
        cursor.endEditBlock()
        self.code = block.code
        self._highlighted = highlight


_PYGMENTS_FORMATS: dict[tuple[bool, object], QTextCharFormat] = {}


def highlighted(code: str, language: str, dark: bool) -> list[tuple[str, QTextCharFormat]]:
    """``code`` in pieces with Pygments' colours (colours off: no token kinds to show)."""
    from pygments.lexers import get_lexer_by_name
    from pygments.styles import get_style_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(language or "text", stripnl=False, ensurenl=False)
    except ClassNotFound:
        lexer = get_lexer_by_name("text", stripnl=False, ensurenl=False)
    style = get_style_by_name("github-dark" if dark else "default")
    pieces = []
    for token_type, value in lexer.get_tokens(code):
        key = (dark, token_type)
        fmt = _PYGMENTS_FORMATS.get(key)
        if fmt is None:
            spec = style.style_for_token(token_type)
            fmt = QTextCharFormat()
            if spec.get("color"):
                fmt.setForeground(QColor("#" + spec["color"]))
            if spec.get("bold"):
                fmt.setFontWeight(QFont.Weight.Bold)
            if spec.get("italic"):
                fmt.setFontItalic(True)
            _PYGMENTS_FORMATS[key] = fmt
        pieces.append((value, fmt))
    # The lexer may differ in the last newline; the copy button copies block.code itself.
    return pieces
