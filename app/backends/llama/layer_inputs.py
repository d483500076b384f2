"""The target's layer inputs, which EAGLE-3 drafters read: bindings llama-cpp-python lacks.

llama.cpp declares these in ``src/llama-ext.h`` without ``extern "C"``, so libllama
exports them under C++ names (Itanium on Linux and macOS, MSVC on Windows).
llama-cpp-python's staging module ``llama_cpp_ext`` binds that header's other calls
the same way, by trying each spelling; these four it does not bind. They are bound
here and used by ``eagle_head.py`` only. Each returns what is checked by its caller.

Hazard: ``llama_get_embeddings_layer_inp`` asserts (ends the process) on a layer whose
extraction was not switched on, and a decode asserts on an architecture whose graph
does not name its layer inputs (``res->t_layer_inp``): both are refused before the call
(``app.engine.gguf.draft_heads.LAYER_INPUT_ARCHITECTURES`` and the head's own list).
"""

from __future__ import annotations

import ctypes
from typing import Any, Iterable

import llama_cpp as ll
import numpy as np

from app.backends.llama.backend_error import BackendError


def _bind(names: Iterable[str], argtypes: list[Any], restype: Any):
    lib = ll.llama_cpp._lib
    for name in names:
        func = getattr(lib, name, None)
        if func is not None:
            func.argtypes, func.restype = argtypes, restype
            return func
    return None


_SET = _bind(("llama_set_embeddings_layer_inp", "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
              "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z"),
             [ll.llama_context_p_ctypes, ctypes.c_uint32, ctypes.c_bool], None)
_GET = _bind(("llama_get_embeddings_layer_inp", "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
              "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z"),
             [ll.llama_context_p_ctypes, ctypes.c_uint32], ctypes.POINTER(ctypes.c_float))
_IDS = _bind(("llama_model_target_layer_ids", "_Z28llama_model_target_layer_idsPK11llama_model",
              "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z"),
             [ll.llama_model_p_ctypes], ctypes.POINTER(ctypes.c_int32))
_IDS_N = _bind(("llama_model_target_layer_ids_n", "_Z30llama_model_target_layer_ids_nPK11llama_model",
                "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z"),
               [ll.llama_model_p_ctypes], ctypes.c_uint32)


# Judged once, at import: read() runs after every target decode.
_MISSING = next((name for name, func in (("llama_set_embeddings_layer_inp", _SET),
                                         ("llama_get_embeddings_layer_inp", _GET),
                                         ("llama_model_target_layer_ids", _IDS),
                                         ("llama_model_target_layer_ids_n", _IDS_N)) if func is None), None)


def available() -> str | None:
    """None where this libllama exports all four; else why a drafter that reads layer inputs cannot run."""
    return f"this llama.cpp exports no {_MISSING}" if _MISSING else None


def _require() -> None:
    if _MISSING:
        raise BackendError(available())


def target_layer_ids(model) -> list[int]:
    """The target layers a drafter model reads (EAGLE-3's ``extract_layers``)."""
    _require()
    n = int(_IDS_N(model))
    ptr = _IDS(model)
    if n == 0 or not ptr:
        return []
    return [int(ptr[i]) for i in range(n)]


def extract(ctx, layer: int) -> None:
    """Keep layer ``layer``'s input for every position of each later decode on ``ctx``."""
    _require()
    _SET(ctx, layer, True)


def read(ctx, layer: int, n_rows: int, n_embd: int):
    """The last decode's first ``n_rows`` inputs of ``layer``, a view of llama.cpp's buffer."""
    _require()
    ptr = _GET(ctx, layer)
    if not ptr:
        raise BackendError(f"llama.cpp returned no input rows for layer {layer}")
    return np.ctypeslib.as_array(ptr, shape=(n_rows, n_embd))
