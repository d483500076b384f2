"""Run a generated target and its Gemma 4 assistant or DFlash drafter through llama-cpp-
python's low-level API, one greedy step at a time, as llama.cpp's own drivers do
(``common/speculative.cpp``: ``common_speculative_impl_draft_mtp`` with shared memory for
the assistant, ``common_speculative_impl_draft_dflash``), and count how often the
drafter's first guess is the target's next token. For the writers' tests
(tests/models/test_gemma4_models.py, test_dflash_models.py): a drafter that loads but no
longer agrees with its target fails them.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Sequence

import llama_cpp as ll
import numpy as np

from gguf_arrays import read_gguf

_FLOAT_P = ctypes.POINTER(ctypes.c_float)


def load_model(path: str | Path):
    from llama_cpp import _logger

    _logger.set_verbose(False)  # llama.cpp's load report, as Llama(verbose=False) has it
    params = ll.llama_model_default_params()
    params.n_gpu_layers = 0
    model = ll.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {Path(path).name}")
    return model


def architecture(model) -> str:
    buf = ctypes.create_string_buffer(64)
    ll.llama_model_meta_val_str(model, b"general.architecture", buf, len(buf))
    return buf.value.decode()


def tokenize(model, text: str, add_special: bool = True) -> list[int]:
    vocab = ll.llama_model_get_vocab(model)
    out = (ll.llama_token * 512)()
    n = ll.llama_tokenize(vocab, text.encode(), len(text.encode()), out, 512, add_special, False)
    if n < 0:
        raise ValueError("prompt too long")
    return list(out[:n])


class Context:
    """One llama.cpp context and an extended batch; ``other``: the ``ctx_other`` it reads."""

    def __init__(self, model, *, n_ctx: int = 256, other: "Context | None" = None, mtp: bool = False,
                 threads: int = 1) -> None:
        self.model = model
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_ctx
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        if mtp:
            params.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP
        if other is not None:
            params.ctx_other = other.ctx
        self.ctx = ll.llama_init_from_model(model, params)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not make the context")
        self.batch = ll.llama_batch_ext_init(self.ctx)
        self.n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model))
        self._keep: list[np.ndarray] = []

    def decode(self, tokens: Sequence[int | None], start: int, *, rows: np.ndarray | None = None,
               outputs: Sequence[int] = (), token_rows: bool = False) -> None:
        """Decode ``tokens`` at ``start``...; ``rows`` (one float32 row per entry): with
        ``token_rows`` the row beside each token (an MTP head's input), else the entries
        are rows alone (``tokens`` None: DFlash's injected target features)."""
        ll.llama_batch_ext_clear(self.batch)
        pos = (ctypes.c_int32 * 4)()
        if rows is not None:
            rows = np.ascontiguousarray(rows, dtype=np.float32)
            self._keep = [rows]
            width = rows.shape[1]
        for k, token in enumerate(tokens):
            if token is None:
                row = ll.llama_embd(ctypes.cast(rows.ctypes.data + k * width * 4, _FLOAT_P), 1, width)
                idx = ll.llama_batch_ext_add_embd(self.batch, 0, row)
            else:
                idx = ll.llama_batch_ext_add_token(self.batch, 0, int(token))
            assert idx == k, f"llama.cpp refused entry {k} (code {idx})"
            pos[0], pos[1], pos[2] = start + k, start + k, start + k
            ll.llama_batch_ext_set_pos(self.batch, idx, pos)
            if token is not None and token_rows:
                row = ll.llama_embd(ctypes.cast(rows.ctypes.data + k * width * 4, _FLOAT_P), 1, width)
                assert ll.llama_batch_ext_set_embd_token(self.batch, idx, row)
            if k in outputs or (k == len(tokens) - 1 and not outputs and token is not None):
                ll.llama_batch_ext_set_output_logits(self.batch, idx, True)
        status = ll.llama_process(self.ctx, ll.LLAMA_PROCESS_TYPE_DECODE, self.batch)
        if status != 0:
            raise RuntimeError(f"llama_process failed (code {status})")

    def logits(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()

    def forget_from(self, pos: int) -> None:
        ll.llama_memory_seq_rm(ll.llama_get_memory(self.ctx), 0, pos, -1)

    def close(self) -> None:
        if self.batch:
            ll.llama_batch_ext_free(self.batch)
            self.batch = None
        if self.ctx:
            ll.llama_free(self.ctx)
            self.ctx = None


class ModelPair:
    """A target and its drafter loaded, and the contexts made on them (``context``): on
    leaving, the contexts close, newest first (a drafter's reads its target's), then the
    models are freed."""

    def __init__(self, target_path: str | Path, drafter_path: str | Path) -> None:
        self.target_model = load_model(target_path)
        try:
            self.drafter_model = load_model(drafter_path)
        except BaseException:
            ll.llama_model_free(self.target_model)
            raise
        self._contexts: list[Context] = []

    def context(self, model, **options) -> Context:
        made = Context(model, **options)
        self._contexts.append(made)
        return made

    def __enter__(self) -> "ModelPair":
        return self

    def __exit__(self, *_exc) -> None:
        for made in reversed(self._contexts):
            made.close()
        ll.llama_model_free(self.drafter_model)
        ll.llama_model_free(self.target_model)


# -- Gemma 4 assistant --------------------------------------------------------------------

def assistant_agreement(target_path: str | Path, assistant_path: str | Path, prompt: str, steps: int = 32,
                        threads: int = 1) -> tuple[float, list[int]]:
    """Greedy decoding of ``target_path`` for ``steps`` tokens after ``prompt``; before each
    target step its assistant guesses the token after the one just chosen (reading the
    target's KV and its last hidden row, all drafts at the same position, as llama.cpp
    does). Returns (share of right guesses, the target's tokens)."""
    from llama_cpp import llama_cpp_ext as ext

    with ModelPair(target_path, assistant_path) as pair:
        tmodel, amodel = pair.target_model, pair.drafter_model
        target = pair.context(tmodel, threads=threads)
        ext.llama_set_embeddings_nextn(target.ctx, True, False)  # every position's hidden row
        assistant = pair.context(amodel, other=target, mtp=True, threads=threads)
        ext.llama_set_embeddings_nextn(assistant.ctx, True, True)
        width = ll.llama_model_n_embd_out(amodel)
        prompt_ids = tokenize(tmodel, prompt)
        target.decode(prompt_ids, 0, outputs=[len(prompt_ids) - 1])
        n = len(prompt_ids)
        hidden = _row(ext.llama_get_embeddings_nextn_ith(target.ctx, n - 1), width)
        token = int(np.argmax(target.logits(n - 1)))
        out, right = [token], 0
        for _ in range(steps):
            # The assistant: (the token chosen, the target's row before it) at its position.
            assistant.decode([token], n, rows=hidden[None, :], outputs=[0], token_rows=True)
            guess = int(np.argmax(assistant.logits(0)))
            target.decode([token], n, outputs=[0])
            hidden = _row(ext.llama_get_embeddings_nextn_ith(target.ctx, 0), width)
            token = int(np.argmax(target.logits(0)))
            right += guess == token
            out.append(token)
            n += 1
        return right / steps, out


def _row(ptr, width: int) -> np.ndarray:
    if not ptr:
        raise RuntimeError("llama.cpp returned no hidden row")
    return np.ctypeslib.as_array(ptr, shape=(width,)).copy()


# -- DFlash -------------------------------------------------------------------------------

def _layer_input_bindings():
    """llama.cpp's ``llama_set/get_embeddings_layer_inp``: C++ names in this build, no
    Python binding; None where the library lacks them (then zeros are injected)."""
    lib = ll.llama_cpp._lib
    try:
        setter = lib["_Z30llama_set_embeddings_layer_inpP13llama_contextjb"]
        getter = lib["_Z30llama_get_embeddings_layer_inpP13llama_contextj"]
    except (AttributeError, KeyError):
        return None
    setter.argtypes, setter.restype = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None
    getter.argtypes, getter.restype = [ctypes.c_void_p, ctypes.c_uint32], _FLOAT_P
    return setter, getter


def dflash_agreement(target_path: str | Path, drafter_path: str | Path, prompt: str, steps: int = 32,
                     threads: int = 1) -> tuple[float, list[int], bool]:
    """Greedy decoding of ``target_path``; its DFlash drafter's cache holds the target's
    layer inputs for every decoded position (fused by its ``fc``), and before each target
    step it decodes the block [token chosen, mask, ...] non-causally, guessing the next
    token at the first mask. Returns (share of right first guesses, the target's tokens,
    whether real target features were injected)."""
    with ModelPair(target_path, drafter_path) as pair:
        tmodel, dmodel = pair.target_model, pair.drafter_model
        target = pair.context(tmodel, threads=threads)
        drafter = pair.context(dmodel, other=target, threads=threads)
        ll.llama_set_causal_attn(drafter.ctx, False)
        layers = [int(i) for i in read_gguf(drafter_path).value("target_layers")]
        block = int(_meta(dmodel, "dflash.block_size") or 16)
        mask = ll.llama_vocab_mask(ll.llama_model_get_vocab(dmodel))
        assert mask >= 0, "the drafter names no mask token"
        width = ll.llama_model_n_embd(tmodel)
        bindings = _layer_input_bindings()
        if bindings:
            for layer in layers:
                bindings[0](target.ctx, layer, True)

        def inject(start: int, n_rows: int) -> None:
            feats = np.zeros((n_rows, len(layers) * width), dtype=np.float32)
            if bindings:
                for j, layer in enumerate(layers):
                    ptr = bindings[1](target.ctx, layer)
                    assert ptr, f"target layer {layer}'s input was not extracted"
                    feats[:, j * width:(j + 1) * width] = np.ctypeslib.as_array(ptr, shape=(n_rows, width))
            drafter.decode([None] * n_rows, start, rows=feats)

        prompt_ids = tokenize(tmodel, prompt)
        target.decode(prompt_ids, 0, outputs=[len(prompt_ids) - 1])
        n = len(prompt_ids)
        inject(0, n)
        token = int(np.argmax(target.logits(n - 1)))
        out, right = [token], 0
        for _ in range(steps):
            drafter.decode([token] + [mask] * (block - 1), n, outputs=list(range(block)))
            guess = int(np.argmax(drafter.logits(1)))
            drafter.forget_from(n)  # the block's entries go; the target's features come next
            target.decode([token], n, outputs=[0])
            inject(n, 1)
            token = int(np.argmax(target.logits(0)))
            right += guess == token
            out.append(token)
            n += 1
        return right / steps, out, bindings is not None


def _meta(model, key: str) -> str | None:
    buf = ctypes.create_string_buffer(256)
    n = ll.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode() if n >= 0 else None

