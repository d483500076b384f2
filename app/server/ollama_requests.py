"""Ollama's request bodies (``/api/chat``, ``/api/generate``), checked and turned into
the OpenAI body the other routes parse, so both APIs share one parsing path
(``chat_job``, ``completion_job``) and one queue.

``options`` map onto Tandem's sampling: ``temperature``, ``top_k``, ``top_p``,
``min_p``, ``seed``, ``num_predict`` (-1, -2 or 0: as much as the context leaves; over
the server's limit: capped, as Ollama caps it), ``stop`` and ``draft_num_predict``
(Tandem's ``draft_max``). The rest (``repeat_penalty``, ``presence_penalty``,
``frequency_penalty``, ``typical_p``, ``mirostat*``, ``num_ctx``, ``num_thread``, ...)
are accepted and ignored: Tandem has no such sampling, and the context and threads
are fixed when the pair is loaded. ``keep_alive`` is ignored: the pair stays loaded
while the server runs.

Refused with a 400 until Tandem can honour them: ``format`` (unless the OpenAI parser
takes ``response_format``, then it is passed on), ``tools``, images, ``suffix``,
``template``, ``context``, ``think`` and ``logprobs``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.server.errors import ApiError
from app.server.requests import (ChatBody, CompletionBody, Defaults, JobSpec, TandemOptions, chat_job,
                                 completion_job)
from app.vocabulary import DRAFT_MAX_RANGE

TAG = ":latest"
# Sampling a client may send that Tandem does not have (Ollama's Modelfile parameters).
IGNORED_OPTIONS = ("num_keep", "typical_p", "repeat_last_n", "repeat_penalty", "presence_penalty",
                   "frequency_penalty", "penalize_newline", "mirostat", "mirostat_tau", "mirostat_eta",
                   "tfs_z", "numa", "num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread")
# The OpenAI field an error names -> the Ollama field the client sent.
_OLLAMA_NAMES = {"temperature": "options.temperature", "top_p": "options.top_p", "top_k": "options.top_k",
                 "min_p": "options.min_p", "seed": "options.seed", "stop": "options.stop",
                 "max_tokens": "options.num_predict"}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class Options(_Body):
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int | None = None
    # Ollama's meaning, the exception declared beside Settings.max_tokens: 0, -1, -2 and
    # anything past the server's limit ask for as much as the context leaves
    num_predict: int | None = None
    stop: str | list[str] | None = None
    draft_num_predict: int | None = Field(None, ge=DRAFT_MAX_RANGE[0], le=DRAFT_MAX_RANGE[1])


class Message(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    images: list[str] | None = None


class _Request(_Body):
    model: str | None = None
    stream: bool | None = None       # absent or null: streamed, as Ollama does
    options: Options | None = None
    format: Any = None                # "json", a JSON schema, or absent
    keep_alive: str | int | float | None = None
    think: bool | str | None = None
    logprobs: bool | None = None
    tandem: TandemOptions | None = None


class ChatRequest(_Request):
    messages: list[Message] | None = None
    tools: list[Any] | None = None


class GenerateRequest(_Request):
    prompt: str | None = None
    system: str | None = None
    raw: bool | None = None
    suffix: str | None = None
    images: list[str] | None = None
    template: str | None = None
    context: list[int] | None = None


def checked(model: type[BaseModel], body: dict):
    """The body as ``model``, a model named; ``ApiError`` (400) otherwise. Whatever name
    it gives, the loaded pair answers (as on the OpenAI routes), and the reply names it:
    a client's configured name (litellm's ``ollama/tandem``, an example's ``llama3.2``)
    works unchanged."""
    try:
        request = model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = _location(error["loc"])
        raise ApiError(400, f"{where or 'body'}: {error['msg']}", param=where or None) from None
    if not request.model:
        raise ApiError(400, "model is required", param="model")
    if request.think not in (None, False):
        raise ApiError(400, f"'{request.model}' does not support thinking", param="think")
    if request.logprobs:
        raise ApiError(400, "logprobs are not supported on the Ollama routes yet", param="logprobs")
    return request


def is_load_only(request: ChatRequest | GenerateRequest) -> bool:
    """No messages or no prompt: Ollama's way to load a model (here: it is loaded)."""
    if isinstance(request, ChatRequest):
        return not request.messages
    return not request.prompt


