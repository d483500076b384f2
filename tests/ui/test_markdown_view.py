"""Formatted replies in the real chat view (offscreen): code blocks, emphasis, colours per token, links, Source."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QColor, QDesktopServices, QFont, QFontDatabase, QTextFormat
from PySide6.QtWidgets import QMessageBox

from app.engine.types import Stats, TokenEvent, TokenKind
from app.ui.chat_view import ChatView
from app.ui.code_block import CodeBlockView
from app.ui.markdown_view import ProseText
from app.ui.message_view import COMPLETE
from app.ui.resources import token_palette
from app.ui.token_style import KIND_PROPERTY

KINDS = (TokenKind.ACCEPTED, TokenKind.CORRECTED, TokenKind.BONUS, TokenKind.PLAIN)


@pytest.fixture
def view(qtbot) -> ChatView:
    widget = ChatView()
    qtbot.addWidget(widget)
    widget.resize(700, 500)
    widget.show()
    return widget


def stream(view, events, batch=3):
    reply = view.add_reply()
    for at in range(0, len(events), batch):
        view.append_tokens(reply, events[at:at + batch])
    reply.finish(Stats(tokens=len(events)), COMPLETE)
    return reply


def fragments(document):
    """(text, format) of every run in a document, tables' cells included."""
    runs = []
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            runs.append((it.fragment().text(), it.fragment().charFormat()))
            it += 1
        block = block.next()
    return runs


def documents(reply):
    views = reply.markdown_view.block_widgets()
    return [v.document() if isinstance(v, ProseText) else v.text_view.document() for v in views]


def foreground(fmt):
    return fmt.foreground().color() if fmt.hasProperty(QTextFormat.Property.ForegroundBrush) else None


def signature(reply):
    """What a formatted reply shows, widget by widget and run by run."""
    shape = []
    for widget, document in zip(reply.markdown_view.block_widgets(), documents(reply)):
        runs = [(text, fmt.property(KIND_PROPERTY), fmt.fontWeight(), fmt.fontItalic(), fmt.anchorHref(),
                 fmt.fontUnderline(), fmt.fontFamilies()) for text, fmt in fragments(document)]
        blocks = []
        block = document.begin()
        while block.isValid():
            blocks.append((block.text(), bool(block.textList()), block.blockFormat().headingLevel()))
            block = block.next()
        shape.append((type(widget).__name__, runs, blocks))
    return shape


def words_reply(markdown: str):
    """Tokens for ``markdown``: each word ``wN`` one token of the kind N picks, markers their own tokens."""
    events = []
    for piece in re.findall(r"w\d+|[^w]+|w", markdown):
        word = re.fullmatch(r"w(\d+)", piece)
        kind = KINDS[int(word.group(1)) % 4] if word else KINDS[len(events) % 4]
        events.append(TokenEvent(len(events), piece, kind, draft_text="guess" if kind is TokenKind.CORRECTED else None,
                                 draft_prob=0.3 if kind is TokenKind.CORRECTED else None))
    return events


COLOURED = """# w1 w2 w0

w3 **w4 w5** *w6* `w7` [w8 w9](https://example.com) ~~w10~~

- w11 w28
- w12 **w13**
  1. w14 w29

> w15 w30 w16

| w17 | w18 |
|-----|-----|
| w19 | **w20** |

```python
w21 = w22 + w23
```

w24 w25 w26 w27
"""


