"""llama.cpp's quantizer: a GGUF file written again in another type, or copied with
layers left out. The demo's models, the tests' models and a draft cut from its target
(app/backends/draft_child.py) are made with it.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Sequence

import llama_cpp as ll

from app.backends.llama import log_capture
from app.backends.llama.backend_error import BackendError
from app.backends.llama.process_setup import ensure_initialised
from app.engine.gguf.header import shown_name, validate_gguf

FTYPES = {"F32": ll.LLAMA_FTYPE_ALL_F32, "F16": ll.LLAMA_FTYPE_MOSTLY_F16,
          "Q8_0": ll.LLAMA_FTYPE_MOSTLY_Q8_0, "Q4_0": ll.LLAMA_FTYPE_MOSTLY_Q4_0,
          "Q4_1": ll.LLAMA_FTYPE_MOSTLY_Q4_1, "Q4_K_M": ll.LLAMA_FTYPE_MOSTLY_Q4_K_M,
          "Q2_K": ll.LLAMA_FTYPE_MOSTLY_Q2_K, "IQ4_NL": ll.LLAMA_FTYPE_MOSTLY_IQ4_NL,
          "IQ4_XS": ll.LLAMA_FTYPE_MOSTLY_IQ4_XS, "IQ3_S": ll.LLAMA_FTYPE_MOSTLY_IQ3_S}


def quantize(source: str | Path, dest: str | Path, ftype: str | None,
             prune_layers: Sequence[int] = ()) -> None:
    """Write ``source`` re-encoded as ``ftype`` (e.g. "F32", "Q4_0"; None: the types it has)
    with llama.cpp's quantizer, without the layers in ``prune_layers`` (ascending)."""
    source, dest = Path(source), Path(dest)
    validate_gguf(source)
    ensure_initialised()
    params = ll.llama_model_quantize_default_params()
    if ftype is None:
        params.only_copy = True
    else:
        params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    if prune_layers:  # llama.cpp reads the list up to a -1; the array must outlive the call
        pruned = (ctypes.c_int32 * (len(prune_layers) + 1))(*prune_layers, -1)
        params.prune_layers = ctypes.cast(pruned, ctypes.POINTER(ctypes.c_int32))
    log_capture.clear_errors()
    if ll.llama_model_quantize(os.fsencode(source), os.fsencode(dest), ctypes.byref(params)) != 0:
        raise BackendError(f"Could not write {shown_name(dest)} as {ftype or 'a copy'} ({log_capture.last_error()})")
