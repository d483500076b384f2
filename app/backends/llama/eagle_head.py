"""An EAGLE-3 drafter file, run as a draft model that reads its target's layers.

An EAGLE-3 drafter (general.architecture ``eagle3``) is one decoder block trained on
a target: it reads the inputs of three of the target's layers (``eagle3.target_layers``;
the target's block count names its last, normed row), projects them (``fc``, its
encoder) to a row ``g``, and guesses from (a token, that row). llama.cpp's
``draft-eagle3`` (common/speculative.cpp) lays its cache out so:

- the entry at position P holds (token P + 1, g of the target's rows at P), and
  guesses token P + 2: the same pairing as an MTP head's entry for token p (token p,
  the target's row p - 1), one position earlier, and nothing for the first token;
- the k-th guess goes on from the drafter's own row (its ``t_h_nextn``, pre-norm) for
  the guess before it, as an MTP head does.

So it is an ``MtpHead`` with three differences: its own model and an ordinary context
(``ctx_other`` the target's, whose token embedding and output matrix it borrows when it
has none); its entries one position earlier (``pos_shift``); and the target's rows it
reads go through its encoder (``llama_process`` ``ENCODE``) before the decoder reads them.
Like an MTP head it keeps what it reads of the target, by position (``HiddenRows``): told
of each target batch, it asks the target for the three layers' inputs (``TargetFeatures``)
and keeps them side by side.
"""

from __future__ import annotations

import ctypes
import os
from typing import Protocol, Sequence

import llama_cpp as ll
import numpy as np

from app.backends.llama import layer_inputs
from app.backends.llama.backend_error import BackendError
from app.backends.llama.log_capture import last_error
from app.backends.llama.mtp_head import MtpHead, read_hidden
from app.backends.llama.target_batches import TargetBatch


def load_drafter_model(path: str | os.PathLike[str], n_gpu_layers: int = 0):
    """An EAGLE-3 drafter file as a llama.cpp model. Raises BackendError."""
    mparams = ll.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers
    model = ll.llama_model_load_from_file(os.fsencode(path), mparams)
    if not model:
        raise BackendError(f"llama.cpp could not load the EAGLE-3 drafter ({last_error()})")
    return model


def drafter_layers(path: str | os.PathLike[str]) -> list[int]:
    """The target layers llama.cpp reads from a drafter file (its trial: the load alone)."""
    from app.backends.llama.process_setup import ensure_initialised

    ensure_initialised()
    model = load_drafter_model(path)
    try:
        return layer_inputs.target_layer_ids(model)
    finally:
        ll.llama_model_free(model)


class _RowSource(Protocol):
    """What ``TargetFeatures`` asks of the target (a ``LlamaBackend``, named by shape: the
    backend imports this module): its last decode's rows, which it was told to hand out."""

    def hidden_rows(self, n_rows: int, width: int) -> np.ndarray: ...

    def layer_input_rows(self, layer: int, n_rows: int, width: int) -> np.ndarray: ...


class TargetFeatures:
    """Reads, after each of the target's batches, the rows an EAGLE-3 drafter encodes:
    the inputs of its chosen layers, side by side (a layer id equal to the block count
    names the target's last, normed row). The target hands out those layers' inputs
    (``LlamaBackend.eagle_head`` asked it to)."""

    def __init__(self, target: _RowSource, layers: Sequence[int], n_layer: int, n_embd: int) -> None:
        self._target, self._layers, self._n_layer, self._n_embd = target, list(layers), n_layer, n_embd
        self.width = len(self._layers) * n_embd

    def read(self, batch: TargetBatch) -> np.ndarray:
        """``batch``'s rows: each position's layer inputs, side by side (float32)."""
        n, width = batch.decoded, self._n_embd
        out = np.empty((len(batch.tokens), self.width), dtype=np.float32)
        for k, layer in enumerate(self._layers):
            rows = (self._target.layer_input_rows(layer, n, width) if layer < self._n_layer
                    else self._target.hidden_rows(n, width))
            out[:, k * width:(k + 1) * width] = batch.pick(rows)
        return out


