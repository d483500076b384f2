"""A reply's Markdown drawn: prose in QTextDocuments, each code block a frame with a Copy button.

``markdown_render`` decides what the blocks are and which token each character
came from; this module only draws them. Text goes in through
``QTextCursor.insertText`` with character formats (never HTML), each format the
Markdown look with the token kind's format merged over it, so the kind's colour,
a corrected token's underline and its tooltip properties survive the formatting.

While a reply streams, blocks the renderer calls final are drawn once into the
message's committed widgets and never touched again; only the open tail (usually
one top-level block) is redrawn per token batch, in widgets of its own that are
reused from batch to batch (an open code block only appends what is new).
"""

from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextFrameFormat,
    QTextLength,
    QTextListFormat,
    QTextOption,
    QTextTableFormat,
)
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.engine.types import TokenEvent, TokenKind
from app.ui.markdown_render import (
    CodeBlock,
    Item,
    MarkdownStream,
    Marks,
    Paragraph,
    Rule,
    Run,
    Table,
    TopBlock,
    Update,
)
from app.ui.message_text import MessageText
from app.ui.token_style import TokenStyle

HEADING_SIZE = {1: 2, 2: 1, 3: 1, 4: 0, 5: 0, 6: 0}  # QTextFormat.FontSizeAdjustment per level
BULLETS = (QTextListFormat.Style.ListDisc, QTextListFormat.Style.ListCircle, QTextListFormat.Style.ListSquare)
PARAGRAPH_GAP = 6
LIST_GAP = 2
QUOTE_INDENT = 16


def monospace_font(size_from: QFont) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setPointSizeF(size_from.pointSizeF() * 0.95)
    return font


class Formats:
    """Character formats for runs: the Markdown look first, the token kind's format merged over it."""

    def __init__(self, style: TokenStyle, events: list[TokenEvent]) -> None:
        self.style = style
        self.events = events
        self.link_colour = QColor("#8ab4f8" if style.dark else "#1a5fb4")
        # Opaque: a translucent fill costs a blend per pixel on every repaint of a streaming reply.
        self.code_background = QColor("#2c3036" if style.dark else "#eef0f3")
        self.border = QColor("#555a62" if style.dark else "#c4c8ce")
        self.mono_families = [QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()]
        self._cache: dict[tuple[Marks, TokenKind], QTextCharFormat] = {}

    def for_run(self, run: Run) -> QTextCharFormat:
        event = self.events[run.event] if run.event >= 0 else None
        kind = event.kind if event is not None else TokenKind.PLAIN
        if event is None or kind is not TokenKind.CORRECTED:
            key = (run.marks, kind)
            fmt = self._cache.get(key)
            if fmt is None:
                fmt = self._cache[key] = self._build(run.marks, self.style.kind_format(kind))
            return fmt
        fmt = self._build(run.marks, self.style.format_for(event))  # its own: the tooltip rides on it
        if run.lead:
            fmt.setFontUnderline(False)  # underlined from its first visible character, as in the source view
        return fmt

    def _build(self, marks: Marks, kind_format: QTextCharFormat) -> QTextCharFormat:
        fmt = QTextCharFormat()
        if marks.bold or marks.heading:
            fmt.setFontWeight(QFont.Weight.Bold)
        if marks.italic:
            fmt.setFontItalic(True)
        if marks.strike:
            fmt.setFontStrikeOut(True)
        if marks.heading:
            fmt.setProperty(QTextFormat.Property.FontSizeAdjustment, HEADING_SIZE.get(marks.heading, 0))
        if marks.code:
            fmt.setFontFamilies(self.mono_families)
            fmt.setBackground(self.code_background)
        if marks.link:
            fmt.setAnchor(True)
            fmt.setAnchorHref(marks.link)
            fmt.setFontUnderline(True)
            fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DashUnderline)  # a corrected token's is solid
            if not self.style.coloured:
                fmt.setForeground(self.link_colour)  # with colours on, the token's colour stays
        fmt.merge(kind_format)
        return fmt


