"""A streaming reply's Markdown as blocks of runs, each run tied to the token it came from.

Qt-free (the widgets in ``markdown_view`` draw what this returns), so it is tested
without a display. markdown-it-py parses; this module only walks its token stream.

Colours stay true to the tokens: every character a block shows is located in the
reply's source text (markdown-it gives each block its source lines; within them a
run's text is found left to right, the markers in between skipped), and the token
that wrote that source character gives the run its kind. Characters Markdown adds
(list bullets, the table grid) are drawn by the widgets, not written as text.

Model text never becomes live content: raw HTML is off in the parser (shown as
text), an image shows its alt text and is never fetched, and a link keeps its href
only when its scheme is http, https or mailto (others read as plain text).
"""

from __future__ import annotations

import bisect
from typing import Sequence
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

from app.engine.types import TokenEvent, TokenKind
from app.ui.markdown_blocks import (PLAIN_MARKS, CodeBlock, Item, ListLevel, Marks, Paragraph, Rule, Run, Table, TopBlock,
                                    Update)

SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
LINE_BREAK = "\u2028"  # a line break inside a paragraph (QTextDocument's line separator)
# An open block longer than this streams as coloured source and is formatted when it
# closes, so one endless paragraph cannot make every token batch dearer than the last.
MAX_OPEN_BLOCK_CHARS = 12_000


def make_parser() -> MarkdownIt:
    # CommonMark plus GFM tables and strikethrough. No raw HTML. No reference-style link
    # definitions: a definition would change blocks already drawn above it, and without
    # them a block reads the same whatever arrives after it (streamed = reopened).
    return (MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
            .enable(["table", "strikethrough"]).disable("reference"))


def safe_href(href: str) -> str | None:
    """The href when a click may offer to open it (http, https, mailto), else None."""
    try:
        scheme = urlsplit(href.strip()).scheme.lower()
    except ValueError:
        return None
    return href.strip() if scheme in SAFE_SCHEMES else None


class MarkdownStream:
    """A reply's source as it streams, and its blocks: committed ones and the open tail.

    Incremental re-parse: only the text from the start of the last top-level block
    on is parsed again per batch. When that tail holds two or more top-level blocks,
    all but the last are final (with raw HTML and link definitions off, nothing
    appended can change a top-level block once another has started after it) and
    are committed; the next parse starts at the last one's first line.
    """

    def __init__(self, events: Sequence[TokenEvent] = ()) -> None:
        self._md = make_parser()
        self.events: list[TokenEvent] = []
        self.source = ""
        self._starts: list[int] = []   # source offset where each texted event starts
        self._owners: list[int] = []   # its index in self.events
        self._line_starts = [0]
        self._tail_line = 0            # first line of the open tail
        self.add(events)

    # --- input ------------------------------------------------------------------------------

    def add(self, events: Sequence[TokenEvent]) -> None:
        pieces = []
        offset = len(self.source)
        for event in events:
            self.events.append(event)
            if event.text:
                self._starts.append(offset)
                self._owners.append(len(self.events) - 1)
                pieces.append(event.text)
                offset += len(event.text)
        if pieces:
            added = "".join(pieces)
            base = len(self.source)
            self.source += added
            at = added.find("\n")
            while at >= 0:
                self._line_starts.append(base + at + 1)
                at = added.find("\n", at + 1)

    def update(self, events: Sequence[TokenEvent] = ()) -> Update:
        """Add ``events`` and return the blocks newly final plus the open tail."""
        self.add(events)
        blocks = self._parse_tail()
        if len(blocks) < 2:
            return Update([], blocks)
        committed, last = blocks[:-1], blocks[-1]
        self._tail_line = bisect.bisect_right(self._line_starts, last.start) - 1
        return Update(committed, [last])

    def finish(self) -> Update:
        """The reply ended: every block is final."""
        blocks = self._parse_tail(final=True)
        self._tail_line = len(self._line_starts)  # nothing left open
        return Update(blocks, [])

    # --- parsing ----------------------------------------------------------------------------

    def _offset(self, line: int) -> int:
        line += self._tail_line
        return self._line_starts[line] if line < len(self._line_starts) else len(self.source)

    def _parse_tail(self, final: bool = False) -> list[TopBlock]:
        if self._tail_line >= len(self._line_starts):
            return []
        tail_start = self._line_starts[self._tail_line]
        tail = self.source[tail_start:]
        tokens = self._md.parse(tail)
        groups = _top_level_groups(tokens)
        blocks = []
        for index, group in enumerate(groups):
            first, last = group[0].map or [0, 0], _group_end(group)
            start, end = self._offset(first[0]), self._offset(last)
            is_open = not final and index == len(groups) - 1
            if is_open and end - start > MAX_OPEN_BLOCK_CHARS:
                blocks.append(TopBlock([Paragraph(self._raw_runs(start, end))], start, end, raw=True))
            else:
                blocks.append(TopBlock(_BlockBuilder(self, start, end).build(group), start, end))
        return blocks

    # --- source -> runs ---------------------------------------------------------------------

    def runs_at(self, positions: list[tuple[int, int]], text: str, marks: Marks) -> list[Run]:
        """Runs for ``text`` whose characters sit at the given source ranges (start, length)."""
        runs: list[Run] = []
        at = 0
        for start, length in positions:
            if start < 0:  # not in the source (an entity's expansion found nowhere): plain
                runs.append(Run(text[at:at + length], marks, -1))
                at += length
                continue
            pos, stop = start, start + length
            while pos < stop:
                slot = bisect.bisect_right(self._starts, pos) - 1
                event_index = self._owners[slot] if slot >= 0 else -1
                event_end = self._starts[slot + 1] if slot + 1 < len(self._starts) else len(self.source)
                cut = min(stop, event_end)
                event = self.events[event_index] if event_index >= 0 else None
                if event is not None and event.kind is TokenKind.CORRECTED:
                    body = event.text.lstrip()
                    lead_end = self._starts[slot] + len(event.text) - len(body)
                    if pos < lead_end and body:
                        split = min(cut, lead_end)
                        runs.append(Run(text[at:at + split - pos], marks, event_index, lead=True))
                        at += split - pos
                        pos = split
                        if pos >= cut:
                            continue
                runs.append(Run(text[at:at + cut - pos], marks, event_index))
                at += cut - pos
                pos = cut
        return _merged(runs, self.events)

    def _raw_runs(self, start: int, end: int) -> list[Run]:
        text = self.source[start:end].rstrip("\n")
        return self.runs_at([(start, len(text))], text.replace("\n", LINE_BREAK), PLAIN_MARKS)


