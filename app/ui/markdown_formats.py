"""Character formats for a reply's Markdown runs: the Markdown look first, the token
kind's format merged over it, so the kind's colour, a corrected token's underline and
its tooltip survive the formatting."""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QFontDatabase, QTextCharFormat, QTextFormat

from app.engine.types import TokenEvent, TokenKind
from app.ui.markdown_blocks import Marks, Run
from app.ui.token_style import TokenStyle

HEADING_SIZE = {1: 2, 2: 1, 3: 1, 4: 0, 5: 0, 6: 0}  # QTextFormat.FontSizeAdjustment per level
# Indents in pixels, shared by the prose and the code blocks drawn beside it: a list level
# is QTextDocument's default indentWidth (what the prose's lists use), a quote its margin.
LIST_INDENT = 40
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
        if event is None or (kind is not TokenKind.CORRECTED and not event.draft_source):
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
