"""OpenAI's Responses API, ``/v1/responses``, over the same engine and queue as chat
completions: a request is turned into the chat request it means (``chat_job`` checks
it), and the job's output is written as a ``response`` object or as its documented
server-sent events (``response.created``, ``response.output_text.delta``,
``response.function_call_arguments.delta``, ``response.completed``...).

Served: ``input`` as a string or as items (messages, ``function_call``,
``function_call_output``), ``instructions``, ``max_output_tokens``, ``temperature``,
``top_p``, ``text.format`` (``json_schema``, ``json_object``), function ``tools`` with
``tool_choice`` and ``parallel_tool_calls``, ``stream``, and ``previous_response_id``.

Conversations are kept in this process's memory only, for ``previous_response_id``
and ``GET /v1/responses/{id}``: the newest ``MAX_STORED`` responses, at most
``MAX_STORED_CHARS`` characters of conversation in all (the oldest go first); a
restart forgets them. ``"store": false`` keeps a response out.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import OrderedDict

from fastapi import Request

from app.server.errors import ApiError
from app.server.job_response import EVENT_STREAM, JobOutputResponse, send_body, send_json, start_stream
from app.server.replies import tandem_figures
from app.server.requests import Defaults, chat_job, parse_json
from app.server.tools import CallItem
from app.server.worker import Delta, Job, Outcome

MAX_STORED = 512                    # responses kept for previous_response_id
MAX_STORED_CHARS = 32 * 1024 * 1024  # their conversations' text, in all
_PASSED = ("temperature", "top_p", "top_k", "min_p", "seed", "parallel_tool_calls", "stream", "tandem",
           "stop", "ignore_eos")
_TEXT_PARTS = ("input_text", "output_text", "text")


class ResponseStore:
    """The conversations behind recent responses, newest last, bounded (see the module)."""

    def __init__(self, max_items: int = MAX_STORED, max_chars: int = MAX_STORED_CHARS) -> None:
        self.max_items, self.max_chars = max_items, max_chars
        self._items: OrderedDict[str, tuple[list[dict], dict, int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def put(self, response_id: str, messages: list[dict], response: dict) -> None:
        size = len(json.dumps(messages, ensure_ascii=False))
        with self._lock:
            self._items[response_id] = (messages, response, size)
            self._chars += size
            while self._items and (len(self._items) > self.max_items or self._chars > self.max_chars):
                _, (_, _, dropped) = self._items.popitem(last=False)
                self._chars -= dropped

    def messages(self, response_id: str) -> list[dict] | None:
        with self._lock:
            found = self._items.get(response_id)
            return list(found[0]) if found else None

    def response(self, response_id: str) -> dict | None:
        with self._lock:
            found = self._items.get(response_id)
            return found[1] if found else None

    def delete(self, response_id: str) -> bool:
        with self._lock:
            found = self._items.pop(response_id, None)
            if found:
                self._chars -= found[2]
            return found is not None


def add_responses_routes(app, worker, *, model_id: str, defaults: Defaults) -> ResponseStore:
    store = ResponseStore()

    @app.post("/v1/responses")
    async def create(request: Request):
        raw = await request.body()

        def checked():  # off the event loop: a long conversation takes a while to check
            body = parse_json(raw)
            messages, chat = chat_request(body, store)
            return body, messages, chat_job(chat, defaults)

        body, messages, spec = await asyncio.to_thread(checked)
        rid = f"resp_{uuid.uuid4().hex[:24]}"
        job = Job(spec, asyncio.get_running_loop(), id=rid)
        worker.submit(job)
        shapes = ResponseShapes(rid, model_id, body, spec)
        keep = body.get("store") is not False
        return ResponsesReply(job, shapes, lambda reply: store.put(rid, [*messages, *reply[0]], reply[1])
                              if keep else None)

    @app.get("/v1/responses/{response_id}")
    async def retrieve(response_id: str):
        found = store.response(response_id)
        if found is None:
            raise _not_found(response_id)
        return found

    @app.delete("/v1/responses/{response_id}")
    async def delete(response_id: str):
        if not store.delete(response_id):
            raise _not_found(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    return store


def _not_found(response_id: str) -> ApiError:
    return ApiError(404, f"No response {response_id[:80]!r} is kept here: responses live in this server's memory "
                         f"(the newest {MAX_STORED}) and are lost on restart.", code="response_not_found")


# -- the request ---------------------------------------------------------------------------
def chat_request(body: dict, store: ResponseStore) -> tuple[list[dict], dict]:
    """The conversation so far (without the instructions) and the chat request it makes."""
    previous = body.get("previous_response_id")
    messages: list[dict] = []
    if previous is not None:
        if not isinstance(previous, str):
            raise ApiError(400, "previous_response_id must be a string.", param="previous_response_id")
        kept = store.messages(previous)
        if kept is None:
            raise ApiError(400, f"previous_response_id {previous[:80]!r} is not kept here: responses live in "
                                f"this server's memory (the newest {MAX_STORED}) and are lost on restart.",
                           param="previous_response_id", code="previous_response_not_found")
        messages = kept
    messages += input_messages(body.get("input"))
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError(400, "instructions must be a string.", param="instructions")
    chat: dict = {"messages": ([{"role": "system", "content": instructions}] if instructions else []) + messages}
    for name in _PASSED:
        if name in body:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict):
            raise ApiError(400, "text must be an object.", param="text")
        fmt = text.get("format")
        if fmt is not None:
            chat["response_format"] = _format(fmt)
    return messages, chat


def input_messages(items) -> list[dict]:
    if items is None:
        raise ApiError(400, "input is required: a string or a list of items.", param="input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ApiError(400, "input must be a string or a list of items.", param="input")
    out: list[dict] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where} must be an object.", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise ApiError(400, f"{where}.role must be user, system, developer or assistant.", param=f"{where}.role")
            out.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call = {"id": _string(item, "call_id", where), "type": "function",
                    "function": {"name": _string(item, "name", where), "arguments": _string(item, "arguments", where)}}
            if out and out[-1]["role"] == "assistant" and "tool_call_id" not in out[-1]:
                out[-1] = {**out[-1], "tool_calls": [*(out[-1].get("tool_calls") or []), call]}
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": _string(item, "call_id", where),
                        "content": output if isinstance(output, str) else _text(output, f"{where}.output")})
        elif kind == "reasoning":
            continue  # a reasoning model's summary: nothing this engine reads back
        else:
            raise ApiError(400, f"{where}: items of type {str(kind)[:40]!r} are not supported (message, "
                                "function_call and function_call_output are).", param=f"{where}.type")
    return out


def _string(item: dict, key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or (key != "arguments" and not value):
        raise ApiError(400, f"{where}.{key} must be a string.", param=f"{where}.{key}")
    return value


def _text(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where} must be a string or a list of text parts.", param=where)
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ApiError(400, f"{where}[{index}]: only text parts are supported, not {str(kind)[:40]!r}.",
                           param=f"{where}[{index}]")
        texts.append(part["text"])
    return "\n".join(texts)


def _tools(tools) -> list:
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list.", param="tools")
    out = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise ApiError(400, f"tools[{index}]: only function tools are served here, not {str(kind)[:40]!r}.",
                           param=f"tools[{index}].type")
        out.append({"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters", "strict")
                                                     if tool.get(k) is not None}})
    return out


def _tool_choice(choice):
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _format(fmt) -> dict:
    if not isinstance(fmt, dict):
        raise ApiError(400, "text.format must be an object.", param="text.format")
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in ("name", "description", "schema", "strict")
                                                       if fmt.get(k) is not None}}
    return {"type": fmt.get("type")}


# -- the reply -------------------------------------------------------------------------------
class ResponseShapes:
    """The objects of one response: the ``response`` and its output items."""

    def __init__(self, response_id: str, model: str, body: dict, spec) -> None:
        self.id, self.model, self.body, self.spec = response_id, model, body, spec
        self.created = int(time.time())

    def response(self, status: str, output: list[dict], outcome: Outcome | None = None) -> dict:
        body = self.body
        text = body.get("text") if isinstance(body.get("text"), dict) else {}
        out = {"id": self.id, "object": "response", "created_at": self.created, "status": status,
               "model": self.model, "output": output, "error": None,
               "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
               "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
               "parallel_tool_calls": self.spec.tools.parallel if self.spec.tools else True,
               "previous_response_id": body.get("previous_response_id"),
               "temperature": self.spec.sampling.temperature, "top_p": self.spec.sampling.top_p,
               "text": {"format": text.get("format") or {"type": "text"}},
               "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
               "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
               "store": body.get("store") is not False, "truncation": "disabled", "usage": None}
        if outcome is not None:
            out["usage"] = {"input_tokens": outcome.prompt_tokens,
                            "input_tokens_details": {"cached_tokens": outcome.cached_tokens},
                            "output_tokens": outcome.completion_tokens,
                            "output_tokens_details": {"reasoning_tokens": 0},
                            "total_tokens": outcome.prompt_tokens + outcome.completion_tokens}
            out["tandem"] = tandem_figures(outcome)
        return out

    @staticmethod
    def message(item_id: str, text: str, status: str) -> dict:
        return {"type": "message", "id": item_id, "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
                if status != "in_progress" else []}

    @staticmethod
    def call(item: CallItem, status: str = "completed", arguments: str | None = None) -> dict:
        return {"type": "function_call", "id": "fc_" + item.id.removeprefix("call_"), "call_id": item.id,
                "name": item.call.name, "arguments": item.call.arguments if arguments is None else arguments,
                "status": status}


def _status(outcome: Outcome) -> str:
    return "incomplete" if outcome.finish_reason == "length" else "completed"


def _conversation(output: list[dict]) -> list[dict]:
    """The reply's items as chat messages, for the next request's previous_response_id."""
    text = "".join(part["text"] for item in output if item["type"] == "message" for part in item["content"])
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in output if item["type"] == "function_call"]
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return [message]


class ResponsesReply(JobOutputResponse):
    """A job's output as a ``response`` object, or as the Responses API's events."""

    def __init__(self, job: Job, shapes: ResponseShapes, keep) -> None:
        super().__init__()
        self.job, self.shapes, self.keep = job, shapes, keep
        self.sequence = 0

    async def _whole(self, item, send) -> None:
        job, shapes = self.job, self.shapes
        texts, output = [], []
        while isinstance(item, (Delta, CallItem)):
            if isinstance(item, Delta):
                texts.append(item.text)
            else:
                if "".join(texts):
                    output.append(shapes.message(f"msg_{uuid.uuid4().hex[:24]}", "".join(texts), "completed"))
                texts = []
                output.append(shapes.call(item))
            item = await job.output.get()
        if isinstance(item, ApiError):
            await send_json(send, item.status, item.body())
            return
        if not isinstance(item, Outcome):
            return
        if "".join(texts) or not output:
            output.append(shapes.message(f"msg_{uuid.uuid4().hex[:24]}", "".join(texts), "completed"))
        whole = shapes.response(_status(item), output, item)
        self.keep((_conversation(output), whole))
        await send_json(send, 200, whole)

    async def _stream(self, item, send) -> None:
        job, shapes = self.job, self.shapes
        await start_stream(send, EVENT_STREAM)
        await self._event(send, "response.created", response=shapes.response("in_progress", []))
        await self._event(send, "response.in_progress", response=shapes.response("in_progress", []))
        output: list[dict] = []
        message: dict | None = None   # the open message item, with its text so far
        kinds: list[str] = []         # token kinds not yet sent (a delta with no text of its own)
        while True:
            if isinstance(item, Delta):
                kinds += item.kinds
                if item.text:
                    if message is None:
                        message = {"id": f"msg_{uuid.uuid4().hex[:24]}", "text": "", "index": len(output)}
                        output.append({})
                        await self._event(send, "response.output_item.added", output_index=message["index"],
                                          item=shapes.message(message["id"], "", "in_progress"))
                        await self._event(send, "response.content_part.added", item_id=message["id"],
                                          output_index=message["index"], content_index=0,
                                          part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})
                    message["text"] += item.text
                    extra = {"tandem": {"token_kinds": kinds}} if job.spec.token_kinds else {}
                    kinds = []
                    await self._event(send, "response.output_text.delta", item_id=message["id"],
                                      output_index=message["index"], content_index=0, delta=item.text,
                                      logprobs=[], **extra)
            elif isinstance(item, CallItem):
                message = await self._close(send, message, output)
                index = len(output)
                done = shapes.call(item)
                output.append(done)
                extra = {"tandem": {"token_kinds": kinds + list(item.kinds)}} if job.spec.token_kinds else {}
                kinds = []
                await self._event(send, "response.output_item.added", output_index=index,
                                  item=shapes.call(item, "in_progress", ""))
                await self._event(send, "response.function_call_arguments.delta", item_id=done["id"],
                                  output_index=index, delta=item.call.arguments, **extra)
                await self._event(send, "response.function_call_arguments.done", item_id=done["id"],
                                  output_index=index, arguments=item.call.arguments, name=item.call.name)
                await self._event(send, "response.output_item.done", output_index=index, item=done)
            elif isinstance(item, Outcome):
                await self._close(send, message, output)
                whole = shapes.response(_status(item), [o for o in output if o], item)
                self.keep((_conversation(whole["output"]), whole))
                kind = "response.completed" if whole["status"] == "completed" else "response.incomplete"
                await self._event(send, kind, response=whole, more=False)
                return
            elif isinstance(item, ApiError):
                error = item.body()["error"]
                await self._event(send, "error", code=error.get("code"), message=error["message"],
                                  param=error.get("param"), more=False)
                return
            else:  # the client is gone
                return
            item = await job.output.get()

    async def _close(self, send, message: dict | None, output: list[dict]) -> None:
        """End the open message item, if any (its text is whole); None: no item is open now."""
        if message is None:
            return None
        part = {"type": "output_text", "text": message["text"], "annotations": [], "logprobs": []}
        done = self.shapes.message(message["id"], message["text"], "completed")
        output[message["index"]] = done
        await self._event(send, "response.output_text.done", item_id=message["id"], output_index=message["index"],
                          content_index=0, text=message["text"], logprobs=[])
        await self._event(send, "response.content_part.done", item_id=message["id"], output_index=message["index"],
                          content_index=0, part=part)
        await self._event(send, "response.output_item.done", output_index=message["index"], item=done)
        return None

    async def _event(self, send, kind: str, *, more: bool = True, **fields) -> None:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        data = json.dumps(event, ensure_ascii=False).encode("utf-8")
        await send_body(send, b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n", more=more)
