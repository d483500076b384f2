"""The one error this package raises of its own (beside the engine's model-file and
context errors): llama.cpp refused an operation, with its reason from ``log_capture``."""

from __future__ import annotations

from app.engine.errors import EngineError


class BackendError(EngineError):
    """llama.cpp refused an operation."""
