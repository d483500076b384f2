from app.errors import TandemError


class StorageError(TandemError):
    """Base class of the storage package's user-facing errors."""


class InvalidSettingError(StorageError, ValueError):
    """A setting given a value of the wrong type or out of its range."""


class ImportRefused(StorageError):
    """A conversation export that will not be imported: the first bad field and why."""


class ImportCancelled(StorageError):
    """An import stopped before it finished (the window closed); nothing was written."""
