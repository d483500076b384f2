"""Request bodies, checked: OpenAI's fields (and llama-server's ``top_k``, ``min_p``,
``ignore_eos``) plus the ``tandem`` object; unknown fields are ignored, wrong ones
refused with the field named (``ApiError``, status 400).

Types are strict (``"5"`` is no number, ``1`` no boolean), so a client's mistake is
reported rather than guessed at.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.engine.speculation.target_rows import MAX_TOP_LOGPROBS
from app.engine.types import SamplingConfig, SpecConfig
from app.engine.prompting.tool_prompt import ToolRequest
from app.server.errors import ApiError
from app.server.tools import ToolCallIn, ToolChoice, ToolDef, history_entry, tool_request
from app.server.structured import response_grammar
from app.storage.settings import number_range

MAX_STOPS = 4         # as OpenAI
MAX_STOP_CHARS = 1000  # each is matched against the reply's tail after every token


def _ranged(setting: str):
    """A request field holding the number setting ``setting``, with its declared range
    (``Settings``): what the window and the command line take, the API takes."""
    return Field(None, **_bounds(setting))


def _bounds(setting: str) -> dict:
    bounds = number_range(setting)
    low = {"ge": bounds.low} if bounds.low_inclusive else {"gt": bounds.low}
    return {**low, "le": bounds.high}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class TandemOptions(_Body):
    speculative: bool | None = None
    draft_max: Annotated[int, Field(**_bounds("draft_max"))] | Literal["auto"] | None = None  # the setting's range, or "auto"
    tree: Literal["auto", "on", "off"] | None = None  # token trees, as the setting of that name
    token_kinds: bool = False


class StreamOptions(_Body):
    include_usage: bool = False


class ContentPart(_Body):
    type: str
    text: str | None = None


class JsonSchemaFormat(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallIn] | None = None   # tools.py
    tool_call_id: str | None = None
    name: str | None = None


class _Common(_Body):
    model: str | None = None
    max_tokens: int | None = _ranged("max_tokens")
    temperature: float | None = _ranged("temperature")
    top_p: float | None = _ranged("top_p")
    top_k: int | None = _ranged("top_k")
    min_p: float | None = _ranged("min_p")
    seed: int | None = _ranged("seed")
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool | None = None
    response_format: ResponseFormat | None = None
    tandem: TandemOptions | None = None


class ChatBody(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = _ranged("max_tokens")
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


class CompletionBody(_Common):
    prompt: str | list[str]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


@dataclass(frozen=True)
class Defaults:
    """What a request does not say: the server's command-line choices."""

    sampling: SamplingConfig = SamplingConfig()
    spec: SpecConfig = SpecConfig()
    max_tokens: int | None = None  # None: as much as the context leaves
    max_tokens_limit: int = 4096


@dataclass(frozen=True)
class JobSpec:
    """One checked request: what to prompt with and how to decode."""

    kind: Literal["chat", "completion"]
    sampling: SamplingConfig
    spec: SpecConfig
    max_tokens: int
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    token_kinds: bool = False
    history: tuple = ()                        # chat: the messages after the system prompt
                                               # ((role, text), or a dict: tools.history_entry)
    system: str = ""
    prompt: str = ""                           # completion: the raw prompt text
    speculation_refused: bool = False          # the request itself turned speculation off
    tools: ToolRequest | None = None           # chat: tools, tool_choice (tools.py)
    grammar: str = ""                          # GBNF the reply must match (response_format)
    logprobs: int | None = None                # None: none; else top alternatives per token


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(400, "The request body is not UTF-8 text.", code="invalid_json") from None
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"The request body is not valid JSON: {_first_line(exc)}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    return body


def chat_job(body: dict, defaults: Defaults) -> JobSpec:
    checked = _validate(ChatBody, body)
    system_parts: list[str] = []
    history: list = []
    for index, message in enumerate(checked.messages):
        text = _content_text(message, index)
        role = "system" if message.role == "developer" else message.role
        if role == "system" and not history:
            system_parts.append(text)   # leading system messages: the system prompt
        else:
            history.append(history_entry(role, text, message, index))
    system = "\n\n".join(system_parts)
    if not history:  # only a system prompt: it is the whole conversation
        history, system = [("system", system)], ""
    requested = checked.max_completion_tokens if checked.max_completion_tokens is not None else checked.max_tokens
    param = "max_completion_tokens" if checked.max_completion_tokens is not None else "max_tokens"
    if checked.top_logprobs is not None and not checked.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs set to true.", param="top_logprobs")
    logprobs = (checked.top_logprobs or 0) if checked.logprobs else None
    tools = tool_request(checked.tools, checked.tool_choice, checked.parallel_tool_calls)
    return _job("chat", checked, defaults, requested, param, history=tuple(history), system=system, tools=tools,
                logprobs=logprobs, grammar=_grammar(checked))


