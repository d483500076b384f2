"""Small file operations the storage package relies on: atomic writes, moving bad files aside."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old file or the new one, never half.

    The temp file lives in the same directory because ``os.replace`` is only atomic within
    one file system; the fsync before the rename keeps a crash from leaving an empty file
    under the final name (the classic truncate-then-write failure).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as temp:
            temp.write(text)
            temp.flush()
            _copy_mode(path, temp.fileno())
            os.fsync(temp.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    _fsync_directory(path.parent)


def move_aside(path: Path, companions: tuple[str, ...] = ()) -> Path:
    """Rename a bad file to ``<name>.bad-YYYYmmdd-HHMMSS`` next to it and return the new path.

    ``companions`` are suffixes of sibling files that belong to it (SQLite's ``-wal`` and
    ``-shm``); they move under the new name too so the kept copy stays openable.
    """
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.bad-{stamp}")
    counter = 1
    while target.exists():  # two bad files within one second must not overwrite each other
        target = path.with_name(f"{path.name}.bad-{stamp}-{counter}")
        counter += 1
    os.replace(path, target)
    for suffix in companions:
        sibling = path.with_name(path.name + suffix)
        if sibling.exists():
            os.replace(sibling, target.with_name(target.name + suffix))
    return target


def _copy_mode(existing: Path, fd: int) -> None:
    # mkstemp creates 0600; a file the user had made readable elsewhere should stay so.
    try:
        mode = existing.stat().st_mode & 0o7777
    except OSError:
        return
    with contextlib.suppress(OSError, AttributeError):  # no fchmod on Windows
        os.fchmod(fd, mode)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; Windows cannot open directories, and there
    # os.replace is already as durable as it gets.
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
