"""Ollama's API beside OpenAI's, for the many tools that speak it: ``/api/chat``,
``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/ps``, ``/api/version``, and
``GET``/``HEAD /`` answering "Ollama is running" (what clients probe).

A request is checked (``ollama_requests``), becomes the same ``JobSpec`` an OpenAI
request would, and waits in the same queue. Replies are Ollama's: streamed unless
``"stream": false``, as NDJSON (one object a line, the last with ``done: true``, the
figures and a ``tandem`` object), durations in nanoseconds. Refusals are Ollama's
``{"error": "..."}``; one found by the engine comes back with its status too, since
nothing is sent before the job's first output.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.responses import Response

from app import __version__
from app.server.errors import ApiError
from app.server.job_response import NDJSON, JobOutputResponse, send_body, send_json, start_stream
from app.server.ollama_models import OLLAMA_API_VERSION, ModelCard, timestamp
from app.server.ollama_requests import (TAG, ChatRequest, GenerateRequest, checked, chat_spec, generate_spec,
                                        is_load_only)
from app.server.replies import tandem_figures
from app.server.requests import Defaults, parse_json
from app.server.worker import Delta, Job, Outcome

RUNNING = "Ollama is running"
SERVED = "POST /api/chat, /api/generate, /api/show; GET /api/tags, /api/ps, /api/version"


def add_ollama_routes(app: FastAPI, worker, *, model_id: str, defaults: Defaults, info=None) -> None:
    card: list[ModelCard] = []  # read once, on first use, off the event loop

    async def model_card() -> ModelCard:
        if not card:
            card.append(await asyncio.to_thread(ModelCard, model_id, info, defaults))
        return card[0]

    @app.api_route("/", methods=["GET", "HEAD"])
    async def running():
        return PlainTextResponse(RUNNING)

    @app.api_route("/api/version", methods=["GET", "HEAD"])
    async def version():
        return {"version": OLLAMA_API_VERSION, "tandem": __version__}

    @app.api_route("/api/tags", methods=["GET", "HEAD"])
    async def tags():
        return {"models": [(await model_card()).listed()]}

    @app.get("/api/ps")
    async def ps():
        return {"models": [(await model_card()).running()]}

    @app.post("/api/show")
    async def show(request: Request):
        try:
            body = await _body(request)
            name = body.get("model") or body.get("name")  # "name": Ollama's older spelling
            if not isinstance(name, str) or not name:
                raise ApiError(400, "model is required", param="model")
        except ApiError as exc:
            return _error(exc)
        return (await model_card()).shown()

    async def serve(request: Request, kind: str) -> Response:
        started = time.perf_counter()
        try:
            body = await _body(request)
            model = ChatRequest if kind == "chat" else GenerateRequest
            # Off the event loop: a long conversation takes a while to check.
            parsed = await asyncio.to_thread(checked, model, body)
            shapes = Shapes(kind, f"{model_id}{TAG}")  # the model that answers, whatever name was asked for
            if is_load_only(parsed):
                return JSONResponse(shapes.loaded())
            build = chat_spec if kind == "chat" else generate_spec
            spec = await asyncio.to_thread(build, parsed, defaults)
        except ApiError as exc:
            return _error(exc)
        job = Job(spec, asyncio.get_running_loop(), id=f"ollama-{uuid.uuid4().hex[:24]}")
        worker.submit(job)
        return NdjsonResponse(job, shapes, started)

    @app.post("/api/chat")
    async def chat(request: Request):
        return await serve(request, "chat")

    @app.post("/api/generate")
    async def generate(request: Request):
        return await serve(request, "generate")

    # Last: Ollama's other routes (pull, embed, create, ...) and wrong methods, in its error shape.
    @app.api_route("/api/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"])
    async def other(request: Request, rest: str):
        return _error(ApiError(404, f"{request.method} /api/{rest} is not served by Tandem, which serves its "
                                    f"loaded pair: {SERVED}"))


async def _body(request: Request) -> dict:
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "missing request body")
    return parse_json(raw)


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status)


class Shapes:
    """The objects of one Ollama reply: a chat's ``message`` or a generation's ``response``."""

    def __init__(self, kind: str, model: str) -> None:
        self.chat = kind == "chat"
        self.model = model  # the model served

    def _text(self, text: str) -> dict:
        if self.chat:
            return {"message": {"role": "assistant", "content": text}}
        return {"response": text}

    def part(self, delta: Delta, token_kinds: bool) -> dict:
        obj = {"model": self.model, "created_at": timestamp(), **self._text(delta.text), "done": False}
        if token_kinds:
            obj["tandem"] = {"token_kinds": list(delta.kinds)}
        return obj

    def final(self, text: str, outcome: Outcome, started: float) -> dict:
        stats = outcome.stats
        return {"model": self.model, "created_at": timestamp(), **self._text(text), "done": True,
                "done_reason": "stop" if outcome.finish_reason == "stop" else "length",
                "total_duration": _ns(time.perf_counter() - started), "load_duration": 0,
                "prompt_eval_count": outcome.prompt_tokens, "prompt_eval_duration": _ns(stats.prompt_seconds),
                "eval_count": outcome.completion_tokens, "eval_duration": _ns(stats.seconds),
                "tandem": tandem_figures(outcome)}

    def loaded(self) -> dict:
        return {"model": self.model, "created_at": timestamp(), **self._text(""), "done": True,
                "done_reason": "load"}


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def _line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


class NdjsonResponse(JobOutputResponse):
    """One job's reply, whole or as NDJSON; a client that goes away cancels the job."""

    def __init__(self, job: Job, shapes: Shapes, started: float) -> None:
        super().__init__()
        self.job, self.shapes, self.started = job, shapes, started

    @staticmethod
    def error_body(error: ApiError) -> dict:
        return {"error": error.message}  # Ollama's error shape

    async def _whole(self, item, send) -> None:
        job, shapes = self.job, self.shapes
        texts = []
        while isinstance(item, Delta):
            texts.append(item.text)
            item = await job.output.get()
        if isinstance(item, ApiError):
            await send_json(send, item.status, {"error": item.message})
        elif isinstance(item, Outcome):
            await send_json(send, 200, shapes.final("".join(texts), item, self.started))

    async def _stream(self, item, send) -> None:
        job, shapes = self.job, self.shapes
        await start_stream(send, NDJSON)
        while True:
            if isinstance(item, Delta):
                if item.text or (job.spec.token_kinds and item.kinds):
                    await send_body(send, _line(shapes.part(item, job.spec.token_kinds)))
            elif isinstance(item, Outcome):
                await send_body(send, _line(shapes.final("", item, self.started)), more=False)
                return
            elif isinstance(item, ApiError):
                await send_body(send, _line({"error": item.message}), more=False)
                return
            else:  # the client is gone
                return
            item = await job.output.get()