def _merged(runs: list[Run], events: list[TokenEvent]) -> list[Run]:
    """Neighbouring runs that will look alike become one (corrected tokens stay apart for their tooltips)."""
    out: list[Run] = []
    for run in runs:
        if not run.text:
            continue
        if out:
            prev = out[-1]
            kind = events[run.event].kind if run.event >= 0 else TokenKind.PLAIN
            prev_kind = events[prev.event].kind if prev.event >= 0 else TokenKind.PLAIN
            if (prev.marks == run.marks and kind is prev_kind and kind is not TokenKind.CORRECTED
                    and not run.lead and not prev.lead):
                prev.text += run.text
                continue
        out.append(run)
    return out


def _top_level_groups(tokens: list[Token]) -> list[list[Token]]:
    groups: list[list[Token]] = []
    current: list[Token] = []
    depth = 0
    for token in tokens:
        current.append(token)
        depth += token.nesting
        if depth == 0:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def _group_end(group: list[Token]) -> int:
    end = 0
    for token in group:
        if token.map:
            end = max(end, token.map[1])
    return end


class _Locator:
    """Finds rendered text in the source, left to right, within one block's source range."""

    def __init__(self, source: str, start: int, end: int) -> None:
        self.source, self.pos, self.end = source, start, end

    def find(self, text: str) -> list[tuple[int, int]]:
        found = self.source.find(text, self.pos, self.end)
        if found >= 0:
            self.pos = found + len(text)
            return [(found, len(text))]
        ranges: list[tuple[int, int]] = []
        for ch in text:  # an escape, an entity or a normalised space: character by character
            wanted = "\n" if ch == LINE_BREAK else ch
            at = self.source.find(wanted, self.pos, self.end)
            if at < 0:
                ranges.append((-1, 1))
                continue
            self.pos = at + 1
            if ranges and ranges[-1][0] >= 0 and ranges[-1][0] + ranges[-1][1] == at:
                ranges[-1] = (ranges[-1][0], ranges[-1][1] + 1)
            else:
                ranges.append((at, 1))
        return ranges