class EagleHead(MtpHead):
    """An EAGLE-3 drafter as a draft model (a ``ModelBackend`` for ``ModelDrafter``);
    made by ``LlamaBackend.eagle_head``, closed by its target's ``close`` at the latest.
    ``read_rows``: a ``TargetFeatures``' ``read``, ``width`` its width."""

    pos_shift = 1  # entry i (token i) at position i - 1; token 0 has none
    _what = "the EAGLE-3 drafter"

    def __init__(self, target, model, target_ctx, read_rows, width: int) -> None:
        super().__init__(target, model, target_ctx, read_rows, width, owns_model=True)
        self.compact_copy = False  # its own file, not a copy of the target's head
        self._n_enc = width  # the encoder's input: the target's rows side by side
        self._enc_batch = ll.llama_batch_ext_init(self._ctx)
        if not self._enc_batch:
            self.close()
            raise BackendError("llama.cpp could not make a batch for the EAGLE-3 drafter's encoder")

    @staticmethod
    def _name(target_name: str, owns_model: bool) -> str:
        return f"{target_name} (its EAGLE-3 drafter)"

    @staticmethod
    def _layers(model) -> int:
        return 1

    @staticmethod
    def _context_type(cparams) -> None:
        pass  # an ordinary context: the drafter is a model of its own

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int], borrow: bool = False) -> np.ndarray:
        if self._tokens or not tokens:
            return super().evaluate(tokens, logits_at, borrow)
        # The first token has no entry (nothing before it to pair it with): kept as the
        # cache's first token; a guess asked of it alone is no guess (zeros).
        self._tokens.append(int(tokens[0]))
        wanted = sorted(set(logits_at))
        later = [i - 1 for i in wanted if i > 0]
        rows = super().evaluate(list(tokens[1:]), later) if len(tokens) > 1 else np.empty((0, self.n_vocab))
        out = np.zeros((len(wanted), self.n_vocab), dtype=np.float32)
        out[len(wanted) - len(later):] = rows
        return out

    def _rows_in(self, rows: list[np.ndarray], from_target: list[bool]) -> np.ndarray:
        """Each entry's row in the decoder's width: the target's rows through the encoder
        (in one call), the drafter's own rows as they are."""
        out = np.empty((len(rows), self.n_embd), dtype=np.float32)
        picked = [k for k, is_target in enumerate(from_target) if is_target]
        for k, row in enumerate(rows):
            if not from_target[k]:
                out[k] = row
        if picked:
            out[picked] = self._encode(np.stack([rows[k] for k in picked]))
        return out

    def _encode(self, features: np.ndarray) -> np.ndarray:
        inputs = np.ascontiguousarray(features, dtype=np.float32)  # alive until each llama_process returns
        if inputs.shape[1] != self._n_enc:
            raise BackendError("the target's rows do not fit the EAGLE-3 drafter's encoder")
        out = np.empty((len(inputs), self.n_embd), dtype=np.float32)
        row_size = self._n_enc * ctypes.sizeof(ctypes.c_float)
        pos = (ctypes.c_int32 * 4)()
        for first in range(0, len(inputs), self._n_batch):  # the encoder reads a row at a time: chunks are safe
            batch = self._enc_batch
            ll.llama_batch_ext_clear(batch)
            chunk = inputs[first:first + self._n_batch]
            after = ll.llama_memory_seq_pos_max(self._memory, 0) + 1
            base = chunk.ctypes.data
            for k in range(len(chunk)):
                embd = ll.llama_embd(ctypes.cast(base + k * row_size, ctypes.POINTER(ctypes.c_float)), 1, self._n_enc)
                idx = ll.llama_batch_ext_add_embd(batch, 0, embd)
                if idx != k:
                    raise BackendError(f"llama.cpp refused row {k} of the EAGLE-3 encoder's batch (code {idx})")
                pos[0] = after + k  # the encoder reads none, but llama.cpp wants them to follow the cache's
                ll.llama_batch_ext_set_pos(batch, idx, pos)
                ll.llama_batch_ext_set_output_logits(batch, idx, True)
            status = ll.llama_process(self._ctx, ll.LLAMA_PROCESS_TYPE_ENCODE, batch)
            if status != 0:
                raise BackendError(f"llama.cpp failed to run the EAGLE-3 encoder (code {status}: {last_error()})")
            out[first:first + len(chunk)] = read_hidden(self._ctx, len(chunk), self.n_embd)
        return out

    def close(self) -> None:
        batch = getattr(self, "_enc_batch", None)
        if batch is not None:
            ll.llama_batch_ext_free(batch)
            self._enc_batch = None
        super().close()
