"""How each token kind looks (docs/ARCHITECTURE.md, "Token kinds") and what a corrected token's tooltip says.

Colour is never the only cue: corrected tokens are also underlined, and the
draft's rejected proposal rides on the character format so a tooltip can name it.
A corrected token of whitespace alone (a code line's indent) gets a faint tint of the
same colour instead: an underline under blanks reads as "___", text that is not there.
"""

from __future__ import annotations

import html

from PySide6.QtGui import QColor, QPalette, QTextCharFormat, QTextFormat

from app.engine.speculation.detokenize import visible
from app.engine.types import TokenEvent, TokenKind
from app.ui.resources import token_palette

KIND_PROPERTY = QTextFormat.Property.UserProperty + 1
DRAFT_TEXT_PROPERTY = QTextFormat.Property.UserProperty + 2
DRAFT_PROB_PROPERTY = QTextFormat.Property.UserProperty + 3
TARGET_TEXT_PROPERTY = QTextFormat.Property.UserProperty + 4
# Drafted through text (a draft of another vocabulary): the draft's own tokens' texts,
# joined by DRAFT_SOURCE_SEPARATOR, for the tooltip of the tokens it drafted.
DRAFT_SOURCE_PROPERTY = QTextFormat.Property.UserProperty + 5
DRAFT_SOURCE_SEPARATOR = "\x1f"
WHITESPACE_TINT_ALPHA = 64  # of 255: visible behind blanks, never mistaken for a character

KIND_DESCRIPTIONS = {
    TokenKind.ACCEPTED: "The draft guessed it and the target agreed.",
    TokenKind.CORRECTED: ("The target rejected the draft's guess and wrote this instead (underlined; "
                          "a corrected space or indent is tinted)."),
    TokenKind.BONUS: "The target's extra token after it accepted the whole draft.",
    TokenKind.PLAIN: "Written by the target alone, without speculation.",
}


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


class TokenStyle:
    """Character formats for the token kinds, for one theme, coloured or not."""

    def __init__(self, dark: bool, coloured: bool = True) -> None:
        self.dark = dark
        self.coloured = coloured
        self.colours = {kind: QColor(token_palette(dark)[kind.value]) for kind in TokenKind}
        self._formats = {kind: self._make(kind) for kind in TokenKind}

    def kind_format(self, kind: TokenKind) -> QTextCharFormat:
        return self._formats[kind]

    def format_for(self, event: TokenEvent) -> QTextCharFormat:
        if event.kind is TokenKind.ACCEPTED and event.draft_source:
            fmt = QTextCharFormat(self._formats[TokenKind.ACCEPTED])
            fmt.setProperty(DRAFT_SOURCE_PROPERTY, DRAFT_SOURCE_SEPARATOR.join(event.draft_source))
            return fmt
        if event.kind is not TokenKind.CORRECTED:
            return self._formats[event.kind]
        fmt = QTextCharFormat(self._formats[TokenKind.CORRECTED])
        if event.draft_source:
            fmt.setProperty(DRAFT_SOURCE_PROPERTY, DRAFT_SOURCE_SEPARATOR.join(event.draft_source))
        if event.draft_text is not None:
            fmt.setProperty(DRAFT_TEXT_PROPERTY, event.draft_text)
        if event.draft_prob is not None:
            fmt.setProperty(DRAFT_PROB_PROPERTY, float(event.draft_prob))
        fmt.setProperty(TARGET_TEXT_PROPERTY, event.text)
        if self.coloured and event.text and event.text.isspace():
            fmt.setFontUnderline(False)
            tint = QColor(self.colours[TokenKind.CORRECTED])
            tint.setAlpha(WHITESPACE_TINT_ALPHA)
            fmt.setBackground(tint)
        return fmt

    def _make(self, kind: TokenKind) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setProperty(KIND_PROPERTY, kind.value)
        if not self.coloured:
            return fmt  # the widget's own text colour, no underline: plain reading
        if kind is not TokenKind.PLAIN:
            fmt.setForeground(self.colours[kind])
        if kind is TokenKind.CORRECTED:
            fmt.setFontUnderline(True)
            fmt.setUnderlineColor(self.colours[kind])
        return fmt


def corrected_tooltip(fmt: QTextCharFormat) -> str | None:
    """Rich text for a corrected token's tooltip (model text escaped), or for a token drafted
    through text (what the draft wrote in its own tokens); None for other tokens."""
    source = fmt.property(DRAFT_SOURCE_PROPERTY)
    own = (f"<br>Drafted through text: the draft wrote {_pieces(source)} in its own tokens."
           if isinstance(source, str) and source else "")
    if fmt.property(KIND_PROPERTY) == TokenKind.ACCEPTED.value and own:
        return f"<p style='white-space:pre'><b>Accepted</b>{own}</p>"
    if fmt.property(KIND_PROPERTY) != TokenKind.CORRECTED.value:
        return None
    draft = fmt.property(DRAFT_TEXT_PROPERTY)
    prob = fmt.property(DRAFT_PROB_PROPERTY)
    target = fmt.property(TARGET_TEXT_PROPERTY)
    proposal = html.escape(visible(draft)) if isinstance(draft, str) else "a token"
    chance = f" (p = {prob:.2f})" if isinstance(prob, float) else ""
    chosen = f"<br>The target wrote {html.escape(visible(target))} instead." if isinstance(target, str) else ""
    return f"<p style='white-space:pre'><b>Corrected</b><br>The draft proposed {proposal}{chance}.{chosen}{own}</p>"


def _pieces(joined: str) -> str:
    """The draft's own tokens, each shown as ``visible`` shows one, escaped."""
    return " ".join(html.escape(visible(piece)) for piece in joined.split(DRAFT_SOURCE_SEPARATOR))
