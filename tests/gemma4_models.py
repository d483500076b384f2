"""Tiny random-weight Gemma 4 targets (llama.cpp ``gemma4``) and their assistant drafters
(``gemma4-assistant``), written with the ``gguf`` package as llama.cpp's loader reads them
(``src/models/gemma4.cpp`` and ``gemma4-assistant.cpp`` in the vendored source).

The target: sliding-window layers with a global one every ``global_every``-th and always
last (Gemma 4's 5:1 pattern), global layers with wider heads, fewer KV heads and
proportional RoPE (``rope_freqs``: a quarter of the pairs rotate), q/k norms and an RMS
norm on V, post-attention and post-FFN norms, a GELU-gated FFN, a per-layer output scale
and logit soft-capping, the token embedding scaled by sqrt(n_embd) on the way in. Two
departures from Google's files, for tests: the output matrix is its own (a tied head
echoes the last token back), and no per-layer embeddings or experts (E2B/E4B and 26B-A4B
have them; 31B has neither). Vocabulary and chat template: ``vocab_from``'s, key by key.

Every block's output joins the residual through its post-norm, so the norm's weight is
its gain: ``mixer_gain`` and ``ffn_gain``. With the default gains greedy text is varied;
with GEMMA4_QUIET the trunk is quiet (each block adds little to the token's embedding)
and its next token is mostly what its output matrix makes of the current token alone.

The assistant (``write_gemma4_assistant``) is what llama.cpp drives with ``--spec-type
draft-mtp``: it keeps no KV of its own but reads the target's (its sliding layers the
target's last sliding layer, its global layer the target's last layer), takes the
target's token embedding (through ``ctx_other``) and its last hidden row, and carries
its own tied head. This one is built to agree with a quiet target part of the time:
``nextn.pre_projection`` passes the token's embedding through to the first n_embd
channels of its wider row, its head's rows there are the target's output rows, and its
blocks are quiet; ``noise`` blurs the copy. Its guess is then the target's guess for the
token after the one it was given: right part of the time (chained drafts too, each from
the token drafted before).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from gguf_arrays import read_gguf, write_gguf


@dataclass(frozen=True)
class Gemma4Shape:
    """Sizes of a generated Gemma 4 target."""

    n_embd: int = 64
    n_layer: int = 4
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2          # sliding-window layers
    n_head_kv_global: int = 1   # global layers
    head_dim: int = 16          # sliding-window layers
    head_dim_global: int = 32   # global layers
    global_every: int = 6       # Gemma 4: five sliding layers, then a global one; the last is always global
    sliding_window: int = 32
    n_ctx: int = 8192
    rope_fraction: float = 0.25  # of a global head's pairs that rotate (proportional RoPE)
    softcap: float = 30.0       # final_logit_softcapping (0: none)
    logit_std: float = 3.0      # spread of the logits over the vocabulary
    mixer_gain: float = 1.5     # post-attention norm weight: an attention block's output in the residual
    ffn_gain: float = 1.0       # post-FFN norm weight

    def __post_init__(self) -> None:
        if self.n_layer < 2:
            raise ValueError("Gemma4Shape: at least 2 layers (the assistant reads the last sliding and the last layer)")
        if self.global_every < 2:
            raise ValueError("Gemma4Shape: global_every must be at least 2 (layer n_layer - 2 slides)")
        for whole, part, what in ((self.n_head, self.n_head_kv, "n_head by n_head_kv"),
                                  (self.n_head, self.n_head_kv_global, "n_head by n_head_kv_global")):
            if part <= 0 or whole % part:
                raise ValueError(f"Gemma4Shape: {what} must divide evenly ({whole} / {part})")
        if self.head_dim % 2 or self.head_dim_global % 2:
            raise ValueError("Gemma4Shape: head sizes must be even (RoPE turns pairs)")

    def is_swa(self, i: int) -> bool:
        return (self.n_layer - 1 - i) % self.global_every != 0

    @property
    def rope_pairs(self) -> int:  # rotated pairs of a global head
        return max(1, int(self.head_dim_global * self.rope_fraction / 2))


# A target whose assistant agrees with it part of the time: each block adds little to the
# token's embedding (a twentieth of its size or less), so its next token is the one its
# output matrix makes of the current token alone at about three positions in four; the
# context decides the rest. (Gemma's post-norms set a block's output size exactly: 0.1
# already halves that share on the demo's 49k vocabulary.)
GEMMA4_QUIET = {"mixer_gain": 0.05, "ffn_gain": 0.025}


def _matrix(rng: np.random.Generator, rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
    """rows x cols (ggml {cols, rows}): keeps a unit-RMS input at unit RMS, times ``gain``."""
    return (rng.standard_normal((rows, cols)) * (gain / math.sqrt(cols))).astype(np.float32)


def _rope_freqs(head_dim: int, pairs: int) -> np.ndarray:
    # Proportional RoPE as llama.cpp's converter writes it: rotated pairs keep their
    # frequency, the rest get a factor of 1e30 (they do not turn).
    return np.array([1.0] * pairs + [1e30] * (head_dim // 2 - pairs), dtype=np.float32)


def gemma4_keys(s: Gemma4Shape) -> dict[str, Any]:
    swa = [s.is_swa(i) for i in range(s.n_layer)]
    return {
        "context_length": s.n_ctx, "embedding_length": s.n_embd, "block_count": s.n_layer,
        "feed_forward_length": s.n_ff, "attention.head_count": s.n_head,
        "attention.head_count_kv": [s.n_head_kv if w else s.n_head_kv_global for w in swa],
        "attention.key_length": s.head_dim_global, "attention.value_length": s.head_dim_global,
        "attention.key_length_swa": s.head_dim, "attention.value_length_swa": s.head_dim,
        "attention.layer_norm_rms_epsilon": 1e-6, "attention.sliding_window": s.sliding_window,
        "attention.sliding_window_pattern": swa, "attention.shared_kv_layers": 0,
        "embedding_length_per_layer_input": 0,
        "rope.freq_base": 1_000_000.0, "rope.freq_base_swa": 10_000.0,
        "rope.dimension_count": s.head_dim_global, "rope.dimension_count_swa": s.head_dim,
        "final_logit_softcapping": float(s.softcap) if s.softcap else None,
    }


def write_gemma4_model(path: str | Path, *, vocab_from: str | Path, seed: int = 0, ftype: str = "Q8_0",
                       drop: Iterable[str] = (), keys: dict[str, Any] | None = None,
                       retype: dict[str, Any] | None = None, **shape: Any) -> Path:
    """Write a tiny random-weight Gemma 4 target to ``path`` with ``vocab_from``'s tokenizer
    and ``shape``'s sizes (fields of :class:`Gemma4Shape`; ``**GEMMA4_QUIET`` for a target
    its assistant agrees with); returns the path. For hostile tests: ``drop`` leaves out
    tensors by name, ``keys`` sets ``gemma4.KEY`` values (None: left out), ``retype`` stores
    tensors by name as that numpy type."""
    s = Gemma4Shape(**shape)
    tokenizer = read_gguf(vocab_from).tokenizer()
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"][0])
    rng = np.random.default_rng(seed)
    n, t = s.n_embd, {}
    # Rows of RMS 1/sqrt(n_embd): scaled by sqrt(n_embd) on the way in, unit RMS in the residual.
    t["token_embd.weight"] = (rng.standard_normal((n_vocab, n)) / math.sqrt(n)).astype(np.float32)
    t["rope_freqs.weight"] = _rope_freqs(s.head_dim_global, s.rope_pairs)
    for i in range(s.n_layer):
        hd = s.head_dim if s.is_swa(i) else s.head_dim_global
        kv = s.n_head_kv if s.is_swa(i) else s.n_head_kv_global
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = np.ones(n, np.float32)
        t[b + "attn_q.weight"] = _matrix(rng, s.n_head * hd, n)
        t[b + "attn_k.weight"] = _matrix(rng, kv * hd, n)
        t[b + "attn_v.weight"] = _matrix(rng, kv * hd, n)
        t[b + "attn_output.weight"] = _matrix(rng, n, s.n_head * hd)
        t[b + "attn_q_norm.weight"] = np.ones(hd, np.float32)
        t[b + "attn_k_norm.weight"] = np.ones(hd, np.float32)
        t[b + "post_attention_norm.weight"] = np.full(n, s.mixer_gain, np.float32)
        t[b + "ffn_norm.weight"] = np.ones(n, np.float32)
        t[b + "ffn_gate.weight"] = _matrix(rng, s.n_ff, n)
        t[b + "ffn_up.weight"] = _matrix(rng, s.n_ff, n)
        t[b + "ffn_down.weight"] = _matrix(rng, n, s.n_ff)
        t[b + "post_ffw_norm.weight"] = np.full(n, s.ffn_gain, np.float32)
        t[b + "layer_output_scale.weight"] = np.ones(1, np.float32)
    t["output_norm.weight"] = np.ones(n, np.float32)
    # Untied: a head equal to the embedding scores the token just read highest.
    t["output.weight"] = (rng.standard_normal((n_vocab, n)) * (s.logit_std / math.sqrt(n))).astype(np.float32)
    for name in drop:
        t.pop(name, None)
    values = {**gemma4_keys(s), **(keys or {})}
    return write_gguf(path, "gemma4", "tandem-test-gemma4", values, tokenizer, t, ftype=ftype, retype=retype)


def write_gemma4_assistant(target: str | Path, path: str | Path, *, noise: float = 0.05, seed: int = 0,
                           n_embd: int | None = None, n_layer: int = 2, ftype: str = "Q8_0",
                           drop: Iterable[str] = (), keys: dict[str, Any] | None = None,
                           retype: dict[str, Any] | None = None) -> Path:
    """Write a Gemma 4 assistant for the generated Gemma 4 ``target`` to ``path``: ``n_layer``
    blocks (the last global, the others sliding), ``n_embd`` wide (default 1.5 times the
    target's: llama.cpp refuses an assistant as wide as its target), its head derived from
    the target's output matrix so that it agrees with a quiet (GEMMA4_QUIET) target part of
    the time, ``noise`` blurring the copy. ``drop``/``keys``/``retype`` as for the target."""
    tgt = read_gguf(target)
    if tgt.arch != "gemma4":
        raise ValueError(f"{Path(target).name}: a gemma4 target is needed, not {tgt.arch!r}")
    nb = int(tgt.value("embedding_length"))
    n = n_embd or nb + max(32, nb // 2)
    if n == nb:
        raise ValueError("the assistant's width must differ from the target's (llama.cpp reads it as the target's)")
    n_head = int(tgt.value("attention.head_count"))
    hd_swa, hd_global = int(tgt.value("attention.key_length_swa")), int(tgt.value("attention.key_length"))
    tgt_swa = tgt.value("attention.sliding_window_pattern")
    tgt_kv = tgt.value("attention.head_count_kv")
    kv_swa, kv_global = tgt_kv[len(tgt_swa) - 2], tgt_kv[len(tgt_swa) - 1]
    swa = [i < n_layer - 1 for i in range(n_layer)]
    n_ff = 2 * n
    rng = np.random.default_rng(seed + 1)
    w_out = tgt.array("output.weight")  # (n_vocab, nb)
    n_vocab = w_out.shape[0]

    t: dict[str, np.ndarray] = {}
    # Its head (also its "token embedding": llama.cpp ties them, and reads the input
    # embedding from the target): the target's output rows over the token channels,
    # a little noise over the rest.
    head = np.zeros((n_vocab, n), np.float32)
    head[:, :nb] = w_out
    head[:, nb:] = rng.standard_normal((n_vocab, n - nb)) * (noise * float(w_out.std()))
    t["token_embd.weight"] = head
    t["output_norm.weight"] = np.ones(n, np.float32)
    # [token embedding (scaled to unit RMS) | target's last hidden row] -> n channels:
    # the embedding through to the first nb, blurred by noise; the hidden row, faint, to the rest.
    pre = _matrix(rng, n, 2 * nb, noise)
    pre[:nb, :nb] += np.eye(nb, dtype=np.float32)
    t["nextn.pre_projection.weight"] = pre
    # Its row back to the target's width, for the next chained draft: the token channels.
    post = _matrix(rng, nb, n, noise)
    post[:, :nb] += np.eye(nb, dtype=np.float32)
    t["nextn.post_projection.weight"] = post
    t["rope_freqs.weight"] = tgt.array("rope_freqs.weight")  # its global layer turns as the target's does
    quiet = noise / 2
    for i in range(n_layer):
        hd = hd_swa if swa[i] else hd_global
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = np.ones(n, np.float32)
        t[b + "attn_q.weight"] = _matrix(rng, n_head * hd, n)
        t[b + "attn_output.weight"] = _matrix(rng, n, n_head * hd)
        t[b + "attn_q_norm.weight"] = np.ones(hd, np.float32)
        t[b + "post_attention_norm.weight"] = np.full(n, quiet, np.float32)
        t[b + "layer_output_scale.weight"] = np.ones(1, np.float32)
        t[b + "ffn_norm.weight"] = np.ones(n, np.float32)
        t[b + "ffn_gate.weight"] = _matrix(rng, n_ff, n)
        t[b + "ffn_up.weight"] = _matrix(rng, n_ff, n)
        t[b + "ffn_down.weight"] = _matrix(rng, n, n_ff)
        t[b + "post_ffw_norm.weight"] = np.full(n, quiet, np.float32)
    for name in drop:
        t.pop(name, None)
    values: dict[str, Any] = {
        "context_length": int(tgt.value("context_length")), "embedding_length": n, "embedding_length_out": nb,
        "block_count": n_layer, "nextn_predict_layers": n_layer, "feed_forward_length": n_ff,
        "attention.head_count": n_head, "attention.head_count_kv": [kv_swa if w else kv_global for w in swa],
        "attention.key_length": hd_global, "attention.value_length": hd_global,
        "attention.key_length_swa": hd_swa, "attention.value_length_swa": hd_swa,
        "attention.layer_norm_rms_epsilon": 1e-6,
        "attention.sliding_window": int(tgt.value("attention.sliding_window")),
        "attention.sliding_window_pattern": swa, "attention.shared_kv_layers": 0,
        "embedding_length_per_layer_input": 0,
        "rope.freq_base": float(tgt.value("rope.freq_base")),
        "rope.freq_base_swa": float(tgt.value("rope.freq_base_swa")),
        "rope.dimension_count": hd_global, "rope.dimension_count_swa": hd_swa,
        **(keys or {}),
    }
    return write_gguf(path, "gemma4-assistant", "tandem-test-gemma4-assistant", values, tgt.tokenizer(), t,
                      ftype=ftype, retype=retype)
