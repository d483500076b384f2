"""Tiny random-weight GGUF models of llama.cpp's recurrent and hybrid architectures.

Many 2026 models keep a recurrent state beside (or instead of) the KV cache: Mamba,
LFM2, Granite 4.0-H, Qwen 3.5, Jamba, Falcon-H1, Nemotron-H. None of them is small
enough to download in a test, so these are written here with the ``gguf`` package:
each architecture's tensors and metadata exactly as llama.cpp's loader reads them
(``src/models/<arch>.cpp``, ``load_arch_hparams`` / ``load_arch_tensors`` in the
vendored source), a small width (64) and a few layers, and the demo pair's tokenizer
copied key by key, so that prompts tokenize as with the demo models and the chat
template renders.

The weights are random but scaled so that greedy decoding makes *varied* text that
depends on more than the last few tokens: each mixer's output joins the residual
stream at about the size of the token embedding (the state matters), the recurrent
layers keep slowly decaying channels (long memory), and the output matrix is its
own, not the embedding (a tied head echoes the last token back), with logits spread
a few units wide (neither flat nor one token taking all). ``tests/models/
test_recurrent_models.py`` checks each of these properties.

``write_recurrent_model`` writes a target (Q8_0 matrices: batch-invariant on CPU, as
the exactness tests need); ``write_draft_copy`` re-encodes it with llama.cpp's
quantizer (Q4_0), the natural draft: random weights give no other model to agree with.
The Q4_0 copy agrees with the target's greedy token at 25-65% of positions (rejections
aplenty, which is what rollback tests want). For speed measurements, an F16 target and
its Q8_0 copy agree at 85-95%, like a real pair, but an F16 target's batched logits are
not bit-identical to its single-token ones. ``recurrent_pairs`` is the session fixture
with one Q8_0/Q4_0 pair per architecture; ``tools/make_recurrent_model.py`` writes one
from the command line (``--ftype F16 --draft-ftype Q8_0`` for measurements).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# In a hybrid's stack every third layer attends (2, 5, 8, ...); the others keep a
# recurrent state. Qwen 3.5 says the same with its full_attention_interval.
ATTENTION_INTERVAL = 3


@dataclass(frozen=True)
class Shape:
    """Sizes of a generated model; every architecture reads what it needs of them."""

    n_embd: int = 64
    n_layer: int = 4
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    n_ctx: int = 8192        # the context it claims to be trained on (llama.cpp's n_ctx_train)
    d_state: int = 16        # SSM state per channel (Mamba) / per head (Mamba-2, gated delta net)
    d_conv: int = 4          # causal convolution width (the short conv's cache is d_conv - 1)
    ssm_heads: int = 8       # Mamba-2 heads; Qwen 3.5 has half as many value heads
    ssm_groups: int = 1      # Mamba-2 groups of B and C; Qwen 3.5's key heads (dividing its value heads)
    logit_std: float = 3.0   # spread of the logits over the vocabulary
    mixer_gain: float = 1.5  # a mixer's output against the token embedding in the residual
    ffn_gain: float = 1.0    # a feed-forward block's output, likewise
    nextn: int = 0           # MTP ("NextN") blocks after the trunk, for the architectures that have them
    head_noise: float = 0.6  # how far an MTP head strays from the trunk's own guess (0: a copy)

    def __post_init__(self) -> None:
        # What llama.cpp asserts of these sizes (at load or at the first decode), said first.
        for whole, part, what in ((self.n_embd, self.n_head, "n_embd by n_head"),
                                  (self.n_head, self.n_head_kv, "n_head by n_head_kv"),
                                  (self.d_inner, self.ssm_heads, "d_inner (2 n_embd) by ssm_heads"),
                                  (self.d_inner, self.ssm_groups, "d_inner (2 n_embd) by ssm_groups"),
                                  (self.ssm_heads // 2, self.ssm_groups, "ssm_heads / 2 by ssm_groups")):
            if part <= 0 or whole % part:
                raise ValueError(f"Shape: {what} must divide evenly ({whole} / {part})")
        if self.d_conv < 2:
            raise ValueError(f"Shape: d_conv must be at least 2, not {self.d_conv}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def d_inner(self) -> int:  # Mamba's expansion factor of 2, the only one llama.cpp takes
        return 2 * self.n_embd

    @property
    def dt_rank(self) -> int:  # Mamba-1's default: ceil(n_embd / 16)
        return math.ceil(self.n_embd / 16)


@dataclass(frozen=True)
class Tensor:
    """One tensor to write: its name, llama.cpp's shape (ne0 first) and how to fill it."""

    name: str
    shape: tuple[int, ...]
    init: str                 # see _fill
    gain: float = 1.0


