"""Hostile GGUF model files: one of each kind llama.cpp aborts on (or once aborted on).

Each is the probe's tiny quantised llama (app/backends/probe.py) with one lie in it,
so everything but that lie loads and decodes; before the validator's rules and the
child-process check, every one of them killed Tandem (SIGABRT) or fooled
``check-pair`` into calling it "Compatible".

``python tests/hostile_models.py DIR`` writes them all into DIR (to try them by hand:
``tandem generate --target DIR/<name>.gguf --prompt hi``); tests/test_hostile_models.py
runs each through the CLI.
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

N_EMBD, N_FF, N_LAYER, N_HEAD = 64, 128, 2, 4
SPECIALS = ["<unk>", "<s>", "</s>"]
N_VOCAB = 288  # a multiple of 32, as the quantised kernels want

T = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType
TT = gguf.TokenType


def byte_tokens() -> list[str]:
    return [f"<0x{b:02X}>" for b in range(256)]


def spm_vocab() -> tuple[list[str], list[int]]:
    """Three specials, the 256 byte tokens, filler words: a SentencePiece vocabulary."""
    tokens = SPECIALS + byte_tokens()
    tokens += [f"w{i}" for i in range(N_VOCAB - len(tokens))]
    types = [TT.CONTROL] * 3 + [TT.BYTE] * 256
    types += [TT.NORMAL] * (N_VOCAB - len(types))
    return tokens, types


@dataclass
class ModelSpec:
    """What to write; each field's default is the honest probe model."""

    tokens: list[str] | None = None          # None: spm_vocab()
    token_types: list[int] | None = None
    vocab_type: str = "llama"
    block_count: int = N_LAYER
    rms_eps: float = 1e-5
    alignment: int | None = None             # None: the default 32, no key written
    # key -> (value, GGUFValueType) or (value, ARRAY, element GGUFValueType)
    extra: dict[str, tuple[Any, ...]] = field(default_factory=dict)


