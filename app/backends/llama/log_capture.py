"""What llama.cpp says, caught: its log goes to Tandem's log, its complaints are kept for
the one-line errors, and while a model loads, what it decides is read from it.

llama.cpp reports a failure's reason only in its log (the C call returns NULL or a
code), so the last few warnings and errors are kept here and ``last_error`` picks the
one that says why. Two things a load decides are only ever said in the log too: where
each of a split target's layers went and how big each buffer is; ``load_capture``
collects them for the one load under way.

The callback is a ctypes function object that llama.cpp keeps a bare pointer to: it
stays referenced by this module for the life of the process (dropping it segfaults at
llama.cpp's next log line).
"""

from __future__ import annotations

import collections
import ctypes
import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import llama_cpp as ll

from app.logs import FILE_ONLY

log = logging.getLogger("tandem.llama")

_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_CONTINUATION = 5  # a line that goes on the previous message, at its level
_recent_errors: collections.deque[str] = collections.deque(maxlen=8)
_log_level = logging.INFO
# llama.cpp's closing words after a failed load; the line before them says why.
_GENERIC_ERRORS = ("failed to load model", "failed to load model from")

# Where llama.cpp put each of a split target's layers, as it says at DEBUG while loading
# ("layer 12 assigned to device RPC1"): its own decision, not a recomputation of it.
_LAYER_LINE = re.compile(r"load_tensors: layer +(\d+) assigned to device ([^,\s]+)")
# What llama.cpp allocated while a model loads and its context is made, as it says at
# INFO ("CPU_Mapped model buffer size = 513.00 MiB"): its own sizes, which the memory
# estimate (app/engine/gguf/memory_estimate.py) is checked against and the side panel
# compares with the plan.
_BUFFER_LINE = re.compile(r"(\S+)\s+(model|KV|RS|output|compute) buffer size =\s*([\d.]+) MiB")
_BUFFER_PARTS = {"model": "weights", "KV": "kv_cache", "RS": "recurrent_state", "output": "output", "compute": "compute"}


@dataclass
class LoadCapture:
    """What llama.cpp said while one model loaded."""

    # While a target loads over RPC workers, llama.cpp's errors go to the log file only: a
    # failure there becomes one line naming the worker (app.backends.loader), not four.
    quiet: bool = False
    layer_devices: dict[int, str] | None = None  # layer -> device name (over workers only)
    buffers: list[tuple[str, str, int]] = field(default_factory=list)  # (device, part, bytes)


_load: LoadCapture | None = None
_UNUSED_TENSOR = re.compile(r"^model has unused tensor blk\.\d+\.\S+ \(size = \d+ bytes\) -- ignoring$")


@ll.llama_log_callback
def _log_callback(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    global _log_level
    if level != _CONTINUATION:
        _log_level = _LEVELS.get(level, logging.DEBUG)
    message = (text or b"").decode("utf-8", errors="replace").rstrip()
    if not message:
        return
    load = _load
    if load is not None and load.layer_devices is not None and (said := _LAYER_LINE.search(message)):
        load.layer_devices[int(said.group(1))] = said.group(2)
    if load is not None and (said := _BUFFER_LINE.search(message)):
        load.buffers.append((said.group(1), _BUFFER_PARTS[said.group(2)], round(float(said.group(3)) * 2**20)))
    if _log_level >= logging.WARNING and _UNUSED_TENSOR.search(message):
        # A target whose MTP blocks are left on disk (its head drafts from a compact
        # copy, app/backends/head_files.py) names each of them: expected, not a problem.
        log.debug("%s", message)
        return
    if _log_level >= logging.WARNING:
        _recent_errors.append(message)
    # llama.cpp is chatty at INFO; keep it at DEBUG unless it is a problem.
    log.log(_log_level if _log_level >= logging.WARNING else logging.DEBUG, "%s", message,
            extra=FILE_ONLY if load is not None and load.quiet else None)


def install() -> None:
    """Route llama.cpp's log here (process_setup calls it once, before the backend starts)."""
    ll.llama_log_set(_log_callback, ctypes.c_void_p(0))


def clear_errors() -> None:
    """Forget earlier complaints: the next ``last_error`` is about what comes after."""
    _recent_errors.clear()


def last_error() -> str:
    """The last thing llama.cpp complained about that says more than "failed"."""
    for message in reversed(_recent_errors):
        if not message.endswith(_GENERIC_ERRORS):
            return message.split("error loading model: ", 1)[-1]
    return _recent_errors[-1] if _recent_errors else "no reason given"


@contextmanager
def load_capture(*, over_workers: bool) -> Iterator[LoadCapture]:
    """Collect what llama.cpp says of one load (earlier complaints forgotten); over
    workers, quietly and with each layer's device."""
    global _load
    clear_errors()
    _load = LoadCapture(quiet=over_workers, layer_devices={} if over_workers else None)
    try:
        yield _load
    finally:
        _load = None