def chat_spec(request: ChatRequest, defaults: Defaults) -> JobSpec:
    if request.tools:
        raise ApiError(400, "tools are not supported on /api/chat yet", param="tools")
    messages = []
    for index, message in enumerate(request.messages or ()):
        if message.images:
            raise ApiError(400, "images are not supported: the loaded models read text only",
                           param=f"messages[{index}].images")
        messages.append({"role": message.role, "content": message.content or ""})
    body = {"messages": messages, **_common(request, defaults, ChatBody)}
    return _translated(chat_job, body, defaults)


def generate_spec(request: GenerateRequest, defaults: Defaults) -> JobSpec:
    for name, why in (("suffix", "suffix (the text after the reply, fill-in-the-middle) is not supported"),
                      ("images", "images are not supported: the loaded models read text only"),
                      ("template", "a template of the request's own is not supported: the model's chat "
                                   "template is used, or none with raw"),
                      ("context", "context (deprecated) is not supported: send the conversation to /api/chat")):
        if getattr(request, name):
            raise ApiError(400, why, param=name)
    if request.raw:
        if request.system:
            raise ApiError(400, "raw mode does not support a system prompt", param="system")
        body = {"prompt": request.prompt or "", **_common(request, defaults, CompletionBody)}
        return _translated(completion_job, body, defaults)
    messages = [{"role": "system", "content": request.system}] if request.system else []
    messages.append({"role": "user", "content": request.prompt or ""})
    body = {"messages": messages, **_common(request, defaults, ChatBody)}
    return _translated(chat_job, body, defaults)


def _common(request: _Request, defaults: Defaults, parser: type[BaseModel]) -> dict:
    """The OpenAI fields for ``request``'s stream, options, format and tandem object."""
    options = request.options or Options()
    body: dict = {"stream": request.stream is not False}
    for name in ("temperature", "top_k", "top_p", "min_p", "seed", "stop"):
        value = getattr(options, name)
        if value is not None:
            body[name] = value
    if options.num_predict is not None and options.num_predict > 0:
        body["max_tokens"] = min(options.num_predict, defaults.max_tokens_limit)
    tandem = request.tandem.model_dump(exclude_none=True) if request.tandem else {}
    if options.draft_num_predict is not None:
        tandem.setdefault("draft_max", options.draft_num_predict)
    if tandem:
        body["tandem"] = tandem
    response_format = _response_format(request.format)
    if response_format is not None:
        # The seam for structured output: passed on once the OpenAI parser takes it.
        if "response_format" not in parser.model_fields:
            raise ApiError(400, "format (JSON output) is not supported by this server yet", param="format")
        body["response_format"] = response_format
    return body


def _response_format(value) -> dict | None:
    if value is None or value == "":
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": value, "strict": True}}
    raise ApiError(400, f"format must be \"json\" or a JSON schema, not {value!r}"[:200], param="format")


def _translated(parse, body: dict, defaults: Defaults) -> JobSpec:
    """``parse``'s job, its refusals naming the Ollama field rather than the OpenAI one."""
    try:
        return parse(body, defaults)
    except ApiError as exc:
        name = _OLLAMA_NAMES.get(exc.param or "")
        if name is None:
            raise
        message = name + exc.message[len(exc.param):] if exc.message.startswith(exc.param) else exc.message
        raise ApiError(exc.status, message, param=name, code=exc.code) from None


def _location(loc) -> str:
    """pydantic's location as the client wrote it (``messages[0].content``), without
    the union members pydantic adds (``str``, ``list[...]``)."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("str", "int", "bool", "float", "dict") or "[" in str(part) or str(part).startswith(("literal", "constrained-")):
            continue
        else:
            text += ("." if text else "") + str(part)
    return text