def completion_job(body: dict, defaults: Defaults) -> JobSpec:
    checked = _validate(CompletionBody, body)
    prompt = checked.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise ApiError(400, "Only one prompt per request is supported (a list of exactly one string).",
                           param="prompt")
        prompt = prompt[0]
    return _job("completion", checked, defaults, checked.max_tokens, "max_tokens", prompt=prompt,
                logprobs=checked.logprobs, grammar=_grammar(checked))


def _grammar(checked: _Common) -> str:
    """The grammar ``response_format`` asks for ('' for none): bounded, refused with a 400."""
    fmt = checked.response_format
    if fmt is None:
        return ""
    if fmt.type == "json_schema" and fmt.json_schema is None:
        raise ApiError(400, "response_format: a json_schema object is needed with type 'json_schema'.",
                       param="response_format.json_schema")
    schema = fmt.json_schema.schema_ if fmt.type == "json_schema" else None
    return response_grammar(fmt.type, schema, bool(fmt.type == "json_schema" and fmt.json_schema.strict))


def _job(kind, checked: _Common, defaults: Defaults, requested: int | None, param: str, **prompt) -> JobSpec:
    if checked.n not in (None, 1):
        raise ApiError(400, "Only n=1 is supported: one engine writes one reply at a time.", param="n")
    if requested is not None and requested > defaults.max_tokens_limit:
        raise ApiError(400, f"{param} is {requested}, over this server's limit of {defaults.max_tokens_limit}.",
                       param=param)
    max_tokens = requested or defaults.max_tokens or defaults.max_tokens_limit
    stops = [checked.stop] if isinstance(checked.stop, str) else list(checked.stop or [])
    if len(stops) > MAX_STOPS:
        raise ApiError(400, f"stop holds {len(stops)} sequences; at most {MAX_STOPS} are allowed.", param="stop")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise ApiError(400, f"A stop sequence is longer than {MAX_STOP_CHARS} characters.", param="stop")
    sampling = defaults.sampling
    changes = {name: getattr(checked, name) for name in ("temperature", "top_p", "top_k", "min_p", "ignore_eos")
               if getattr(checked, name) is not None}
    if checked.seed is not None:
        changes["seed"] = None if checked.seed == -1 else checked.seed
    sampling = dataclasses.replace(sampling, **changes)
    options = checked.tandem or TandemOptions()
    spec = defaults.spec
    if options.speculative is not None:
        spec = dataclasses.replace(spec, enabled=options.speculative)
    if options.draft_max is not None:  # in its declared range: TandemOptions checked it
        spec = spec.with_draft_max(options.draft_max)
    if options.tree is not None:
        spec = dataclasses.replace(spec, tree=options.tree)
    return JobSpec(kind=kind, sampling=sampling, spec=spec, max_tokens=max_tokens,
                   stop=tuple(s for s in stops if s), stream=bool(checked.stream),
                   include_usage=bool(checked.stream_options and checked.stream_options.include_usage),
                   token_kinds=options.token_kinds, speculation_refused=options.speculative is False, **prompt)


def _content_text(message: Message, index: int) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part_index, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise ApiError(400, f"Only text content is supported, not {part.type!r}.",
                           param=f"messages[{index}].content[{part_index}]")
        texts.append(part.text)
    return "\n".join(texts)


def _validate(model: type[BaseModel], body: dict):
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = _param(error["loc"])
        raise ApiError(400, f"{param or 'body'}: {error['msg']}", param=param or None) from None


def _param(loc) -> str:
    """pydantic's location as OpenAI writes it: ``messages[0].content``. A union's member
    names (``str``, ``list[...]``) in the location are pydantic's, not the client's."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("str", "int", "bool", "float") or "[" in str(part) or str(part).startswith(("literal", "constrained-")):
            continue
        else:
            text += ("." if text else "") + str(part)
    return text


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
