"""Tool calls in a model's reply: the formats of the families, told apart by their chat
template, and a splitter that turns streamed reply text into content and calls.

Each family writes calls its own way:

* Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block a
  call (also what Tandem asks for when a template knows no tools);
* Llama 3.1+: a JSON object ``{"name": ..., "parameters": {...}}`` as the whole reply,
  or after ``<|python_tag|>``;
* Mistral: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``, or the newer
  ``[TOOL_CALLS]name[ARGS]{...}``;
* Functionary v3.1 (and Llama's "custom tool" prompt): ``<function=name>{...}</function>``.

A call is given to the client only once it is whole and valid; text that only looked
like the start of one (a malformed call, JSON that is no call) is content, as written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Iterable

import pydantic_core

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text of an object, as OpenAI sends it


class _NeedMore(Exception):
    """The text may still become a call: wait for more."""


class _Invalid(Exception):
    """The text is no call."""


def _json_value(text: str, start: int, *, final: bool) -> tuple[object, int]:
    """The JSON value at ``start`` and where it ends; ``_NeedMore`` while the text is a
    valid beginning of one, ``_Invalid`` once it cannot be."""
    start = _skip_ws(text, start)
    if start >= len(text):
        raise _Invalid() if final else _NeedMore()
    try:
        return _DECODER.raw_decode(text, start)
    except ValueError:
        pass
    if final:
        raise _Invalid()
    try:
        pydantic_core.from_json(text[start:], allow_partial=True)
    except ValueError:
        raise _Invalid() from None
    raise _NeedMore()


def _skip_ws(text: str, index: int) -> int:
    while index < len(text) and text[index] in _WS:
        index += 1
    return index


def _expect(text: str, index: int, literal: str, *, final: bool) -> int:
    """Past ``literal`` at ``index`` (after white space)."""
    index = _skip_ws(text, index)
    rest = text[index:index + len(literal)]
    if rest == literal:
        return index + len(literal)
    if not final and literal.startswith(rest):
        raise _NeedMore()
    raise _Invalid()


def _arguments(value: object) -> str:
    """A call's arguments as JSON text of an object; a JSON string holding one counts too."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _Invalid() from None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise _Invalid()
    return json.dumps(value, ensure_ascii=False)


def _call_from(obj: object, argument_keys: tuple[str, ...]) -> ToolCall:
    if not isinstance(obj, dict):
        raise _Invalid()
    if obj.get("type") == "function" and isinstance(obj.get("function"), dict):
        obj = obj["function"]   # the OpenAI shape, written out by an over-eager model
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _Invalid()
    key = next((k for k in argument_keys if k in obj), None)
    return ToolCall(name.strip(), _arguments(obj[key] if key else {}))


def _check_keys(text: str, start: int, allowed: frozenset[str]) -> None:
    """Early refusal of JSON that will be no call: a key no call has (``{"answer": ...``)."""
    try:
        partial = pydantic_core.from_json(text[start:], allow_partial=True)
    except ValueError:
        raise _Invalid() from None
    if not isinstance(partial, dict) or not set(partial) <= allowed:
        raise _Invalid()