def write_model(path: Path, spec: ModelSpec | None = None) -> Path:
    """A small quantised llama GGUF with seeded random weights, lying as ``spec`` says."""
    from gguf.quants import quantize

    spec = spec or ModelSpec()
    rng = np.random.default_rng(19)
    writer = gguf.GGUFWriter(path, "llama")
    if spec.alignment is not None:
        # GGUFWriter refuses nothing it can pad for; 1 is a legal power of two.
        writer.add_custom_alignment(spec.alignment)
    writer.add_name("tandem-hostile")
    writer.add_context_length(256)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(spec.block_count)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    tokens, types = spm_vocab()
    tokens = spec.tokens if spec.tokens is not None else tokens
    types = spec.token_types if spec.token_types is not None else types[:len(tokens)]
    writer.add_tokenizer_model(spec.vocab_type)
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    for key, (value, vtype, *sub) in spec.extra.items():
        writer.add_key_value(key, value, vtype, *sub)
    n_vocab = len(tokens)

    def matrix(name: str, rows: int, cols: int, qtype) -> None:
        weights = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        writer.add_tensor(name, quantize(weights, qtype), raw_dtype=qtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(N_EMBD, dtype=np.float32))

    matrix("token_embd.weight", n_vocab, N_EMBD, Q.Q8_0)
    for i in range(N_LAYER):
        norm(f"blk.{i}.attn_norm.weight")
        for part in ("q", "k", "v", "output"):
            matrix(f"blk.{i}.attn_{part}.weight", N_EMBD, N_EMBD, Q.Q4_0)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD, Q.Q8_0)
        matrix(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD, Q.Q4_0)
        matrix(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF, Q.Q8_0)
    norm("output_norm.weight")
    matrix("output.weight", n_vocab, N_EMBD, Q.Q4_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _without_bytes() -> ModelSpec:
    # SentencePiece with no byte fallback: any character outside the vocabulary sends
    # llama_tokenize into token_to_id.at("<0x..>") -> std::out_of_range -> terminate.
    tokens = SPECIALS + [f"w{i}" for i in range(N_VOCAB - 3)]
    return ModelSpec(tokens=tokens, token_types=[TT.CONTROL] * 3 + [TT.NORMAL] * (N_VOCAB - 3))


def _duplicate_token() -> ModelSpec:
    tokens, types = spm_vocab()
    tokens[-1] = tokens[-2]  # GGML_ASSERT(id_to_token.size() == token_to_id.size())
    return ModelSpec(tokens=tokens, token_types=types)


def _empty_token_clash() -> ModelSpec:
    # llama.cpp renames an empty token i to "[EMPTY_i]": a token already called that clashes.
    tokens, types = spm_vocab()
    tokens[-1] = ""
    tokens[-2] = f"[EMPTY_{N_VOCAB - 1}]"
    return ModelSpec(tokens=tokens, token_types=types)


def _wpm_byte_token() -> ModelSpec:
    # A BERT (WordPiece) vocabulary has no byte tokens: token_to_byte GGML_ABORTs on one.
    return ModelSpec(vocab_type="bert")


def _rwkv_prefix_only() -> ModelSpec:
    # RWKV's trie tokenizer restarts from the start when a prefix matches but no token
    # does ("<" begins "<unk>" but is no token): llama_tokenize loops, filling memory.
    return ModelSpec(vocab_type="rwkv")


def _t5_charsmap_out_of_bounds() -> ModelSpec:
    # No rule knows this one: a T5 (Unigram) normalizer whose double array sends every
    # character but "\n" past its end. The load survives (it only tokenizes "\n"); the
    # first other text throws std::runtime_error out of llama_tokenize -> terminate.
    charsmap = list(struct.pack("<II", 4, 10 << 10) + b"\0")  # blob size, root node with BASE 10
    return ModelSpec(vocab_type="t5", extra={"tokenizer.ggml.precompiled_charsmap": (charsmap, T.ARRAY, T.UINT8)})


def _experts(**counts: int) -> ModelSpec:
    keys = {"count": "llama.expert_count", "used": "llama.expert_used_count",
            "groups": "llama.expert_group_count", "group_used": "llama.expert_group_used_count"}
    return ModelSpec(extra={keys[k]: (v, T.UINT32) for k, v in counts.items()})


# name -> (what to write, a phrase the one-line error must contain)
CASES: dict[str, tuple[ModelSpec, str]] = {
    "duplicate-token-text": (_duplicate_token(), "twice"),
    "empty-token-clash": (_empty_token_clash(), "twice"),
    "block-count-0": (ModelSpec(block_count=0), "block_count"),
    "block-count-1000": (ModelSpec(block_count=1000), "block_count"),
    "experts-used-above-count": (_experts(count=4, used=8), "expert"),
    "experts-above-max": (_experts(count=2000, used=2), "expert"),
    "experts-used-without-experts": (_experts(used=2), "expert"),
    "experts-none-used": (_experts(count=4, used=0), "expert"),
    "expert-groups-not-fewer": (_experts(count=4, used=2, groups=4), "expert"),
    "rope-scaling-unknown": (ModelSpec(extra={"llama.rope.scaling.type": ("bogus", T.STRING)}), "rope"),
    "rms-eps-nan": (ModelSpec(rms_eps=math.nan), "epsilon"),
    "rms-eps-negative": (ModelSpec(rms_eps=-1.0), "epsilon"),
    "rms-eps-inf": (ModelSpec(rms_eps=math.inf), "epsilon"),
    "alignment-1": (ModelSpec(alignment=1), "alignment"),
    "alignment-16": (ModelSpec(alignment=16), "alignment"),
    "spm-without-byte-tokens": (_without_bytes(), "byte"),
    "wpm-with-byte-tokens": (_wpm_byte_token(), "byte"),
    "rwkv-prefix-without-token": (_rwkv_prefix_only(), "loops forever"),
    "nextn-layers-above-blocks": (ModelSpec(extra={"llama.nextn_predict_layers": (3, T.UINT32)}), "nextn"),
    # Left to the trial load in a child (app/backends/model_check.py): no rule foresees these.
    "t5-charsmap-out-of-bounds": (_t5_charsmap_out_of_bounds(), "crashed on it in a trial load (SIGABRT"),
    "rope-freq-base-nan": (ModelSpec(extra={"llama.rope.freq_base": (math.nan, T.FLOAT32)}), "non-finite logits"),
}
# The cases only the child catches (the validator passes them).
TRIAL_ONLY = ("t5-charsmap-out-of-bounds", "rope-freq-base-nan")


def write_all(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return {name: write_model(folder / f"{name}.gguf", spec) for name, (spec, _) in CASES.items()}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/hostile_models.py DIR")
    for name, path in write_all(Path(sys.argv[1])).items():
        print(path)
