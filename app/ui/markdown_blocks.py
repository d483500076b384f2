"""What a reply's Markdown is made of, as the renderer (``markdown_render``) hands it to
the widgets: top-level blocks of paragraphs, code blocks, tables and rules, each a list
of runs of text tied to the token that wrote them. Qt-free plain data."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Marks:
    """The Markdown formatting of a run (its colour comes from its token, not from here)."""

    bold: bool = False
    italic: bool = False
    strike: bool = False
    code: bool = False
    link: str | None = None  # a safe href
    heading: int = 0         # 1..6 inside a heading


PLAIN_MARKS = Marks()


@dataclass
class Run:
    text: str
    marks: Marks
    event: int          # index into the reply's events of the token that wrote it; -1: none
    lead: bool = False  # the leading whitespace of a corrected token (not underlined)


@dataclass(frozen=True)
class ListLevel:
    key: int       # one list, for this block's lifetime
    ordered: bool
    number: int    # the current item's number (ordered lists)


@dataclass
class Paragraph:
    runs: list[Run]
    heading: int = 0
    quote: int = 0                      # block-quote depth
    lists: tuple[ListLevel, ...] = ()   # enclosing lists, outermost first
    item_start: bool = False            # first paragraph of its list item: it carries the bullet


@dataclass
class CodeBlock:
    language: str
    code: str
    runs: list[Run]
    lists: int = 0  # enclosing lists and block quotes: the block is indented under them
    quote: int = 0


@dataclass
class Table:
    rows: list[list[list[Run]]]  # rows of cells of runs
    header_rows: int
    align: list[str]             # per column: "", "left", "center" or "right"


@dataclass
class Rule:
    depth: int = 0


Item = Paragraph | CodeBlock | Table | Rule


@dataclass
class TopBlock:
    """One top-level Markdown block (a paragraph, a whole list, a fence...)."""

    items: list[Item]
    start: int  # source offsets
    end: int
    raw: bool = False  # too long while open: shown as source until it closes


@dataclass
class Update:
    committed: list[TopBlock] = field(default_factory=list)  # final: drawn once, never again
    open: list[TopBlock] = field(default_factory=list)       # may still change: redrawn
