"""The conversation export, checked in full before anything of it is written.

An export is other people's data: a shared file, perhaps crafted. Every field the
history keeps is checked for its type, its range and its size here, and the first one
that is wrong refuses the whole file with its path (``messages[12].tokens[3].draft_prob``), so
an import is all or nothing and nothing malformed reaches the history (where, before,
one bad conversation could break every later start).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from app.storage.errors import ImportRefused
from app.storage.history import ROLES, STATUSES, TOKEN_KEYS, TOKEN_KINDS, readable_key
from app.vocabulary import MessageState

FORMAT = "tandem-conversation"
VERSION = 2          # 2: the tree (parent_id, current_leaf) and the chat's preset
READABLE_VERSIONS = (1, 2)  # a version 1 export is a linear chat
MAX_MESSAGES = 1_000_000
MAX_TEXT_CHARS = 4_000_000       # one message; a long paste fits, a gigabyte does not
MAX_TITLE_CHARS = 10_000
MAX_TOKENS_PER_MESSAGE = 1_000_000
MAX_DIGITS = 30                  # no count or time in an export is longer
MAX_DEPTH = 32                   # meta and stats are flat; some room for what a tool adds
MAX_TIME = 1e11                  # seconds since 1970: year 5138; beyond, localtime() fails
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# Stats written by the app (``Stats`` fields, the figures derived from them, "error"):
# name -> the JSON type it must have. Other names pass if they are plain JSON.
_STAT_TYPES = {
    **{name: "count" for name in ("tokens", "rounds", "drafted", "accepted", "copied", "copied_accepted",
                                  "rejections", "prompt_tokens", "prompt_eval_tokens", "left_out")},
    **{name: "number" for name in ("seconds", "prompt_seconds", "draft_seconds", "target_seconds",
                                   "python_seconds", "acceptance", "alpha", "tokens_per_round",
                                   "tokens_per_second", "draft_host_seconds", "verify_host_seconds",
                                   "host_ms_per_round", "host_ms_per_drafted")},
    **{name: "counts" for name in ("accepted_by_position", "drafted_by_position")},
    "acceptance_by_position": "numbers",
    **{name: "text" for name in ("stop_reason", "note", "prompt_notice", "error")},
    "speculative": "flag",
}


class _TooBig(Exception):
    pass


def parse_export_json(text: str) -> Any:
    """``json.loads`` that refuses, in one line, what no export holds: deep nesting,
    numbers of thousands of digits, NaN and Infinity."""
    def whole(digits: str) -> int:
        if len(digits) > MAX_DIGITS:
            raise _TooBig(f"a number of {len(digits):,} digits")
        return int(digits)

    def real(digits: str) -> float:
        if len(digits) > MAX_DIGITS + 10:
            raise _TooBig(f"a number of {len(digits):,} characters")
        return float(digits)

    def constant(name: str) -> float:
        raise _TooBig(f"{name}, which is not a number JSON allows")

    decoder = json.JSONDecoder(parse_int=whole, parse_float=real, parse_constant=constant)
    try:
        return _decode_in_pieces(decoder, text)
    except _TooBig as exc:
        raise ImportRefused(f"Not a usable conversation export: it holds {exc}.") from None
    except RecursionError:
        raise ImportRefused("Not a usable conversation export: it is nested too deeply.") from None
    except ValueError as exc:  # JSONDecodeError included
        raise ImportRefused(f"Not a Tandem conversation export: {exc}") from None


_SPACE = re.compile(r"[ \t\n\r]*")


def _decode_in_pieces(decoder: json.JSONDecoder, text: str) -> Any:
    """What ``decoder.decode(text)`` returns, but a top-level object's arrays are decoded
    an element at a time.

    One ``json.loads`` of a 100,000-message export is a single C call that holds the GIL
    for most of a second, and the window (whose import runs on a thread) froze for that
    long. Between elements other threads run. Anything but a top-level object, and any
    malformed text, goes to the decoder whole, for its own error message."""
    at = _SPACE.match(text).end()
    if not text.startswith("{", at):
        return decoder.decode(text)
    document: dict[str, Any] = {}
    at = _SPACE.match(text, at + 1).end()
    if text.startswith("}", at):
        return decoder.decode(text)
    while True:
        if not text.startswith('"', at):
            return decoder.decode(text)
        key, at = decoder.raw_decode(text, at)
        at = _SPACE.match(text, at).end()
        if not text.startswith(":", at):
            return decoder.decode(text)
        at = _SPACE.match(text, at + 1).end()
        if text.startswith("[", at):
            document[key], at = _decode_array(decoder, text, at)
        else:
            document[key], at = decoder.raw_decode(text, at)
        at = _SPACE.match(text, at).end()
        if text.startswith(",", at):
            at = _SPACE.match(text, at + 1).end()
            continue
        if text.startswith("}", at) and not text[at + 1:].strip(" \t\n\r"):
            return document
        return decoder.decode(text)


def _decode_array(decoder: json.JSONDecoder, text: str, at: int) -> tuple[list, int]:
    items: list[Any] = []
    at = _SPACE.match(text, at + 1).end()
    if text.startswith("]", at):
        return items, at + 1
    while True:
        item, at = decoder.raw_decode(text, at)
        items.append(item)
        at = _SPACE.match(text, at).end()
        if text.startswith(",", at):
            at = _SPACE.match(text, at + 1).end()
        elif text.startswith("]", at):
            return items, at + 1
        else:
            decoder.decode(text)  # raises with the decoder's own position and message
            raise ValueError(f"Expecting ',' delimiter: char {at}")



def check_export(document: Any) -> dict[str, Any]:
    """The export's fields, every one checked; raises ImportRefused naming the first bad one.

    Returns {"title", "created_at", "updated_at", "messages": [dict, ...], "tree",
    "current_leaf", "preset"} where each message dict holds the StoredMessage fields
    (missing optional ones filled in). ``tree`` is true when any message names its
    parent (then every parent is an earlier message's id); otherwise the messages are a chain."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ImportRefused("Not a Tandem conversation export.")
    version = document.get("version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ImportRefused(f"Unsupported conversation export version {_shown(version)}.")
    checked = {
        "title": _text(_field(document, "title", ""), "title", MAX_TITLE_CHARS),
        "created_at": _time(_field(document, "created_at", ""), "created_at"),
        "updated_at": _time(_field(document, "updated_at", ""), "updated_at"),
    }
    messages = _field(document, "messages", "")
    if not isinstance(messages, list):
        _refuse("messages", "must be a list of messages")
    if len(messages) > MAX_MESSAGES:
        _refuse("messages", f"{len(messages):,} messages, over the limit of {MAX_MESSAGES:,}")
    checked["messages"] = [_message(item, f"messages[{i}]") for i, item in enumerate(messages)]
    checked["tree"] = version >= 2 and any(isinstance(m, dict) and "parent_id" in m for m in messages)
    checked["preset"] = _text(document.get("preset", ""), "preset", MAX_TITLE_CHARS) if version >= 2 else ""
    checked["current_leaf"] = None
    if checked["tree"]:
        _check_tree(checked["messages"])
        leaf = document.get("current_leaf")
        if leaf is not None:
            if leaf not in {m["id"] for m in checked["messages"]} or isinstance(leaf, bool):
                _refuse("current_leaf", f"names no message of the export, got {_shown(leaf)}")
            checked["current_leaf"] = leaf
    return checked


def _check_tree(messages: list[dict[str, Any]]) -> None:
    """Ids unique, and every parent an earlier message: a tree with no cycle."""
    earlier: set[int] = set()
    for i, message in enumerate(messages):
        if message["id"] in earlier:
            _refuse(f"messages[{i}].id", f"{message['id']} is used by an earlier message too")
        parent = message["parent_id"]
        if parent is not None and parent not in earlier:
            _refuse(f"messages[{i}].parent_id", f"{parent} is not the id of an earlier message")
        earlier.add(message["id"])


def _message(item: Any, path: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        _refuse(path, "must be an object with role and text")
    role = _field(item, "role", path)
    if role not in ROLES:
        _refuse(f"{path}.role", f"must be one of {', '.join(ROLES)}, got {_shown(role)}")
    status = item.get("status", MessageState.COMPLETE.value)
    if status not in STATUSES:
        _refuse(f"{path}.status", f"must be one of {', '.join(STATUSES)}, got {_shown(status)}")
    tokens = item.get("tokens", [])
    if not isinstance(tokens, list):
        _refuse(f"{path}.tokens", "must be a list")
    if len(tokens) > MAX_TOKENS_PER_MESSAGE:
        _refuse(f"{path}.tokens", f"{len(tokens):,} tokens, over the limit of {MAX_TOKENS_PER_MESSAGE:,}")
    message = {
        "id": _count(item.get("id", 0), f"{path}.id"),
        "conversation_id": _count(item.get("conversation_id", 0), f"{path}.conversation_id"),
        "role": role,
        "text": _text(_field(item, "text", path), f"{path}.text", MAX_TEXT_CHARS),
        "tokens": [_token(record, f"{path}.tokens[{i}]") for i, record in enumerate(tokens)],
        "status": status,
        "meta": _object(item.get("meta", {}), f"{path}.meta"),
        "stats": _stats(item.get("stats", {}), f"{path}.stats"),
        "created_at": _time(item.get("created_at", 0.0), f"{path}.created_at"),
        "updated_at": _time(item.get("updated_at", 0.0), f"{path}.updated_at"),
        "parent_id": None if item.get("parent_id") is None else _count(item["parent_id"], f"{path}.parent_id"),
    }
    return message


def _token(record: Any, path: str) -> dict[str, Any]:
    """A token, stored with the readable keys. Exports from before them spell the keys
    t, k, d, p; both read, and a refusal names a field as the file spells it."""
    if not isinstance(record, dict):
        _refuse(path, 'must be an object like {"text": text, "kind": kind}')
    spelled = {readable_key(key): key for key in record}  # readable name -> as written
    if len(spelled) < len(record):
        _refuse(path, "names a field twice (short and in full)")
    unknown = sorted(str(key) for name, key in spelled.items() if name not in TOKEN_KEYS)
    if unknown:
        _refuse(f"{path}.{unknown[0]}", f"is not a token field ({', '.join(TOKEN_KEYS)})")

    def at(name: str) -> str:
        return f"{path}.{spelled.get(name, name)}"

    def value(name: str, default: Any = None) -> Any:
        return record.get(spelled.get(name, name), default)

    checked = {"text": _text(_field(record, spelled.get("text", "text"), path), at("text"), MAX_TEXT_CHARS),
               "kind": value("kind", "plain")}
    if checked["kind"] not in TOKEN_KINDS:
        _refuse(at("kind"), f"must be one of {', '.join(TOKEN_KINDS)}, got {_shown(checked['kind'])}")
    if value("draft_text") is not None:
        checked["draft_text"] = _text(value("draft_text"), at("draft_text"), MAX_TEXT_CHARS)
    if value("draft_prob") is not None:
        checked["draft_prob"] = _number(value("draft_prob"), at("draft_prob"), 0.0, 1.0)
    return checked


def _stats(value: Any, path: str) -> dict[str, Any]:
    stats = _object(value, path)
    for name, kind in _STAT_TYPES.items():
        if name not in stats:
            continue
        where, item = f"{path}.{name}", stats[name]
        if kind == "count":
            _count(item, where)
        elif kind == "number":
            _number(item, where)
        elif kind == "text":
            _text(item, where, MAX_TEXT_CHARS)
        elif kind == "flag" and not isinstance(item, bool):
            _refuse(where, "must be true or false")
        elif kind in ("counts", "numbers"):
            if not isinstance(item, list):
                _refuse(where, "must be a list of numbers")
            for i, entry in enumerate(item):
                (_count if kind == "counts" else _number)(entry, f"{where}[{i}]")
    return stats


def _object(value: Any, path: str) -> dict[str, Any]:
    """A JSON object of plain JSON, at most MAX_DEPTH deep, without lone surrogates."""
    if not isinstance(value, dict):
        _refuse(path, "must be an object")
    stack = [(value, path, 1)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            _refuse(where, f"is nested more than {MAX_DEPTH} deep")
        if isinstance(item, dict):
            for key, entry in item.items():
                _text(key, f"{where} (a key)", MAX_TITLE_CHARS)
                stack.append((entry, f"{where}.{key}", depth + 1))
        elif isinstance(item, list):
            stack.extend((entry, f"{where}[{i}]", depth + 1) for i, entry in enumerate(item))
        elif isinstance(item, str):
            _text(item, where, MAX_TEXT_CHARS)
    return value


def _field(container: dict, name: str, path: str) -> Any:
    if name not in container:
        _refuse(f"{path}.{name}" if path else name, "is missing")
    return container[name]


def _text(value: Any, path: str, limit: int) -> str:
    if not isinstance(value, str):
        _refuse(path, f"must be text, got {_shown(value)}")
    if len(value) > limit:
        _refuse(path, f"{len(value):,} characters, over the limit of {limit:,}")
    if _LONE_SURROGATE.search(value):
        _refuse(path, "holds a lone surrogate (half a UTF-16 pair), which is no character")
    return value


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _refuse(path, f"must be a whole number of at least 0, got {_shown(value)}")
    return value


def _number(value: Any, path: str, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _refuse(path, f"must be a number, got {_shown(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        _refuse(path, f"must be from {low:g} to {high:g}, got {value!r}")
    return value


def _time(value: Any, path: str) -> float:
    return float(_number(value, path, 0.0, MAX_TIME))


def _refuse(path: str, reason: str) -> None:
    raise ImportRefused(f"Damaged conversation export: {path} {reason}.")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True) if not isinstance(value, (dict, list)) else (
        "an object" if isinstance(value, dict) else "a list")
    return text if len(text) <= 40 else text[:39] + "…"
