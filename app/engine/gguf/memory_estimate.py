"""What a model will need in memory, from its header alone, before llama.cpp loads it.

llama.cpp allocates four kinds of buffer for a model and its context, and says so in
its log ("CPU_Mapped model buffer size", "KV buffer size", "RS buffer size", "output
buffer size", "compute buffer size"). :func:`estimate_memory` predicts each from the
header Tandem already read (``ModelFile``): no weight is read and nothing can crash.

- **Weights**: the bytes of every tensor, layer by layer (``blk.N.*``), so that a
  split of the layers between a GPU and the CPU is exact. The token embeddings stay
  in system memory (llama.cpp never offloads the input layer); the output head goes
  to the GPU only with every layer. MTP ("NextN") layers are not loaded, so they are
  not counted.
- **KV cache**: per attention layer, ``cells x (K width + V width)`` at 16 bits, the
  cells being the context rounded up to 256 (llama.cpp's padding). Sliding-window
  layers are counted at the full context: Tandem keeps llama.cpp's default of
  full-size sliding-window caches, which a regenerate or an edit far back needs.
- **Recurrent state** (Mamba, RWKV, LFM2, the gated delta net of Qwen 3.5 ...): per
  recurrent layer, a convolution row and a state row (32-bit), times one plus the
  rollback snapshots (``n_rs_seq``); and Tandem's own checkpoints of that state in
  system memory (``app/backends/llama/state_checkpoints.py``, at most ``KEPT_CHECKPOINTS_MOST`` + 1).
- **Compute**: the graph's scratch for the largest batch (one ubatch). Its peak is
  the larger of the output head's logits (``n_vocab x n_ubatch`` floats: at a 262k
  vocabulary as big as the weights of a 270M model) and attention's score matrix
  (``n_head x cells x n_ubatch`` floats, without flash attention) or its mask (with).
- **Output**: the logits llama.cpp keeps for the caller, one row per sequence.

Checked against llama.cpp's own figures for every model the tests have
(``tests/engine/gguf/test_memory_estimate.py``): within 15% of the sum, and exact
for the weights.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_LAYERS = 512    # LLAMA_MAX_LAYERS: llama.cpp refuses more (and so does the header check)
# llama.cpp rounds a context up to this many cells (llama-context.cpp, GGML_PAD(n_ctx, 256)).
CELL_PADDING = 256
KV_BYTES = 2        # F16 K and V, llama.cpp's default cache type
STATE_BYTES = 4     # F32 recurrent rows
FLOAT_BYTES = 4     # logits and the graph's activations
# Graph scratch beside the largest tensor, in activations of the width n_embd x n_ubatch:
# fitted to llama.cpp's compute buffers of the test models (2-7 of them; the largest
# deviation is well under the 15% the estimate is held to).
_ATTENTION_EXTRA_ROWS = 6
_OUTPUT_EXTRA_ROWS = 3
_FFN_ROWS = 3       # gate, up and their product, n_ff wide

# Tandem's checkpoints of a recurrent state, kept along a conversation: at most this many,
# and this many bytes of them together. Declared here, where the estimate counts them (one
# more for the round's); app/backends/llama/state_checkpoints.py keeps them to these bounds.
KEPT_CHECKPOINTS_MOST = 8
KEPT_CHECKPOINT_BYTES = 256 << 20

_LAYER = re.compile(r"blk\.(\d+)\.(.+)")
_RECURRENT_TENSOR = ("ssm_", "shortconv", "time_mix", "channel_mix")
_ATTENTION_TENSOR = ("attn_k.", "attn_k_b.", "attn_kv_a_mqa.", "attn_q.", "attn_k_norm", "attn_v.")
_OUTPUT_TENSOR = ("output.", "output_norm.")
# The hyperparameters this module reads, as {arch}.NAME keys of the header.
HYPERPARAMETERS = frozenset({
    "block_count", "embedding_length", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "attention.kv_lora_rank",
    "rope.dimension_count", "nextn_predict_layers", "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size",
    "ssm.group_count", "wkv.head_size", "token_shift_count", "shortconv.l_cache", "expert_used_count",
    "expert_feed_forward_length", "attention.sliding_window",
})


@dataclass(frozen=True)
class ContextShape:
    """The context Tandem will create for a model (the backend's choice, in one place:
    ``app/engine/gguf/context_shape.py``)."""

    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int       # sequences (a token tree's branches)
    n_rs_seq: int        # recurrent-state snapshots per sequence (0 where the architecture has none)
    flash_attn: bool

    @property
    def cells(self) -> int:
        return -(-self.n_ctx // CELL_PADDING) * CELL_PADDING


@dataclass(frozen=True)
class Layer:
    """One repeating layer: what goes wherever the layer goes."""

    weights: int
    kv_cache: int
    recurrent_state: int

    @property
    def bytes(self) -> int:
        return self.weights + self.kv_cache + self.recurrent_state


@dataclass(frozen=True)
class MemoryEstimate:
    """A model's memory with its context, in bytes, by part and by layer."""

    layers: tuple[Layer, ...]
    input_weights: int       # token embeddings and other tensors outside the layers: system memory
    output_weights: int      # the output norm and head: on the GPU with every layer
    tied_output: int         # a head that reuses the embeddings: copied to the GPU with it
    compute_layers: int      # the graph's scratch for the layers (attention, feed-forward)
    compute_output: int      # the graph's scratch for the logits
    output_buffer: int
    checkpoints: int         # Tandem's saved recurrent states: system memory, never the GPU
    shape: ContextShape      # the context it was estimated for

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def weights(self) -> int:
        return self.input_weights + self.output_weights + sum(layer.weights for layer in self.layers)

    @property
    def kv_cache(self) -> int:
        return sum(layer.kv_cache for layer in self.layers)

    @property
    def recurrent_state(self) -> int:
        return sum(layer.recurrent_state for layer in self.layers)

    @property
    def compute(self) -> int:
        return max(self.compute_layers, self.compute_output)

    @property
    def llama_bytes(self) -> int:
        """What llama.cpp itself allocates (its buffers' sum), on whatever devices."""
        return self.weights + self.kv_cache + self.recurrent_state + self.compute + self.output_buffer

    @property
    def bytes(self) -> int:
        """All of it: llama.cpp's buffers and Tandem's checkpoints."""
        return self.llama_bytes + self.checkpoints

    def parts(self) -> dict[str, int]:
        return {"weights": self.weights, "kv_cache": self.kv_cache, "recurrent_state": self.recurrent_state,
                "compute": self.compute, "output": self.output_buffer, "checkpoints": self.checkpoints}

    def offloaded(self, gpu_layers: int) -> int:
        """Layers on the GPU for a ``gpu_layers`` setting (-1: all), as llama.cpp counts:
        the last ones, then the output head as one more."""
        n = self.n_layers + 1
        return n if gpu_layers < 0 else min(gpu_layers, n)

    def gpu_bytes(self, gpu_layers: int) -> int:
        """What goes to the GPU with ``gpu_layers`` of its layers there (llama.cpp puts
        the last layers on the GPU, and the output head once every layer is)."""
        g = self.offloaded(gpu_layers)
        if g == 0:
            return 0
        on_gpu = self.layers[self.n_layers - min(g, self.n_layers):]
        head = g > self.n_layers
        scratch = self.compute if head else self.compute_layers
        return (sum(layer.bytes for layer in on_gpu) + scratch
                + (self.output_weights + self.tied_output if head else 0))

    def ram_bytes(self, gpu_layers: int) -> int:
        """What stays in system memory with ``gpu_layers`` of its layers on the GPU."""
        g = self.offloaded(gpu_layers)
        on_cpu = self.layers[:self.n_layers - min(g, self.n_layers)]
        head = g > self.n_layers
        scratch = (0 if head else self.compute_output) if g else self.compute
        return (self.input_weights + sum(layer.bytes for layer in on_cpu) + scratch + self.output_buffer
                + self.checkpoints + (0 if head else self.output_weights))