class ProseWriter:
    """Appends paragraphs, lists, tables and rules to the end of one document."""

    def __init__(self, text: MessageText, formats: Formats) -> None:
        self.document = text.document()
        self.cursor = QTextCursor(self.document)
        self.cursor.movePosition(QTextCursor.MoveOperation.End)
        self.formats = formats
        self.fresh = self.document.isEmpty()  # the current block is empty and free to use
        self.lists: dict[int, object] = {}
        self.after_table = False

    def write(self, item: Item) -> None:
        self.cursor.beginEditBlock()
        if isinstance(item, Paragraph):
            self._paragraph(item)
        elif isinstance(item, Table):
            self._table(item)
        elif isinstance(item, Rule):
            self.fresh = self.fresh and not self.after_table  # the ruler would be drawn beside the table
            fmt = QTextBlockFormat()
            fmt.setProperty(QTextFormat.Property.BlockTrailingHorizontalRulerWidth,
                            QTextLength(QTextLength.Type.PercentageLength, 100))
            self._block(fmt)
        self.cursor.endEditBlock()

    def _block(self, fmt: QTextBlockFormat) -> None:
        self.after_table = False
        if self.fresh:
            self.cursor.setBlockFormat(fmt)
            self.cursor.setBlockCharFormat(QTextCharFormat())
            self.fresh = False
        else:
            self.cursor.insertBlock(fmt, QTextCharFormat())

    def _paragraph(self, paragraph: Paragraph) -> None:
        fmt = QTextBlockFormat()
        fmt.setBottomMargin(LIST_GAP if paragraph.lists else PARAGRAPH_GAP)
        if paragraph.heading:
            fmt.setHeadingLevel(paragraph.heading)
            fmt.setTopMargin(PARAGRAPH_GAP)
        if paragraph.quote:
            fmt.setLeftMargin(QUOTE_INDENT * paragraph.quote)
            fmt.setBackground(self.formats.code_background)
        if paragraph.lists and not paragraph.item_start:
            fmt.setIndent(len(paragraph.lists))  # a later paragraph of an item: under its text, no bullet
        self._block(fmt)
        if paragraph.lists and paragraph.item_start:
            level = paragraph.lists[-1]
            text_list = self.lists.get(level.key)
            if text_list is None:
                list_format = QTextListFormat()
                depth = len(paragraph.lists)
                list_format.setIndent(depth)
                if level.ordered:
                    list_format.setStyle(QTextListFormat.Style.ListDecimal)
                    list_format.setStart(level.number)  # continues after a code block split it
                else:
                    list_format.setStyle(BULLETS[(depth - 1) % len(BULLETS)])
                self.lists[level.key] = self.cursor.createList(list_format)
            else:
                text_list.add(self.cursor.block())
        for run in paragraph.runs:
            self.cursor.insertText(run.text, self.formats.for_run(run))

    def _table(self, table: Table) -> None:
        columns = max((len(row) for row in table.rows), default=0)
        if not table.rows or not columns:
            return
        if not self.fresh:  # the table's own block, without the last paragraph's quote tint or list
            self.cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        fmt = QTextTableFormat()
        fmt.setBorder(1)
        fmt.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
        fmt.setBorderCollapse(True)
        fmt.setCellPadding(4)
        fmt.setCellSpacing(0)
        fmt.setBottomMargin(PARAGRAPH_GAP)
        fmt.setBorderBrush(self.formats.border)
        text_table = self.cursor.insertTable(len(table.rows), columns, fmt)
        alignments = {"left": Qt.AlignmentFlag.AlignLeft, "center": Qt.AlignmentFlag.AlignHCenter,
                      "right": Qt.AlignmentFlag.AlignRight}
        for r, row in enumerate(table.rows):
            for c, runs in enumerate(row):
                cursor = text_table.cellAt(r, c).firstCursorPosition()
                align = table.align[c] if c < len(table.align) else ""
                if align in alignments:
                    block_format = cursor.blockFormat()
                    block_format.setAlignment(alignments[align])
                    cursor.setBlockFormat(block_format)
                for run in runs:
                    cursor.insertText(run.text, self.formats.for_run(run))
        self.cursor = QTextCursor(self.document)
        self.cursor.movePosition(QTextCursor.MoveOperation.End)  # the empty block after the table
        self.fresh = True
        self.after_table = True