@dataclass(frozen=True)
class ToolFormat:
    """One family's way of writing calls."""

    name: str
    markers: tuple[str, ...]          # texts that open a call wherever they appear
    leading_json: bool = False        # a bare JSON object opening the reply is a call
    argument_keys: tuple[str, ...] = ("arguments", "parameters")
    special_texts: tuple[str, ...] = field(default=())  # control tokens to read as text

    def parse(self, text: str, *, final: bool, eager: bool = False) -> tuple[list[ToolCall], int]:
        """The calls at the start of ``text`` (a marker, or a bare object), and the end of
        what they used; ``_NeedMore`` / ``_Invalid`` otherwise. ``eager``: a call is whole
        once its JSON is, without waiting for what may close it (no further call is wanted)."""
        if text.startswith("{") and self.leading_json:
            return self._bare(text, final, eager)
        for marker in self.markers:
            if text.startswith(marker):
                return getattr(self, "_after_" + self.name)(text, len(marker), final, eager)
        raise _Invalid()

    def _bare(self, text: str, final: bool, eager: bool) -> tuple[list[ToolCall], int]:
        allowed = frozenset(("name", "type", "function", "id", *self.argument_keys))
        try:
            obj, end = _json_value(text, 0, final=final)
        except _NeedMore:
            _check_keys(text, 0, allowed)
            raise
        if not isinstance(obj, dict) or not set(obj) <= allowed:
            raise _Invalid()
        return [_call_from(obj, self.argument_keys)], _past_separator(text, end, final or eager)

    def _after_hermes(self, text: str, index: int, final: bool, eager: bool) -> tuple[list[ToolCall], int]:
        obj, end = _json_value(text, index, final=final)
        call = _call_from(obj, self.argument_keys)
        try:
            end = _expect(text, end, "</tool_call>", final=final or eager)
        except _Invalid:
            pass  # a call whose closing tag the model left out still counts
        return [call], end

    def _after_llama3(self, text: str, index: int, final: bool, eager: bool) -> tuple[list[ToolCall], int]:
        if not text[_skip_ws(text, index):].startswith("{") and (final or text[index:].strip()):
            raise _Invalid()   # built-in tools' Python (brave_search.call(...)): no JSON call
        obj, end = _json_value(text, index, final=final)
        return [_call_from(obj, self.argument_keys)], _past_separator(text, end, final or eager)

    def _after_mistral(self, text: str, index: int, final: bool, eager: bool) -> tuple[list[ToolCall], int]:
        start = _skip_ws(text, index)
        if start >= len(text):
            raise _Invalid() if final else _NeedMore()
        if text[start] in "[{":
            value, end = _json_value(text, start, final=final)
            items = value if isinstance(value, list) else [value]
            if not items:
                raise _Invalid()
            return [_call_from(item, self.argument_keys) for item in items], end
        # The newer form: name[ARGS]{...} (or name[CALL_ID]id[ARGS]{...}).
        match = re.match(r"([A-Za-z0-9_.-]+)(\[CALL_ID\][A-Za-z0-9]*)?\[ARGS\]", text[start:])
        if match is None:
            if not final and re.fullmatch(r"[A-Za-z0-9_.-]*(\[[A-Z_]*\]?[A-Za-z0-9]*(\[[A-Z]*)?)?", text[start:]):
                raise _NeedMore()
            raise _Invalid()
        obj, end = _json_value(text, start + match.end(), final=final)
        return [ToolCall(match.group(1), _arguments(obj))], end

    def _after_functionary(self, text: str, index: int, final: bool, eager: bool) -> tuple[list[ToolCall], int]:
        close = text.find(">", index)
        if close < 0:
            if not final and re.fullmatch(r"[A-Za-z0-9_.-]*", text[index:]):
                raise _NeedMore()
            raise _Invalid()
        name = text[index:close]
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise _Invalid()
        obj, end = _json_value(text, close + 1, final=final)
        call = ToolCall(name, _arguments(obj))
        try:
            end = _expect(text, end, "</function>", final=final or eager)
        except _Invalid:
            pass
        return [call], end

    def opening(self, name: str | None) -> str:
        """What a reply that must call (``name``, or any tool) is begun with."""
        if self.name == "functionary":
            return f"<function={name}>" if name else "<function="
        head = {"hermes": "<tool_call>\n{", "llama3": "{", "mistral": "[TOOL_CALLS] [{"}[self.name]
        if name is None:
            return head + '"name":'
        return head + f'"name": "{name}", "{self.argument_keys[0]}":'

    def call_text(self, calls: Iterable[tuple[str, object]]) -> str:
        """Earlier calls (name, arguments) written as this family writes them, for a
        template that cannot render an assistant's ``tool_calls`` itself."""
        calls = list(calls)
        key = self.argument_keys[0]
        if self.name == "mistral":
            items = [{"name": name, key: arguments} for name, arguments in calls]
            return "[TOOL_CALLS] " + json.dumps(items, ensure_ascii=False)
        if self.name == "functionary":
            return "".join(f"<function={name}>{json.dumps(arguments, ensure_ascii=False)}</function>"
                           for name, arguments in calls)
        blocks = [json.dumps({"name": name, key: arguments}, ensure_ascii=False) for name, arguments in calls]
        if self.name == "llama3":
            return "; ".join(blocks)
        return "\n".join(f"<tool_call>\n{block}\n</tool_call>" for block in blocks)


def _past_separator(text: str, end: int, final: bool) -> int:
    """Past the ``;`` that Llama writes between calls, if there is one (waiting to see)."""
    index = _skip_ws(text, end)
    if index == len(text) and not final:
        raise _NeedMore()
    return index + 1 if text[index:index + 1] == ";" else end


HERMES = ToolFormat("hermes", ("<tool_call>",), leading_json=True, special_texts=("<tool_call>", "</tool_call>"))
LLAMA3 = ToolFormat("llama3", ("<|python_tag|>",), leading_json=True, argument_keys=("parameters", "arguments"),
                    special_texts=("<|python_tag|>",))
