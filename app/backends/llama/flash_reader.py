"""A long prompt read with flash attention, for a context that decodes without it.

On a CPU llama.cpp's flash-attention kernel reads a prompt faster but verifies a draft
slower (``app.engine.gguf.context_shape.flash_attention`` has the figures), and a
context has one setting for both. So where auto turned it off, a long reading goes to a
second context of the same model with it on (``FlashReader``): the decoding context's
sequence is copied in, the prompt read there, and the whole sequence moved back, its
values transposed to the decoding context's layout (``value_layout.py``), before the
decoding context is used for anything else. The second context exists only while a
prompt is read, and only where the system's memory holds its cache twice over (it is as
large as the decoding one's), for a reading worth it (``worth_reading_apart``).

``ReadingApart`` is the part of a ``LlamaBackend`` that decides when to read apart and
brings the reading back; the backend holds one, made with the handles it needs.

Nothing here is trusted blindly: a state that does not transpose, or that llama.cpp will
not take, leaves the backend to read those tokens itself (``ReadingApart.bring_back``),
and to read every prompt itself from then on.
"""

from __future__ import annotations

import ctypes
import logging
from enum import Enum, auto
from typing import Callable

import llama_cpp as ll
import numpy as np

from app.backends.llama.backend_error import BackendError
from app.backends.llama.line_batch import fill_line
from app.backends.llama.log_capture import last_error
from app.engine.gguf.context_shape import worth_reading_apart
from app.backends.llama.value_layout import transpose_values
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


def room_for_a_reader(buffers) -> bool:
    """Whether a second cache and graph as large as a context's (``buffers``: what
    llama.cpp made for it, as (device, part, bytes)) leave as much of the system's memory
    free again: the reader is made with the same size (a prompt read in pieces grows in it)."""
    need = sum(size for _, part, size in buffers if part in ("kv_cache", "compute"))
    return 2 * need < available_ram()


class MovedBack(Enum):
    """What the decoding context holds after ``FlashReader.move_back``."""

    ALL = auto()      # the whole sequence: what it held before, then the reading
    BASE = auto()     # only what it held before the reading: nothing moved
    NOTHING = auto()  # nothing: its sequence went and the reader's did not come in


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

    def copy_in(self, ctx) -> bool:
        """Copy ``ctx``'s sequence (``base`` tokens) in; False where it cannot be."""
        if not self.base:
            return True
        state = _state(ctx)
        rows = transpose_values(state, transposed=False) if state is not None else None
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

    def move_back(self, ctx, memory) -> MovedBack:
        """Move the whole sequence into ``ctx`` (whose memory is ``memory``), its values
        transposed to a context without flash attention."""
        state = _state(self._ctx)
        columns = transpose_values(state, transposed=True) if state is not None else None
        if columns is None:
            return MovedBack.BASE
        if not ll.llama_memory_seq_rm(memory, 0, -1, -1):
            return MovedBack.BASE  # (nothing was removed)
        return MovedBack.ALL if _put(ctx, columns) else MovedBack.NOTHING

    def set_threads(self, n: int) -> None:
        ll.llama_set_n_threads(self._ctx, n, n)

    def close(self) -> None:
        if self._batch is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None


class ReadingApart:
    """A ``LlamaBackend``'s long readings, sent to a ``FlashReader`` and brought back.

    While a reading is under way the backend's ``tokens`` run ahead of its context's cache
    (from ``base`` on, the reader holds them), so everything but another reading brings it
    back first. ``model``, ``cparams``, ``ctx`` and ``memory`` are the backend's, for the
    reader's context and the move back; ``read_here(base)`` has the backend read again, in
    its own context, what its tokens hold from ``base`` on, its cache holding exactly the
    tokens before ``base`` (a reading that did not come back)."""

    def __init__(self, model, cparams, ctx, memory, *, on: bool, name: str,
                 read_here: Callable[[int], None]) -> None:
        self._model, self._cparams, self._ctx, self._memory = model, cparams, ctx, memory
        self.on = on  # long readings may go apart (off for good after one that failed)
        self._name = name
        self._read_here = read_here
        self._reader: FlashReader | None = None
        self.tokens_read = 0  # prompt tokens read so, for the tests and the probe

    @property
    def base(self) -> int | None:
        """Where the reading under way started (the tokens the cache holds), or None."""
        return self._reader.base if self._reader is not None else None

    def read(self, tokens: list[int], pos: int, free: Callable[[], bool]) -> bool:
        """Read ``tokens`` (no logits) at ``pos`` on (the backend's tokens so far) in the
        reader, started for a long reading where ``free()`` says nothing else needs the
        context as it is; False: the backend reads them itself."""
        if self._reader is None:
            if not self.on or not worth_reading_apart(len(tokens), pos) or not free():
                return False
            try:
                self._reader = FlashReader(self._model, self._cparams, pos)
                if not self._reader.copy_in(self._ctx):
                    raise BackendError("its cache's state did not move")
            except BackendError as e:
                self._give_up(e, base=pos)  # the cache holds what it held
                return False
        try:
            self._reader.read(tokens, pos)
        except BackendError as e:
            self._give_up(e, base=self._reader.base)  # earlier pieces of this reading are lost too
            return False
        self.tokens_read += len(tokens)
        return True

    def bring_back(self) -> None:
        """The reading under way moves into the context; where it cannot, the backend
        reads it itself."""
        reader = self._reader
        if reader is None:
            return
        self._reader = None
        try:
            moved = reader.move_back(self._ctx, self._memory)
        finally:
            reader.close()
        if moved is not MovedBack.ALL:
            self._give_up(BackendError("its cache's state did not move back"),
                          base=reader.base if moved is MovedBack.BASE else 0)

    def _give_up(self, error: BackendError, base: int) -> None:
        """Read apart no more (what failed would fail again), and have the backend read
        itself what its cache lacks: its tokens from ``base`` on."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
        self.on = False
        log.warning("reading long prompts with flash attention is off for %s: %s", self._name, error)
        self._read_here(base)

    def drop(self) -> int | None:
        """Forget the reading under way and what it read; where it started (the backend's
        tokens end there again), or None where none was under way."""
        reader, self._reader = self._reader, None
        if reader is None:
            return None
        reader.close()
        return reader.base

    def set_threads(self, n: int) -> None:
        if self._reader is not None:
            self._reader.set_threads(n)