class ProseText(MessageText):
    """Formatted prose: selectable, links clickable (a click only emits)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.TextSelectableByKeyboard
                                     | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.setObjectName("markdownProse")


class CodeBlockView(QFrame):
    """A fenced code block: its language, a Copy button that copies exactly the code, the code."""

    copied = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.code = ""
        self.language = ""
        self._highlighted = False
        self.language_label = QLabel(self)
        self.language_label.setObjectName("codeLanguage")
        self.language_label.setTextFormat(Qt.TextFormat.PlainText)
        self.copy_button = QToolButton(self)
        self.copy_button.setObjectName("copyCode")
        self.copy_button.setText("Copy")
        self.copy_button.setToolTip("Copy this code")
        self.copy_button.setAutoRaise(True)
        self.copy_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.copy_button.clicked.connect(self.copy_code)
        self.text_view = MessageText(self)
        self.text_view.setObjectName("codeText")
        self.text_view.setWordWrapMode(QTextOption.WrapMode.WrapAnywhere)
        header = QHBoxLayout()
        header.setContentsMargins(6, 2, 2, 0)
        header.addWidget(self.language_label)
        header.addStretch(1)
        header.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 4)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(self.text_view)

    def copy_code(self) -> None:
        QGuiApplication.clipboard().setText(self.code)
        self.copy_button.setText("Copied")
        self.copied.emit()

    def set_font_from(self, font: QFont) -> None:
        self.text_view.setFont(monospace_font(font))

    def show_block(self, block: CodeBlock, formats: Formats) -> None:
        """Draw ``block``; when it only grew (a streaming fence) and is token-coloured, append the rest."""
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


class MarkdownBody(QWidget):
    """A reply's formatted text: committed widgets (final) above the tail's (redrawn per batch)."""

    link_clicked = Signal(str)

    def __init__(self, style: TokenStyle, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("markdownBody")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)
        self._style = style
        self._stream = MarkdownStream()
        self._formats = Formats(style, self._stream.events)
        self._committed: list[QWidget] = []
        self._tail: list[QWidget] = []
        self._writer: ProseWriter | None = None  # for the last committed prose document
        self._finished = False

    # --- input ------------------------------------------------------------------------------

    def append(self, events: Sequence[TokenEvent]) -> None:
        self._draw(self._stream.update(events))

    def finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._draw(self._stream.finish())

    def restyle(self, style: TokenStyle) -> None:
        """Everything drawn again from the reply's tokens (colours on/off, theme)."""
        events = list(self._stream.events)
        for widget in self._committed + self._tail:
            _discard(self._layout, widget)
        self._committed, self._tail, self._writer = [], [], None
        self._style = style
        self._stream = MarkdownStream()
        self._formats = Formats(style, self._stream.events)
        self._draw(self._stream.update(events))
        if self._finished:
            self._draw(self._stream.finish())

    def refont(self) -> None:
        for widget in self._committed + self._tail:
            if isinstance(widget, CodeBlockView):
                widget.set_font_from(self.font())

    # --- reading back (tests, the screenshot) -----------------------------------------------

    def block_widgets(self) -> list[QWidget]:
        return self._committed + self._tail

    def code_blocks(self) -> list[CodeBlockView]:
        return [w for w in self.block_widgets() if isinstance(w, CodeBlockView)]

    def prose_views(self) -> list[ProseText]:
        return [w for w in self.block_widgets() if isinstance(w, ProseText)]

    # --- drawing ----------------------------------------------------------------------------

    def _draw(self, update: Update) -> None:
        # The tail's widgets are reused, in order, for what comes next: a block that closes
        # keeps the widget it streamed into (an open code block that closed only appends).
        spare = self._tail
        self._tail = []
        for block in update.committed:
            self._commit(block, spare)
        self._draw_tail(update.open, spare)
        for widget in spare:
            _discard(self._layout, widget)

    def _place(self, widget: QWidget, index: int) -> None:
        self._layout.removeWidget(widget)
        self._layout.insertWidget(index, widget)

    def _commit(self, block: TopBlock, spare: list[QWidget]) -> None:
        for item in block.items:
            if isinstance(item, CodeBlock):
                view = self._code(spare)
                view.show_block(item, self._formats)
                self._place(view, len(self._committed))
                self._committed.append(view)
                self._writer = None
                continue
            if self._writer is None:
                prose = self._prose(spare)
                self._place(prose, len(self._committed))
                self._committed.append(prose)
                self._writer = ProseWriter(prose, self._formats)
            self._writer.write(item)
        if self._writer is not None:
            self._writer.lists = {}  # lists never span top-level blocks

    def _draw_tail(self, blocks: list[TopBlock], spare: list[QWidget]) -> None:
        segments: list[CodeBlock | list[Item]] = []
        for block in blocks:
            for item in block.items:
                if isinstance(item, CodeBlock):
                    segments.append(item)
                elif segments and isinstance(segments[-1], list):
                    segments[-1].append(item)
                else:
                    segments.append([item])
        for segment in segments:
            if isinstance(segment, CodeBlock):
                view: QWidget = self._code(spare)
                view.show_block(segment, self._formats)
            else:
                view = self._prose(spare)
                writer = ProseWriter(view, self._formats)
                for item in segment:
                    writer.write(item)
            self._place(view, len(self._committed) + len(self._tail))
            self._tail.append(view)

    def _prose(self, spare: list[QWidget]) -> ProseText:
        """A spare prose view emptied, else a new one."""
        if spare and isinstance(spare[0], ProseText):
            prose = spare.pop(0)
            prose.clear()
            return prose
        return self._new_prose()

    def _code(self, spare: list[QWidget]) -> CodeBlockView:
        """A spare code view (``show_block`` decides between appending and redrawing), else a new one."""
        if spare and isinstance(spare[0], CodeBlockView):
            return spare.pop(0)
        return self._new_code()

    def _new_prose(self) -> ProseText:
        prose = ProseText(self)
        prose.link_clicked.connect(self.link_clicked)
        return prose

    def _new_code(self) -> CodeBlockView:
        view = CodeBlockView(self)
        view.set_font_from(self.font())
        return view


def _discard(layout: QVBoxLayout, widget: QWidget) -> None:
    layout.removeWidget(widget)
    widget.hide()  # gone from view now; deleted when the event loop next gets to it
    widget.deleteLater()
