"""The only module that talks to llama.cpp (through llama-cpp-python's low-level API).

One ``LlamaBackend`` = one model + one context + one sequence. Logits are
requested only at the positions the engine asks for (never ``logits_all``), and
rollback is ``llama_memory_seq_rm``. A token tree (``evaluate_tree``) is the one
time the context holds several sequences, one per leaf, for the length of a round.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import re
import secrets
import threading
from pathlib import Path
from typing import Callable, Sequence

import llama_cpp as ll
import numpy as np

from app.backends import rpc
from app.engine.errors import ChatTemplateError, ContextOverflowError, EngineError, ModelFileError
from app.engine.gguf_header import shown_name, validate_gguf
from app.logs import FILE_ONLY

log = logging.getLogger("tandem.llama")

FTYPES = {"F32": ll.LLAMA_FTYPE_ALL_F32, "F16": ll.LLAMA_FTYPE_MOSTLY_F16,
          "Q8_0": ll.LLAMA_FTYPE_MOSTLY_Q8_0, "Q4_0": ll.LLAMA_FTYPE_MOSTLY_Q4_0,
          "Q4_1": ll.LLAMA_FTYPE_MOSTLY_Q4_1, "Q4_K_M": ll.LLAMA_FTYPE_MOSTLY_Q4_K_M,
          "Q2_K": ll.LLAMA_FTYPE_MOSTLY_Q2_K, "IQ4_NL": ll.LLAMA_FTYPE_MOSTLY_IQ4_NL,
          "IQ4_XS": ll.LLAMA_FTYPE_MOSTLY_IQ4_XS, "IQ3_S": ll.LLAMA_FTYPE_MOSTLY_IQ3_S}
# Sequences a context holds: one per leaf of a token tree. A unified KV cache keeps the
# cells of every sequence in one buffer, so the shared prefix is stored once (a
# sequence copy only tags cells) and a single sequence runs exactly as with one.
# TANDEM_TREE_BRANCHES=1 makes single-sequence contexts as before trees (no trees then), to
# measure the two against each other.
TREE_BRANCHES = max(1, int(os.environ.get("TANDEM_TREE_BRANCHES", "8") or 8))
_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


class BackendError(EngineError):
    """llama.cpp refused an operation."""


# -- process-wide set-up: once, with references kept so ctypes callbacks stay alive --
_init_lock = threading.Lock()
_initialised = False
_recent_errors: collections.deque[str] = collections.deque(maxlen=8)
_log_level = logging.INFO
# While a target loads over RPC workers, llama.cpp's errors go to the log file only: a
# failure there becomes one line naming the worker (app.backends.loader), not four.
_quiet_load = False
# Where llama.cpp put each of a split target's layers, as it says at DEBUG while loading
# ("layer 12 assigned to device RPC1"): its own decision, not a recomputation of it.
_LAYER_LINE = re.compile(r"load_tensors: layer +(\d+) assigned to device ([^,\s]+)")
_layer_devices: dict[int, str] | None = None


@ll.llama_log_callback
def _log_callback(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    global _log_level
    if level != 5:  # 5 = continuation of the previous message
        _log_level = _LEVELS.get(level, logging.DEBUG)
    message = (text or b"").decode("utf-8", errors="replace").rstrip()
    if not message:
        return
    if _layer_devices is not None and (said := _LAYER_LINE.search(message)):
        _layer_devices[int(said.group(1))] = said.group(2)
    if _log_level >= logging.WARNING:
        _recent_errors.append(message)
    # llama.cpp is chatty at INFO; keep it at DEBUG unless it is a problem.
    log.log(_log_level if _log_level >= logging.WARNING else logging.DEBUG, "%s", message,
            extra=FILE_ONLY if _quiet_load else None)


def _ensure_initialised() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
            ll.llama_backend_init()
            _initialised = True


def system_info() -> dict[str, str]:
    """Which compute backend this llama.cpp build uses (for --self-test and the UI)."""
    _ensure_initialised()
    info = ll.llama_print_system_info().decode("utf-8", errors="replace")
    gpu = rpc.has_local_gpu()
    kind = "CPU"
    if gpu:
        kind = "Metal" if "METAL" in info.upper() else "CUDA" if "CUDA" in info.upper() else "GPU"
    return {"backend": kind, "system_info": info.strip(), "llama_cpp_python": ll.__version__}


def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


class LlamaBackend:
    """A loaded GGUF model with its own KV cache, implementing ``engine.backend.ModelBackend``."""

    def __init__(self, path: str | Path, *, n_ctx: int = 4096, n_gpu_layers: int = -1,
                 n_threads: int = 0, flash_attention: str = "auto", exact_batches: bool = True,
                 progress: Callable[[float], bool | None] | None = None,
                 devices: Sequence[rpc.Device] | None = None, tensor_split: Sequence[float] = ()) -> None:
        """``devices``: the devices its offloaded layers go to, in order (workers' and this
        machine's; None: this machine's, llama.cpp's own choice); ``tensor_split``: each
        one's share of them (empty: in proportion to their free memory)."""
        path = Path(path)
        validate_gguf(path)  # before llama.cpp sees a byte of it
        _ensure_initialised()
        self.path = path
        self._model = self._ctx = None
        self._batch = None
        self._workers: tuple[str, ...] = ()  # RPC workers its layers live on, while loaded
        # Over workers: how many of its layers each holds, workers first, then "here"
        # (this machine's devices together); () for a load without workers.
        self.layer_split: tuple[tuple[str, int], ...] = ()

        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers if n_gpu_layers >= 0 else 999
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
        global _quiet_load, _layer_devices
        _recent_errors.clear()
        _quiet_load = devices is not None
        if devices is not None:
            self._workers = rpc.hold(devices)  # from the load's first connection (close releases)
            _layer_devices = {}
        try:
            self._load(path, mparams, n_ctx, n_threads, flash_attention, exact_batches)
            if devices is not None:
                self.layer_split = rpc.layer_split(_layer_devices, devices, ll.llama_model_n_layer(self._model))
        except BaseException:
            self.close()  # what was made, and the workers held
            raise
        finally:
            _quiet_load = False
            _layer_devices = None

    def _load(self, path: Path, mparams, n_ctx: int, n_threads: int, flash_attention: str,
              exact_batches: bool) -> None:
        # The path's own bytes: a name that is not UTF-8 must load too.
        self._model = ll.llama_model_load_from_file(os.fsencode(path), mparams)
        if not self._model:
            raise ModelFileError(f"{shown_name(path)}: llama.cpp could not load the model ({_last_error()})")

        self._vocab = ll.llama_model_get_vocab(self._model)
        self.n_vocab = ll.llama_vocab_n_tokens(self._vocab)
        threads = n_threads or default_threads()
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = min(n_ctx, 512)
        cparams.n_seq_max = TREE_BRANCHES
        cparams.kv_unified = TREE_BRANCHES > 1  # coupled sequences (a tree) need it: no sequential split
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.no_perf = True
        float_weights = self._meta("general.file_type") in _FLOAT_FILE_TYPES
        cparams.flash_attn_type = _flash_attn_type(flash_attention, mparams.n_gpu_layers,
                                                   exact=exact_batches and not float_weights)
        self._ctx = ll.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise BackendError(f"{shown_name(path)}: llama.cpp could not create a context of {n_ctx} "
                               f"tokens ({_last_error()}); try a smaller context size")
        self.n_ctx = ll.llama_n_ctx(self._ctx)
        self.n_ctx_train = ll.llama_model_n_ctx_train(self._model)  # the context it was trained on
        self.threads = threads
        # 0 asked for the adaptive choice (app/engine/thread_policy.py), from at most this many.
        self.adaptive_threads = n_threads == 0
        self.n_batch = cparams.n_batch
        self._memory = ll.llama_get_memory(self._ctx)
        self._batch = ll.llama_batch_init(self.n_batch, 0, TREE_BRANCHES)
        self.tree_branches = TREE_BRANCHES
        self._tree: list[int] | None = None  # a tree evaluated and not yet kept: its tokens

        self._read_vocabulary(path)
        self._tokens: list[int] = []
        self._lag = 0  # of those, the last ones not in the cache yet (a tree's kept branch)
        self._piece_cache: dict[int, bytes] = {}

    def _read_vocabulary(self, path: Path) -> None:
        """What the engine reads of the vocabulary and the file's names (a ``vocab_only``
        load reads the same: ``LlamaVocab``)."""
        self.bos_id = ll.llama_vocab_bos(self._vocab)
        self.eos_id = ll.llama_vocab_eos(self._vocab)
        self.add_bos = bool(ll.llama_vocab_get_add_bos(self._vocab))
        self.eog_ids = frozenset(t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self._vocab, t))
        template = ll.llama_model_chat_template(self._model, None)
        self.chat_template = template.decode("utf-8") if template else None
        self.name = self._meta("general.name") or Path(shown_name(path)).stem
        self.architecture = self._meta("general.architecture") or ""
        self.tokenizer_pre = self._meta("tokenizer.ggml.pre") or ""

    # -- protocol ------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        return self._tokens

    @property
    def chat_formats(self) -> tuple[str, ...]:
        return chat_format_names()

    @staticmethod
    def render_chat_format(name: str, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        return render_chat_format(name, messages, add_generation_prompt)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (ll.llama_token * capacity)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (ll.llama_token * capacity)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            raise BackendError("llama.cpp could not tokenize the text")
        return list(buf[:n])

    def token_bytes(self, token_id: int) -> bytes:
        piece = self._piece_cache.get(token_id)
        if piece is None:
            piece = self._piece_cache[token_id] = self._piece(token_id, special=False)
        return piece

    def token_text(self, token_id: int) -> str:
        return self._piece(token_id, special=True).decode("utf-8", errors="replace")

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int]) -> np.ndarray:
        tokens = list(tokens)
        if len(self._tokens) + len(tokens) > self.n_ctx:
            raise ContextOverflowError(
                f"The conversation needs {len(self._tokens) + len(tokens)} tokens but the context "
                f"holds {self.n_ctx}; start a new chat or raise the context size.")
        wanted = set(logits_at)
        if self._lag:  # a tree's kept branch goes into the cache first (see keep_branch)
            head, cached = self._tokens[-self._lag:], len(self._tokens) - self._lag
            del self._tokens[cached:]
            self._lag = 0
            tokens, wanted = head + tokens, {len(head) + i for i in wanted}
            try:
                return self._evaluate(tokens, wanted)
            except BaseException:
                self.trim(cached)  # what the cache holds; the reply that failed ends anyway
                raise
        return self._evaluate(tokens, wanted)

    def _evaluate(self, tokens: list[int], wanted: set[int]) -> np.ndarray:
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
        if self._tree is not None:  # a tree left unkept (an error before acceptance): drop all of it
            self._tree = None
            ll.llama_memory_seq_keep(self._memory, 0)
            ll.llama_memory_seq_rm(self._memory, 0, len(self._tokens) - self._lag, -1)
        if n_keep < len(self._tokens):
            cached = len(self._tokens) - self._lag
            if n_keep < cached:
                ll.llama_memory_seq_rm(self._memory, 0, n_keep, -1)
            self._lag = max(0, n_keep - cached)
            del self._tokens[n_keep:]

    def save_cache(self) -> tuple[list[int], object, int]:
        """What the cache holds, copied out (llama.cpp's sequence state), so that other
        work can use the context and ``restore_cache`` put it back: a long prompt's
        evaluation paused while a short request is served (``app/server/interleave.py``)."""
        if self._lag or self._tree is not None:
            self.evaluate([], [])  # a kept branch not yet cached goes in first
        size = ll.llama_state_seq_get_size(self._ctx, 0)
        buf = (ctypes.c_uint8 * max(size, 1))()
        n = ll.llama_state_seq_get_data(self._ctx, buf, size, 0) if size else 0
        if self._tokens and n == 0:
            raise BackendError(f"llama.cpp could not copy the cache out ({_last_error()})")
        return list(self._tokens), buf, n

    def restore_cache(self, saved: tuple[list[int], object, int]) -> None:
        """Put back what ``save_cache`` copied out, whatever the cache holds now."""
        tokens, buf, n = saved
        self.trim(0)
        if n and ll.llama_state_seq_set_data(self._ctx, buf, n, 0) == 0:
            raise BackendError(f"llama.cpp could not put the cache back ({_last_error()})")
        self._tokens = list(tokens) if n else []

    def evaluate_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        tokens, parents = [int(t) for t in tokens], [int(p) for p in parents]
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
        seqs = _leaf_sequences(parents)
        branches = max(max(s) for s in seqs) + 1
        if branches > self.tree_branches:
            raise ValueError(f"a token tree of {branches} branches, the context holds {self.tree_branches}")
        if self._lag + n > self.n_batch:
            self.evaluate([], [])  # the kept branch of the last tree into the cache on its own
        depth = [0] * n
        for i in range(1, n):
            depth[i] = depth[parents[i]] + 1
        for seq in range(1, branches):  # every branch starts from the cached sequence
            ll.llama_memory_seq_cp(self._memory, 0, seq, -1, -1)
        # A kept branch not yet cached comes first, on every branch (see keep_branch).
        lag, batch = self._lag, self._batch
        head = self._tokens[len(self._tokens) - lag:]
        every = seqs[0]
        base = len(self._tokens) - lag
        for i, token in enumerate(head + tokens):
            node = i - lag
            batch.token[i] = token
            batch.pos[i] = base + i if node < 0 else base + lag + depth[node]
            on = every if node < 0 else seqs[node]
            batch.n_seq_id[i] = len(on)
            for k, seq in enumerate(on):
                batch.seq_id[i][k] = seq
            batch.logits[i] = node >= 0
        batch.n_tokens = lag + n
        status = ll.llama_decode(self._ctx, batch)
        if status != 0:
            ll.llama_memory_seq_keep(self._memory, 0)
            raise BackendError(f"llama.cpp failed to evaluate a token tree (code {status}: {_last_error()})")
        self._lag = 0
        rows = np.array(np.ctypeslib.as_array(ll.llama_get_logits(self._ctx), shape=(n, self.n_vocab)))
        self._tree = tokens
        return rows

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
        # cache and goes back in, in order, at the head of the next batch (``_lag``):
        # a few more tokens in a batch, not another llama.cpp call.
        contiguous = next((i for i, node in enumerate(nodes) if node != i), len(nodes))
        ll.llama_memory_seq_keep(self._memory, 0)
        ll.llama_memory_seq_rm(self._memory, 0, len(self._tokens) + contiguous, -1)
        self._tokens.extend(tokens[i] for i in nodes)
        self._lag = len(nodes) - contiguous

    def set_threads(self, n: int) -> None:
        """Run the next steps with ``n`` threads (single tokens and batches alike); takes
        effect at the next ``llama_decode``, with nothing else about the context changed."""
        n = max(1, int(n))
        if self._ctx and n != self.threads:
            ll.llama_set_n_threads(self._ctx, n, n)
            self.threads = n

    def close(self) -> None:
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
    def _decode(self, chunk: list[int], flags: list[bool]) -> None:
        batch = self._batch
        base = len(self._tokens)
        for i, (token, flag) in enumerate(zip(chunk, flags)):
            batch.token[i] = token
            batch.pos[i] = base + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = flag
        batch.n_tokens = len(chunk)
        status = ll.llama_decode(self._ctx, batch)
        if status != 0:
            # llama.cpp leaves the cache as it was before this batch.
            raise BackendError(f"llama.cpp failed to evaluate a batch (code {status}: {_last_error()})")
        self._tokens.extend(chunk)

    def _piece(self, token_id: int, *, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, special)
        return buf.raw[:max(n, 0)]

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(512)
        n = ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None


