"""Looking at processes from a test: is one running, and what did it start (Linux /proc)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

needs_proc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # after "pid (name) "


def running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[1] == str(pid) and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