@dataclass(frozen=True)
class Architecture:
    """One llama.cpp architecture this module writes."""

    name: str                 # general.architecture
    memory: str               # "recurrent" (llm_arch_is_recurrent) or "hybrid" (llm_arch_is_hybrid)
    rs_rollback: bool         # llm_arch_supports_rs_rollback: n_rs_seq > 0 honoured
    build: Callable[[Shape], tuple[dict[str, Any], list[Tensor]]]
    note: str = ""


# -- the pieces architectures share -------------------------------------------------

def _common(s: Shape, tensors: list[Tensor], *, output_norm: str = "output_norm.weight") -> None:
    tensors.insert(0, Tensor("token_embd.weight", (s.n_embd, -1), "embedding"))
    tensors.append(Tensor(output_norm, (s.n_embd,), "ones"))
    # Untied: a head equal to the embedding scores the token just read highest (it is
    # in the residual stream), and greedy text repeats one token.
    tensors.append(Tensor("output.weight", (s.n_embd, -1), "output"))


def _attention(s: Shape, i: int, *, q_mult: int = 1, norms: bool = False) -> list[Tensor]:
    hd, kv = s.head_dim, s.head_dim * s.n_head_kv
    out = [Tensor(f"blk.{i}.attn_q.weight", (s.n_embd, hd * s.n_head * q_mult), "matrix"),
           Tensor(f"blk.{i}.attn_k.weight", (s.n_embd, kv), "matrix"),
           Tensor(f"blk.{i}.attn_v.weight", (s.n_embd, kv), "matrix"),
           Tensor(f"blk.{i}.attn_output.weight", (hd * s.n_head, s.n_embd), "matrix", s.mixer_gain)]
    if norms:
        out += [Tensor(f"blk.{i}.attn_q_norm.weight", (hd,), "ones"),
                Tensor(f"blk.{i}.attn_k_norm.weight", (hd,), "ones")]
    return out


def _ffn(s: Shape, i: int, *, gate: bool = True, norm: str | None = "ffn_norm.weight",
         gain: float | None = None) -> list[Tensor]:
    """A feed-forward block whose output joins the residual at ``gain`` (default ``ffn_gain``)."""
    out = [Tensor(f"blk.{i}.{norm}", (s.n_embd,), "ones")] if norm else []
    if gate:
        out.append(Tensor(f"blk.{i}.ffn_gate.weight", (s.n_embd, s.n_ff), "matrix"))
    return out + [Tensor(f"blk.{i}.ffn_up.weight", (s.n_embd, s.n_ff), "matrix"),
                  Tensor(f"blk.{i}.ffn_down.weight", (s.n_ff, s.n_embd), "matrix", s.ffn_gain if gain is None else gain)]


def _mamba1(s: Shape, i: int, *, bc_norms: bool = False) -> list[Tensor]:
    di, ds, r = s.d_inner, s.d_state, s.dt_rank
    out = [Tensor(f"blk.{i}.ssm_in.weight", (s.n_embd, 2 * di), "matrix"),
           Tensor(f"blk.{i}.ssm_conv1d.weight", (s.d_conv, di), "conv"),
           Tensor(f"blk.{i}.ssm_conv1d.bias", (di,), "zeros"),
           Tensor(f"blk.{i}.ssm_x.weight", (di, r + 2 * ds), "matrix"),
           Tensor(f"blk.{i}.ssm_dt.weight", (r, di), "matrix", 0.5),
           Tensor(f"blk.{i}.ssm_dt.bias", (di,), "dt_bias"),
           Tensor(f"blk.{i}.ssm_a", (ds, di), "mamba1_a"),
           Tensor(f"blk.{i}.ssm_d", (di,), "ones"),
           Tensor(f"blk.{i}.ssm_out.weight", (di, s.n_embd), "matrix", s.mixer_gain)]
    if bc_norms:  # Jamba normalises dt, B and C
        out += [Tensor(f"blk.{i}.ssm_dt_norm.weight", (r,), "ones"),
                Tensor(f"blk.{i}.ssm_b_norm.weight", (ds,), "ones"),
                Tensor(f"blk.{i}.ssm_c_norm.weight", (ds,), "ones")]
    return out


