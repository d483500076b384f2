"""The system memory this process may still take: for a load's plan
(``app/session/fit.py``), the served conversations' copies (``app/server/prompt_cache.py``)
and a long prompt's second context (``app/backends/llama/flash_reader.py``)."""

from __future__ import annotations

import ctypes
import os
import sys


def available_ram() -> int:
    """System memory a load may use: Linux's MemAvailable, else the free pages, else the
    physical memory (macOS, where the page cache counts as in use)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if sys.platform == "win32":
        return _windows_available()
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
    return 1 << 62  # unknown: never the reason to refuse


def _windows_available() -> int:
    class _Status(ctypes.Structure):
        _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong), ("total", ctypes.c_ulonglong),
                    ("available", ctypes.c_ulonglong), ("total_page", ctypes.c_ulonglong),
                    ("available_page", ctypes.c_ulonglong), ("total_virtual", ctypes.c_ulonglong),
                    ("available_virtual", ctypes.c_ulonglong), ("extended", ctypes.c_ulonglong)]
    status = _Status()
    status.length = ctypes.sizeof(_Status)
    if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        return int(status.available)
    return 1 << 62
