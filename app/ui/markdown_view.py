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
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextFrameFormat,
    QTextLength,
    QTextListFormat,
    QTextTableFormat,
)
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.engine.types import TokenEvent
from app.ui.markdown_blocks import CodeBlock, Item, Paragraph, Rule, Table, TopBlock, Update
from app.ui.markdown_render import MarkdownStream
from app.ui.code_block import CodeBlockView
from app.ui.markdown_formats import QUOTE_INDENT, Formats
from app.ui.message_text import MessageText
from app.ui.token_style import TokenStyle

BULLETS = (QTextListFormat.Style.ListDisc, QTextListFormat.Style.ListCircle, QTextListFormat.Style.ListSquare)
PARAGRAPH_GAP = 6
LIST_GAP = 2


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