class LlamaVocab:
    """A model file's tokenizer alone (llama.cpp's ``vocab_only`` load, no weights read):
    enough to judge its chat format (``app.engine.chat_formats``) without loading it."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        validate_gguf(path)
        _ensure_initialised()
        self.path = path
        params = ll.llama_model_default_params()
        params.vocab_only = True
        _recent_errors.clear()
        self._model = ll.llama_model_load_from_file(os.fsencode(path), params)
        if not self._model:
            raise ModelFileError(f"{shown_name(path)}: llama.cpp could not read the vocabulary ({_last_error()})")
        self._vocab = ll.llama_model_get_vocab(self._model)
        self._piece_cache: dict[int, bytes] = {}
        self.n_vocab = ll.llama_vocab_n_tokens(self._vocab)
        self._read_vocabulary(path)

    _read_vocabulary = LlamaBackend._read_vocabulary
    tokenize = LlamaBackend.tokenize
    token_bytes = LlamaBackend.token_bytes
    token_text = LlamaBackend.token_text
    chat_formats = LlamaBackend.chat_formats
    render_chat_format = LlamaBackend.__dict__["render_chat_format"]  # the staticmethod itself
    _piece = LlamaBackend._piece
    _meta = LlamaBackend._meta

    def close(self) -> None:
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


_format_names: tuple[str, ...] | None = None


def chat_format_names() -> tuple[str, ...]:
    """The names of llama.cpp's built-in chat formats (``llama_chat_builtin_templates``)."""
    global _format_names
    if _format_names is None:
        count = ll.llama_chat_builtin_templates(None, 0)
        names = (ctypes.c_char_p * max(count, 1))()
        ll.llama_chat_builtin_templates(names, count)
        _format_names = tuple(sorted(n.decode("utf-8") for n in names[:count] if n))
    return _format_names


