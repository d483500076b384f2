from app.errors import TandemError


class StorageError(TandemError):
    """Base class of the storage package's user-facing errors."""


class InvalidSettingError(StorageError, ValueError):
    """A setting given a value of the wrong type or out of its range."""