def _mamba2(s: Shape, i: int, *, d_inner: int | None = None) -> list[Tensor]:
    di = d_inner or s.d_inner
    conv = di + 2 * s.ssm_groups * s.d_state
    return [Tensor(f"blk.{i}.ssm_in.weight", (s.n_embd, di + conv + s.ssm_heads), "matrix"),
            Tensor(f"blk.{i}.ssm_conv1d.weight", (s.d_conv, conv), "conv"),
            Tensor(f"blk.{i}.ssm_conv1d.bias", (conv,), "zeros"),
            Tensor(f"blk.{i}.ssm_dt.bias", (s.ssm_heads,), "dt_bias"),
            Tensor(f"blk.{i}.ssm_a", (1, s.ssm_heads), "mamba2_a"),
            Tensor(f"blk.{i}.ssm_d", (1, s.ssm_heads), "ones"),
            Tensor(f"blk.{i}.ssm_norm.weight", (di // s.ssm_groups, s.ssm_groups), "ones"),
            Tensor(f"blk.{i}.ssm_out.weight", (di, s.n_embd), "matrix", s.mixer_gain)]


def _ssm_keys(s: Shape, *, d_inner: int, dt_rank: int, groups: int | None = None) -> dict[str, Any]:
    keys = {"ssm.conv_kernel": s.d_conv, "ssm.inner_size": d_inner, "ssm.state_size": s.d_state,
            "ssm.time_step_rank": dt_rank}
    if groups is not None:
        keys["ssm.group_count"] = groups
    return keys


def _base_keys(s: Shape, **more: Any) -> dict[str, Any]:
    # An MTP block counts in block_count; nextn_predict_layers says how many of the last are heads.
    nextn = {"nextn_predict_layers": s.nextn} if s.nextn else {}
    return {"context_length": s.n_ctx, "embedding_length": s.n_embd, "block_count": s.n_layer + s.nextn,
            "attention.layer_norm_rms_epsilon": 1e-5, **nextn, **more}


def _kv_heads(s: Shape, attends: Callable[[int], bool]) -> list[int]:
    """Per layer: llama.cpp's hybrids mark a recurrent layer by 0 KV heads."""
    return [s.n_head_kv if attends(i) else 0 for i in range(s.n_layer)]


def _nextn(s: Shape, i: int, *, post_norm: str = "post_attention_norm.weight") -> list[Tensor]:
    """One MTP block at index ``i`` (past the trunk), as a Qwen 3.5 or GLM head reads it:
    the next token's embedding and the trunk's last hidden row, normed, concatenated and
    projected back (``eh_proj``), then a full-attention block and the shared output.

    A random head never agrees with a random trunk. This one is built to agree part of
    the time: ``eh_proj`` passes the token's embedding through (its identity half) and the
    block's own mixers are small, so the head guesses what the trunk's output matrix makes
    of that token alone; the trunk adds its context on top, and ``head_noise`` blurs the
    copy. Acceptance lands between the two ends, which is what rejection sampling tests need."""
    return [Tensor(f"blk.{i}.nextn.eh_proj.weight", (2 * s.n_embd, s.n_embd), "eh_proj", s.head_noise),
            Tensor(f"blk.{i}.nextn.enorm.weight", (s.n_embd,), "ones"),
            Tensor(f"blk.{i}.nextn.hnorm.weight", (s.n_embd,), "ones"),
            Tensor(f"blk.{i}.nextn.shared_head_norm.weight", (s.n_embd,), "ones"),
            Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"),
            Tensor(f"blk.{i}.{post_norm}", (s.n_embd,), "ones")]


def _is_attention(i: int) -> bool:
    return i % ATTENTION_INTERVAL == ATTENTION_INTERVAL - 1


# -- the architectures ----------------------------------------------------------------

def _mamba(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    tensors = [t for i in range(s.n_layer)
               for t in [Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"), *_mamba1(s, i)]]
    _common(s, tensors)
    return _base_keys(s, **_ssm_keys(s, d_inner=s.d_inner, dt_rank=s.dt_rank)), tensors


def _mamba2_arch(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    tensors = [t for i in range(s.n_layer)
               for t in [Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"), *_mamba2(s, i)]]
    _common(s, tensors)
    keys = _ssm_keys(s, d_inner=s.d_inner, dt_rank=s.ssm_heads, groups=s.ssm_groups)
    return _base_keys(s, **keys), tensors


def _lfm2(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    tensors: list[Tensor] = []
    for i in range(s.n_layer):
        tensors.append(Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"))
        if _is_attention(i):
            tensors += _attention(s, i, norms=True)
        else:
            tensors += [Tensor(f"blk.{i}.shortconv.conv.weight", (s.d_conv, s.n_embd), "conv"),
                        Tensor(f"blk.{i}.shortconv.in_proj.weight", (s.n_embd, 3 * s.n_embd), "matrix"),
                        Tensor(f"blk.{i}.shortconv.out_proj.weight", (s.n_embd, s.n_embd), "matrix",
                               s.mixer_gain)]
        tensors += _ffn(s, i)
    # LFM2's final norm is stored under the embedding norm's name (llama-arch.cpp says why).
    _common(s, tensors, output_norm="token_embd_norm.weight")
    # shortconv.l_cache is the convolution's width; llama.cpp keeps l_cache - 1 inputs.
    keys = _base_keys(s, feed_forward_length=s.n_ff, **{"attention.head_count": s.n_head,
                      "attention.head_count_kv": _kv_heads(s, _is_attention),
                      "shortconv.l_cache": s.d_conv})
    return keys, tensors


def _granite_hybrid(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    tensors: list[Tensor] = []
    for i in range(s.n_layer):
        tensors.append(Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"))
        tensors += _attention(s, i) if _is_attention(i) else _mamba2(s, i)
        tensors += _ffn(s, i)
    _common(s, tensors)
    keys = _base_keys(s, feed_forward_length=s.n_ff, **{
        "attention.head_count": s.n_head, "attention.head_count_kv": _kv_heads(s, _is_attention),
        "rope.dimension_count": s.head_dim,
        **_ssm_keys(s, d_inner=s.d_inner, dt_rank=s.ssm_heads, groups=s.ssm_groups)})
    return keys, tensors


def _qwen35(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    # Gated delta net: key heads of d_state, value heads of d_state (llama.cpp's state is
    # d_state x d_state per value head), a whole number of value heads per key head.
    k_heads, v_heads = s.ssm_groups, s.ssm_heads // 2
    key_dim, value_dim = s.d_state * k_heads, s.d_state * v_heads
    interval = ATTENTION_INTERVAL  # llama.cpp: layer i attends when (i + 1) % interval == 0
    tensors: list[Tensor] = []
    for i in range(s.n_layer):
        tensors += [Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"),
                    Tensor(f"blk.{i}.post_attention_norm.weight", (s.n_embd,), "ones")]
        if _is_attention(i):
            # The query projection carries a gate of the same size beside it.
            tensors += _attention(s, i, q_mult=2, norms=True)
        else:
            tensors += [Tensor(f"blk.{i}.attn_qkv.weight", (s.n_embd, 2 * key_dim + value_dim), "matrix"),
                        Tensor(f"blk.{i}.attn_gate.weight", (s.n_embd, value_dim), "matrix"),
                        Tensor(f"blk.{i}.ssm_conv1d.weight", (s.d_conv, 2 * key_dim + value_dim), "conv"),
                        Tensor(f"blk.{i}.ssm_dt.bias", (v_heads,), "dt_bias"),
                        Tensor(f"blk.{i}.ssm_a", (v_heads,), "mamba2_a"),
                        Tensor(f"blk.{i}.ssm_beta.weight", (s.n_embd, v_heads), "matrix"),
                        Tensor(f"blk.{i}.ssm_alpha.weight", (s.n_embd, v_heads), "matrix", 0.5),
                        Tensor(f"blk.{i}.ssm_norm.weight", (s.d_state,), "ones"),
                        Tensor(f"blk.{i}.ssm_out.weight", (value_dim, s.n_embd), "matrix", s.mixer_gain)]
        tensors += _ffn(s, i, norm=None)
    quiet = replace(s, mixer_gain=s.mixer_gain * s.head_noise / 4)  # the head's block barely moves it
    for i in range(s.n_layer, s.n_layer + s.nextn):
        tensors += _nextn(s, i) + _attention(quiet, i, q_mult=2, norms=True) + _ffn(s, i, norm=None, gain=quiet.mixer_gain)
    _common(s, tensors)
    rot = s.head_dim
    sections = [rot // 2 - 2 * (rot // 6), rot // 6, rot // 6, 0]  # multimodal RoPE: text uses all
    keys = _base_keys(s, feed_forward_length=s.n_ff, full_attention_interval=interval, **{
        "attention.head_count": s.n_head, "attention.head_count_kv": s.n_head_kv,
        "attention.key_length": s.head_dim, "attention.value_length": s.head_dim,
        "rope.dimension_count": rot, "rope.dimension_sections": sections,
        **_ssm_keys(s, d_inner=value_dim, dt_rank=v_heads, groups=k_heads)})
    return keys, tensors


def _glm4_moe(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    # GLM-4.5: attention only, dense feed-forward in the leading blocks and experts after;
    # here every trunk block is dense and only the MTP head routes (llama.cpp's GLM head
    # must: its graph asserts a router), with one shared expert beside its routed ones.
    experts, ff_exp = 4, s.n_ff // 2
    tensors: list[Tensor] = []
    for i in range(s.n_layer):
        tensors += [Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"), *_attention(s, i),
                    Tensor(f"blk.{i}.post_attention_norm.weight", (s.n_embd,), "ones"), *_ffn(s, i, norm=None)]
    quiet = s.mixer_gain * s.head_noise / 4
    for i in range(s.n_layer, s.n_layer + s.nextn):
        tensors += _nextn(s, i) + _attention(replace(s, mixer_gain=quiet), i)
        tensors += [Tensor(f"blk.{i}.ffn_gate_inp.weight", (s.n_embd, experts), "router"),
                    Tensor(f"blk.{i}.exp_probs_b.bias", (experts,), "zeros"),
                    Tensor(f"blk.{i}.ffn_gate_exps.weight", (s.n_embd, ff_exp, experts), "matrix"),
                    Tensor(f"blk.{i}.ffn_up_exps.weight", (s.n_embd, ff_exp, experts), "matrix"),
                    Tensor(f"blk.{i}.ffn_down_exps.weight", (ff_exp, s.n_embd, experts), "matrix", quiet),
                    Tensor(f"blk.{i}.ffn_gate_shexp.weight", (s.n_embd, ff_exp), "matrix"),
                    Tensor(f"blk.{i}.ffn_up_shexp.weight", (s.n_embd, ff_exp), "matrix"),
                    Tensor(f"blk.{i}.ffn_down_shexp.weight", (ff_exp, s.n_embd), "matrix", quiet)]
    _common(s, tensors)
    keys = _base_keys(s, feed_forward_length=s.n_ff, expert_feed_forward_length=ff_exp, expert_count=experts,
                      expert_used_count=2, expert_shared_count=1, leading_dense_block_count=s.n_layer,
                      expert_weights_scale=1.0, expert_weights_norm=True, **{
                          "attention.head_count": s.n_head, "attention.head_count_kv": s.n_head_kv,
                          "rope.dimension_count": s.head_dim})
    return keys, tensors


def _jamba(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    tensors: list[Tensor] = []
    for i in range(s.n_layer):
        tensors.append(Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"))
        tensors += _attention(s, i) if _is_attention(i) else _mamba1(s, i, bc_norms=True)
        tensors += _ffn(s, i)
    _common(s, tensors)
    keys = _base_keys(s, feed_forward_length=s.n_ff, **{
        "attention.head_count": s.n_head, "attention.head_count_kv": _kv_heads(s, _is_attention),
        **_ssm_keys(s, d_inner=s.d_inner, dt_rank=s.dt_rank)})
    return keys, tensors


def _falcon_h1(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    # Every layer runs attention and a Mamba-2 mixer side by side and adds them.
    half = replace(s, mixer_gain=s.mixer_gain / math.sqrt(2))
    tensors: list[Tensor] = []
    for i in range(s.n_layer):
        tensors.append(Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"))
        tensors += _attention(half, i) + _mamba2(half, i)
        # Falcon-H1's loader names this one without a ".weight" (falcon-h1.cpp).
        tensors += _ffn(s, i, norm="ffn_norm")
    _common(s, tensors)
    keys = _base_keys(s, feed_forward_length=s.n_ff, **{
        "attention.head_count": s.n_head, "attention.head_count_kv": s.n_head_kv,
        "rope.dimension_count": s.head_dim,
        **_ssm_keys(s, d_inner=s.d_inner, dt_rank=s.ssm_heads, groups=s.ssm_groups)})
    return keys, tensors


def _nemotron_h(s: Shape) -> tuple[dict[str, Any], list[Tensor]]:
    # Three kinds of layer: Mamba-2 (no KV heads, no FFN), attention (KV heads, no FFN)
    # and a squared-ReLU FFN alone (an FFN length). Pattern: M - * - M - ...
    def kind(i: int) -> str:
        return "attention" if _is_attention(i) else "ffn" if i % 2 else "mamba"

    tensors: list[Tensor] = []
    for i in range(s.n_layer):
        tensors.append(Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "ones"))
        k = kind(i)
        tensors += (_mamba2(s, i) if k == "mamba" else _attention(s, i) if k == "attention"
                    else _ffn(s, i, gate=False, norm=None))
    _common(s, tensors)
    keys = _base_keys(s, **{
        "feed_forward_length": [s.n_ff if kind(i) == "ffn" else 0 for i in range(s.n_layer)],
        "attention.head_count": s.n_head,
        "attention.head_count_kv": [s.n_head_kv if kind(i) == "attention" else 0 for i in range(s.n_layer)],
        "attention.layer_norm_epsilon": 1e-5,
        **_ssm_keys(s, d_inner=s.d_inner, dt_rank=s.ssm_heads, groups=s.ssm_groups)})
    return keys, tensors


# Memory kinds and rollback support as the vendored llama.cpp says (src/llama-arch.cpp:
# llm_arch_is_recurrent, llm_arch_is_hybrid, llm_arch_supports_rs_rollback).
ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("mamba", "recurrent", False, _mamba, "Mamba-1: selective scan"),
    Architecture("mamba2", "recurrent", False, _mamba2_arch, "Mamba-2: multi-head scan with grouped B, C"),
    Architecture("lfm2", "hybrid", True, _lfm2, "LFM2: short-convolution layers, attention in every third"),
    Architecture("qwen35", "hybrid", True, _qwen35,
                 "Qwen 3.5: gated delta net layers, gated attention in every third"),
    Architecture("nemotron_h", "hybrid", True, _nemotron_h,
                 "Nemotron-H: Mamba-2, attention and FFN-only layers"),
    Architecture("granitehybrid", "hybrid", False, _granite_hybrid,
                 "Granite 4.0-H: Mamba-2 layers, attention in every third"),
    Architecture("jamba", "hybrid", False, _jamba, "Jamba: Mamba-1 layers, attention in every third"),
    Architecture("falcon-h1", "hybrid", False, _falcon_h1, "Falcon-H1: attention and Mamba-2 in every layer"),
)}

# Architectures whose files may carry MTP heads (``nextn``) but keep no recurrent state:
# written by the same code, kept apart so that the recurrent fixtures stay recurrent.
ATTENTION_ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("glm4moe", "attention", True, _glm4_moe, "GLM-4.5: attention, an MTP head with experts"),
)}


# -- writing ---------------------------------------------------------------------------

# Encodings a target may be written in; Q8_0 applies to the matrices llama.cpp multiplies
# (rows a multiple of 32), everything else stays F32 as llama.cpp's own files keep it.
TARGET_TYPES = ("Q8_0", "F16", "F32")


def write_recurrent_model(path: str | Path, arch: str, *, vocab_from: str | Path, seed: int = 0,
                          ftype: str = "Q8_0", drop: Iterable[str] = (), keys: dict[str, Any] | None = None,
                          retype: dict[str, Any] | None = None, **shape: Any) -> Path:
    """Write a tiny random-weight GGUF of llama.cpp architecture ``arch`` to ``path``, with
    the tokenizer of ``vocab_from`` (every ``tokenizer.*`` key) and ``shape``'s sizes
    (fields of :class:`Shape`); returns the path. A malformed file for a hostile test:
    ``drop`` leaves out tensors by name, ``keys`` sets ``{arch}.KEY`` values (None: left out),
    ``retype`` stores tensors by name as that numpy type (int32, float64 ...: a head that lies)."""
    import gguf

    known = {**ARCHITECTURES, **ATTENTION_ARCHITECTURES}
    if arch not in known:
        raise ValueError(f"unknown architecture {arch!r}; one of {', '.join(known)}")
    if ftype not in TARGET_TYPES:
        raise ValueError(f"ftype must be one of {', '.join(TARGET_TYPES)}, not {ftype!r}")
    s = Shape(**shape)
    if known[arch].memory == "hybrid" and s.n_layer < ATTENTION_INTERVAL:
        raise ValueError(f"a hybrid needs at least {ATTENTION_INTERVAL} layers (layer "
                         f"{ATTENTION_INTERVAL - 1} attends), not {s.n_layer}")
    built, tensors = known[arch].build(s)
    built = {key: value for key, value in {**built, **(keys or {})}.items() if value is not None}
    dropped = set(drop)
    tensors = [t for t in tensors if t.name not in dropped]
    path = Path(path)
    tokenizer = _tokenizer_fields(Path(vocab_from))
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"][0])
    rng = np.random.default_rng(seed)

    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(f"tandem-test-{arch}")
    writer.add_file_type({"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "F16": gguf.LlamaFileType.MOSTLY_F16,
                          "F32": gguf.LlamaFileType.ALL_F32}[ftype])
    for key, value in built.items():
        _add(writer, f"{arch}.{key}", value)
    for key, (value, vtype, sub) in tokenizer.items():
        writer.add_key_value(key, value, vtype, sub) if sub is not None else writer.add_key_value(key, value, vtype)
    for t in tensors:
        ne = tuple(n_vocab if d == -1 else d for d in t.shape)
        data = _fill(rng, t, ne, s).astype(np.float32).reshape(ne[::-1])
        qtype = _encoding(t, ne, ftype)
        if retype and t.name in retype:
            writer.add_tensor(t.name, data.astype(retype[t.name]))
        elif qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(t.name, data)
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(t.name, data.astype(np.float16))
        else:
            writer.add_tensor(t.name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_split_part(path: str | Path, tensors: list[tuple[str, int]], *, vocab_from: str | Path | None = None) -> Path:
    """One part of a split llama model, as gguf-split writes one: ``tensors`` are (name,
    element count) of zeros; the first part carries the metadata (``vocab_from``'s
    tokenizer), the others none."""
    import gguf

    writer = gguf.GGUFWriter(Path(path), "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    if vocab_from is not None:
        for key, (value, vtype, sub) in _tokenizer_fields(Path(vocab_from)).items():
            writer.add_key_value(key, value, vtype, *(() if sub is None else (sub,)))
    for name, n in tensors:
        writer.add_tensor(name, np.zeros(n, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def write_draft_copy(target_path: str | Path, draft_path: str | Path, ftype: str = "Q4_0") -> Path:
    """``target_path`` re-encoded as ``ftype`` by llama.cpp's quantizer: the same random
    model, a little off, as speculation's draft."""
    from app.backends.llama.quantizer import quantize

    quantize(target_path, draft_path, ftype)
    return Path(draft_path)


def _add(writer: Any, key: str, value: Any) -> None:
    import gguf

    V = gguf.GGUFValueType
    if isinstance(value, bool):
        writer.add_key_value(key, value, V.BOOL)
    elif isinstance(value, int):
        writer.add_key_value(key, value, V.UINT32)
    elif isinstance(value, float):
        writer.add_key_value(key, value, V.FLOAT32)
    elif isinstance(value, list):
        sub = V.BOOL if all(isinstance(v, bool) for v in value) else V.INT32
        writer.add_key_value(key, value, V.ARRAY, sub)
    else:
        raise TypeError(f"{key}: no GGUF type for {value!r}")


def _tokenizer_fields(source: Path) -> dict[str, tuple[Any, Any, Any]]:
    """Every ``tokenizer.*`` key of ``source``: key -> (value, value type, element type)."""
    st = source.stat()
    return _read_tokenizer(source.resolve(), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_tokenizer(source: Path, _size: int, _mtime_ns: int) -> dict[str, tuple[Any, Any, Any]]:
    # GGUFReader takes seconds over a 49k vocabulary and its merges: once per file and version.
    import gguf

    reader = gguf.GGUFReader(source)
    V = gguf.GGUFValueType
    fields: dict[str, tuple[Any, Any, Any]] = {}
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == V.ARRAY else None
        if sub == V.ARRAY:
            raise ValueError(f"{source.name}: nested array '{key}' is not copied")
        fields[key] = (field.contents(), vtype, sub)
    if "tokenizer.ggml.tokens" not in fields:
        raise ValueError(f"{source.name} has no tokenizer to copy")
    return fields


def _encoding(t: Tensor, ne: tuple[int, ...], ftype: str) -> Any:
    import gguf

    Q = gguf.GGMLQuantizationType
    # Norms, biases, the SSM's A and D and the convolutions: F32, as llama.cpp needs
    # (ggml_ssm_conv and ggml_ssm_scan take F32 only).
    if len(ne) == 1 or t.init not in ("matrix", "embedding", "output") or ftype == "F32":
        return Q.F32
    if ftype == "F16":
        return Q.F16
    return Q.Q8_0 if ne[0] % 32 == 0 else Q.F32


def _fill(rng: np.random.Generator, t: Tensor, ne: tuple[int, ...], s: Shape) -> np.ndarray:
    """Values for one tensor, in llama.cpp's element order (ne0 fastest)."""
    size = int(np.prod(ne))
    if t.init == "ones":
        return np.ones(size)
    if t.init == "zeros":
        return np.zeros(size)
    if t.init == "embedding":  # rows of unit RMS: the residual stream's starting scale
        return rng.standard_normal(size)
    if t.init == "output":  # RMS-normalised hidden state (entries ~1) -> logits of std logit_std
        return rng.standard_normal(size) * (s.logit_std / math.sqrt(ne[0]))
    if t.init in ("matrix", "router"):  # keeps a unit-RMS input at unit RMS, times the gain
        return rng.standard_normal(size) * (t.gain / math.sqrt(ne[0]))
    if t.init == "eh_proj":  # [embedding | hidden] -> n_embd: the embedding through, blurred by gain
        out_dim, in_dim = ne[1], ne[0]
        w = rng.standard_normal((out_dim, in_dim)) * (t.gain / math.sqrt(in_dim))
        w[:, :out_dim] += np.eye(out_dim)
        return w.reshape(-1)
    if t.init == "conv":  # a causal smoothing window with random signs
        return rng.standard_normal(size) * (1.0 / math.sqrt(ne[0]))
    if t.init == "dt_bias":
        # Time steps log-uniform in [0.001, 0.1] (Mamba's initialisation), stored as the
        # inverse softplus: most channels forget slowly, so early tokens keep mattering.
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), size))
        return dt + np.log(-np.expm1(-dt))
    if t.init == "mamba1_a":  # S4D-real: A[n] = -(n + 1) for state n, every channel alike
        return -np.tile(np.arange(1, ne[0] + 1, dtype=np.float64), size // ne[0])
    if t.init == "mamba2_a":  # one rate per head, -exp(A_log) with A in [1, 16]
        return -rng.uniform(1.0, 16.0, size)
    raise ValueError(f"{t.name}: unknown initialisation {t.init!r}")


# A model whose MTP head agrees with its trunk part of the time (``_nextn``): a quiet trunk
# (each block adds little to the token's embedding, so the trunk's next token is mostly
# the token's own) and a head that copies that with a little noise. On the demo's 49k
# vocabulary its first guess is kept about half the time, greedy and sampled alike.
MTP_SHAPE = {"nextn": 1, "mixer_gain": 0.2, "ffn_gain": 0.1, "head_noise": 0.15}
MTP_ARCHITECTURES = ("qwen35", "glm4moe")  # a hybrid (chains only) and attention (trees too)


def write_mtp_model(path: str | Path, arch: str, *, vocab_from: str | Path, seed: int = 0,
                    ftype: str = "Q8_0", retype: dict[str, Any] | None = None, **shape: Any) -> Path:
    """``write_recurrent_model`` with an MTP head that agrees part of the time (MTP_SHAPE)."""
    return write_recurrent_model(path, arch, vocab_from=vocab_from, seed=seed, ftype=ftype, retype=retype,
                                 **{**MTP_SHAPE, **shape})


# -- the fixture -------------------------------------------------------------------------

class RecurrentPairs(Mapping[str, tuple[Path, Path]]):
    """{arch: (target, draft)} over every architecture in ARCHITECTURES; a pair is written
    on first use (about a second each), so a test of one architecture pays for one."""

    def __init__(self, folder: Path, vocab_from: Path) -> None:
        self.folder, self.vocab_from = folder, vocab_from
        self._written: dict[str, tuple[Path, Path]] = {}

    def __getitem__(self, arch: str) -> tuple[Path, Path]:
        if arch not in ARCHITECTURES:
            raise KeyError(arch)
        if arch not in self._written:
            target = write_recurrent_model(self.folder / f"{arch}.Q8_0.gguf", arch, vocab_from=self.vocab_from)
            self._written[arch] = (target, write_draft_copy(target, self.folder / f"{arch}.Q4_0.gguf"))
        return self._written[arch]

    def __iter__(self) -> Iterator[str]:
        return iter(ARCHITECTURES)

    def __len__(self) -> int:
        return len(ARCHITECTURES)


@pytest.fixture(scope="session")
def mtp_models(demo_models, tmp_path_factory) -> dict[str, Path]:
    """{arch: a Q8_0 target with one MTP block} for each of MTP_ARCHITECTURES."""
    folder = tmp_path_factory.mktemp("mtp-models")
    return {arch: write_mtp_model(folder / f"{arch}-mtp.Q8_0.gguf", arch, vocab_from=demo_models.draft)
            for arch in MTP_ARCHITECTURES}


@pytest.fixture(scope="session")
def recurrent_pairs(demo_models, tmp_path_factory) -> RecurrentPairs:
    """{arch: (target, draft)}: a Q8_0 target and its Q4_0 copy per architecture, written
    once a session, each when first asked for; the demo draft gives the vocabulary."""
    return RecurrentPairs(tmp_path_factory.mktemp("recurrent-models"), demo_models.draft)
