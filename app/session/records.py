"""A reply as the chat history stores it, and back: token events, stats and the reply's meta.

No Qt: the window's history controller records with these, and a server (or any other
front end) that keeps chats reads and writes the same records. What is stored may come
from another tool or an old import, so every reader here takes what fits and leaves the
rest out: a stored reply never raises on its way back to the screen.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Iterable

from app.engine.types import Stats, TokenEvent, TokenKind
from app.session.chat_types import LoadInfo
from app.storage.history import TokenRecord, token_record
from app.storage.settings import Settings
from app.vocabulary import MessageState

_STATS_FIELDS = {f.name for f in dataclasses.fields(Stats)}
_STATS_DEFAULTS = Stats()
# Stored status -> the reply's state on screen. 'streaming' found at load time belongs
# to a reply another Tandem is writing, or that died: either way it is not going on here.
_SHOWN_STATE = {MessageState.COMPLETE: MessageState.COMPLETE, MessageState.STOPPED: MessageState.STOPPED,
                MessageState.INTERRUPTED: MessageState.INTERRUPTED,
                MessageState.STREAMING: MessageState.INTERRUPTED}


def records_from_events(events: Iterable[TokenEvent]) -> list[TokenRecord]:
    return [token_record(e.text, e.kind.value, e.draft_text, e.draft_prob) for e in events]


def events_from_records(records: Any, text: Any) -> list[TokenEvent]:
    """Token events to redraw a stored reply; a reply stored without kinds comes back plain.

    Anything that is not a record of the right types is left out; when what is left
    does not spell the stored text, the text wins (one plain event)."""
    events = []
    for record in records if isinstance(records, list) else ():
        if not isinstance(record, dict) or not isinstance(record.get("text", ""), str):
            continue
        try:
            kind = TokenKind(record.get("kind", "plain"))
        except (ValueError, TypeError):
            kind = TokenKind.PLAIN
        draft_text = record.get("draft_text") if isinstance(record.get("draft_text"), str) else None
        prob = record.get("draft_prob")
        draft_prob = float(prob) if _finite(prob) else None
        events.append(TokenEvent(-1, record.get("text", ""), kind, draft_text=draft_text, draft_prob=draft_prob))
    if "".join(e.text for e in events) != text and isinstance(text, str):
        events = [TokenEvent(-1, text, TokenKind.PLAIN)] if text else []  # records lost: the text is right
    return events


def stats_to_record(stats: Stats | None) -> dict[str, Any]:
    """The derived figures (for exports and readers) plus the raw counters (to rebuild ``Stats``).

    The raw values win where a name is both: ``to_dict`` rounds ``seconds``, and a reply
    read back must show the very figures it showed live (63.5 tok/s, not 63.6)."""
    if stats is None:
        return {}
    return {**stats.to_dict(), **dataclasses.asdict(stats)}


def stats_from_record(record: Any) -> Stats | None:
    """The reply's Stats again; a field of the wrong type (another tool's) is left out."""
    if not isinstance(record, dict):
        return None
    values = {key: value for key, value in record.items() if key in _STATS_FIELDS and _fits(key, value)}
    if not values:
        return None
    try:
        return Stats(**values)
    except TypeError:
        return None


def error_from_record(record: Any) -> str | None:
    """The error a failed reply was stored with (in its stats), if any."""
    error = record.get("error") if isinstance(record, dict) else None
    return str(error) if error else None


def shown_state(status: Any) -> MessageState:
    """How a stored reply's status shows: a reply found 'streaming' was cut off."""
    try:
        return _SHOWN_STATE.get(MessageState(status), MessageState.COMPLETE)
    except (ValueError, TypeError):
        return MessageState.COMPLETE


def reply_meta(settings: Settings, info: LoadInfo | None) -> dict[str, Any]:
    """The models and settings a reply is being produced with (as a front end just sent them).

    ``info`` is None while models load: the request waits for what the settings name."""
    if info is not None:
        target, draft, drafter = info.target_name, info.draft_name, info.drafter
        speculating = settings.speculation and info.speculation_available
    else:
        target = Path(settings.target_path).name or "demo target"
        draft = Path(settings.draft_path).name if settings.draft_path else ""
        drafter, speculating = settings.drafter, settings.speculation
    return {
        "target": target,
        "draft": draft,
        "drafter": drafter,
        "speculation": speculating,
        "draft_max": settings.draft_max,
        "draft_min": settings.draft_min,
        "p_min": settings.p_min,
        "sampling": {"temperature": settings.temperature, "top_k": settings.top_k, "top_p": settings.top_p,
                     "min_p": settings.min_p, "seed": settings.seed},
        "max_tokens": settings.max_tokens,
        "system_prompt": settings.system_prompt,
    }


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fits(name: str, value: Any) -> bool:
    default = getattr(_STATS_DEFAULTS, name)
    if name == "stop_reason":  # None while running; stored as its value ("" when unknown)
        return isinstance(value, str)
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if isinstance(default, float):
        return _finite(value) and value >= 0
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, list):
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return False
