"""The backend the engine drives: a model loaded by llama.cpp (through llama-cpp-python's
low-level API) with its context, batches, decoding, rollback and checkpoints.

One ``LlamaBackend`` = one model + one context + one sequence. Logits are
requested only at the positions the engine asks for (never ``logits_all``), and
rollback is ``llama_memory_seq_rm``. A token tree (``evaluate_tree``) is the one
time the context holds several sequences, one per leaf, for the length of a round.

A recurrent or hybrid model (``memory``: app/engine/gguf/memory_kinds.py) cannot cut its
state short, except over the last batch's few tokens llama.cpp keeps snapshots of
(``n_rs_seq``, on some architectures). Everywhere else ``trim`` restores a saved
state (``state_checkpoints.py``) and decodes the kept tokens again, or decodes from
the start: it is exact on every memory, or it raises. Such a model has no trees.

Token trees: the context is made with ``n_seq_max = TREE_BRANCHES`` (8,
app/engine/gguf/context_shape.py) and ``kv_unified``; without it, coupled sequences fail
with "sequential split is not supported". Sequence 0 is copied to each branch first
(``llama_memory_seq_cp``, which only tags cells); each batch token carries the sequence
ids of the leaves below it. After acceptance ``keep_branch`` (``seq_keep(0)``, ``seq_rm``)
leaves one sequence again; the part of the kept path off the first chain leaves the cache
and goes in again at the head of the next batch, so the logits stay those of a line
(tests/backends/llama/test_tree_backend.py).

Drafters that read the target (an MTP head, an EAGLE-3 drafter) keep what they read
themselves: the backend tells one listener (``listen``) of every change to its sequence,
each decode, a tree's kept branch and each trim (``target_batches.py``), and hands out
the rows of its last decode on request (``hidden_rows``, ``layer_input_rows``).

A long prompt may be read by a second, flash-attention context and moved in
(``flash_reader.ReadingApart``, which the backend holds).

Threads: ``set_threads`` calls ``llama_set_n_threads``; it takes effect at the next decode.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Callable, Sequence

import llama_cpp as ll
import numpy as np

from app.backends.llama import cache_image, layer_inputs, log_capture, rpc
from app.backends.llama.backend_error import BackendError
from app.backends.llama.flash_reader import ReadingApart, room_for_a_reader
from app.backends.llama.eagle_head import EagleHead, TargetFeatures, load_drafter_model
from app.backends.llama.line_batch import fill_line
from app.backends.llama.log_capture import last_error
from app.backends.llama.mtp_head import MtpHead, hidden_rows_on, load_head_model, read_hidden
from app.backends.llama.process_setup import default_threads, ensure_initialised
from app.backends.llama.state_checkpoints import KEEP_EVERY, Checkpoint, Checkpoints
from app.backends.llama.target_batches import BatchListener, TargetBatch
from app.backends.llama.token_tree import leaf_sequences
from app.backends.llama.vocabulary import VocabularyReader
from app.engine.backend import CacheImage
from app.engine.errors import ContextOverflowError, ModelFileError
from app.engine.gguf.draft_heads import eagle3_map_problem, eagle3_problem
from app.engine.gguf.model_file import ModelFile, open_model_file
from app.engine.gguf.header import shown_name
from app.engine.gguf.context_shape import (BATCH, FLOAT_FILE_TYPES, RS_SNAPSHOTS, TREE_BRANCHES,
                                           flash_attention, reads_apart)
from app.engine.gguf.memory_kinds import ATTENTION, HYBRID, RECURRENT, memory_note

log = logging.getLogger("tandem.llama")

# A batch longer than this is a prompt's (or a re-read's): a kept checkpoint goes
# before it and after it, so that the next turn, a regenerate or an edit finds one.
_PROMPT_BATCH = 32
# Checkpoints hold the recurrent part of a hybrid's memory only (its attention part
# is cut by position); for a pure recurrent model that part is all of it.
_PARTIAL = ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


class LlamaBackend(VocabularyReader):
    """A loaded GGUF model with its own KV cache, implementing ``engine.backend.ModelBackend``."""

    def __init__(self, path: str | Path | ModelFile, *, n_ctx: int = 4096, n_gpu_layers: int = -1,
                 n_threads: int = 0, flash_attention: str = "auto", exact_batches: bool = True,
                 progress: Callable[[float], bool | None] | None = None,
                 devices: Sequence[rpc.Device] | None = None, tensor_split: Sequence[float] = (),
                 rs_snapshots: int | None = None, load_mtp: bool = False) -> None:
        """``devices``: the devices its offloaded layers go to, in order (workers' and this
        machine's; None: this machine's, llama.cpp's own choice); ``tensor_split``: each
        one's share of them (empty: in proportion to their free memory); ``rs_snapshots``:
        recurrent-state snapshots to ask for (None: ``RS_SNAPSHOTS``; a draft needs none);
        ``load_mtp``: load the file's MTP layers too, for ``mtp_head`` (only a file whose
        head ``app.engine.gguf.draft_heads.mtp_head_problem`` passes: llama.cpp aborts
        on a malformed one)."""
        path = Path(path)
        self.model_file = open_model_file(path)  # before llama.cpp sees a byte of it (the load's own: no walk)
        ensure_initialised()
        self.path = path
        self._model = self._ctx = None
        self._batch = None
        self._head: MtpHead | None = None  # a drafter reading this context (mtp_head, eagle_head)
        self._listener: BatchListener | None = None  # told of every change to the sequence (listen)
        self._apart: ReadingApart | None = None  # long readings in a flash-attention context
        self._workers: tuple[str, ...] = ()  # RPC workers its layers live on, while loaded
        # Over workers: how many of its layers each holds, workers first, then "here"
        # (this machine's devices together); () for a load without workers.
        self.layer_split: tuple[tuple[str, int], ...] = ()
        # llama.cpp's buffers as it reported them: (device, part, bytes); () until loaded.
        self.buffers: tuple[tuple[str, str, int], ...] = ()

        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers if n_gpu_layers >= 0 else 999
        mparams.load_mtp = load_mtp
        if devices is not None:  # NULL-terminated; llama.cpp reads it during the load only
            self._devices = (ctypes.c_void_p * (len(devices) + 1))(*[d.handle for d in devices], None)
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p).value
        if tensor_split:
            self._split = (ctypes.c_float * ll.LLAMA_MAX_DEVICES)(*tensor_split)
            mparams.tensor_split = self._split
        if progress is not None:
            # Returning False from the callback cancels the load.
            self._progress = ll.llama_progress_callback(lambda value, _u: progress(value) is not False)
            mparams.progress_callback = self._progress
        with log_capture.load_capture(over_workers=devices is not None) as said:
            if devices is not None:
                self._workers = rpc.hold(devices)  # from the load's first connection (close releases)
            try:
                self._load(path, mparams, n_ctx, n_threads, flash_attention, exact_batches,
                           RS_SNAPSHOTS if rs_snapshots is None else max(0, rs_snapshots))
                if devices is not None:
                    self.layer_split = rpc.layer_split(said.layer_devices, devices, ll.llama_model_n_layer(self._model))
                # (device, part, bytes) of each buffer llama.cpp made for this model and its context
                self.buffers = tuple(said.buffers)
            except BaseException:
                self.close()  # what was made, and the workers held
                raise

    def _load(self, path: Path, mparams, n_ctx: int, n_threads: int, flash_attention: str,
              exact_batches: bool, rs_snapshots: int) -> None:
        # The path's own bytes: a name that is not UTF-8 must load too.
        self._model = ll.llama_model_load_from_file(os.fsencode(path), mparams)
        if not self._model:
            raise ModelFileError(f"{shown_name(path)}: llama.cpp could not load the model ({last_error()})")

        self._vocab = ll.llama_model_get_vocab(self._model)
        self.n_vocab = ll.llama_vocab_n_tokens(self._vocab)
        threads = n_threads or default_threads()
        self.memory = (HYBRID if ll.llama_model_is_hybrid(self._model) else
                       RECURRENT if ll.llama_model_is_recurrent(self._model) else ATTENTION)
        # A recurrent state per sequence: a tree would need one per branch, and each
        # sequence costs a whole state. One sequence, no trees.
        branches = TREE_BRANCHES if self.memory == ATTENTION else 1
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = min(n_ctx, BATCH)
        cparams.n_seq_max = branches
        cparams.kv_unified = branches > 1  # coupled sequences (a tree) need it: no sequential split
        cparams.n_rs_seq = rs_snapshots if self.memory != ATTENTION else 0
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.no_perf = True
        float_weights = self.model_file.file_type in FLOAT_FILE_TYPES
        fa = dict(exact=exact_batches and not float_weights, windowed=ll.llama_model_n_swa(self._model) > 0)
        cparams.flash_attn_type = _flash_attn_type(flash_attention, mparams.n_gpu_layers, **fa)
        # A long prompt read by a flash-attention context of its own (flash_reader.py):
        # one stream of plain attention cache, on this machine's CPU.
        apart = (reads_apart(flash_attention, gpu=_on_gpu(mparams.n_gpu_layers), **fa)
                 and self.memory == ATTENTION and not self._workers)
        # Whether its context runs flash attention (None: llama.cpp's own choice, on a GPU).
        self.flash_attention = {ll.LLAMA_FLASH_ATTN_TYPE_ENABLED: True,
                                ll.LLAMA_FLASH_ATTN_TYPE_DISABLED: False}.get(cparams.flash_attn_type)
        self._ctx = ll.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise BackendError(f"{shown_name(path)}: llama.cpp could not create a context of {n_ctx} "
                               f"tokens ({last_error()}); try a smaller context size")
        self.n_ctx = ll.llama_n_ctx(self._ctx)
        self.n_ctx_train = ll.llama_model_n_ctx_train(self._model)  # the context it was trained on
        self.threads = threads
        # 0 asked for the adaptive choice (app/engine/speculation/thread_policy.py), from at most this many.
        self.adaptive_threads = n_threads == 0
        self.n_batch = cparams.n_batch
        self._memory = ll.llama_get_memory(self._ctx)
        self._apart = ReadingApart(self._model, cparams, self._ctx, self._memory, on=apart, name=shown_name(path),
                                   read_here=self._read_here_from)
        self._batch = ll.llama_batch_init(self.n_batch, 0, branches)
        self.tree_branches = branches
        self._tree: list[int] | None = None  # a tree evaluated and not yet kept: its tokens
        self._tree_first_row = 0  # its node 0's row among the decode's (a kept branch read again came first)
        self.load_mtp = bool(mparams.load_mtp)
        # What llama.cpp honoured of the snapshots (0 where the architecture has none).
        self.rs_snapshots = ll.llama_n_rs_seq(self._ctx) if self.memory != ATTENTION else 0
        self.memory_note = memory_note(self.memory, self.rs_snapshots)
        self._checkpoints = Checkpoints()
        # The last batch's positions [start, end): snapshots cover a cut within it, once.
        self._snapshot_span: tuple[int, int] | None = None
        self._round_point = False  # rollback_point() asked for a checkpoint at the next batch
        self._last_batch = 0       # tokens in the last evaluate
        self.rollbacks = {"native": 0, "restored": 0, "redecoded": 0, "tokens_redecoded": 0}

        self._read_vocabulary(path)
        self._tokens: list[int] = []
        self._uncached = 0  # of those, the last ones not in the cache yet (a tree's kept branch)
        self._piece_cache: dict[int, bytes] = {}

    # -- protocol (its vocabulary part is VocabularyReader's) --------------------
    @property
    def tokens(self) -> list[int]:
        return self._tokens

    @property
    def read_apart(self) -> int:
        """Prompt tokens read in the flash-attention reader (``flash_reader.py``), for the
        tests and the probe."""
        return self._apart.tokens_read

    # ``evaluate(..., borrow=True)`` and ``evaluate_tree(..., borrow=True)`` may return a
    # view of llama.cpp's own logits buffer (no copy of (k+1) x vocabulary floats); it is
    # valid until this context's next decode, so callers read it and let it go.
    lends_logits = True

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int], borrow: bool = False) -> np.ndarray:
        tokens = list(tokens)
        if len(self._tokens) + len(tokens) > self.n_ctx:
            raise ContextOverflowError(
                f"The conversation needs {len(self._tokens) + len(tokens)} tokens but the context "
                f"holds {self.n_ctx}; start a new chat or raise the context size.")
        wanted = set(logits_at)
        if not wanted and tokens and self._apart.read(tokens, len(self._tokens), self._free_to_read_apart):
            self._tokens.extend(tokens)
            return np.empty((0, self.n_vocab), dtype=np.float32)
        self._apart.bring_back()
        if self._uncached:  # a tree's kept branch goes into the cache first (see keep_branch)
            head, cached = self._tokens[-self._uncached:], len(self._tokens) - self._uncached
            del self._tokens[cached:]
            self._uncached = 0
            tokens, wanted = head + tokens, {len(head) + i for i in wanted}
            try:
                return self._evaluate(tokens, wanted, borrow)
            except BaseException:
                self.trim(cached)  # what the cache holds; the reply that failed ends anyway
                raise
        return self._evaluate_saving(tokens, wanted, borrow)

    def _evaluate_saving(self, tokens: list[int], wanted: set[int], borrow: bool = False) -> np.ndarray:
        """``_evaluate``, with the checkpoints a recurrent memory needs to come back here."""
        if self.memory == ATTENTION or not tokens:
            return self._evaluate(tokens, wanted, borrow)
        pos, n = len(self._tokens), len(tokens)
        # The round's way back: where the engine said it would come back to (a draft
        # round), or before a batch whose rollback the snapshots cannot cover.
        round_point = self._round_point or n - 1 > self.rs_snapshots
        self._round_point = False
        if pos and (n > _PROMPT_BATCH or pos - self._checkpoints.last_kept() >= KEEP_EVERY):
            self._save(kept=True)
        elif pos and round_point:
            self._save(kept=False)
        rows = self._evaluate(tokens, wanted, borrow)
        if n > _PROMPT_BATCH:  # (saving a state decodes nothing: borrowed rows stay valid)
            self._save(kept=True)  # a prompt's end: where a regenerate or the next turn comes back to
        return rows

    def _evaluate(self, tokens: list[int], wanted: set[int], borrow: bool = False) -> np.ndarray:
        if borrow and wanted and len(tokens) <= self.n_batch:
            # One decode makes every row: they lie in llama.cpp's buffer, contiguous and
            # in batch order, until the next decode.
            self._decode(tokens, [i in wanted for i in range(len(tokens))])
            return self._logits_view(len(wanted))
        rows = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
        row = 0
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            flags = [start + i in wanted for i in range(len(chunk))]
            self._decode(chunk, flags)
            n_out = sum(flags)
            if n_out:
                # Rows of the flagged positions, contiguous and in batch order.
                ptr = ll.llama_get_logits(self._ctx)
                rows[row:row + n_out] = np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))
                row += n_out
        return rows

    def trim(self, n_keep: int) -> None:
        """Exact on every memory: afterwards the cache holds ``tokens[:n_keep]`` (a kept
        branch may still wait in ``_uncached``), or this raises BackendError with the cache
        holding some prefix of them, which ``tokens`` then says."""
        apart_from = self._apart.base
        if apart_from is not None and n_keep <= apart_from:
            self._drop_reading_apart()  # what it read goes anyway
        self._apart.bring_back()
        if self._tree is not None:  # a tree left unkept (an error before acceptance): drop all of it
            self._tree = None
            ll.llama_memory_seq_keep(self._memory, 0)
            cached = len(self._tokens) - self._uncached
            if not ll.llama_memory_seq_rm(self._memory, 0, cached, -1):
                self._cut(min(n_keep, cached), native=False)
        if n_keep < len(self._tokens):
            cached = len(self._tokens) - self._uncached
            if n_keep < cached:
                self._cut(n_keep)
            else:
                self._uncached = n_keep - cached
                del self._tokens[n_keep:]
        if self._listener is not None:
            self._listener.target_read(TargetBatch.trim(len(self._tokens)))

    def rollback_point(self) -> None:
        """The engine may trim back to the cache's end as it is now (a draft round's
        start: its single-token steps leave no snapshots to roll back through). A
        recurrent memory saves its state there before the next batch."""
        if self.memory != ATTENTION:
            self._round_point = True

    def _cut(self, n_keep: int, native: bool = True) -> None:
        """Make the cache hold exactly ``tokens[:n_keep]`` (fewer than it holds): a
        partial removal where the memory can do one, else the latest checkpoint at or
        before ``n_keep`` and the tokens after it decoded again, else all of them."""
        del self._tokens[len(self._tokens) - self._uncached:]  # a kept branch not yet cached goes too
        self._uncached = 0
        self._checkpoints.drop_after(n_keep)
        if native and self._can_cut(n_keep):
            if ll.llama_memory_seq_rm(self._memory, 0, n_keep, -1):
                if self.memory != ATTENTION:
                    self._snapshot_span = None  # llama.cpp's rollback is single-use until the next batch
                    self.rollbacks["native"] += 1
                del self._tokens[n_keep:]
                return
            log.debug("llama.cpp refused to cut the sequence at %d of %d; restoring instead", n_keep, len(self._tokens))
        self._snapshot_span = None
        point = self._checkpoints.latest_at_or_before(n_keep) if self.memory != ATTENTION else None
        start = 0
        if point is not None and self._restore(point):
            start = point.pos
            self.rollbacks["restored"] += 1
        else:
            ll.llama_memory_clear(self._memory, True)
        redo = self._tokens[start:n_keep]
        del self._tokens[start:]
        if redo:
            self.rollbacks["redecoded"] += 1
            self.rollbacks["tokens_redecoded"] += len(redo)
            self._evaluate_saving(redo, set())

    def _can_cut(self, n_keep: int) -> bool:
        """Whether ``llama_memory_seq_rm`` can cut at ``n_keep`` exactly. Attention:
        always. Recurrent: only within the last batch, over at most ``rs_snapshots``
        tokens, once: llama.cpp accepts a cut it has no snapshot for (an earlier batch's
        stale one would be used), so it is not asked outside that span."""
        if self.memory == ATTENTION:
            return True
        span = self._snapshot_span
        return (span is not None and span[1] == len(self._tokens) and span[0] < n_keep
                and span[1] - n_keep <= self.rs_snapshots)

    def _save(self, *, kept: bool) -> None:
        """Save the recurrent state at the cache's end (a kept checkpoint, or the round's)."""
        pos, books = len(self._tokens), self._checkpoints
        if books.has(pos):
            if kept and books.round is not None and books.round.pos == pos:
                books.keep(books.round)
            return
        size = ll.llama_state_seq_get_size_ext(self._ctx, 0, _PARTIAL)
        data = (None if kept else books.buffer_for(size)) or (ctypes.c_uint8 * max(size, 1))()
        if not size or ll.llama_state_seq_get_data_ext(self._ctx, data, size, 0, _PARTIAL) != size:
            # No checkpoint here: a rollback past it goes further back, still exact.
            log.warning("llama.cpp could not save the recurrent state at %d tokens (%s)", pos, last_error())
            return
        checkpoint = Checkpoint(pos, data, size)
        if kept:
            books.keep(checkpoint)
        else:
            books.set_round(checkpoint)

    def _restore(self, point: Checkpoint) -> bool:
        """The state saved at ``point`` back in the cache, and the attention part cut
        there (a no-op for the recurrent part, which ends there now)."""
        if ll.llama_state_seq_set_data_ext(self._ctx, point.data, point.size, 0, _PARTIAL) != point.size:
            log.warning("llama.cpp could not restore the recurrent state at %d tokens (%s); decoding from the "
                        "start instead", point.pos, last_error())
            return False
        if not ll.llama_memory_seq_rm(self._memory, 0, point.pos, -1):
            log.warning("llama.cpp could not cut a restored state at %d tokens; decoding from the start", point.pos)
            return False
        return True

    def _save_cache(self) -> tuple[list[int], bytearray, int, object]:
        """What the cache holds, copied out (llama.cpp's sequence state, written straight
        into the bytearray a ``CacheImage`` keeps: ``cache_image``)."""
        if self._uncached or self._tree is not None or self._apart.base is not None:
            self.evaluate([], [])  # a kept branch not yet cached (or a prompt read apart) goes in first
        size = ll.llama_state_seq_get_size(self._ctx, 0)
        state = bytearray(max(size, 1))
        into = (ctypes.c_uint8 * len(state)).from_buffer(state)
        n = ll.llama_state_seq_get_data(self._ctx, into, size, 0) if size else 0
        del into  # (it pins the bytearray's size)
        if self._tokens and n == 0:
            raise BackendError(f"llama.cpp could not copy the cache out ({last_error()})")
        rows = self._listener.rows_copy() if self._listener is not None else None  # what an MTP head reads
        return list(self._tokens), state, n, rows

    def _restore_cache(self, saved: tuple[list[int], object, int, object]) -> None:
        """Put back what ``_save_cache`` copied out, whatever the cache holds now
        (``load_cache_image``)."""
        tokens, buf, n, rows = saved
        self.trim(0)
        if n and ll.llama_state_seq_set_data(self._ctx, buf, n, 0) == 0:
            raise BackendError(f"llama.cpp could not put the cache back ({last_error()})")
        self._tokens = list(tokens) if n else []
        if self._listener is not None and rows is not None and n:
            self._listener.restore_rows(rows)

    # The copy above as plain data (app/engine/backend.py, ``KeepsStates``): kept in memory
    # or on disk (app/session/kept_states.py), or while a long prompt pauses.
    keeps_states = True

    @property
    def cache_identity(self) -> dict:
        return cache_image.identity(self)

    def cache_image(self) -> CacheImage:
        return cache_image.image(self)

    def load_cache_image(self, image: CacheImage) -> None:
        cache_image.load(self, image)

    def evaluate_tree(self, tokens: Sequence[int], parents: Sequence[int], borrow: bool = False) -> np.ndarray:
        tokens, parents = [int(t) for t in tokens], [int(p) for p in parents]
        self._apart.bring_back()
        if self.memory != ATTENTION:
            raise BackendError(f"a {self.memory} model has no token trees (its state is one per sequence)")
        if self._tree is not None:
            raise BackendError("a token tree was evaluated and not kept")
        n = len(tokens)
        if n == 0 or len(parents) != n or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents) if i):
            raise ValueError("a token tree needs a root (parent -1) and every parent before its child")
        if n > self.n_batch:
            raise ValueError(f"a token tree of {n} tokens does not fit a batch of {self.n_batch}")
        if len(self._tokens) + n > self.n_ctx:
            raise ContextOverflowError(
                f"The conversation needs {len(self._tokens) + n} tokens but the context "
                f"holds {self.n_ctx}; start a new chat or raise the context size.")
        seqs = leaf_sequences(parents)
        branches = max(max(s) for s in seqs) + 1
        if branches > self.tree_branches:
            raise ValueError(f"a token tree of {branches} branches, the context holds {self.tree_branches}")
        if self._uncached + n > self.n_batch:
            self.evaluate([], [])  # the kept branch of the last tree into the cache on its own
        depth = [0] * n
        for i in range(1, n):
            depth[i] = depth[parents[i]] + 1
        for seq in range(1, branches):  # every branch starts from the cached sequence
            ll.llama_memory_seq_cp(self._memory, 0, seq, -1, -1)
        # A kept branch not yet cached comes first, on every branch (see keep_branch).
        uncached, batch = self._uncached, self._batch
        head = self._tokens[len(self._tokens) - uncached:]
        every = seqs[0]
        base = len(self._tokens) - uncached
        for i, token in enumerate(head + tokens):
            node = i - uncached
            batch.token[i] = token
            batch.pos[i] = base + i if node < 0 else base + uncached + depth[node]
            on = every if node < 0 else seqs[node]
            batch.n_seq_id[i] = len(on)
            for k, seq in enumerate(on):
                batch.seq_id[i][k] = seq
            batch.logits[i] = node >= 0
        batch.n_tokens = uncached + n
        status = ll.llama_decode(self._ctx, batch)
        if status != 0:
            ll.llama_memory_seq_keep(self._memory, 0)
            raise BackendError(f"llama.cpp failed to evaluate a token tree (code {status}: {last_error()})")
        self._uncached = 0
        if self._listener is not None and uncached:  # (the tree's kept branch: at keep_branch)
            self._listener.target_read(TargetBatch.line(base, head, 0, uncached + n))
        rows = self._logits_view(n)
        self._tree, self._tree_first_row = tokens, uncached
        return rows if borrow else np.array(rows)

    def keep_branch(self, nodes: Sequence[int]) -> None:
        if self._tree is None:
            raise BackendError("no token tree to keep a branch of")
        tokens, self._tree = self._tree, None
        # The batch's cells are in batch order, and the nodes reached by first children
        # from the root come first, all on sequence 0. Of the kept path, that stretch
        # stays in the cache as it is. The rest of it (a second candidate, the nodes
        # after it) sits in cells after the first chain's: attention would sum over
        # the cache out of position order, which changes a quantised model's logits
        # (by up to ~0.9 on the demo's Q4_1) and so its near-ties. So it leaves the
        # cache and goes back in, in order, at the head of the next batch (``_uncached``):
        # a few more tokens in a batch, not another llama.cpp call.
        contiguous = next((i for i, node in enumerate(nodes) if node != i), len(nodes))
        kept = [tokens[i] for i in nodes]
        if self._listener is not None:  # the tree's rows, before anything below decodes again
            first = self._tree_first_row
            self._listener.target_read(TargetBatch(len(self._tokens), kept, [first + node for node in nodes],
                                                   first + len(tokens)))
        ll.llama_memory_seq_keep(self._memory, 0)
        cached = len(self._tokens)
        if not ll.llama_memory_seq_rm(self._memory, 0, cached + contiguous, -1):
            # Decoded again from what came before the tree (the whole branch goes in
            # at the head of the next batch): slower, still exact.
            if cached:
                self._cut(cached, native=False)
            else:
                ll.llama_memory_clear(self._memory, True)
            contiguous = 0
        self._tokens.extend(kept)
        self._uncached = len(nodes) - contiguous

    def set_threads(self, n: int) -> None:
        """Run the next steps with ``n`` threads (single tokens and batches alike); takes
        effect at the next ``llama_decode``, with nothing else about the context changed."""
        n = max(1, int(n))
        if self._ctx and n != self.threads:
            ll.llama_set_n_threads(self._ctx, n, n)
            self._apart.set_threads(n)
            self.threads = n

    def mtp_head(self, compact_copy: str | os.PathLike[str] | None = None) -> MtpHead:
        """The model's MTP layers as a draft model reading this context (made once; closed
        with this backend): from ``compact_copy``, a compact copy of them
        (``app.engine.gguf.compact_head``), else from this model, which must have been
        loaded with ``load_mtp``."""
        if self._head is not None:
            return self._head
        if ll.llama_model_n_layer_nextn(self._model) <= 0 or not (self.load_mtp or compact_copy):
            raise BackendError(f"{shown_name(self.path)} was loaded without MTP layers")
        self._apart.bring_back()
        n_embd = ll.llama_model_n_embd_out(self._model)
        model = load_head_model(compact_copy) if compact_copy else self._model
        if compact_copy and ll.llama_model_n_embd_out(model) != n_embd:
            ll.llama_model_free(model)
            raise BackendError("the compact MTP head's rows are not as wide as the target's")
        hidden_rows_on(self._ctx, masked=False)  # every position's row, for the head to read

        def batch_rows(batch: TargetBatch) -> np.ndarray:
            return batch.pick(self.hidden_rows(batch.decoded, n_embd))

        return self._attach(lambda: MtpHead(self, model, self._ctx, batch_rows, n_embd,
                                            owns_model=bool(compact_copy)))

    def eagle_head(self, path: str | os.PathLike[str], layers: Sequence[int], n_gpu_layers: int = 0) -> EagleHead:
        """An EAGLE-3 drafter file as a draft model reading this context's ``layers``
        (made once; closed with this backend), its layers offloaded as ``n_gpu_layers``
        says (-1: all). Only for a pair ``eagle3_problem`` passed: llama.cpp aborts on a
        layer this architecture's graph does not name."""
        if self._head is not None:
            return self._head
        n_embd = ll.llama_model_n_embd(self._model)
        n_layer = ll.llama_model_n_layer(self._model)
        # Judged again here, on what llama.cpp loaded: each case below aborts inside it.
        drafter = open_model_file(path).metadata
        why = eagle3_problem(self.model_file.metadata.architecture, n_layer, n_embd, tuple(layers),
                             drafter.eagle3_width, drafter.n_embd, drafter.eagle3_borrows) or \
            eagle3_map_problem(drafter.eagle3_tensors, drafter.n_vocab, self.n_vocab, drafter.eagle3_d2t_range)
        if why:
            raise BackendError(f"the EAGLE-3 drafter cannot draft for {shown_name(self.path)}: {why}")
        self._apart.bring_back()
        model = load_drafter_model(path, n_gpu_layers if n_gpu_layers >= 0 else 999)
        try:
            read = layer_inputs.target_layer_ids(model)
            if read != list(layers):
                raise BackendError(f"llama.cpp reads the drafter's target layers as {read}, not {list(layers)}")
            for layer in layers:  # what the drafter reads, handed out from the next decode on
                if layer < n_layer:
                    layer_inputs.extract(self._ctx, layer)
            if n_layer in layers:  # the last, normed row: the MTP heads' call (unmasked)
                hidden_rows_on(self._ctx, masked=False)
            features = TargetFeatures(self, layers, n_layer, n_embd)
        except BaseException:
            ll.llama_model_free(model)
            raise
        return self._attach(lambda: EagleHead(self, model, self._ctx, features.read, features.width))

    def _attach(self, make: Callable[[], MtpHead]) -> MtpHead:
        """A head reading this context from now on; a head that cannot be made freed its
        model and leaves this context as it was."""
        head = make()
        try:
            self.listen(head)
        except BaseException:
            head.close()
            raise
        self._head = head
        return head

    def listen(self, listener: BatchListener) -> None:
        """Tell ``listener`` of every change to this sequence from now on: each decode, a
        tree's kept branch and each trim (``target_batches.py``). One listener at a time
        (a drafter reading this target). What the cache holds already was read before it
        listened: it goes, and the next reply reads it again."""
        if self._listener is not None and self._listener is not listener:
            raise BackendError("another drafter reads this target already")
        self._listener = listener
        self.trim(0)

    @property
    def drafter_row_width(self) -> int | None:
        """The width of the rows the drafter reading this target keeps by position (None:
        none keeps any), which a chat's saved rows must fit (``cache_image.py``)."""
        return self._listener.row_width if self._listener is not None else None

    def hidden_rows(self, n_rows: int, width: int) -> np.ndarray:
        """The last decode's first ``n_rows`` hidden rows (its last layer's output, normed),
        ``width`` floats each: a view of llama.cpp's buffer, valid until the next decode.
        Handed out only once a drafter that reads them was made (``mtp_head``, ``eagle_head``)."""
        return read_hidden(self._ctx, n_rows, width)

    def layer_input_rows(self, layer: int, n_rows: int, width: int) -> np.ndarray:
        """The last decode's first ``n_rows`` inputs of ``layer``, as ``hidden_rows``; only
        for a layer an EAGLE-3 drafter made with ``eagle_head`` reads."""
        return layer_inputs.read(self._ctx, layer, n_rows, width)

    def close(self) -> None:
        self._drop_reading_apart()
        self._listener = None
        if self._head is not None:  # its context reads this one: it goes first
            self._head.close()
            self._head = None
        if getattr(self, "_checkpoints", None) is not None:
            self._checkpoints.clear()
        if self._batch is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None
        if self._workers:  # freed: ggml let go of their connections
            rpc.release(self._workers)
            self._workers = ()

    def __del__(self) -> None:  # a safety net; owners call close()
        try:
            self.close()
        except Exception:
            pass

    # -- internals -------------------------------------------------------------
    def _free_to_read_apart(self) -> bool:
        """Whether a long reading may go to the flash-attention reader: nothing else needs
        this context as it is (a kept branch waiting, a tree, a listener, which would miss
        the rows), and the system's memory has room for the reader's context."""
        if self._uncached or self._tree is not None or self._listener is not None:
            return False
        return room_for_a_reader(self.buffers)

    def _read_here_from(self, base: int) -> None:
        """Read in this context what ``tokens`` hold from ``base`` on: its cache holds the
        tokens before ``base`` only (a reading apart that did not come back)."""
        redo = self._tokens[base:]
        del self._tokens[base:]
        if not base:
            ll.llama_memory_clear(self._memory, True)
        if redo:
            self._evaluate(redo, set())

    def _drop_reading_apart(self) -> None:
        """Forget a reading apart under way and what it read (``tokens`` end where this
        context's cache does)."""
        apart = getattr(self, "_apart", None)  # (a load that failed early made none)
        base = apart.drop() if apart is not None else None
        if base is not None:
            del self._tokens[base:]

    def _logits_view(self, n: int) -> np.ndarray:
        """The last decode's ``n`` rows of logits, in llama.cpp's buffer (no copy)."""
        ptr = ll.llama_get_logits(self._ctx)
        if not ptr:
            raise BackendError("llama.cpp returned no logits for the batch")
        return np.ctypeslib.as_array(ptr, shape=(n, self.n_vocab))

    def _decode(self, chunk: list[int], flags: list[bool]) -> None:
        batch = self._batch
        base = len(self._tokens)
        fill_line(batch, chunk, base, flags)
        status = ll.llama_decode(self._ctx, batch)
        if status != 0:
            # llama.cpp leaves the cache as it was before this batch.
            raise BackendError(f"llama.cpp failed to evaluate a batch (code {status}: {last_error()})")
        if self._listener is not None:
            self._listener.target_read(TargetBatch.line(base, chunk))
        self._tokens.extend(chunk)
        self._snapshot_span = (base, base + len(chunk))


def _on_gpu(n_gpu_layers: int) -> bool:
    return rpc.has_local_gpu() and n_gpu_layers > 0


def _flash_attn_type(choice: str, n_gpu_layers: int, *, exact: bool, windowed: bool = False) -> int:
    """llama.cpp's flash-attention type for ``choice`` ('auto', 'on' or 'off'), decided by
    ``app.engine.gguf.context_shape.flash_attention`` (which says why)."""
    on = flash_attention(choice, gpu=_on_gpu(n_gpu_layers), exact=exact, windowed=windowed)
    return (ll.LLAMA_FLASH_ATTN_TYPE_AUTO if on is None else
            ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if on else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED)