class _BlockBuilder:
    """One top-level group of markdown-it tokens -> items."""

    def __init__(self, stream: MarkdownStream, start: int, end: int) -> None:
        self.stream = stream
        self.locator = _Locator(stream.source, start, end)
        self.items: list[Item] = []
        self.quote = 0
        self.lists: list[ListLevel] = []
        self.item_start = False
        self.heading = 0
        self.table: Table | None = None
        self.row: list[list[Run]] | None = None
        self.header = False

    def build(self, group: list[Token]) -> list[Item]:
        for token in group:
            self._block(token)
        return self.items

    def _depth(self) -> int:
        return self.quote + len(self.lists)

    def _block(self, token: Token) -> None:
        kind = token.type
        if kind == "blockquote_open":
            self.quote += 1
        elif kind == "blockquote_close":
            self.quote -= 1
        elif kind in ("bullet_list_open", "ordered_list_open"):
            start = int(token.attrs.get("start", 1) or 1) if kind == "ordered_list_open" else 1
            key = self.stream._offset((token.map or [0, 0])[0])  # where it starts: the same in every parse
            self.lists.append(ListLevel(key, kind == "ordered_list_open", start - 1))
        elif kind in ("bullet_list_close", "ordered_list_close"):
            self.lists.pop()
        elif kind == "list_item_open" and self.lists:
            level = self.lists[-1]
            self.lists[-1] = ListLevel(level.key, level.ordered, level.number + 1)
            self.item_start = True
        elif kind == "heading_open":
            self.heading = int(token.tag[1:]) if token.tag[1:].isdigit() else 1
        elif kind == "heading_close":
            self.heading = 0
        elif kind == "inline":
            self._inline(token)
        elif kind in ("fence", "code_block"):
            code = token.content[:-1] if token.content.endswith("\n") else token.content
            language = (token.info or "").split()[0] if token.info and token.info.strip() else ""
            lines = token.map or [0, 0]
            if kind == "fence":  # the code starts on the line after the opening fence
                self.locator.pos = max(self.locator.pos, self.stream._offset(lines[0] + 1))
            runs = self._located(code, PLAIN_MARKS)
            self.items.append(CodeBlock(language, code, runs, len(self.lists), self.quote))
            self.item_start = False
        elif kind == "hr":
            self.locator.pos = max(self.locator.pos, self.stream._offset((token.map or [0, 0])[1]))
            self.items.append(Rule(self._depth()))
        elif kind == "table_open":
            self.table = Table([], 0, [])
        elif kind == "table_close" and self.table is not None:
            self.items.append(self.table)
            self.table = None
        elif kind == "thead_open":
            self.header = True
        elif kind == "thead_close":
            self.header = False
        elif kind == "tr_open" and self.table is not None:
            self.row = []
        elif kind == "tr_close" and self.table is not None and self.row is not None:
            self.table.rows.append(self.row)
            if self.header:
                self.table.header_rows += 1
            self.row = None
        elif kind in ("th_open", "td_open") and self.table is not None:
            if self.header:
                style = str(token.attrs.get("style", ""))
                self.table.align.append(style.split(":", 1)[1].strip() if ":" in style else "")

    def _located(self, text: str, marks: Marks) -> list[Run]:
        if not text:
            return []
        return self.stream.runs_at(self.locator.find(text), text, marks)

    def _inline(self, token: Token) -> None:
        runs = self._inline_runs(token.children or [])
        if self.row is not None:
            self.row.append(runs)
            return
        self.items.append(Paragraph(runs, self.heading, self.quote, tuple(self.lists), self.item_start))
        self.item_start = False

    def _inline_runs(self, children: list[Token]) -> list[Run]:
        runs: list[Run] = []
        bold = italic = strike = 0
        links: list[str | None] = []
        for child in children:
            marks = Marks(bold=bold > 0 or self.header, italic=italic > 0, strike=strike > 0,
                          link=links[-1] if links else None, heading=self.heading)
            kind = child.type
            if kind == "text":
                runs += self._located(child.content, marks)
            elif kind == "code_inline":
                runs += self._located(child.content, Marks(marks.bold, marks.italic, marks.strike, True,
                                                           marks.link, marks.heading))
            elif kind in ("softbreak", "hardbreak"):
                runs += self._located(LINE_BREAK, marks)
            elif kind == "strong_open":
                bold += 1
            elif kind == "strong_close":
                bold -= 1
            elif kind == "em_open":
                italic += 1
            elif kind == "em_close":
                italic -= 1
            elif kind == "s_open":
                strike += 1
            elif kind == "s_close":
                strike -= 1
            elif kind == "link_open":
                links.append(safe_href(str(child.attrs.get("href", ""))))
            elif kind == "link_close":
                if links:
                    links.pop()
            elif kind == "image":  # never fetched: its alt text, as the text it is
                runs += self._inline_runs(child.children or [])
            elif child.content:  # anything else (html is off): its text, literally
                runs += self._located(child.content, marks)
        return _merged(runs, self.stream.events)


def plain_text(items: Sequence[Item]) -> str:
    """What the items show, as text (tests and the reopened-equals-streamed check)."""
    parts = []
    for item in items:
        if isinstance(item, Paragraph):
            parts.append("".join(run.text for run in item.runs))
        elif isinstance(item, CodeBlock):
            parts.append(item.code)
        elif isinstance(item, Table):
            parts += ["\t".join("".join(r.text for r in cell) for cell in row) for row in item.rows]
    return "\n".join(parts)
