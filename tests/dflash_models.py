"""Tiny DFlash drafters (llama.cpp ``dflash``) for a generated target, made to agree with
it part of the time, for ``--spec-type draft-dflash`` and Tandem's tests.

What llama.cpp reads (``src/models/dflash.cpp``, ``common/speculative.cpp``
``common_speculative_impl_draft_dflash``): ``dflash.target_layers`` names target layers
whose *inputs* the target hands over (``llama_set_embeddings_layer_inp``: llama, qwen3,
qwen35, gemma4, lfm2, nemotron_h ... expose them, see ``t_layer_inp`` in ``src/models``);
``fc`` fuses those rows (layers x the target's width: the drafter's ``embedding_length``
must equal the target's) and writes each position's K/V into the drafter's cache. A draft
is one decode of a block ``[last token, mask, mask, ...]`` (``dflash.block_size`` long,
``tokenizer.ggml.mask_token_id``) with non-causal attention; position i's logits are the
guess for the token i places after the last one. Without ``token_embd``/``output`` of its
own, the drafter borrows the target's (``ctx_other``), as z-lab's DFlash files do.

A random drafter never agrees with a random target. This one is built to, against a
quiet target (tests/gemma4_models.GEMMA4_QUIET, or recurrent_models.MTP_SHAPE): its one
block's sliding window of 2 (``attention.sliding_window``) lets the first mask see only
the last token and itself; its queries and keys are the row itself, the query negated, so
a mask scores itself (and every other mask) far below the last token; its values and
output pass that token's row through, scaled up past the mask's own embedding in the
residual (``1 / noise``). Read through the target's output matrix, the first guess is
then the quiet target's guess after that token: right most of the time. The later masks
see only masks, so their guesses are wrong: with the default ``block_size`` of 3, two
tokens a round are drafted and the first is kept most of the time.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from gguf_arrays import V, read_gguf, write_gguf

HEAD_DIM = 16
QUERY_NORM = 2.0  # sharpens the last token's lead over the masks


def write_dflash_drafter(target: str | Path, path: str | Path, *, layers: Sequence[int] | None = None,
                         block_size: int = 3, noise: float = 0.1, window: int = 2, mask_token: int | None = None,
                         seed: int = 0, ftype: str = "F32", drop: Iterable[str] = (),
                         keys: dict[str, Any] | None = None, retype: dict[str, Any] | None = None) -> Path:
    """Write a DFlash drafter for the generated ``target`` to ``path``: it reads the inputs
    of target ``layers`` (default: three spread over the stack, not the first), drafts
    ``block_size - 1`` tokens a round, its first guess blurred by ``noise``; ``mask_token``
    (default: the vocabulary's unknown or padding token, else 0) fills a block. For hostile
    tests: ``drop`` leaves out tensors by name, ``keys`` sets ``dflash.KEY`` values (None:
    left out), ``retype`` stores tensors by name as that numpy type."""
    tgt = read_gguf(target)
    n = int(tgt.value("embedding_length"))
    n_layer = int(tgt.value("block_count")) - int(tgt.value("nextn_predict_layers", 0) or 0)
    if n % HEAD_DIM:
        raise ValueError(f"the target's width {n} is not a multiple of {HEAD_DIM}")
    reads = list(layers) if layers is not None else sorted({max(1, round(k * (n_layer - 1) / 3)) for k in (1, 2, 3)})
    n_head, n_ff = n // HEAD_DIM, 2 * n
    tokenizer = dict(tgt.tokenizer())
    if mask_token is None:
        named = ("tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id")
        mask_token = next((tokenizer[k][0] for k in named if k in tokenizer), 0)
    tokenizer["tokenizer.ggml.mask_token_id"] = (int(mask_token), V.UINT32, None)
    rng = np.random.default_rng(seed + 2)

    def matrix(rows: int, cols: int, gain: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * (gain / math.sqrt(cols))).astype(np.float32)

    eye = np.eye(n, dtype=np.float32)
    rope_pairs = max(1, HEAD_DIM // 8)  # a quarter of the head turns with position (Gemma 4's proportional RoPE)
    t: dict[str, np.ndarray] = {
        "fc.weight": matrix(n, len(reads) * n, 1.0),
        "enc.output_norm.weight": np.ones(n, np.float32),
        "rope_freqs.weight": np.array([1.0] * rope_pairs + [1e30] * (HEAD_DIM // 2 - rope_pairs), np.float32),
        "blk.0.attn_norm.weight": np.ones(n, np.float32),
        "blk.0.attn_q.weight": -eye,
        "blk.0.attn_k.weight": eye.copy(),
        "blk.0.attn_v.weight": eye.copy(),
        "blk.0.attn_output.weight": eye / max(noise, 1e-3),
        "blk.0.attn_q_norm.weight": np.full(HEAD_DIM, QUERY_NORM, np.float32),
        "blk.0.attn_k_norm.weight": np.ones(HEAD_DIM, np.float32),
        "blk.0.ffn_norm.weight": np.ones(n, np.float32),
        "blk.0.ffn_gate.weight": matrix(n_ff, n, 1.0),
        "blk.0.ffn_up.weight": matrix(n_ff, n, 1.0),
        "blk.0.ffn_down.weight": matrix(n, n_ff, 1.0),
        "output_norm.weight": np.ones(n, np.float32),
    }
    for name in drop:
        t.pop(name, None)
    gemma = tgt.arch == "gemma4"
    values: dict[str, Any] = {
        "context_length": int(tgt.value("context_length", 8192)), "embedding_length": n, "block_count": 1,
        "feed_forward_length": n_ff, "attention.head_count": n_head, "attention.head_count_kv": n_head,
        "attention.key_length": HEAD_DIM, "attention.value_length": HEAD_DIM,
        "attention.layer_norm_rms_epsilon": 1e-6, "rope.dimension_count": HEAD_DIM, "rope.freq_base": 10_000.0,
        "attention.sliding_window": window, "attention.sliding_window_pattern": [True],
        "target_layers": reads, "block_size": block_size,
        # A Gemma target scales its embedding by sqrt(n_embd) on the way in; so does its drafter.
        "embedding_scale": float(math.sqrt(n)) if gemma else None,
        "hidden_activation": "gelu_pytorch_tanh" if gemma else None,
        **(keys or {}),
    }
    return write_gguf(path, "dflash", "tandem-test-dflash", values, tokenizer, t, ftype=ftype, retype=retype)
