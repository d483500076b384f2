"""A conversation as Markdown (to read or share) or as JSON (everything, and readable back).

A JSON export read back is someone else's data: ``read_export`` reads only a regular
file of bounded size, ``from_json`` checks every field (``export_schema``) and
``import_conversation`` writes it in one transaction, so an import is all or nothing.
The Markdown is meant to be rendered: what the texts say stays text there (no HTML of
theirs, no heading that looks like one of the roles').
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from app.storage.errors import ImportRefused
from app.storage.export_schema import FORMAT, VERSION, check_export, parse_export_json
from app.storage.history import ConversationSummary, HistoryStore, StoredMessage
from app.storage.safe_json import UnreadableFile, read_regular_file
from app.vocabulary import MessageState

EXPORT_FORMAT = FORMAT
EXPORT_VERSION = VERSION
UNTITLED = "Untitled chat"
MAX_EXPORT_BYTES = 512 << 20  # a 100,000-message chat with token kinds is well under 100 MB


@dataclass(frozen=True)
class ConversationExport:
    title: str
    created_at: float
    updated_at: float
    messages: list[StoredMessage]
    tree: bool = False                # parent_id names each message's parent; else a chain
    current_leaf: int | None = None   # the exported id of the message shown
    preset: str = ""


def to_markdown(conversation: ConversationSummary, messages: list[StoredMessage]) -> str:
    """A readable document of ``messages``: the branch shown (``HistoryStore.messages``)."""
    try:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation.created_at))
    except (OverflowError, OSError, ValueError):
        created = "at an unknown time"
    parts = [f"# {markdown_line(conversation.title) or UNTITLED}", f"*Tandem conversation, started {created}*"]
    for message in messages:
        parts.append(f"## {message.role.capitalize()}")
        parts.append(markdown_text(message.text) if message.text else "*(empty)*")
        footnote = _footnote(message)
        if footnote:
            parts.append(f"*{footnote}*")
    return "\n\n".join(parts) + "\n"


def to_json(conversation: ConversationSummary, messages: list[StoredMessage],
            current_leaf: int | None = None) -> str:
    """Everything, to read back: give it the whole tree (``HistoryStore.all_messages``)
    and the leaf shown. Messages that name no parent at all are written as a chain."""
    tree = any(message.parent_id is not None for message in messages)
    records = []
    for message in messages:
        record = asdict(message)
        if not tree:
            del record["parent_id"]
        records.append(record)
    document = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "title": conversation.title,
        "created_at": conversation.created_at,
        "updated_at": conversation.updated_at,
        "preset": conversation.preset,
        **({"current_leaf": current_leaf} if tree and current_leaf is not None else {}),
        "messages": records,
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def conversation_json(store: HistoryStore, conversation_id: int) -> str:
    """The JSON export of a stored conversation: the whole tree, and the branch shown."""
    summary = store.conversation(conversation_id)
    if summary is None:
        raise ImportRefused(f"Conversation {conversation_id} is not in the history.")
    return to_json(summary, store.all_messages(conversation_id), store.current_leaf(conversation_id))


def conversation_markdown(store: HistoryStore, conversation_id: int) -> str:
    """The Markdown export of a stored conversation: the branch shown."""
    summary = store.conversation(conversation_id)
    if summary is None:
        raise ImportRefused(f"Conversation {conversation_id} is not in the history.")
    return to_markdown(summary, store.messages(conversation_id))


def from_json(text: str) -> ConversationExport:
    """Read what ``to_json`` wrote, every field checked; raises ImportRefused (a
    StorageError) naming the first field that is wrong and where it is."""
    checked = check_export(parse_export_json(text))
    return ConversationExport(title=checked["title"], created_at=checked["created_at"],
                              updated_at=checked["updated_at"],
                              messages=[StoredMessage(**message) for message in checked["messages"]],
                              tree=checked["tree"], current_leaf=checked["current_leaf"], preset=checked["preset"])


def read_export(path: Path) -> ConversationExport:
    """``from_json`` of a file: only a regular file of at most MAX_EXPORT_BYTES, as UTF-8."""
    try:
        data = read_regular_file(Path(path), MAX_EXPORT_BYTES)
    except UnreadableFile as exc:
        raise ImportRefused(f"Not a file to import: {exc}.") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportRefused(f"Not a Tandem conversation export: not UTF-8 text (byte {exc.start:,}).") from None
    return from_json(text)


Progress = Callable[[int, int], "bool | None"]  # (done, total) -> False to stop


def import_conversation(store: HistoryStore, exported: ConversationExport, progress: Progress | None = None) -> int:
    """Add an exported conversation to ``store`` as a new conversation, in one
    transaction (all of it or, on any failure or a stop, none); returns its id."""
    return store.import_conversation(exported.title, exported.messages, progress, tree=exported.tree,
                                     current_leaf=exported.current_leaf, preset=exported.preset)


# --- Markdown that stays as written --------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# Block quote and list markers before a line's text: a heading may hide behind them.
_BLOCK_PREFIX = re.compile(r"(?:[ \t]*(?:>|[-*+](?=[ \t])|[0-9]{1,9}[.)](?=[ \t])))*[ \t]*")
_UNDERLINE = re.compile(r"[=-][=\s-]*$")  # '===' or '---' under a line makes it a heading
_UNESCAPED_HTML = re.compile(r"(\\*)([<&])")
_ALL_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def markdown_line(text: str) -> str:
    """One line (a title) that renders as exactly its characters: all punctuation escaped."""
    return _ALL_PUNCTUATION.sub(r"\\\1", " ".join(text.split()))


def markdown_text(text: str) -> str:
    """A message's text for a Markdown document: its own Markdown still renders (lists,
    emphasis, code), but no HTML of its own and no heading of its own, so nothing in it
    can pass for another message's role heading or inject markup into a viewer.

    Outside fenced code, ``<`` and ``&`` are escaped (no tags, no entities, even inside
    `code spans`, where the backslash then shows: telling spans apart exactly needs a
    whole CommonMark parser, and a mistake there would let HTML through), and a line
    that would be a heading (``# ...``, or ``===`` / ``---`` under a line, also inside
    quotes and lists) is escaped. Fenced code renders literally and is left as written;
    a fence the text leaves open is closed, so it cannot swallow what follows."""
    out: list[str] = []
    fence = ""  # the open fence's marker, or ""
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence:
            out.append(line)
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and not line[match.end():].strip():
                fence = ""
            continue
        if match and not (match.group(1)[0] == "`" and "`" in line[match.end():]):
            fence = match.group(1)
            out.append(line)
            continue
        line = _UNESCAPED_HTML.sub(_escape_html, line)
        prefix = _BLOCK_PREFIX.match(line).end()
        rest = line[prefix:]
        if rest.startswith("#") or _UNDERLINE.match(rest):
            line = line[:prefix] + "\\" + rest
        out.append(line)
    if fence:
        out.append(fence)  # closes it: the next role heading stays a heading
    return "\n".join(out)


def _escape_html(match: re.Match) -> str:
    # An odd run of backslashes already escapes the character; an even one (or none)
    # is itself escaped and leaves it live, so it gets one more.
    backslashes, char = match.groups()
    return backslashes + ("\\" if len(backslashes) % 2 == 0 else "") + char


# An imported file's time saved beyond these is not a figure any reply had.
_SAVED_MOST = 1e7     # seconds: no reply saves or loses months
_SPEEDUP_MOST = 1e4


def _footnote(message: StoredMessage) -> str:
    notes = []
    if message.status != MessageState.COMPLETE:
        notes.append(f"reply {message.status}")
    # Stats come from whichever engine version wrote them: show the figures that are there.
    stats = {key: value for key, value in message.stats.items() if isinstance(value, (int, float))}
    if stats.get("tokens"):
        notes.append(f"{stats['tokens']} tokens")
    if stats.get("tokens_per_second"):
        notes.append(f"{stats['tokens_per_second']:.1f} tokens/s")
    if stats.get("speculative") and "acceptance" in stats:
        notes.append(f"acceptance {stats['acceptance']:.0%}")
    # As the window shows it under the reply; an infinite, NaN or absurd figure is left out.
    saved, speedup = stats.get("seconds_saved"), stats.get("speedup")
    if (stats.get("speculative") and saved is not None and speedup is not None
            and abs(saved) < _SAVED_MOST and 0 < speedup < _SPEEDUP_MOST):
        notes.append(f"{abs(saved):.1f} s {'saved' if saved >= 0 else 'lost'} ({speedup:.2f}×)")
    return " · ".join(notes)

