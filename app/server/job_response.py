"""What every route's answer to a queued job shares (OpenAI's and Ollama's shapes alike):
it waits for the job's output, and while it waits and while it streams it listens for
the client going away, which cancels the job within one round."""

from __future__ import annotations

import asyncio
import json

from starlette.responses import Response

from app.server.errors import ApiError

GONE = object()  # pushed into a job's output when its client disconnects


class JobOutputResponse(Response):
    """A job's reply: its first output read here (a failure before it answered whole, in
    the route's shape), then written by the subclass, whole (``_whole``) or as a stream
    (``_stream``), from ``self.job.output``."""

    job = None  # the app.server.worker.Job answered

    async def __call__(self, scope, receive, send) -> None:
        job = self.job

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            job.cancel.set()
            job.output.put_nowait(GONE)

        listener = asyncio.create_task(listen())
        try:
            await self._respond(send)
        except OSError:  # the client went away mid-send
            pass
        finally:
            job.cancel.set()  # a reply left early stops; one that ended is not touched
            listener.cancel()

    async def _respond(self, send) -> None:
        item = await self._first_output(send)
        if item is not None:
            await (self._stream(item, send) if self.job.spec.stream else self._whole(item, send))

    async def _whole(self, item, send) -> None:
        """The reply in one JSON answer, starting from its first output ``item``."""
        raise NotImplementedError

    async def _stream(self, item, send) -> None:
        """The reply as the route's stream, starting from its first output ``item``."""
        raise NotImplementedError

    async def _first_output(self, send):
        """The job's first output; None where there is nothing more to send: the client
        went away, or the job failed before its first byte (answered here, whole)."""
        item = await self.job.output.get()
        if item is GONE:
            return None
        if isinstance(item, ApiError):
            await send_json(send, item.status, self.error_body(item))
            return None
        return item

    @staticmethod
    def error_body(error: ApiError) -> dict:
        """A failure in the route's own shape (OpenAI's error object by default)."""
        return error.body()


EVENT_STREAM = b"text/event-stream; charset=utf-8"  # OpenAI's and the Responses API's streams
NDJSON = b"application/x-ndjson"                     # Ollama's


async def start_stream(send, content_type: bytes) -> None:
    """A streamed answer's head: no caching, and no proxy buffering that would hold tokens back."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", content_type), (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no")]})


async def send_body(send, body: bytes, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def send_json(send, status: int, obj) -> None:
    """A whole JSON answer, for a job that failed before its first byte was sent."""
    body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
