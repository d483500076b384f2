"""The conversation view: literal text, colours by token kind, tooltips, colours off."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextFormat

from app.engine.types import Stats, TokenEvent, TokenKind
from app.ui.chat_view import ChatView
from app.ui.message_view import COMPLETE, FAILED, STOPPED
from app.ui.resources import token_palette
from app.ui.token_style import KIND_PROPERTY, TARGET_TEXT_PROPERTY

MARKUP = ["<b>bold</b>", " <img src=x onerror=alert(1)>", " <a href=\"https://example.com\">link</a>",
          " &amp; <script>x</script>", " [md](http://example.com) **strong**"]


@pytest.fixture
def view(qtbot) -> ChatView:
    widget = ChatView(markdown=False)  # these tests read the source view; test_markdown_view.py the formatted one
    qtbot.addWidget(widget)
    widget.resize(600, 400)
    widget.show()
    return widget


def fragments(message):
    """(text, format) for every run of text in a message's document."""
    runs = []
    block = message.text_view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            runs.append((fragment.text(), fragment.charFormat()))
            it += 1
        block = block.next()
    return runs


def foreground(fmt) -> QColor | None:
    return fmt.foreground().color() if fmt.hasProperty(QTextFormat.Property.ForegroundBrush) else None


def test_markup_in_model_output_stays_literal(view):
    reply = view.add_reply()
    view.append_tokens(reply, [TokenEvent(i, text, TokenKind.ACCEPTED) for i, text in enumerate(MARKUP)])
    document = reply.text_view.document()
    assert document.toPlainText() == "".join(MARKUP)
    assert reply.text() == "".join(MARKUP)
    html = document.toHtml()
    assert "<img" not in html and "<b>" not in html and "<a " not in html
    assert "&lt;img src=x" in html
    assert not any(fmt.isAnchor() or fmt.isImageFormat() for _, fmt in fragments(reply))


def test_user_text_is_literal_too(view):
    message = view.add_user_message("<i>not italic</i>")
    assert message.text_view.toPlainText() == "<i>not italic</i>"
    assert not any(fmt.fontItalic() for _, fmt in fragments(message))


def test_each_kind_has_its_colour_and_corrected_is_underlined(view):
    palette = token_palette(view.token_style.dark)
    reply = view.add_reply()
    view.append_tokens(reply, [
        TokenEvent(1, "Hello", TokenKind.ACCEPTED), TokenEvent(2, " there", TokenKind.ACCEPTED),
        TokenEvent(3, " friend", TokenKind.CORRECTED, draft_id=9, draft_text=" <pal>", draft_prob=0.25),
        TokenEvent(4, "!", TokenKind.BONUS), TokenEvent(5, " Plain", TokenKind.PLAIN),
    ])
    runs = fragments(reply)
    # Same kinds merge; a corrected token's underline starts at its first visible character.
    assert [text for text, _ in runs] == ["Hello there", " ", "friend", "!", " Plain"]
    accepted, space, corrected, bonus, plain = (fmt for _, fmt in runs)
    assert foreground(accepted) == QColor(palette["accepted"])
    assert foreground(corrected) == QColor(palette["corrected"]) and corrected.fontUnderline()
    assert space.property(KIND_PROPERTY) == "corrected" and not space.fontUnderline()
    assert foreground(bonus) == QColor(palette["bonus"])
    assert foreground(plain) is None  # the theme's own text colour
    assert not any(fmt.fontUnderline() for fmt in (accepted, bonus, plain))
    assert [fmt.property(KIND_PROPERTY) for fmt in (accepted, corrected, bonus, plain)] == [
        "accepted", "corrected", "bonus", "plain"]


def test_a_corrected_indent_is_tinted_not_underlined(view):
    """A whitespace-only correction (a code line's indent) must not draw as "___"."""
    from app.ui.token_style import WHITESPACE_TINT_ALPHA

    corrected = QColor(token_palette(view.token_style.dark)["corrected"])
    reply = view.add_reply()
    view.append_tokens(reply, [
        TokenEvent(1, "def f():\n", TokenKind.ACCEPTED),
        TokenEvent(2, "    ", TokenKind.CORRECTED, draft_text="\t", draft_prob=0.4),
        TokenEvent(3, "return", TokenKind.ACCEPTED),
        TokenEvent(4, " word", TokenKind.CORRECTED, draft_text=" other", draft_prob=0.3),
    ])
    runs = dict(fragments(reply))
    indent, word = runs["    "], runs["word"]
    assert indent.property(KIND_PROPERTY) == "corrected" and not indent.fontUnderline()
    tint = indent.background().color()
    assert (tint.red(), tint.green(), tint.blue()) == (corrected.red(), corrected.green(), corrected.blue())
    assert tint.alpha() == WHITESPACE_TINT_ALPHA < 128  # faint: a hint, not a block of colour
    assert indent.property(TARGET_TEXT_PROPERTY) == "    "  # its tooltip still names the guess
    assert word.fontUnderline() and word.background().style() == Qt.BrushStyle.NoBrush  # words as before
    view.set_show_colours(False)
    assert all(fmt.background().style() == Qt.BrushStyle.NoBrush for _, fmt in fragments(reply))


