"""OpenAI's tool calls on ``/v1/chat/completions``: the request fields (``tools``,
``tool_choice``, ``parallel_tool_calls``, an assistant's ``tool_calls``, ``tool``
messages), checked into an ``engine.prompting.tool_prompt.ToolRequest``, and the reply's calls
read from the model's text (``ToolReader``) in OpenAI's shapes.

How a template is given the tools and which family's call format is read:
``app/engine/prompting/tool_prompt.py`` and ``app/engine/prompting/tool_calls.py``.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.engine.prompting.tool_calls import CallSplitter, ToolCall
from app.engine.prompting.tool_prompt import ToolPlan, ToolRequest
from app.server.errors import ApiError

log = logging.getLogger(__name__)

MAX_TOOLS = 128               # as OpenAI
FUNCTION_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class FunctionDef(_Body):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class ToolDef(_Body):
    type: Literal["function"]
    function: FunctionDef


class _Named(_Body):
    name: str


class NamedChoice(_Body):
    type: Literal["function"]
    function: _Named


class CallFunction(_Body):
    name: str = Field(min_length=1)
    arguments: str


class ToolCallIn(_Body):
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: CallFunction


ToolChoice = str | dict  # checked by ``tool_request``, which says what is wrong in words
CHOICES = ("auto", "none", "required")


def _choice(choice: ToolChoice | None) -> str | NamedChoice | None:
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise ApiError(400, f"tool_choice is {choice[:40]!r}; it must be \"auto\", \"none\", \"required\" "
                                "or {\"type\": \"function\", \"function\": {\"name\": ...}}.", param="tool_choice")
        return choice
    if choice is None:
        return None
    try:
        return NamedChoice.model_validate(choice)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = ".".join(["tool_choice", *(str(part) for part in error["loc"])])
        raise ApiError(400, f"{param}: {error['msg']}", param=param) from None


def tool_request(tools: list[ToolDef] | None, choice: ToolChoice | None, parallel: bool | None) -> ToolRequest | None:
    """The checked request's tool fields; ``ApiError`` (400) for what cannot be served."""
    choice = _choice(choice)
    if tools is None:
        if choice == "required" or isinstance(choice, NamedChoice):
            raise ApiError(400, "tool_choice asks for a tool call, but the request gives no tools.",
                           param="tool_choice")
        return None
    if not tools:
        raise ApiError(400, "tools is an empty list; give at least one tool or leave tools out.", param="tools")
    if len(tools) > MAX_TOOLS:
        raise ApiError(400, f"tools holds {len(tools)} tools; at most {MAX_TOOLS} are allowed.", param="tools")
    names = [t.function.name for t in tools]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ApiError(400, f"tools names {repeated[0]!r} more than once.", param="tools")
    name = None
    if isinstance(choice, NamedChoice):
        name = choice.function.name
        if name not in names:
            raise ApiError(400, f"tool_choice names {name!r}, which is not among the tools.",
                           param="tool_choice.function.name")
    as_dicts = tuple(t.model_dump(exclude_none=True) for t in tools)
    choice = "auto" if choice is None or name else choice
    return ToolRequest(as_dicts, choice, name, True if parallel is None else parallel,
                       constrained=choice != "none" and _schemas_convert(as_dicts))


def _schemas_convert(tools: tuple[dict, ...]) -> bool:
    """Whether the tools' parameter schemas make a grammar (tool_grammar.py). One that
    does not (too big, a keyword the converter cannot handle) leaves the calls
    unconstrained (read from the reply's text as it comes) rather than refusing the request."""
    # llama.cpp's converter, imported here: the window's side imports the server's request
    # shapes but never llama.cpp (requests are served in the engine process).
    from app.backends.llama.grammar import GrammarError
    from app.backends.tool_grammar import tool_calls_grammar
    from app.engine.prompting.tool_calls import HERMES

    try:
        tool_calls_grammar(HERMES, list(tools))
    except GrammarError as exc:
        log.info("tool calls left unconstrained: %s", exc)
        return False
    return True


def history_entry(role: str, text: str, message, index: int) -> tuple[str, str] | dict:
    """One message for the engine: (role, text), or a dict for a call or a tool result."""
    if message.tool_calls:
        if role != "assistant":
            raise ApiError(400, f"messages[{index}]: only assistant messages carry tool_calls.",
                           param=f"messages[{index}].tool_calls")
        calls = [c.model_dump() for c in message.tool_calls]
        return {"role": "assistant", "content": text, "tool_calls": calls}
    if role == "tool":
        if not message.tool_call_id:
            raise ApiError(400, f"messages[{index}]: a tool message needs the tool_call_id it answers.",
                           param=f"messages[{index}].tool_call_id")
        entry = {"role": "tool", "content": text, "tool_call_id": message.tool_call_id}
        if message.name:
            entry["name"] = message.name
        return entry
    return role, text


@dataclass(frozen=True)
class CallItem:
    """A whole call of the reply, on its way to the client."""

    index: int
    id: str
    call: ToolCall
    kinds: tuple[str, ...] = ()

    def openai(self) -> dict:
        return {"id": self.id, "type": "function",
                "function": {"name": self.call.name, "arguments": self.call.arguments}}

    def chunks(self) -> list[dict]:
        """As OpenAI streams a call: id, type and name first, then the arguments."""
        return [{"index": self.index, "id": self.id, "type": "function",
                 "function": {"name": self.call.name, "arguments": ""}},
                {"index": self.index, "function": {"arguments": self.call.arguments}}]


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolReader:
    """The reply's text in, content text and ``CallItem``s out (``engine.prompting.tool_calls``).

    Control tokens the format names (``[TOOL_CALLS]``, ``<|python_tag|>``) write no text
    of their own in a reply; ``text_of`` gives them theirs, so the splitter sees them."""

    def __init__(self, plan: ToolPlan, target, *, constrained: bool = False) -> None:
        self.splitter = CallSplitter(plan.format, prefill=plan.prefill, max_calls=plan.max_calls)
        self.constrained = constrained  # calls held to their grammar: one cut short is no text
        self._special: dict[int, str] = {}
        for text in plan.format.special_texts:
            ids = target.tokenize(text, add_special=False, parse_special=True)
            if len(ids) == 1 and not target.token_bytes(ids[0]):
                self._special[ids[0]] = text
        self.made = 0

    def text_of(self, token_id: int, text: str) -> str:
        return self._special.get(token_id, text)

    def feed(self, text: str) -> list:
        return self._items(self.splitter.feed(text))

    def finish(self) -> list:
        return self._items(self.splitter.finish(cut=self.constrained))

    @property
    def done(self) -> bool:
        return self.splitter.done

    def _items(self, pieces) -> list:
        items = []
        for piece in pieces:
            if isinstance(piece, ToolCall):
                items.append(CallItem(self.made, call_id(), piece))
                self.made += 1
            else:
                items.append(piece)
        return items
