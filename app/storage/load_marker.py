"""A mark left while the window loads models, so a load that killed Tandem is not retried blindly.

The trial load in a child (``app.backends.model_check``) keeps known and unknown
llama.cpp aborts out of the app, but if something still kills the process while it
loads a model (a GPU driver, the out-of-memory killer, a bug nobody foresaw), the
settings still name that model and every later start would die the same way: a
crash loop with no way out but editing the settings file by hand.

So the engine thread writes ``loading-<pid>.json`` before a load and removes it
after, however the load ended. A mark whose process is gone means that process
died loading; the next window start sees it (:func:`crashed_load`), does not load
those models, says why and opens the settings. A load that starts clears old marks
(:func:`begin`): choosing models again, or confirming them, is the user's retry.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX, SUFFIX = "loading-", ".json"


@dataclass(frozen=True)
class PendingLoad:
    """A load that was under way when its process ended."""

    target_path: str   # as the settings gave them: '' is the demo pair
    draft_path: str
    pid: int
    started: str

    def matches(self, target_path: str, draft_path: str) -> bool:
        return (self.target_path, self.draft_path) == (target_path, draft_path)

    def describe(self) -> str:
        """'demo models' or the file names, for a notice."""
        if not self.target_path:
            return "the demo models"
        names = [_name(self.target_path)] + ([_name(self.draft_path)] if self.draft_path else [])
        return " and ".join(names)


def _folder(folder: Path | None) -> Path:
    if folder is not None:
        return folder
    from app.storage import paths

    return paths.data_dir()


def _mark(folder: Path, pid: int) -> Path:
    return folder / f"{PREFIX}{pid}{SUFFIX}"


def begin(target_path: str, draft_path: str, *, folder: Path | None = None) -> None:
    """Mark a load as started by this process (and forget marks of dead processes)."""
    folder = _folder(folder)
    forget_crashed(folder=folder)
    record = {"target_path": target_path, "draft_path": draft_path, "pid": os.getpid(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    mark = _mark(folder, os.getpid())
    try:
        tmp = mark.with_suffix(".tmp")
        # ensure_ascii keeps a path that is not UTF-8 (lone surrogates) writable and readable.
        tmp.write_text(json.dumps(record), encoding="ascii")
        os.replace(tmp, mark)
    except OSError:
        pass  # a read-only data folder costs only the crash-loop guard


def finish(*, folder: Path | None = None) -> None:
    """The load this process marked ended (loaded, failed or cancelled): remove the mark."""
    try:
        _mark(_folder(folder), os.getpid()).unlink(missing_ok=True)
    except OSError:
        pass


def crashed_load(*, folder: Path | None = None) -> PendingLoad | None:
    """The newest load whose process died before it ended, if any."""
    found = [load for load in _marks(_folder(folder)) if not _alive(load.pid)]
    return max(found, key=lambda load: load.started) if found else None


def forget_crashed(*, folder: Path | None = None) -> None:
    folder = _folder(folder)
    for load in _marks(folder):
        if not _alive(load.pid):
            try:
                _mark(folder, load.pid).unlink(missing_ok=True)
            except OSError:
                pass


def _marks(folder: Path) -> list[PendingLoad]:
    loads = []
    try:
        candidates = list(folder.glob(f"{PREFIX}*{SUFFIX}"))
    except OSError:
        return []
    for path in candidates:
        try:
            if not path.is_file() or path.stat().st_size > 64_000:
                continue  # never block on or read much of something that is not our mark
            data = json.loads(path.read_text(encoding="ascii"))
            load = PendingLoad(str(data["target_path"]), str(data["draft_path"]), int(data["pid"]),
                               str(data.get("started", "")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if path.name == _mark(folder, load.pid).name and load.pid != os.getpid():
            loads.append(load)
    return loads


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (then its mark is a load in progress, not a crash)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":
        return _alive_windows(pid)
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as someone else
    except OSError:
        return False
    return True


def _alive_windows(pid: int) -> bool:
    # os.kill(pid, 0) on Windows would send CTRL_C_EVENT, so ask the kernel instead.
    import ctypes

    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    synchronize, wait_timeout = 0x00100000, 0x102
    handle = kernel32.OpenProcess(synchronize, False, pid)
    if not handle:
        return False
    try:
        return kernel32.WaitForSingleObject(handle, 0) == wait_timeout
    finally:
        kernel32.CloseHandle(handle)


def _name(path: str) -> str:
    return os.fsencode(Path(path).name or path).decode("utf-8", "backslashreplace")