def estimate_memory(tensors: Sequence[Any], hparams: Mapping[str, Any], n_vocab: int, shape: ContextShape,
                    *, memory_kind: str = "attention") -> MemoryEstimate:
    """The memory of a model whose header lists ``tensors`` (``TensorInfo``: name,
    nbytes) and ``hparams`` (its ``{arch}.*`` keys, the prefix removed), loaded with a
    context of ``shape``. ``memory_kind``: "attention", "recurrent" or "hybrid"."""
    hp = _Hparams(hparams)
    n_all = min(hp.integer("block_count") or 0, MAX_LAYERS)
    n_layers = max(0, n_all - (hp.integer("nextn_predict_layers") or 0))  # MTP layers are not loaded
    weights = [0] * n_layers
    names: list[set[str]] = [set() for _ in range(n_layers)]
    input_weights = output_weights = embeddings = 0
    has_head = False
    for t in tensors:
        if match := _LAYER.fullmatch(t.name):
            i = int(match.group(1))
            if i < n_layers:
                weights[i] += t.nbytes
                names[i].add(match.group(2))
        elif t.name.startswith(_OUTPUT_TENSOR):
            output_weights += t.nbytes
            has_head = has_head or t.name.startswith("output.")
        else:
            input_weights += t.nbytes
            if t.name.startswith("token_embd."):
                embeddings += t.nbytes

    cells = shape.cells
    rows = max(1, shape.n_seq_max) * (1 + shape.n_rs_seq)
    state_row = (hp.conv_row() + hp.state_row()) * STATE_BYTES
    layers = []
    n_head_max = 0
    for i in range(n_layers):
        recurrent = memory_kind != "attention" and any(n.startswith(_RECURRENT_TENSOR) for n in names[i])
        attends = memory_kind != "recurrent" and hp.head_count_kv(i) != 0 and (
            not names[i] or memory_kind == "attention" or any(n.startswith(_ATTENTION_TENSOR) for n in names[i]))
        if attends:
            n_head_max = max(n_head_max, hp.head_count(i))
        layers.append(Layer(weights=weights[i],
                            kv_cache=cells * hp.kv_width(i) * KV_BYTES if attends else 0,
                            recurrent_state=rows * state_row if recurrent else 0))

    n_embd = hp.integer("embedding_length") or 0
    t = shape.n_ubatch
    activation = n_embd * t * FLOAT_BYTES
    kv_cells = cells if n_head_max else 0
    if shape.flash_attn:
        attention = kv_cells * t * KV_BYTES
    else:
        attention = (n_head_max + 1) * kv_cells * t * FLOAT_BYTES  # the scores, and the mask beside them
    n_ff = hp.ffn_width()
    compute_layers = max(attention + _ATTENTION_EXTRA_ROWS * activation, _FFN_ROWS * n_ff * t * FLOAT_BYTES)
    n_outputs = min(t, shape.n_batch)
    compute_output = n_vocab * n_outputs * FLOAT_BYTES + _OUTPUT_EXTRA_ROWS * activation
    recurrent_state = sum(layer.recurrent_state for layer in layers)
    one_state = recurrent_state // (1 + shape.n_rs_seq) if recurrent_state else 0
    checkpoints = min((KEPT_CHECKPOINTS_MOST + 1) * one_state, KEPT_CHECKPOINT_BYTES + one_state)
    return MemoryEstimate(
        layers=tuple(layers), input_weights=input_weights, output_weights=output_weights,
        tied_output=0 if has_head else embeddings, compute_layers=compute_layers, compute_output=compute_output,
        output_buffer=n_vocab * max(1, shape.n_seq_max) * FLOAT_BYTES, checkpoints=checkpoints, shape=shape)


