"""A backend's cache as plain data (``CacheImage``): the one form in which the target's
cache leaves the backend, to be kept in memory or on disk (app/session/kept_states.py)
or set aside while a long prompt pauses (app/server/interleave.py), and put back.

The bytes are llama.cpp's own sequence state (``llama_state_seq_get_data``), written
straight into the image's bytearray and handed back to llama.cpp from it, uncopied.
They fit only the model, context size and attention layout they came from, and
llama.cpp's version: that is the image's ``identity``, which a reader of a file compares
before it asks llama.cpp to take the bytes (llama.cpp checks the layout again and
refuses what does not fit).
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
    tokens, state, n, rows = backend._save_cache()
    del state[n:]  # the room past what llama.cpp wrote (an empty cache's one byte)
    if rows is not None:  # only the rows of the tokens held
        rows = (rows[0][:len(tokens)].copy(), rows[1][:len(tokens)].copy())
    return CacheImage(tokens, state, identity(backend), rows)


def load(backend, saved: CacheImage) -> None:
    width = backend.drafter_row_width
    rows = saved.rows if width is not None else None
    if rows is not None and (rows[0].ndim != 2 or rows[0].shape[1] != width):
        raise BackendError("the saved rows of the MTP head do not fit this model")
    n = len(saved.state)
    if not n:
        buf = (ctypes.c_uint8 * 1)()
    elif isinstance(saved.state, bytearray):  # llama.cpp reads it where it is
        buf = (ctypes.c_uint8 * n).from_buffer(saved.state)
    else:  # bytes (read from a file) are read-only: copied
        buf = (ctypes.c_uint8 * n).from_buffer_copy(saved.state)
    backend._restore_cache((list(saved.tokens), buf, n, rows))