def test_every_visible_character_carries_its_tokens_colour(view):
    events = words_reply(COLOURED)
    reply = stream(view, events)
    palette = token_palette(view.token_style.dark)
    kind_of = {e.text: e.kind for e in events if re.fullmatch(r"w\d+", e.text)}
    seen = set()
    for document in documents(reply):
        for text, fmt in fragments(document):
            kind = fmt.property(KIND_PROPERTY)
            for word in re.findall(r"\S+", text.replace("\u2028", " ")):
                for part in re.findall(r"w\d+|[^w\d]+", word):
                    assert part in kind_of or not re.search(r"[\w*`#|>~\[\]]", part), (part, text)
                    if part in kind_of:
                        seen.add(part)
                        assert kind == kind_of[part].value, (part, kind)
                        wanted = None if kind == "plain" else QColor(palette[kind])
                        assert foreground(fmt) == wanted, part
                        assert fmt.fontUnderline() == (kind == "corrected") or fmt.isAnchor(), part
    assert seen == set(kind_of)  # every word shown, no marker (*, `, #, |, >, ~) left visible


def test_bold_renders_without_asterisks(view):
    reply = stream(view, [TokenEvent(0, "Say **x**", TokenKind.ACCEPTED), TokenEvent(1, " now", TokenKind.BONUS)])
    runs = fragments(documents(reply)[0])
    assert "".join(text for text, _ in runs) == "Say x now"
    bold = [text for text, fmt in runs if fmt.fontWeight() == QFont.Weight.Bold]
    assert bold == ["x"]


def test_a_code_block_has_a_copy_button_that_copies_exactly_the_code(view, qapp):
    code = "def f(s):\n    return s[::-1]  # **not bold**\n\n\tend"
    text = f"Here:\n\n```python\n{code}\n```\nAfter."
    reply = stream(view, [TokenEvent(i, text[i:i + 4], TokenKind.ACCEPTED) for i in range(0, len(text), 4)])
    (block,) = reply.markdown_view.code_blocks()
    assert isinstance(block, CodeBlockView) and block.language_label.text() == "python"
    assert block.text_view.toPlainText() == code
    assert block.text_view.font().family() == QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
    block.copy_button.click()
    assert qapp.clipboard().text() == code
    assert block.copy_button.text() == "Copied"
    assert [type(w).__name__ for w in reply.markdown_view.block_widgets()] == ["ProseText", "CodeBlockView",
                                                                              "ProseText"]


def test_a_code_block_in_a_list_item_sits_under_the_items_text(view, qtbot):
    text = ("Steps:\n\n1. Install it:\n\n   ```sh\n   pip install x\n   ```\n\n"
            "   - then, nested:\n\n     ```\n     run\n     ```\n\n> quoted\n>\n> ```\n> q\n> ```\n\n"
            "```\ntop\n```")
    reply = stream(view, [TokenEvent(i, text[i:i + 5], TokenKind.PLAIN) for i in range(0, len(text), 5)])
    blocks = reply.markdown_view.code_blocks()
    assert [b.text_view.toPlainText() for b in blocks] == ["pip install x", "run", "q", "top"]
    listed, nested, quoted, top = blocks
    assert top.indent == 0 and listed.indent == 40  # the list text's indent
    qtbot.waitUntil(lambda: listed.panel.geometry().left() == 40 and listed.panel.width() > 0)  # once laid out
    assert top.panel.geometry().left() == 0
    assert nested.indent == 80
    assert quoted.indent == 16  # a quote's margin
    assert listed.copy_button.isVisible() and listed.panel.width() < top.panel.width()


def test_colours_off_highlight_code_with_pygments_and_on_again_restores_kinds(view):
    text = "```python\ndef f():\n    return 'x'\n```"
    reply = stream(view, [TokenEvent(0, text, TokenKind.ACCEPTED)])
    view.set_show_colours(False)
    (block,) = reply.markdown_view.code_blocks()
    runs = fragments(block.text_view.document())
    assert block.text_view.toPlainText() == "def f():\n    return 'x'"
    assert len({foreground(fmt).name() for _, fmt in runs if foreground(fmt) is not None}) >= 2  # keyword, string
    assert all(fmt.property(KIND_PROPERTY) is None for _, fmt in runs)
    view.set_show_colours(True)
    (block,) = reply.markdown_view.code_blocks()
    assert {fmt.property(KIND_PROPERTY) for _, fmt in fragments(block.text_view.document())} == {"accepted"}


