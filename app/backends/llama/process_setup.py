"""llama.cpp's once-per-process set-up, and what the process asks of the build as a whole.

``llama_backend_init`` and the log callback are process-wide: every entry point that
reaches llama.cpp (a model, a vocabulary, the quantizer, the system info) calls
``ensure_initialised`` first, and the lock makes the first caller the only one to do it.
"""

from __future__ import annotations

import os
import threading

import llama_cpp as ll

from app.backends.llama import log_capture, rpc

_init_lock = threading.Lock()
_initialised = False


def ensure_initialised() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            log_capture.install()  # first: the init's own messages go to the log too
            ll.llama_backend_init()
            _initialised = True


def system_info() -> dict[str, str]:
    """Which compute backend this llama.cpp build uses (for --self-test and the UI)."""
    ensure_initialised()
    info = ll.llama_print_system_info().decode("utf-8", errors="replace")
    gpu = rpc.has_local_gpu()
    kind = "CPU"
    if gpu:
        kind = "Metal" if "METAL" in info.upper() else "CUDA" if "CUDA" in info.upper() else "GPU"
    return {"backend": kind, "system_info": info.strip(), "llama_cpp_python": ll.__version__}


def default_threads() -> int:
    """Threads for a decode when none were asked for: the cores, at most 8."""
    return max(1, min(os.cpu_count() or 1, 8))
