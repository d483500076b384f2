"""The Markdown renderer without Qt: blocks, runs tied to their tokens, safe links, streamed = whole."""

from __future__ import annotations

import pytest

from app.engine.types import TokenEvent, TokenKind
from app.ui.markdown_blocks import CodeBlock, Paragraph, Table
from app.ui.markdown_render import MAX_OPEN_BLOCK_CHARS, MarkdownStream, plain_text, safe_href

REPLY = """Intro with **bold** and `code`.

```python
def reverse(text):
    return text[::-1]
```

- one *item*
- two
  1. nested

| a | b |
|---|--:|
| 1 | **2** |

> quoted [site](https://example.com) [bad](javascript:alert(1)) ![pic](http://img.example/x.png) <b>raw</b>
"""


def chopped(text: str, size: int = 3) -> list[TokenEvent]:
    kinds = list(TokenKind)
    return [TokenEvent(i, text[at:at + size], kinds[i % len(kinds)], draft_text="x" if i % 4 == 1 else None)
            for i, at in enumerate(range(0, len(text), size))]


def rendered(events, batch: int | None = None):
    stream = MarkdownStream()
    blocks = []
    if batch is None:
        update = stream.update(events)
        blocks += update.committed
    else:
        for at in range(0, len(events), batch):
            blocks += stream.update(events[at:at + batch]).committed
    blocks += stream.finish().committed
    return stream, [item for block in blocks for item in block.items]


def all_runs(items):
    for item in items:
        if isinstance(item, (Paragraph, CodeBlock)):
            yield from item.runs
        elif isinstance(item, Table):
            for row in item.rows:
                for cell in row:
                    yield from cell


def test_blocks_and_markers_hidden():
    _, items = rendered(chopped(REPLY))
    kinds = [type(item).__name__ for item in items]
    assert kinds == ["Paragraph", "CodeBlock", "Paragraph", "Paragraph", "Paragraph", "Table", "Paragraph"]
    intro = items[0]
    assert plain_text([intro]) == "Intro with bold and code."
    assert "".join(run.text for run in intro.runs if run.marks.bold) == "bold"
    assert "".join(run.text for run in intro.runs if run.marks.code) == "code"
    code = items[1]
    assert code.language == "python" and code.code == "def reverse(text):\n    return text[::-1]"
    assert "".join(run.text for run in code.runs) == code.code
    nested = items[4]
    assert [(level.ordered, level.number) for level in nested.lists] == [(False, 2), (True, 1)]
    table = items[5]
    assert table.header_rows == 1 and table.align == ["", "right"]
    assert [["".join(r.text for r in cell) for cell in row] for row in table.rows] == [["a", "b"], ["1", "2"]]


def test_links_images_and_html_stay_inert():
    _, items = rendered(chopped(REPLY))
    quote = items[-1]
    assert quote.quote == 1
    text = plain_text([quote])
    # The parser refuses the javascript: link outright (its source stays text), the image is
    # its alt text, the HTML literal.
    assert text == "quoted site [bad](javascript:alert(1)) pic <b>raw</b>"
    links = {run.marks.link for run in quote.runs}
    assert links == {None, "https://example.com"}
    assert safe_href("javascript:alert(1)") is None and safe_href("file:///etc/passwd") is None
    assert safe_href(" JAVASCRIPT:x") is None and safe_href("data:text/html,x") is None
    assert safe_href("mailto:a@b.c") == "mailto:a@b.c" and safe_href("http://[bad") is None


@pytest.mark.parametrize("batch", [1, 2, 7, 50])
def test_a_streamed_reply_ends_as_the_whole_one_parses(batch):
    events = chopped(REPLY)
    _, whole = rendered(events)
    _, streamed = rendered(events, batch)

    def shape(items):
        return [(type(i).__name__, [(r.text, r.marks, r.event, r.lead) for r in all_runs([i])]) for i in items]

    assert shape(streamed) == shape(whole)


def test_every_character_comes_from_a_token_of_the_runs_kind():
    events = chopped(REPLY, 2)
    stream, items = rendered(events, 5)
    source_kinds = [event.kind for event in events for _ in event.text]
    # Walk the source and the runs together: each run's characters are found, in order, in
    # the source, at positions whose token kind is the run's kind.
    position = 0
    for run in all_runs(items):
        kind = events[run.event].kind
        for ch in run.text:
            wanted = "\n" if ch == "\u2028" else ch
            position = stream.source.index(wanted, position)
            assert source_kinds[position] is kind, (run, position)
            position += 1


def test_corrected_tokens_keep_their_event_and_leading_space_apart():
    events = [TokenEvent(0, "Say", TokenKind.ACCEPTED), TokenEvent(1, " **hi**", TokenKind.CORRECTED, 5, "x", 0.5)]
    _, items = rendered(events)
    runs = items[0].runs
    assert [(r.text, r.event, r.lead, r.marks.bold) for r in runs] == [("Say", 0, False, False),
                                                                        (" ", 1, True, False),
                                                                        ("hi", 1, False, True)]


def test_only_the_open_tail_is_parsed_again():
    stream = MarkdownStream()
    first = stream.update(chopped("Para one.\n\nPara two"))
    assert [plain_text(b.items) for b in first.committed] == ["Para one."]
    assert [plain_text(b.items) for b in first.open] == ["Para two"]
    second = stream.update(chopped(" goes on.\n\n- a list"))
    assert [plain_text(b.items) for b in second.committed] == ["Para two goes on."]
    assert stream.source[second.open[0].start:] == "- a list"


def test_an_endless_open_block_streams_as_source_then_formats_when_it_closes():
    text = "**" + "word " * (MAX_OPEN_BLOCK_CHARS // 5 + 10)
    stream = MarkdownStream()
    update = stream.update(chopped(text, 50))
    assert update.open[0].raw and plain_text(update.open[0].items).startswith("**word")
    final = stream.finish()
    assert not final.committed[0].raw
