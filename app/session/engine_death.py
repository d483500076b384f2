"""One line for an engine process that died: the signal, llama.cpp's last words from the
engine's log, or "out of memory" when the kernel's out-of-memory killer ended it.

The kernel counts its kills (``oom_kill`` in /proc/vmstat, and per cgroup in
memory.events); a SIGKILL that nobody here sent, with that count grown since the engine
started, was the out-of-memory killer.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from app.errors import last_words

TAIL_BYTES = 64_000
TAIL_LINES = 40


def oom_kills() -> int:
    """The kernel's out-of-memory kills so far, system-wide plus this cgroup's (0 if unknown)."""
    total = 0
    for path, key in ((Path("/proc/vmstat"), "oom_kill"), (_cgroup_events(), "oom_kill")):
        if path is None:
            continue
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key and value.strip().isdigit():
                    total += int(value)
        except OSError:
            continue
    return total


def _cgroup_events() -> Path | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return Path("/sys/fs/cgroup") / line[3:].strip().lstrip("/") / "memory.events"
    except OSError:
        pass
    return None


def log_tail(path: Path, start: int = 0) -> list[str]:
    """The last lines written to ``path`` after byte ``start`` (the engine's stderr)."""
    try:
        with open(path, "rb") as stream:
            size = stream.seek(0, os.SEEK_END)
            stream.seek(max(start, size - TAIL_BYTES))
            data = stream.read()
    except OSError:
        return []
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
    return [line for line in lines if line][-TAIL_LINES:]


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def death_line(returncode: int | None, lines: list[str], *, oom: bool = False, ended_here: bool = False) -> str:
    """What happened to the engine, in one line (no full stop at the end)."""
    if ended_here:
        return "The engine was ended from here"
    words = last_words(lines)
    said = f": llama.cpp said: {words}" if words else ""
    if returncode is not None and returncode < 0:
        name = signal_name(-returncode)
        if -returncode == getattr(signal, "SIGKILL", 9) and oom:
            return f"The engine ran out of memory: the system ended it ({name})"
        return f"The engine crashed ({name}{': ' + words if words else ''})"
    if returncode is None:
        return "The engine stopped answering" + said
    return f"The engine exited with code {returncode}{said}"
