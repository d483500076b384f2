"""Refusals in OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import json


class ApiError(Exception):
    """A request refused with ``status`` and a one-line ``message`` for the client."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def body_bytes(self) -> bytes:
        return json.dumps(self.body(), ensure_ascii=False).encode("utf-8")


def server_error(message: str) -> ApiError:
    return ApiError(500, message, code="internal_error", kind="server_error")