MISTRAL = ToolFormat("mistral", ("[TOOL_CALLS]",), special_texts=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"))
FUNCTIONARY = ToolFormat("functionary", ("<function=",))
FORMATS = {f.name: f for f in (HERMES, LLAMA3, MISTRAL, FUNCTIONARY)}


def detect_format(template: str | None) -> ToolFormat:
    """The family whose calls a template teaches, by what it writes; Hermes when it
    names none (the format Tandem's own tool prompt asks for)."""
    text = template or ""
    if "[TOOL_CALLS]" in text:
        return MISTRAL
    if "<tool_call>" in text:
        return HERMES
    if "<function=" in text:
        return FUNCTIONARY
    if "<|python_tag|>" in text or "ipython" in text:
        return LLAMA3
    return HERMES


class CallSplitter:
    """Reply text in, content and whole calls out, as it streams.

    Text that could still open a call is held back; a call comes out when it is whole
    and valid, and text that turned out to be no call comes out as content. White space
    around calls is dropped. ``prefill``: what the prompt already began the reply with
    (a forced call's opening), part of the call but never sent."""

    def __init__(self, fmt: ToolFormat, *, prefill: str = "", max_calls: int | None = None) -> None:
        self.fmt = fmt
        self.buffer = prefill
        self.calls = 0
        self.max_calls = max_calls
        self._held_space = ""
        self._open = True   # nothing but white space or calls so far: a bare object may be a call
        self._after_call = False  # no content since the last call: its leading white space goes

    @property
    def done(self) -> bool:
        """No further call is wanted (``max_calls`` reached): the reply may end here."""
        return self.max_calls is not None and self.calls >= self.max_calls

    def feed(self, text: str) -> list[str | ToolCall]:
        self.buffer += text
        return self._drain(final=False)

    def finish(self, *, cut: bool = False) -> list[str | ToolCall]:
        """What is left, the reply having ended. ``cut``: it ended before a call it had
        opened was whole (max_tokens) and that call is no text -- a grammar held it to
        being a call -- so it is dropped rather than sent as content."""
        out = self._drain(final=False) if cut else []
        if cut and self.buffer and self._call_start() == 0:
            self.buffer = ""
        out += self._drain(final=True)
        if self.buffer:
            out += self._text(self.buffer)
            self.buffer = ""
        if self._held_space and not self.calls:
            out.append(self._held_space)
        self._held_space = ""
        return out

    def _drain(self, final: bool) -> list[str | ToolCall]:
        out: list[str | ToolCall] = []
        while self.buffer and not self.done:
            start = self._call_start()
            if start is None:           # a tail that may begin a marker waits
                keep = self._marker_tail() if not final else 0
                cut = len(self.buffer) - keep
                out += self._text(self.buffer[:cut])
                self.buffer = self.buffer[cut:]
                break
            if start > 0:
                out += self._text(self.buffer[:start])
                self.buffer = self.buffer[start:]
                continue
            try:
                eager = self.max_calls is not None and self.calls + 1 >= self.max_calls
                calls, end = self.fmt.parse(self.buffer, final=final, eager=eager)
            except _NeedMore:
                break
            except _Invalid:
                # No call after all: its first character is content; look again after it.
                out += self._text(self.buffer[0])
                self.buffer = self.buffer[1:]
                self._open = False
                continue
            if self.max_calls is not None:
                calls = calls[:self.max_calls - self.calls]
            out += calls
            self.calls += len(calls)
            self._held_space = ""
            self._open = self._after_call = True
            self.buffer = self.buffer[end:]
        if self.done:
            self.buffer = ""            # what follows the last wanted call is dropped
        return out

    def _call_start(self) -> int | None:
        found = [i for i in (self.buffer.find(m) for m in self.fmt.markers) if i >= 0]
        if self.fmt.leading_json and self._open:
            stripped = len(self.buffer) - len(self.buffer.lstrip(_WS))
            if stripped == len(self.buffer):
                return len(self.buffer) if not found else min(found)  # only white space yet
            if self.buffer[stripped] == "{":
                found.append(stripped)
        return min(found) if found else None

    def _marker_tail(self) -> int:
        if self.fmt.leading_json and self._open and not self.buffer.strip(_WS):
            return len(self.buffer)
        return max((k for m in self.fmt.markers for k in range(1, len(m)) if self.buffer.endswith(m[:k])), default=0)

    def _text(self, text: str) -> list[str]:
        """Content, its trailing white space held until more content (or the end) comes."""
        if not text:
            return []
        text = self._held_space + text
        if self._after_call:
            text = text.lstrip(_WS)
        body = text.rstrip(_WS)
        self._held_space = text[len(body):]
        if not body:
            return []
        self._open = self._after_call = False
        return [body]
