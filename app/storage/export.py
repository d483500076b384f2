"""A conversation as Markdown (to read or share) or as JSON (everything, and readable back)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from app.storage.errors import StorageError
from app.storage.history import ROLES, STATUSES, ConversationSummary, HistoryStore, StoredMessage

EXPORT_FORMAT = "tandem-conversation"
EXPORT_VERSION = 1
UNTITLED = "Untitled chat"


@dataclass(frozen=True)
class ConversationExport:
    title: str
    created_at: float
    updated_at: float
    messages: list[StoredMessage]


def to_markdown(conversation: ConversationSummary, messages: list[StoredMessage]) -> str:
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation.created_at))
    parts = [f"# {conversation.title or UNTITLED}", f"*Tandem conversation, started {created}*"]
    for message in messages:
        parts.append(f"## {message.role.capitalize()}")
        parts.append(message.text if message.text else "*(empty)*")
        footnote = _footnote(message)
        if footnote:
            parts.append(f"*{footnote}*")
    return "\n\n".join(parts) + "\n"


def to_json(conversation: ConversationSummary, messages: list[StoredMessage]) -> str:
    document = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "title": conversation.title,
        "created_at": conversation.created_at,
        "updated_at": conversation.updated_at,
        "messages": [asdict(message) for message in messages],
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def from_json(text: str) -> ConversationExport:
    """Read what ``to_json`` wrote; raises StorageError naming what is wrong."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise StorageError(f"Not a Tandem conversation export: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise StorageError("Not a Tandem conversation export.")
    if document.get("version") != EXPORT_VERSION:
        raise StorageError(f"Unsupported conversation export version {document.get('version')!r}.")
    try:
        messages = [_message(item) for item in document["messages"]]
        return ConversationExport(title=str(document["title"]), created_at=float(document["created_at"]),
                                  updated_at=float(document["updated_at"]), messages=messages)
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageError(f"Damaged conversation export: {exc!r}") from None


def import_conversation(store: HistoryStore, exported: ConversationExport) -> int:
    """Add an exported conversation to ``store`` as a new conversation; returns its id."""
    conversation_id = store.create_conversation(exported.title)
    for message in exported.messages:
        # A reply exported mid-stream will never finish here.
        status = "interrupted" if message.status == "streaming" else message.status
        store.add_message(conversation_id, message.role, message.text, tokens=message.tokens,
                          meta=message.meta, stats=message.stats, status=status)
    return conversation_id


def _message(item: dict[str, Any]) -> StoredMessage:
    known = {f.name for f in fields(StoredMessage)}
    message = StoredMessage(**{key: value for key, value in item.items() if key in known})
    if message.role not in ROLES or message.status not in STATUSES:
        raise ValueError(f"role {message.role!r} / status {message.status!r}")
    if not isinstance(message.text, str) or not isinstance(message.tokens, list):
        raise ValueError("text must be a string and tokens a list")
    return message


def _footnote(message: StoredMessage) -> str:
    notes = []
    if message.status != "complete":
        notes.append(f"reply {message.status}")
    # Stats come from whichever engine version wrote them: show the figures that are there.
    stats = {key: value for key, value in message.stats.items() if isinstance(value, (int, float))}
    if stats.get("tokens"):
        notes.append(f"{stats['tokens']} tokens")
    if stats.get("tokens_per_second"):
        notes.append(f"{stats['tokens_per_second']:.1f} tokens/s")
    if stats.get("speculative") and "acceptance" in stats:
        notes.append(f"acceptance {stats['acceptance']:.0%}")
    return " · ".join(notes)
