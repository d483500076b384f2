"""The routes: ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``,
``/v1/responses`` (``responses.py``), ``/health`` and ``/tandem/requests`` (the recent requests with their figures); Ollama's
``/api/...`` beside them (``ollama.py``).

A handler checks the body, queues a ``Job`` on the one ``EngineWorker`` and answers
with a ``JobResponse``, which waits for the job's output: a refusal found by the engine
(a prompt over the context) still comes back as a 400, streamed or not, because
nothing is sent before the job's first output. While it waits, and while it streams,
it listens for the client going away and cancels the job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from app.server.errors import ApiError, server_error
from app.server.job_response import EVENT_STREAM, JobOutputResponse, send_body, send_json, start_stream
from app.server.guard import DEFAULT_MAX_BODY, Guard
from app.server.ollama import add_ollama_routes
from app.server.replies import Shapes
from app.server.responses import add_responses_routes
from app.server.requests import Defaults, JobSpec, chat_job, completion_job, parse_json
from app.server.tools import CallItem
from app.server.worker import Delta, EngineWorker, Job, Outcome
from app.session.chat_types import LoadInfo

log = logging.getLogger(__name__)


def create_app(worker: EngineWorker, *, model_id: str, defaults: Defaults, info=None,
               api_key: str | None = None, max_body: int = DEFAULT_MAX_BODY, cors_origins=(), allowed_hosts=(),
               model_aliases=()):
    """The ASGI application: FastAPI's routes inside the guard (and CORS when asked).
    ``info``: what was loaded (``LoadInfo``); None says only ``model_id``."""
    info = info if info is not None else LoadInfo(target_name=model_id, target_path="")
    app = FastAPI(title="Tandem", docs_url=None, redoc_url=None, openapi_url=None)
    created = int(time.time())

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_id, "draft": info.draft_name,
                "speculation": info.speculation_available, "waiting": worker.waiting,
                # the memory plan the models were loaded with (app/session/fit.py)
                "memory": {"plan": info.memory_plan, "gpu_layers": list(info.gpu_layers),
                           "planned_gpu_bytes": info.planned_gpu_bytes, "allocated_bytes": info.allocated_bytes}}

    model = {"id": model_id, "object": "model", "created": created, "owned_by": "tandem"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model]}

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str):
        if name != model_id and name not in model_aliases:
            raise ApiError(404, f"No model {name!r} here; this server serves {model_id!r}.", param="model",
                           code="model_not_found")
        return model

    @app.get("/tandem/requests")
    async def requests():
        return {"object": "list", "data": list(worker.recent)}

    async def serve(request: Request, parse: Callable[[dict, Defaults], JobSpec], prefix: str) -> Response:
        raw = await request.body()
        # A big body (50,000 messages) takes a while to check: off the event loop, which
        # keeps answering other clients meanwhile.
        spec = await asyncio.to_thread(lambda: parse(parse_json(raw), defaults))
        job = Job(spec, asyncio.get_running_loop(), id=f"{prefix}-{uuid.uuid4().hex[:24]}")
        worker.submit(job)
        return JobResponse(job, Shapes(spec.kind, job.id, model_id, int(time.time())))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await serve(request, chat_job, "chatcmpl")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await serve(request, completion_job, "cmpl")

    add_responses_routes(app, worker, model_id=model_id, defaults=defaults)
    add_ollama_routes(app, worker, model_id=model_id, defaults=defaults, info=info)

    @app.exception_handler(ApiError)
    async def refused(request: Request, exc: ApiError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 404:
            error = ApiError(404, f"Unknown route: {request.method} {request.url.path}", code="not_found")
        elif exc.status_code == 405:
            error = ApiError(405, f"{request.method} is not allowed on {request.url.path}.",
                             code="method_not_allowed")
        else:
            error = ApiError(exc.status_code, str(exc.detail))
        return JSONResponse(error.body(), status_code=error.status, headers=exc.headers)

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception):
        log.exception("request failed: %s %s", request.method, request.url.path)
        error = server_error(f"The server failed on this request: {type(exc).__name__}")
        return JSONResponse(error.body(), status_code=500)

    guarded = Guard(app, api_key=api_key, max_body=max_body, allowed_hosts=allowed_hosts, cors_origins=cors_origins)
    if not cors_origins:
        return guarded
    return CORSMiddleware(guarded, allow_origins=list(cors_origins), allow_methods=["GET", "POST", "OPTIONS"],
                          allow_headers=["Authorization", "Content-Type"])


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n\n"


class JobResponse(JobOutputResponse):
    """The answer to one job, whole or as server-sent events."""

    def __init__(self, job: Job, shapes: Shapes) -> None:
        super().__init__()
        self.job, self.shapes = job, shapes

    async def _whole(self, item, send) -> None:
        job, shapes = self.job, self.shapes
        texts, calls, entries = [], [], []
        while isinstance(item, (Delta, CallItem)):
            if isinstance(item, Delta):
                texts.append(item.text)
                entries.extend(item.logprobs)
            else:
                calls.append(item)
            item = await job.output.get()
        if isinstance(item, ApiError):
            await send_json(send, item.status, item.body())
        elif isinstance(item, Outcome):
            logprobs = entries if job.spec.logprobs is not None else None
            await send_json(send, 200, shapes.whole("".join(texts), item, calls, logprobs))

    async def _stream(self, item, send) -> None:
        job, shapes = self.job, self.shapes
        await start_stream(send, EVENT_STREAM)
        opening = shapes.opening()
        if opening is not None:
            await send_body(send, _sse(opening))
        while True:
            if isinstance(item, Delta):
                await send_body(send, _sse(shapes.delta(item, job.spec.token_kinds,
                                                         job.spec.logprobs is not None)))
            elif isinstance(item, CallItem):
                await send_body(send, b"".join(_sse(c) for c in shapes.call_chunks(item, job.spec.token_kinds)))
            elif isinstance(item, Outcome):
                chunks = _sse(shapes.closing(item))
                if job.spec.include_usage:
                    chunks += _sse(shapes.usage_chunk(item))
                await send_body(send, chunks + b"data: [DONE]\n\n", more=False)
                return
            elif isinstance(item, ApiError):
                await send_body(send, _sse(item.body()) + b"data: [DONE]\n\n", more=False)
                return
            else:  # the client is gone
                return
            item = await job.output.get()
