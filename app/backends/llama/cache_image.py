"""A backend's cache as plain data (``CacheImage``), for a chat's state kept on disk.

The bytes are llama.cpp's own sequence state (``llama_state_seq_get_data``), the same
copy ``save_cache`` takes for ``tandem serve``'s kept conversations. They fit only the
model, context size and attention layout they came from, and llama.cpp's version: that
is the image's ``identity``, which a reader compares before it asks llama.cpp to take
the bytes (llama.cpp checks the layout again and refuses what does not fit).
"""

from __future__ import annotations

import ctypes

import llama_cpp as ll
from app.backends.llama.backend_error import BackendError
from app.engine.backend import CacheImage


def identity(backend) -> dict:
    """What a saved state fits: the same file (path, size, modification time), context
    size, flash attention (it lays values out another way) and llama.cpp build."""
    file = backend.model_file
    return {"model": str(file.resolved), "bytes": file.identity.size, "mtime_ns": file.identity.mtime_ns,
            "n_ctx": int(backend.n_ctx), "flash_attention": backend.flash_attention,
            "memory": backend.memory, "llama_cpp": getattr(ll, "__version__", "")}


def image(backend) -> CacheImage:
    tokens, buf, n, rows = backend.save_cache()
    state = bytes(memoryview(buf)[:n]) if n else b""
    if rows is not None:  # only the rows of the tokens held
        rows = (rows[0][:len(tokens)].copy(), rows[1][:len(tokens)].copy())
    return CacheImage(tokens, state, identity(backend), rows)


def load(backend, saved: CacheImage) -> None:
    hidden = backend._hidden
    rows = saved.rows if hidden is not None else None
    if rows is not None and (rows[0].ndim != 2 or rows[0].shape[1] != hidden.n_embd):
        raise BackendError("the saved rows of the MTP head do not fit this model")
    n = len(saved.state)
    buf = (ctypes.c_uint8 * n).from_buffer_copy(saved.state) if n else (ctypes.c_uint8 * 1)()
    backend.restore_cache((list(saved.tokens), buf, n, rows))
