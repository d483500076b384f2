"""Tools in the prompt: what a request asks, what the model's template can render of
it, and the conversation made ready for that template.

Most templates of tool-calling models take ``tools``, an assistant's ``tool_calls`` and
``tool`` messages. Whether one does is found by rendering it once with marked probe
values (cached per template) rather than by reading its code, so a template is judged
by what it writes. What it cannot render is written for it:

* tools it does not show: Tandem's tool prompt (``TOOL_PROMPT``, Hermes-style, as
  Qwen 2.5 and Hermes models are taught) goes at the end of the system prompt;
* earlier calls: the assistant's text, in the family's own call format;
* tool results: a user turn of ``<tool_response>`` blocks (one turn for consecutive
  results, so turns still alternate).

A forced call (``tool_choice`` "required" or a named function) begins the reply with
the family's call opening (``ToolFormat.opening``), so the model can only go on with a
call; ``app/backends/tool_grammar.py`` constrains the rest of it (and, with ``auto``,
any call the model opens) to calls whose arguments follow the functions' schemas.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

from app.engine.errors import ChatTemplateError
from app.engine.prompting.tool_calls import HERMES, MISTRAL, ToolFormat, detect_format

TOOL_PROMPT = (
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    "<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>"
)

_PROBE_TOOL = "tandem_probe_tool"
_PROBE_CALL = "tandem_probe_call"
_PROBE_RESULT = "tandem_probe_result"
_PROBE_ID = "tandemprb"  # nine letters: Mistral's templates insist on that length


@dataclass(frozen=True)
class ToolRequest:
    """The tool fields of one request, checked."""

    tools: tuple[dict, ...] = ()   # OpenAI's {"type": "function", "function": {...}}
    choice: str = "auto"           # auto | none | required
    name: str | None = None        # the function a named tool_choice forces
    parallel: bool = True
    constrained: bool = True       # calls held to the functions' schemas by a grammar

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none"


@dataclass(frozen=True)
class ToolPlan:
    """How one reply is prompted and read for calls."""

    format: ToolFormat
    prefill: str = ""              # the reply's forced beginning, already in the prompt
    max_calls: int | None = None   # one, when parallel calls are off or a function is named
    forced: bool = False           # the reply must be calls (tool_choice "required" or a name)
    name: str | None = None        # the one function it may call, when that is decided


@dataclass(frozen=True)
class TemplateTools:
    """What a template renders of its own accord."""

    tools: bool = False
    calls: bool = False
    results: bool = False


Render = Callable[..., str]  # chat.render_chat


@lru_cache(maxsize=16)
def template_tools(template: str | None, render: Render) -> TemplateTools:
    if template is None:
        return TemplateTools()
    tool = {"type": "function", "function": {"name": _PROBE_TOOL, "description": "probe",
                                             "parameters": {"type": "object", "properties": {}}}}
    user = {"role": "user", "content": "hello"}
    tools = _renders(render, template, [user], [tool], _PROBE_TOOL)
    if not tools:
        return TemplateTools()
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"id": _PROBE_ID, "type": "function",
                            "function": {"name": _PROBE_CALL, "arguments": {"x": 1}}}]}
    result = {"role": "tool", "content": _PROBE_RESULT, "tool_call_id": _PROBE_ID, "name": _PROBE_CALL}
    messages = [user, call, result]
    return TemplateTools(True, _renders(render, template, messages, [tool], _PROBE_CALL),
                         _renders(render, template, messages, [tool], _PROBE_RESULT))


def _renders(render: Render, template: str, messages: list[dict], tools: list[dict], marker: str) -> bool:
    try:
        return marker in render(template, messages, tools=tools)
    except ChatTemplateError:
        return False


def tool_plan(template: str | None, request: ToolRequest | None, render: Render) -> ToolPlan | None:
    """How the reply is read, or None when it is not read for calls."""
    if request is None or not request.active:
        return None
    fmt = detect_format(template) if template_tools(template, render).tools else HERMES
    name = request.name
    if name is None and request.choice == "required" and len(request.tools) == 1:
        name = request.tools[0]["function"]["name"]
    forced = request.choice == "required" or request.name is not None
    single = request.name is not None or not request.parallel
    return ToolPlan(fmt, fmt.opening(name) if forced else "", 1 if single else None, forced,
                    name if forced else None)


def prepare(messages: Sequence[dict], request: ToolRequest | None, template: str | None,
            render: Render) -> tuple[list[dict], list[dict] | None]:
    """The messages as the template can take them, and the tools for its ``tools``
    (None: not given to it)."""
    messages = list(messages)
    active = request is not None and request.active
    if not active and not any(m.get("tool_calls") or m.get("role") == "tool" for m in messages):
        return messages, None
    can = template_tools(template, render)
    fmt = detect_format(template) if can.tools else HERMES
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    out: list[dict] = []
    for message in messages:
        if message.get("tool_calls"):
            out.append(_assistant_calls(message, can.calls, fmt))
        elif message.get("role") == "tool":
            if can.results:
                out.append(_tool_result(message, names, fmt))
            elif out and out[-1].get("tandem_results"):
                out[-1] = dict(out[-1], content=out[-1]["content"] + "\n" + _response(message))
            else:
                out.append({"role": "user", "content": _response(message), "tandem_results": True})
        else:
            out.append(message)
    out = [{k: v for k, v in m.items() if k != "tandem_results"} for m in out]
    if not active:
        return out, None
    if can.tools:
        return out, list(request.tools)
    return _with_tool_prompt(out, request.tools), None


def _arguments(text: object) -> object:
    """Templates write arguments with ``tojson``: an object, not the JSON text OpenAI sends."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _assistant_calls(message: dict, native: bool, fmt: ToolFormat) -> dict:
    calls = message["tool_calls"]
    if native:
        rendered = [{"id": _call_id(c["id"], fmt), "type": "function",
                     "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}}
                    for c in calls]
        return {"role": "assistant", "content": message.get("content") or "", "tool_calls": rendered}
    text = fmt.call_text((c["function"]["name"], _arguments(c["function"]["arguments"])) for c in calls)
    content = message.get("content") or ""
    return {"role": "assistant", "content": f"{content}\n{text}" if content else text}


def _tool_result(message: dict, names: dict, fmt: ToolFormat) -> dict:
    call_id = message.get("tool_call_id") or ""
    return {"role": "tool", "content": message.get("content") or "", "tool_call_id": _call_id(call_id, fmt),
            "name": message.get("name") or names.get(call_id, "")}


def _response(message: dict) -> str:
    return f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"


_NINE = re.compile(r"[A-Za-z0-9]{9}")


def _call_id(call_id: str, fmt: ToolFormat) -> str:
    """Mistral's templates refuse ids that are not nine letters or digits: a client's
    ``call_...`` becomes nine of its own, the same for the call and its result."""
    if fmt is not MISTRAL or _NINE.fullmatch(call_id):
        return call_id
    return hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:9]


def tool_prompt_text(tools: Sequence[dict]) -> str:
    return TOOL_PROMPT.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))


def _with_tool_prompt(messages: list[dict], tools: Sequence[dict]) -> list[dict]:
    prompt = tool_prompt_text(tools)
    if messages and messages[0].get("role") == "system":
        system = messages[0].get("content") or ""
        return [dict(messages[0], content=f"{system}\n\n{prompt}" if system else prompt), *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]
