from app.errors import TandemError


class EngineError(TandemError):
    """Base class of the engine's user-facing errors."""


class ModelFileError(EngineError):
    """A model path that is missing, not a file, or not a valid GGUF."""


class ContextOverflowError(EngineError):
    """The prompt (plus room to answer) does not fit the context window."""


class ChatTemplateError(EngineError):
    """The model's chat template is missing or fails to render."""