def test_raw_html_images_and_unsafe_links_stay_inert(view, monkeypatch):
    text = ('<b>bold?</b> <img src="http://x/y.png"> ![alt text](http://x/y.png) '
            '[js](javascript:alert(1)) [ftp](ftp://x.example/) [file](file:///etc/passwd) [ok](https://ok.example/)')
    reply = stream(view, [TokenEvent(0, text, TokenKind.ACCEPTED)])
    (document,) = documents(reply)
    shown = document.toPlainText()
    assert '<b>bold?</b> <img src="http://x/y.png"> alt text' in shown
    assert "[js](javascript:alert(1))" in shown
    anchors = {fmt.anchorHref() for _, fmt in fragments(document) if fmt.isAnchor()}
    assert anchors == {"https://ok.example/"}
    assert not any(fmt.isImageFormat() for _, fmt in fragments(document))
    assert "<img" not in document.toHtml() and "<b>" not in document.toHtml()

    asked, opened = [], []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or QMessageBox.StandardButton.Cancel)
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    for href in ("javascript:alert(1)", "file:///etc/passwd", "ftp://x.example/"):
        assert view.open_link(href) is False
    assert asked == [] and opened == []
    assert view.open_link("https://ok.example/") is False  # the user said Cancel
    assert len(asked) == 1 and "https://ok.example/" in asked[0] and opened == []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Open)
    assert view.open_link("https://ok.example/") is True
    assert opened == [QUrl("https://ok.example/")]