def test_corrected_token_tooltip_shows_the_drafts_proposal_escaped(view, qtbot):
    reply = view.add_reply()
    view.append_tokens(reply, [TokenEvent(1, "Say", TokenKind.ACCEPTED),
                               TokenEvent(2, " friend", TokenKind.CORRECTED, draft_id=9,
                                          draft_text=" <pal>", draft_prob=0.25)])
    edit = reply.text_view
    cursor = edit.textCursor()
    cursor.setPosition(len("Say") + 3)  # inside " friend"
    qtbot.waitUntil(lambda: edit.cursorRect(cursor).x() > 0)  # laid out (lazily, on paint)
    point = edit.cursorRect(cursor).center()
    tip = edit.tooltip_at(point)
    assert tip is not None
    assert "“ &lt;pal&gt;”" in tip and "p = 0.25" in tip and "“ friend”" in tip
    cursor.setPosition(1)  # inside "Say": an accepted token has no tooltip
    assert edit.tooltip_at(edit.cursorRect(cursor).center()) is None


def test_colours_off_and_on_again_keep_the_text(view):
    reply = view.add_reply()
    view.append_tokens(reply, [TokenEvent(1, "a", TokenKind.ACCEPTED),
                               TokenEvent(2, "b", TokenKind.CORRECTED, draft_text="c", draft_prob=0.5)])
    view.set_show_colours(False)
    assert reply.text_view.toPlainText() == "ab"
    assert all(foreground(fmt) is None and not fmt.fontUnderline() for _, fmt in fragments(reply))
    view.set_show_colours(True)
    assert reply.text_view.toPlainText() == "ab"
    assert any(fmt.fontUnderline() for _, fmt in fragments(reply))


def test_partial_characters_wait_for_the_token_that_completes_them(view):
    reply = view.add_reply()
    view.append_tokens(reply, [TokenEvent(1, "", TokenKind.ACCEPTED), TokenEvent(2, "🙂", TokenKind.ACCEPTED)])
    assert reply.text_view.toPlainText() == "🙂"
    assert len(reply.events) == 2


def test_history_leaves_out_failed_and_streaming_replies(view):
    view.add_user_message("one")
    done = view.add_reply([TokenEvent(1, "first", TokenKind.PLAIN)], Stats(tokens=1), COMPLETE)
    view.add_user_message("two")
    failed = view.add_reply()
    failed.fail("The prompt is too long.")
    assert failed.status == FAILED and "The prompt is too long." in failed.stats_label.text()
    stopped = view.add_reply([TokenEvent(1, "half", TokenKind.PLAIN)], Stats(tokens=1, stop_reason="cancelled"),
                             STOPPED)
    view.add_reply()  # still streaming
    assert view.history() == [("user", "one"), ("assistant", "first"), ("user", "two"), ("assistant", "half")]
    assert view.history(upto=stopped) == [("user", "one"), ("assistant", "first"), ("user", "two")]
    assert view.last_reply() is not done


def test_reply_actions_reach_present_and_future_replies(view):
    clicked = []
    first = view.add_reply()
    view.add_reply_action("Compare", "Run again without speculation", clicked.append)
    second = view.add_reply()
    first.action_buttons["Compare"].click()
    second.action_buttons["Compare"].click()
    assert clicked == [first, second]


def test_copy_puts_the_message_text_on_the_clipboard(view, qapp):
    reply = view.add_reply([TokenEvent(1, "<b>copied</b>", TokenKind.ACCEPTED)], Stats(tokens=1), COMPLETE)
    reply.copy_button.click()
    assert qapp.clipboard().text() == "<b>copied</b>"


def test_tokens_drafted_through_text_show_the_drafts_own_tokens_on_hover(view, qtbot):
    """A draft of another vocabulary: its tokens take the draft's colours as any draft's,
    and the hover shows what it wrote in its own tokens (accepted and corrected alike)."""
    reply = view.add_reply()
    source = ("Rep", "ly", " <b>")
    view.append_tokens(reply, [TokenEvent(1, "Reply", TokenKind.ACCEPTED, draft_source=source),
                               TokenEvent(2, " now", TokenKind.CORRECTED, draft_id=7, draft_text=" <b>",
                                          draft_prob=0.5, draft_source=source),
                               TokenEvent(3, " yes", TokenKind.ACCEPTED)])
    runs = dict(fragments(reply))
    accepted = QColor(token_palette(view.token_style.dark)["accepted"])
    assert runs["Reply"].foreground().color() == accepted
    edit = reply.text_view
    cursor = edit.textCursor()
    cursor.setPosition(2)  # inside "Reply"
    qtbot.waitUntil(lambda: edit.cursorRect(cursor).x() > 0)
    tip = edit.tooltip_at(edit.cursorRect(cursor).center())
    assert tip is not None and "Drafted through text" in tip
    assert "“Rep” “ly” “ &lt;b&gt;”" in tip
    cursor.setPosition(len("Reply") + 3)  # inside " now"
    tip = edit.tooltip_at(edit.cursorRect(cursor).center())
    assert "Corrected" in tip and "“ &lt;b&gt;”" in tip and "in its own tokens" in tip
    cursor.setPosition(len("Reply now") + 2)  # a token of a same-vocabulary round: no tooltip
    assert edit.tooltip_at(edit.cursorRect(cursor).center()) is None
