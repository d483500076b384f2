"""What every route goes through first: the API key and the body cap.

A plain ASGI wrapper, so it covers every route, known or not, before FastAPI reads
a byte: a request without the key is refused unread, and a body is read at most up
to the cap (its ``Content-Length`` is believed only when it is too big) and then
handed on whole.
"""

from __future__ import annotations

import hmac

from app.server.errors import ApiError

DEFAULT_MAX_BODY = 4 * 1024 * 1024


class Guard:
    def __init__(self, app, *, api_key: str | None = None, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.app = app
        self.api_key = api_key.encode("utf-8") if api_key else None
        self.max_body = max_body

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.api_key is not None and not self._authorized(headers.get(b"authorization", b"")):
            await send_error(send, ApiError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>'.",
                                            code="invalid_api_key"))
            return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await send_error(send, self._too_big())
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away while sending
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                await send_error(send, self._too_big())
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _authorized(self, header: bytes) -> bool:
        scheme, _, token = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.api_key)

    def _too_big(self) -> ApiError:
        return ApiError(413, f"The request body is over this server's limit of {self.max_body:,} bytes.",
                        code="request_too_large")


async def send_error(send, error: ApiError) -> None:
    body = error.body_bytes()
    await send({"type": "http.response.start", "status": error.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