def render_chat_format(name: str, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
    """``messages`` in llama.cpp's built-in format ``name`` (``llama_chat_apply_template``).

    Its messages are C strings: a NUL in a content would end it there, so NULs travel
    as a marker that cannot occur in the text and come back after."""
    texts = [tuple(v if isinstance(v, str) else "" for v in (m.get("role"), m.get("content"))) for m in messages]
    nul = ""
    if any("\0" in text for pair in texts for text in pair):
        while not nul or any(nul in text for pair in texts for text in pair):
            nul = f"\ue002{secrets.token_hex(8)}\ue003"
    keep = [tuple((t.replace("\0", nul) if nul else t).encode("utf-8", "replace") for t in pair) for pair in texts]
    chat = (ll.llama_chat_message * max(len(keep), 1))()
    for i, (role, content) in enumerate(keep):
        chat[i].role, chat[i].content = role, content
    size = sum(len(r) + len(c) for r, c in keep) * 2 + 256
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = ll.llama_chat_apply_template(name.encode("utf-8"), chat, len(keep), add_generation_prompt, buf, size)
        if n < 0:
            raise ChatTemplateError(f"llama.cpp has no chat format called '{name}'")
        if n <= size:
            text = buf.raw[:n].decode("utf-8", "replace")
            return text.replace(nul, "\0") if nul else text
        size = n + 1
    raise ChatTemplateError(f"llama.cpp's '{name}' format could not be rendered")


def _leaf_sequences(parents: list[int]) -> list[list[int]]:
    """Per node, the sequences it belongs to: one per leaf below it. The leaf reached by
    first children from the root is sequence 0, so a tree that is a chain is one sequence."""
    n = len(parents)
    has_child = [False] * n
    for p in parents[1:]:
        has_child[p] = True
    first_leaf = 0
    while True:
        child = next((i for i in range(first_leaf + 1, n) if parents[i] == first_leaf), None)
        if child is None:
            break
        first_leaf = child
    leaves = [first_leaf] + [i for i in range(n) if not has_child[i] and i != first_leaf]
    seqs: list[list[int]] = [[] for _ in range(n)]
    for seq, leaf in enumerate(leaves):
        node = leaf
        while node >= 0:
            seqs[node].append(seq)
            node = parents[node]
    return seqs


# general.file_type of unquantised models: F32, F16, BF16.
_FLOAT_FILE_TYPES = {str(ll.LLAMA_FTYPE_ALL_F32), str(ll.LLAMA_FTYPE_MOSTLY_F16), str(ll.LLAMA_FTYPE_MOSTLY_BF16)}


def _flash_attn_type(choice: str, n_gpu_layers: int, *, exact: bool) -> int:
    """'on', 'off', or 'auto'. On a GPU of this machine, auto is llama.cpp's choice. On a
    CPU (and on RPC workers, whose device kind ggml's RPC does not report), llama.cpp's
    flash-attention kernel makes batched verification slower as the context grows (9 tokens after 1,000: 59 ms without it, 98 ms with it; demo target, 2 threads),
    so auto turns it off, except where ``exact`` asks for batched logits identical to
    single-token ones: without flash attention, a quantised model's batched logits come
    out up to ~1 apart from its single-token ones (activations are rounded to 8 bits, so
    the attention's different summation order grows), enough to flip near-ties between
    verification and plain decoding; with it they match bit for bit. (Unquantised
    weights are the other way round: without flash attention they are the closer, 0.01
    apart against 0.03, so ``exact`` is not asked for them.)"""
    if choice == "on":
        return ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
    if choice == "off":
        return ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    if choice != "auto":
        raise ValueError(f"flash attention must be 'auto', 'on' or 'off', not {choice!r}")
    if rpc.has_local_gpu() and n_gpu_layers > 0:
        return ll.LLAMA_FLASH_ATTN_TYPE_AUTO
    return ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if exact else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED


def quantize(source: str | Path, dest: str | Path, ftype: str | None,
             prune_layers: Sequence[int] = ()) -> None:
    """Write ``source`` re-encoded as ``ftype`` (e.g. "F32", "Q4_0"; None: the types it has)
    with llama.cpp's quantizer, without the layers in ``prune_layers`` (ascending)."""
    source, dest = Path(source), Path(dest)
    validate_gguf(source)
    _ensure_initialised()
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
    _recent_errors.clear()
    if ll.llama_model_quantize(os.fsencode(source), os.fsencode(dest), ctypes.byref(params)) != 0:
        raise BackendError(f"Could not write {shown_name(dest)} as {ftype or 'a copy'} ({_last_error()})")


# llama.cpp's closing words after a failed load; the line before them says why.
_GENERIC_ERRORS = ("failed to load model", "failed to load model from")


def _last_error() -> str:
    """The last thing llama.cpp complained about that says more than "failed"."""
    for message in reversed(_recent_errors):
        if not message.endswith(_GENERIC_ERRORS):
            return message.split("error loading model: ", 1)[-1]
    return _recent_errors[-1] if _recent_errors else "no reason given"