def windowed(hparams: Mapping[str, Any]) -> bool:
    """Whether the model attends through a sliding window (a size in
    ``attention.sliding_window``; a hostile value is none)."""
    return bool(_size(hparams.get("attention.sliding_window")))


def _size(value: Any) -> int | None:
    """A size from a header: a whole number from 0 up (a bool, a float, a negative or an
    absurd number from a hostile file is no size; llama.cpp reads these as 32 bits)."""
    return value if type(value) is int and 0 <= value < 1 << 32 else None


class _Hparams:
    """A model's hyperparameters as llama.cpp reads them: a per-layer key may be one
    number or an array of one per layer; absent keys take llama.cpp's defaults."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values

    def integer(self, key: str) -> int | None:
        return _size(self.values.get(key))

    def per_layer(self, key: str, i: int) -> int | None:
        value = self.values.get(key)
        if isinstance(value, list):
            value = value[i] if i < len(value) else None
        return _size(value)

    def head_count(self, i: int) -> int:
        return self.per_layer("attention.head_count", i) or 0

    def head_count_kv(self, i: int) -> int:
        kv = self.per_layer("attention.head_count_kv", i)
        return self.head_count(i) if kv is None else kv

    def kv_width(self, i: int) -> int:
        """K and V widths of layer ``i`` together (llama.cpp's n_embd_k_gqa + n_embd_v_gqa)."""
        rank = self.integer("attention.kv_lora_rank")
        if rank:  # multi-head latent attention caches the compressed KV and the rope part
            return rank + (self.integer("rope.dimension_count") or 0)
        n_head, n_kv = self.head_count(i), self.head_count_kv(i)
        n_embd = self.integer("embedding_length") or 0
        per_head = n_embd // n_head if n_head else 0
        k = self.integer("attention.key_length") or per_head
        v = self.integer("attention.value_length") or per_head
        return n_kv * (k + v)

    def conv_row(self) -> int:
        """llama.cpp's n_embd_r: the rows a recurrent layer's convolution keeps."""
        n_embd = self.integer("embedding_length") or 0
        if self.integer("wkv.head_size"):
            return (self.integer("token_shift_count") or 2) * n_embd
        if l_cache := self.integer("shortconv.l_cache"):
            return n_embd * (l_cache - 1)
        d_conv = self.integer("ssm.conv_kernel") or 0
        inner = (self.integer("ssm.inner_size") or 0) + 2 * (self.integer("ssm.group_count") or 0) * (
            self.integer("ssm.state_size") or 0)
        return max(0, d_conv - 1) * inner

    def state_row(self) -> int:
        """llama.cpp's n_embd_s: a recurrent layer's state."""
        if head := self.integer("wkv.head_size"):
            return (self.integer("embedding_length") or 0) * head
        return (self.integer("ssm.state_size") or 0) * (self.integer("ssm.inner_size") or 0)

    def ffn_width(self) -> int:
        widths = self.values.get("feed_forward_length")
        widest = max((_size(w) or 0 for w in widths), default=0) if isinstance(widths, list) else (
            _size(widths) or 0)
        experts = (self.integer("expert_used_count") or 0) * (self.integer("expert_feed_forward_length") or 0)
        return max(widest, experts)
