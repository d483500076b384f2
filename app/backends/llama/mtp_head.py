"""A target's own MTP ("multi-token prediction", "nextn") layers, run as a draft model.

Qwen 3.5/3.6, GLM-4.5, DeepSeek V3 and others ship one or more decoder blocks trained to
guess the token after next. llama.cpp runs them in a context of their own, made on the
target's model (``LLAMA_CONTEXT_TYPE_MTP``, ``ctx_other`` = the target's context). Each
entry of that context reads two things: a token, and the target's hidden row (its last
layer, normed: ``h_nextn``) at the position before it. So:

- position p of the head holds (token p, the target's row p - 1): the head's cache is
  aligned with the target's, from position 0, and reads everything the target reads;
- the head keeps the target's rows (``HiddenRows``): it is told of every batch the target
  reads (``target_read``, the hook of ``target_batches.py``) and asks the target for that
  batch's rows, which go in by position; a trim forgets the rows past it, so a row is
  there exactly while the target's cache holds that position with the same token before it;
- drafting goes on from the head's own output row: the k-th guess reads the head's row
  for the guess before it, as llama.cpp's ``draft-mtp`` does.

``MtpHead`` offers what ``app.engine.speculation.drafters.ModelDrafter`` asks of a draft
model (``tokens``, ``evaluate``, ``trim``), so the head drafts through the engine's one
drafter: sampled drafting (the head's logits warped by the target's chain are q),
constraints, second candidates for trees and the auto draft length come with it.

Its cache is plain attention: a rejected guess leaves with ``llama_memory_seq_rm``.

``llama_cpp.llama_cpp_ext`` (the hidden-row calls) says it is no stable API: it is used
here only, and what it returns is checked.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Callable, Protocol, Sequence

import llama_cpp as ll
import numpy as np

from app.backends.llama.backend_error import BackendError
from app.backends.llama.log_capture import last_error
from app.backends.llama.target_batches import TargetBatch

log = logging.getLogger("tandem.llama")


class _Target(Protocol):
    """What the head reads of its target (a ``LlamaBackend``; named by shape, not imported,
    because the backend imports this module)."""

    n_vocab: int
    n_ctx: int
    n_batch: int
    bos_id: int
    eos_id: int
    add_bos: bool
    eog_ids: frozenset
    name: str
    threads: int


def _ext():
    """llama-cpp-python's staging bindings (hidden rows, the MTP context's other half)."""
    try:
        from llama_cpp import llama_cpp_ext
    except ImportError as exc:  # an older or newer llama-cpp-python without them
        raise BackendError(f"this llama-cpp-python has no MTP bindings ({exc})") from None
    for name in ("llama_set_embeddings_nextn", "llama_get_embeddings_nextn", "llama_get_embeddings_nextn_ith"):
        if not hasattr(llama_cpp_ext, name):
            raise BackendError(f"this llama-cpp-python lacks {name}: MTP heads cannot run")
    return llama_cpp_ext


def hidden_rows_on(ctx, masked: bool) -> None:
    """Ask ``ctx`` for its hidden rows: every batch position (``masked`` False: the
    target, whose rows the head reads) or only those with logits (the head's own)."""
    _ext().llama_set_embeddings_nextn(ctx, True, masked)


def read_hidden(ctx, n_rows: int, n_embd: int) -> np.ndarray:
    """The last decode's first ``n_rows`` hidden rows, a view of llama.cpp's buffer."""
    ptr = _ext().llama_get_embeddings_nextn(ctx)
    if not ptr:
        raise BackendError("llama.cpp returned no hidden rows for the batch")
    return np.ctypeslib.as_array(ptr, shape=(n_rows, n_embd))


class HiddenRows:
    """The target's rows by position, kept by the head that reads them. Kept as float16
    (half the memory: n_ctx x n_embd x 2 bytes, 80 MB for a 5,120-wide model at 8,192
    tokens); the head only guesses with them, and the target judges every guess."""

    def __init__(self, n_embd: int, n_ctx: int) -> None:
        self.n_embd, self.n_ctx = n_embd, n_ctx
        self._rows = np.zeros((0, n_embd), dtype=np.float16)
        self._known = np.zeros(0, dtype=bool)

    def put(self, start: int, rows: np.ndarray) -> None:
        end = start + len(rows)
        if end > len(self._rows):
            size = min(self.n_ctx, max(end, 2 * len(self._rows), 256))
            grown = np.zeros((size, self.n_embd), dtype=np.float16)
            grown[:len(self._rows)] = self._rows
            known = np.zeros(size, dtype=bool)
            known[:len(self._known)] = self._known
            self._rows, self._known = grown, known
        self._rows[start:end] = rows
        self._known[start:end] = True

    def forget_from(self, n: int) -> None:
        """Positions from ``n`` on no longer hold what they held (the target was trimmed)."""
        self._known[max(0, n):] = False

    def row(self, pos: int) -> np.ndarray | None:
        if 0 <= pos < len(self._known) and self._known[pos]:
            return self._rows[pos].astype(np.float32)
        return None

    def copy(self) -> tuple[np.ndarray, np.ndarray]:
        return self._rows.copy(), self._known.copy()

    def restore(self, saved: tuple[np.ndarray, np.ndarray]) -> None:
        self._rows, self._known = saved[0].copy(), saved[1].copy()


def load_head_model(path: str | os.PathLike[str]):
    """A compact head file (``app.engine.gguf.compact_head``) as a llama.cpp model, on
    this machine's CPU, its MTP blocks loaded. Raises BackendError."""
    mparams = ll.llama_model_default_params()
    mparams.load_mtp = True
    mparams.n_gpu_layers = 0
    model = ll.llama_model_load_from_file(os.fsencode(path), mparams)
    if not model:
        raise BackendError(f"llama.cpp could not load the compact MTP head ({last_error()})")
    if ll.llama_model_n_layer_nextn(model) <= 0:
        ll.llama_model_free(model)
        raise BackendError("the compact MTP head has no MTP layers")
    return model


class MtpHead:
    """The target's MTP layers as a draft model (a ``ModelBackend`` for ``ModelDrafter``).

    Made by ``LlamaBackend.mtp_head()`` on a target loaded with ``load_mtp``; closed by its
    target's ``close`` at the latest (its context reads the target's). It listens to the
    target's batches (a ``target_batches.BatchListener``): ``read_rows(batch)`` asks the
    target for a batch's rows, ``width`` wide."""

    lends_logits = False
    adaptive_threads = False  # it runs with the target's count, a layer at a time
    # Where entry i (token i) sits: an MTP head reads (token p, the target's row p - 1)
    # at position p; an EAGLE-3 drafter (``eagle_head.py``) one position earlier.
    pos_shift = 0

    def __init__(self, target: _Target, model, target_ctx, read_rows: Callable[[TargetBatch], np.ndarray],
                 width: int, owns_model: bool = False) -> None:
        self._read_target_rows = read_rows
        self._hidden = HiddenRows(width, target.n_ctx)
        # A compact copy's own model (``load_head_model``), freed with the head; else the target's.
        self._model = model if owns_model else None
        self.n_vocab, self.n_ctx = target.n_vocab, target.n_ctx
        self.bos_id, self.eos_id, self.add_bos = target.bos_id, target.eos_id, target.add_bos
        self.eog_ids, self.chat_template = target.eog_ids, None
        self.name = self._name(target.name, owns_model)
        # An MTP head that owns its model drafts from a compact Q8_0 copy of the head
        # (``app.engine.gguf.compact_head``); an EAGLE-3 drafter's own file is none.
        self.compact_copy = owns_model
        self.layers = self._layers(model)
        self.n_embd = int(ll.llama_model_n_embd_out(model)) if owns_model else width
        self.threads = target.threads
        self.blind_steps = 0  # steps that found no row to read (zeros read instead): guesses only
        self._ctx = self._batch = None
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = target.n_ctx
        cparams.n_batch = cparams.n_ubatch = target.n_batch
        cparams.n_seq_max = 1
        cparams.n_rs_seq = 0
        cparams.n_threads = cparams.n_threads_batch = target.threads
        cparams.no_perf = True
        self._context_type(cparams)
        cparams.ctx_other = target_ctx
        self._ctx = ll.llama_init_from_model(model, cparams)
        if not self._ctx:
            self.close()
            raise BackendError(f"llama.cpp could not make a context for {self._what} ({last_error()})")
        try:
            hidden_rows_on(self._ctx, masked=True)
            self._batch = ll.llama_batch_ext_init(self._ctx)
            if not self._batch:
                raise BackendError(f"llama.cpp could not make a batch for {self._what}")
        except BaseException:
            self.close()
            raise
        self._memory = ll.llama_get_memory(self._ctx)
        self._n_batch = max(1, int(ll.llama_n_batch(self._ctx)))  # what one batch may hold
        self._tokens: list[int] = []
        self._own: tuple[int, np.ndarray] | None = None  # (position, the head's row there)
        # The first entry made from the head's own row (a guess after a guess), if any.
        # An entry's keys and values depend on its own inputs alone, so the entries
        # before it are what llama.cpp's head would hold; those from it on are not, and
        # ``tokens`` leaves them out, so the drafter's next sync makes them again from
        # the target's rows once the target has judged them (llama.cpp's catch-up).
        self._first_guess: int | None = None
        self._zeros = np.zeros(self.n_embd, dtype=np.float32)

    _what = "the MTP head"

    @staticmethod
    def _name(target_name: str, owns_model: bool) -> str:
        return f"{target_name} (its MTP head{', a Q8_0 copy' if owns_model else ''})"

    @staticmethod
    def _layers(model) -> int:
        return int(ll.llama_model_n_layer_nextn(model))

    @staticmethod
    def _context_type(cparams) -> None:
        cparams.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP

    # -- the target's batches (``target_batches.BatchListener``) ----------------------
    def target_read(self, batch: TargetBatch) -> None:
        """Keep the target's rows of ``batch`` by position; a trim forgets those after it."""
        if batch.tokens:
            self._hidden.put(batch.start, self._read_target_rows(batch))
        else:
            self._hidden.forget_from(batch.start)

    @property
    def row_width(self) -> int:
        return self._hidden.n_embd

    def rows_copy(self) -> tuple[np.ndarray, np.ndarray]:
        return self._hidden.copy()

    def restore_rows(self, saved: tuple[np.ndarray, np.ndarray]) -> None:
        self._hidden.restore(saved)

    # -- as a draft model --------------------------------------------------------------
    def _rows_in(self, rows: list[np.ndarray], from_target: list[bool]) -> np.ndarray:
        """The rows a batch's entries read, as one float32 array (kept alive by the
        caller until llama.cpp has run it): the target's rows are read as they are."""
        return np.ascontiguousarray(np.stack(rows), dtype=np.float32)

    @property
    def tokens(self) -> list[int]:
        """What the cache holds as the target's rows made it (see ``_first_guess``)."""
        return self._tokens if self._first_guess is None else self._tokens[:self._first_guess]

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int], borrow: bool = False) -> np.ndarray:
        """Append ``tokens``; logits at ``logits_at``. A run of tokens whose rows the target
        has goes in one batch; past the target's end each token reads the head's own row
        for the one before it, one step at a time."""
        tokens = [int(t) for t in tokens]
        start = len(self._tokens)
        if start + len(tokens) > self.n_ctx:
            raise BackendError(f"the MTP head's context holds {self.n_ctx} tokens")
        wanted = sorted(set(logits_at))
        out = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
        filled = 0
        i = 0
        while i < len(tokens):
            row, exact = self._pair_row(start + i)
            rows, from_target = [row], [exact and start + i > 0]
            j = i + 1
            # A long run (a prompt read at once) goes in batches of at most n_batch.
            while (j < len(tokens) and j - i < self._n_batch
                   and (row := self._hidden.row(start + j - 1)) is not None):
                rows.append(row)
                from_target.append(True)
                j += 1
            flags = [i + k in wanted or i + k == j - 1 for k in range(j - i)]
            self._decode(tokens[i:j], start + i, self._rows_in(rows, from_target), flags)
            if not exact and (self._first_guess is None or self._first_guess > start + i):
                self._first_guess = start + i
            for k in range(j - i):  # rows are asked for by their index in the batch
                if i + k in wanted:
                    logits = ll.llama_get_logits_ith(self._ctx, k)
                    if not logits:
                        raise BackendError("llama.cpp returned no logits for the MTP head's step")
                    out[filled] = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
                    filled += 1
            last = _ext().llama_get_embeddings_nextn_ith(self._ctx, j - i - 1)
            if not last:
                raise BackendError("llama.cpp returned no hidden row for the MTP head's step")
            self._own = (start + j - 1, np.ctypeslib.as_array(last, shape=(self.n_embd,)).copy())
            i = j
        return out

    def _pair_row(self, pos: int) -> tuple[np.ndarray, bool]:
        """The row position ``pos`` reads, and whether it is the target's (as llama.cpp's
        own head would read it): the target's at ``pos - 1``, else the head's own there
        (a guess after a guess), else (nothing known) zeros."""
        if pos == 0:
            return self._zeros, True  # nothing before the first token: llama.cpp reads zeros too
        row = self._hidden.row(pos - 1)
        if row is not None:
            return row, True
        if self._own is not None and self._own[0] == pos - 1:
            return self._own[1], False
        self.blind_steps += 1
        return self._zeros, False

    def _decode(self, tokens: list[int], start: int, entry_rows: np.ndarray, flags: list[bool]) -> None:
        """``entry_rows``: each entry's row (float32, contiguous), alive until llama_process returns."""
        batch = self._batch
        ll.llama_batch_ext_clear(batch)
        row_size = self.n_embd * ctypes.sizeof(ctypes.c_float)
        base = entry_rows.ctypes.data
        pos = (ctypes.c_int32 * 4)()
        for k, token in enumerate(tokens):
            idx = ll.llama_batch_ext_add_token(batch, 0, token)
            if idx != k:
                raise BackendError(f"llama.cpp refused token {k} of the MTP head's batch (code {idx})")
            pos[0] = start + k - self.pos_shift
            ll.llama_batch_ext_set_pos(batch, idx, pos)
            embd = ll.llama_embd(ctypes.cast(base + k * row_size, ctypes.POINTER(ctypes.c_float)), 1, self.n_embd)
            if not ll.llama_batch_ext_set_embd_token(batch, idx, embd):
                raise BackendError("llama.cpp refused the target's row for the MTP head's batch")
            if flags[k]:
                ll.llama_batch_ext_set_output_logits(batch, idx, True)
        status = ll.llama_process(self._ctx, ll.LLAMA_PROCESS_TYPE_DECODE, batch)
        if status != 0:
            raise BackendError(f"llama.cpp failed to run {self._what} (code {status}: {last_error()})")
        self._tokens.extend(tokens)

    def trim(self, n_keep: int) -> None:
        if n_keep < len(self._tokens):
            if not ll.llama_memory_seq_rm(self._memory, 0, max(0, n_keep - self.pos_shift), -1):
                ll.llama_memory_clear(self._memory, True)
                n_keep = 0
            del self._tokens[n_keep:]
        if self._own is not None and self._own[0] >= n_keep:
            self._own = None
        if self._first_guess is not None and self._first_guess >= n_keep:
            self._first_guess = None

    def close(self) -> None:
        if self._batch is not None:
            ll.llama_batch_ext_free(self._batch)
            self._batch = None
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
