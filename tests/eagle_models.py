"""Tiny EAGLE-3 drafter files for a generated target (tests/recurrent_models.py), made to
agree with it part of the time, for ``app/backends/llama/eagle_head.py``'s tests and for
``tools/make_recurrent_model.py --eagle3``.

An EAGLE-3 drafter's entry at position P reads (token P + 1, g) where g is its ``fc``
projection of three of the target's layer inputs at P, and guesses token P + 2. The
targets written with MTP_SHAPE have a quiet trunk: their next token is mostly what their
output matrix makes of the current token alone. So this drafter carries token P + 1
through: its attention's queries and keys are the token's own embedding, scaled, so each
entry attends (nearly) to the entries of its own token, whose values are that embedding;
``fc`` and the feed-forward add a little noise (``noise``); it has no output matrix of
its own and borrows the target's, as EAGLE-3 files for Llama 3.1 8B do. Its guess is
then the target's guess for the token after its own token: right part of the time.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from recurrent_models import _tokenizer_fields

N_HEAD = 4
ATTENTION_SCALE = 3.0  # queries and keys: the embedding times this (self-attention wins by far)


def write_eagle3_drafter(target: str | Path, path: str | Path, *, layers: Sequence[int] | None = None,
                         noise: float = 0.15, seed: int = 0, keys: dict[str, Any] | None = None,
                         width: int | None = None, d2t: np.ndarray | None = None,
                         retype: dict[str, Any] | None = None) -> Path:
    """Write an EAGLE-3 drafter for the generated ``target`` to ``path``: it reads
    ``layers`` of the target (default: the first, the middle one and the last, normed
    row); ``keys`` overrides ``eagle3.*`` values (None: left out) and ``width`` its own
    rows' width (default the target's), for hostile tests; ``d2t``: a vocabulary map to
    carry (as given: int64 is llama.cpp's type); ``retype`` stores tensors by name as
    that numpy type (a drafter that lies)."""
    import gguf

    from app.engine.gguf.meta import read_metadata

    meta = read_metadata(target)
    target_width, n_layer = meta.n_embd, meta.n_layer
    n_embd = width or target_width
    reads = list(layers) if layers is not None else [0, n_layer // 2, n_layer]
    n_ff, head_dim = 2 * n_embd, n_embd // N_HEAD
    rng = np.random.default_rng(seed)

    def small(rows: int, cols: int, gain: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * (gain / math.sqrt(cols))).astype(np.float32)

    eye = np.eye(n_embd, dtype=np.float32)
    zeros = np.zeros((n_embd, n_embd), dtype=np.float32)
    token_half = np.concatenate([eye, zeros], axis=1)  # [embedding | target rows] -> the embedding
    tensors = {
        "fc.weight": small(n_embd, len(reads) * target_width, noise),
        "output_norm.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.attn_norm.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.attn_norm_2.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.attn_q.weight": ATTENTION_SCALE * token_half,
        "blk.0.attn_k.weight": ATTENTION_SCALE * token_half,
        "blk.0.attn_v.weight": token_half + small(n_embd, 2 * n_embd, noise),
        "blk.0.attn_output.weight": eye,
        "blk.0.ffn_norm.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.ffn_gate.weight": small(n_ff, n_embd, 1.0),
        "blk.0.ffn_up.weight": small(n_ff, n_embd, noise),
        "blk.0.ffn_down.weight": small(n_embd, n_ff, noise),
    }
    values: dict[str, Any] = {
        "context_length": meta.context_length or 8192, "embedding_length": n_embd, "block_count": 1,
        "feed_forward_length": n_ff, "attention.head_count": N_HEAD, "attention.head_count_kv": N_HEAD,
        "attention.key_length": head_dim, "attention.value_length": head_dim,
        "attention.layer_norm_rms_epsilon": 1e-5, "target_layers": reads, "target_hidden_size": target_width,
    }
    values.update(keys or {})
    writer = gguf.GGUFWriter(Path(path), "eagle3")
    writer.add_name("tandem-test-eagle3")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    V = gguf.GGUFValueType
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, list):
            writer.add_key_value(f"eagle3.{key}", value, V.ARRAY, V.INT32)
        elif isinstance(value, float):
            writer.add_key_value(f"eagle3.{key}", value, V.FLOAT32)
        else:
            writer.add_key_value(f"eagle3.{key}", value, V.UINT32)
    for key, (value, vtype, sub) in _tokenizer_fields(Path(target)).items():
        writer.add_key_value(key, value, vtype, sub) if sub is not None else writer.add_key_value(key, value, vtype)
    if d2t is not None:
        tensors["d2t"] = d2t
    for name, data in tensors.items():
        writer.add_tensor(name, data.astype(retype[name]) if retype and name in retype else data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
