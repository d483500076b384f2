"""A long prompt read with flash attention, for a context that decodes without it.

On a CPU llama.cpp's flash-attention kernel reads a prompt faster but verifies a draft
slower (``app.engine.gguf.context_shape.flash_attention`` has the figures), and a
context has one setting for both. So where auto turned it off, a long reading goes to a
second context of the same model with it on (``FlashReader``): the decoding context's
sequence is copied in, the prompt read there, and the whole sequence moved back, its
values relaid (``value_layout.py``), before the decoding context is used for anything
else. The second context exists only while a prompt is read, and only where the system's
memory holds its cache twice over (it is as large as the decoding one's), for a reading
worth it (``worth_reading_apart``).

Nothing here is trusted blindly: a state that does not relay, or that llama.cpp will not
take, leaves the backend to read those tokens itself (``ReadsApart._settle``), and to read
every prompt itself from then on.
"""

from __future__ import annotations

import ctypes
import logging

import llama_cpp as ll
import numpy as np

from app.backends.llama.backend_error import BackendError
from app.backends.llama.line_batch import fill_line
from app.backends.llama.log_capture import last_error
from app.engine.gguf.context_shape import worth_reading_apart
from app.engine.gguf.header import shown_name
from app.backends.llama.value_layout import relaid
from app.system_memory import available_ram

log = logging.getLogger("tandem.llama")


def _state(ctx) -> np.ndarray | None:
    size = ll.llama_state_seq_get_size(ctx, 0)
    if not size:
        return None
    state = np.empty(size, np.uint8)
    n = ll.llama_state_seq_get_data(ctx, state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, 0)
    return state[:n] if n else None


def _put(ctx, state: np.ndarray) -> bool:
    pointer = state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
    return ll.llama_state_seq_set_data(ctx, pointer, len(state), 0) == len(state)


class FlashReader:
    """A flash-attention context over ``model`` holding one sequence, for one prompt's
    reading. ``base``: the tokens the decoding context held when it started."""

    def __init__(self, model, cparams, base: int) -> None:
        self.base = base
        self._ctx = self._batch = None
        params = ll.llama_context_default_params()
        for name in ("n_ctx", "n_batch", "n_ubatch", "n_seq_max", "kv_unified", "n_threads",
                     "n_threads_batch", "no_perf"):
            setattr(params, name, getattr(cparams, name))
        params.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
        self._ctx = ll.llama_init_from_model(model, params)
        if not self._ctx:
            raise BackendError(f"no flash-attention context for reading ({last_error()})")
        self.n_batch = params.n_batch
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)

    def take(self, ctx) -> bool:
        """Copy ``ctx``'s sequence (``base`` tokens) in; False where it cannot be."""
        if not self.base:
            return True
        state = _state(ctx)
        rows = relaid(state, transposed=False) if state is not None else None
        return rows is not None and _put(self._ctx, rows)

    def read(self, tokens: list[int], pos: int) -> None:
        """Decode ``tokens`` at ``pos`` on, no logits; BackendError if llama.cpp fails."""
        batch = self._batch
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            fill_line(batch, chunk, pos + start, [False] * len(chunk))
            status = ll.llama_decode(self._ctx, batch)
            if status != 0:
                raise BackendError(f"llama.cpp failed to read a batch with flash attention "
                                   f"(code {status}: {last_error()})")

    def give(self, ctx, memory) -> str:
        """Move the whole sequence into ``ctx``, values relaid: 'all' (done), 'base' (not
        done, ``ctx`` holds what it held) or 'none' (``ctx`` holds nothing now)."""
        state = _state(self._ctx)
        columns = relaid(state, transposed=True) if state is not None else None
        if columns is None:
            return "base"
        if not ll.llama_memory_seq_rm(memory, 0, -1, -1):
            return "base"  # (nothing was removed)
        return "all" if _put(ctx, columns) else "none"

    def set_threads(self, n: int) -> None:
        ll.llama_set_n_threads(self._ctx, n, n)

    def close(self) -> None:
        if self._batch is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None


class ReadsApart:
    """``LlamaBackend``'s part that sends a long reading to a ``FlashReader`` and brings it
    back. Its ``tokens`` run ahead of its context's cache while a reader holds the rest;
    everything but another reading ``_settle``s first."""

    _reader: FlashReader | None = None

    def _read_apart(self, tokens: list[int]) -> bool:
        """Read ``tokens`` (no logits) in the flash-attention reader, started for a long
        reading where nothing else needs this context as it is; False: read them here."""
        if self._reader is None:
            if (not self._reads_apart or not worth_reading_apart(len(tokens), len(self._tokens)) or self._lag
                    or self._tree is not None or self._hidden is not None or not self._reader_fits()):
                return False
            try:
                self._reader = FlashReader(self._model, self._cparams, len(self._tokens))
                if not self._reader.take(self._ctx):
                    raise BackendError("its cache's state did not move")
            except BackendError as e:
                self._give_up_reading_apart(e)
                return False
        try:
            self._reader.read(tokens, len(self._tokens))
        except BackendError as e:
            self._give_up_reading_apart(e)
            return False
        self._tokens.extend(tokens)
        self.read_apart += len(tokens)
        return True

    def _reader_fits(self) -> bool:
        """Whether a second cache and graph as large as this context's leave as much of the
        system's memory free again (it is made with the same size: a prompt read in pieces
        grows in it)."""
        need = sum(size for _, part, size in getattr(self, "buffers", ()) if part in ("kv_cache", "compute"))
        return 2 * need < available_ram()

    def _settle(self) -> None:
        """The prompt read apart moves into this context; where it cannot, it is read here."""
        reader = self._reader
        if reader is None:
            return
        self._reader = None
        try:
            moved = reader.give(self._ctx, self._memory)
        finally:
            reader.close()
        if moved != "all":
            self._give_up_reading_apart(BackendError("its cache's state did not move back"),
                                        base=reader.base if moved == "base" else 0)

    def _give_up_reading_apart(self, error: BackendError, base: int | None = None) -> None:
        """Read here what the reader read (from ``base``: what this context still holds),
        and read here from now on: whatever failed would fail again."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
        if base is None:
            base = reader.base if reader is not None else len(self._tokens)
        self._reads_apart = False
        log.warning("reading long prompts with flash attention is off for %s: %s", shown_name(self.path), error)
        redo = self._tokens[base:]
        del self._tokens[base:]
        if not base:
            ll.llama_memory_clear(self._memory, True)
        if redo:
            self._evaluate(redo, set())

    def _drop_reader(self) -> None:
        """Forget the reader and what it read (``tokens`` ends where this context's cache does)."""
        reader, self._reader = getattr(self, "_reader", None), None
        if reader is not None:
            del self._tokens[reader.base:]
            reader.close()