def test_a_click_on_a_link_asks_first(view, qtbot, monkeypatch):
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or QMessageBox.StandardButton.Cancel)
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: pytest.fail("opened without asking"))
    reply = stream(view, [TokenEvent(0, "[here](https://example.com/a)", TokenKind.ACCEPTED)])
    prose = reply.markdown_view.prose_views()[0]
    cursor = prose.textCursor()
    cursor.setPosition(2)
    qtbot.waitUntil(lambda: prose.cursorRect(cursor).x() > 0)
    point = prose.cursorRect(cursor).center()
    assert prose.anchorAt(point) == "https://example.com/a"
    qtbot.mouseClick(prose.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert len(asked) == 1 and "https://example.com/a" in asked[0]


def test_corrected_tokens_keep_their_tooltip_in_formatted_text(view, qtbot):
    reply = stream(view, [TokenEvent(1, "Say *", TokenKind.ACCEPTED),
                          TokenEvent(2, "friend", TokenKind.CORRECTED, 9, " <pal>", 0.25),
                          TokenEvent(3, "*", TokenKind.ACCEPTED)])
    prose = reply.markdown_view.prose_views()[0]
    assert prose.toPlainText() == "Say friend"
    italic = [(text, fmt.property(KIND_PROPERTY)) for text, fmt in fragments(prose.document()) if fmt.fontItalic()]
    assert italic == [("friend", "corrected")]
    cursor = prose.textCursor()
    cursor.setPosition(prose.toPlainText().index("friend") + 2)
    qtbot.waitUntil(lambda: prose.cursorRect(cursor).x() > 0)
    tip = prose.tooltip_at(prose.cursorRect(cursor).center())
    assert tip is not None and "&lt;pal&gt;" in tip and "p = 0.25" in tip


def test_a_corrected_indent_in_a_code_block_is_tinted_not_underlined(view):
    events = [TokenEvent(1, "```python\nif x:\n", TokenKind.ACCEPTED),
              TokenEvent(2, "    ", TokenKind.CORRECTED, draft_text="  ", draft_prob=0.4),
              TokenEvent(3, "pass\n```\n", TokenKind.ACCEPTED)]
    reply = stream(view, events)
    [code] = [v for v in reply.markdown_view.block_widgets() if isinstance(v, CodeBlockView)]
    [indent] = [fmt for text, fmt in fragments(code.text_view.document()) if text == "    "]
    assert indent.property(KIND_PROPERTY) == "corrected" and not indent.fontUnderline()
    assert indent.background().color().alpha() < 128
    assert indent.background().color().rgb() == QColor(token_palette(view.token_style.dark)["corrected"]).rgb()


def test_show_source_round_trip(view):
    text = "# Title\n\nSome **bold** text.\n"
    reply = stream(view, [TokenEvent(0, text[:9], TokenKind.ACCEPTED), TokenEvent(1, text[9:], TokenKind.BONUS)])
    before = signature(reply)
    assert not reply.showing_source and not reply.markdown_view.isHidden() and reply.text_view.isHidden()
    reply.source_button.click()
    assert reply.showing_source and not reply.text_view.isHidden() and reply.markdown_view.isHidden()
    assert reply.text_view.toPlainText() == text
    assert {fmt.property(KIND_PROPERTY) for _, fmt in fragments(reply.text_view.document())} == {"accepted", "bonus"}
    assert reply.source_button.text() == "Formatted"
    reply.source_button.click()
    assert not reply.showing_source and not reply.markdown_view.isHidden() and reply.text_view.isHidden()
    assert signature(reply) == before
    assert reply.text() == text  # Copy copies the source either way


def test_a_reply_restored_whole_renders_as_it_streamed(view):
    events = words_reply(COLOURED)
    streamed = stream(view, events, batch=2)
    restored = view.add_reply(events, Stats(tokens=len(events)), COMPLETE)
    assert signature(restored) == signature(streamed)
    assert len(signature(streamed)) == 3  # prose, the code block, prose


def test_zoom_scales_reading_text_and_code(view):
    reply = stream(view, [TokenEvent(0, "Text\n\n```\ncode\n```", TokenKind.ACCEPTED)])
    size = reply.markdown_view.font().pointSizeF()
    code_size = reply.markdown_view.code_blocks()[0].text_view.font().pointSizeF()
    view.zoom_in()
    assert view.zoom > 1.0
    assert reply.markdown_view.font().pointSizeF() > size
    assert reply.markdown_view.code_blocks()[0].text_view.font().pointSizeF() > code_size
    later = view.add_user_message("hi")
    assert later.text_view.font().pointSizeF() > size / 1.0 - 0.01
    view.reset_zoom()
    assert view.zoom == 1.0 and reply.markdown_view.font().pointSizeF() == pytest.approx(size)


def wheel(target, qapp, *, ctrl=False, dy=-120):
    from PySide6.QtCore import QPoint, QPointF
    from PySide6.QtGui import QWheelEvent

    pos = QPointF(10, 5)
    modifiers = Qt.KeyboardModifier.ControlModifier if ctrl else Qt.KeyboardModifier.NoModifier
    qapp.sendEvent(target, QWheelEvent(pos, target.mapToGlobal(pos), QPoint(0, 0), QPoint(0, dy),
                                       Qt.MouseButton.NoButton, modifiers, Qt.ScrollPhase.NoScrollPhase, False))


def test_the_wheel_scrolls_the_chat_over_message_text_and_code(view, qtbot, qapp):
    text = "Para.\n\n```\n" + "code\n" * 30 + "```\n\n" + "More text.\n\n" * 30
    for _ in range(2):
        view.add_user_message("question")
        view.add_reply([TokenEvent(0, text, TokenKind.ACCEPTED)], Stats(), COMPLETE)
    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 200)
    reply = view.messages()[1]
    for target in (reply.markdown_view.prose_views()[0].viewport(),
                   reply.markdown_view.code_blocks()[0].text_view.viewport(),
                   view.messages()[0].text_view.viewport()):
        bar.setValue(0)
        wheel(target, qapp)
        assert bar.value() > 0, target.parent()
    zoom = view.zoom
    wheel(reply.markdown_view.prose_views()[0].viewport(), qapp, ctrl=True, dy=120)
    assert view.zoom > zoom
