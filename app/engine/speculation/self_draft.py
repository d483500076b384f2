"""A draft made from the target itself: what to write, how big it gets, and whether the
target's layers may be cut.

Two ways to make a target smaller, alone or together (``tandem make-draft``):

- **Quantised**: the same weights at fewer bits (the demo pair is exactly this: an F32
  target checked by its Q4_1). The variants are llama.cpp's own file types, written by
  ``llama_model_quantize``. The IQ1/IQ2 types need an importance matrix (llama.cpp
  refuses them without one; Tandem does not make one), as do IQ3_XXS and IQ3_XS, so they
  are refused here with that reason; IQ3_S, IQ4_NL and IQ4_XS do not need one.
- **Early exit**: the target's first N layers only, with its own output norm and head
  (LayerSkip's idea; ``prune_layers`` of the quantizer drops the rest and rewrites
  ``block_count``). Safe only where every layer is alike and nothing depends on the
  layer count: the architectures in ``PRUNABLE`` with no per-layer hyper-parameters,
  no MTP layers at the end and no dense layers before MoE ones. Any other file is
  refused in one line saying why.

By default (``default_variant``) a float or Q8_0 target gets ``DEFAULT_VARIANT``
(Q4_K_M) and one already at 6 bits or fewer ``SMALL_TARGET_VARIANT`` (Q2_K). A plan
carries an upper estimate of the file's size (``estimate_bytes``), checked against the
free disk before a byte is written.

This module plans only (pure Python, reads the validated header); the writing runs in a
child process (``app.backends.draft_maker``, reached from the front ends through
``app.session.drafting``). The result goes to the data folder's ``drafts/``, is
validated and trial-loaded like any file, and is remembered per target
(``app.storage.made_drafts``); the library lists that folder ("Made by Tandem") and the
draft finder offers a target's own drafts first. The window runs it on a plain thread
(``app.window.draft_task``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.errors import EngineError
from app.engine.gguf.header import GGUFHeader, TensorInfo, scan_header, shown_name


class SelfDraftError(EngineError):
    """A draft cannot be made from this file as asked (one line, why)."""


@dataclass(frozen=True)
class Variant:
    name: str            # llama.cpp's file type, as ``LLAMA_FTYPE_MOSTLY_<name>``
    bits: float          # bits per weight of the main type
    fallback_bits: float  # ... where a row is not a multiple of 256 (K and IQ types fall back)
    about: str


# The quantised variants offered (acceptance measured on the demo target: README, "A draft
# from your target").
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("Q4_0", 4.5, 4.5, "4-bit, the simplest"),
    Variant("Q4_1", 5.0, 5.0, "4-bit with offsets (the demo pair's draft)"),
    Variant("Q8_0", 8.5, 8.5, "8-bit: closest to the target, least saved"),
    Variant("Q4_K_M", 4.85, 5.5, "4-bit K-quant mix: the default for a float or Q8_0 target"),
    Variant("Q2_K", 3.35, 4.5, "2-bit K-quant mix: smallest without an importance matrix; "
                               "the default for a target already at 6 bits or fewer"),
    Variant("IQ4_NL", 4.5, 4.5, "4-bit non-linear"),
    Variant("IQ4_XS", 4.25, 4.5, "4-bit non-linear, smaller"),
    Variant("IQ3_S", 3.44, 4.5, "3-bit non-linear"),
)}
# The default, by the target's own type. On the demo target Q4_K_M was accepted 0.80 of
# the time against Q4_0's 0.61 for a file 15% bigger (README); a target already at 6 bits
# or fewer gets the one type that is still much smaller than it.
DEFAULT_VARIANT = "Q4_K_M"
SMALL_TARGET_VARIANT = "Q2_K"
_WIDE_FILE_TYPES = (0, 1, 7, 32)  # llama_ftype: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0, MOSTLY_BF16
KEEP_TYPE = "keep"   # --variant keep: the target's own types, only cut (needs --layers)
# llama.cpp refuses these without an importance matrix ("Missing importance matrix").
NEEDS_IMATRIX = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "Q2_K_S")

# Architectures whose blocks are all alike (attention + MLP or MoE in every layer, no
# per-layer pattern keyed to the layer count): the first N of them are a model.
PRUNABLE = frozenset({
    "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "granite", "granitemoe", "olmo", "olmo2",
    "internlm2", "stablelm", "starcoder2", "phi2", "phi3", "gpt2", "falcon", "mpt", "refact",
    "bloom", "gemma", "exaone", "mistral3", "ernie4_5", "seed_oss",
})
_HEAD_BITS = 8.5         # output / tied embeddings: llama.cpp keeps them at Q6_K or Q8_0
_MARGIN = 1.05           # and a little room for mixes the estimate does not follow
_EXTRA_BYTES = 8 << 20   # metadata (a vocabulary) and alignment
_BLOCK = "blk."


@dataclass(frozen=True)
class DraftPlan:
    source: Path
    architecture: str
    variant: str                 # a VARIANTS name or KEEP_TYPE
    n_layer: int                 # the target's layers
    keep_layers: int             # layers the draft keeps (n_layer: all)
    bytes_needed: int            # an upper estimate of the file written
    tensors_out: int             # tensors written (the progress bar counts them)

    @property
    def prune(self) -> tuple[int, ...]:
        """The layers to drop, ascending (llama.cpp's remapping needs that order)."""
        return tuple(range(self.keep_layers, self.n_layer))

    @property
    def ftype(self) -> str:
        return self.variant

    def describe(self) -> str:
        kind = "its own types" if self.variant == KEEP_TYPE else self.variant
        layers = (f", first {self.keep_layers} of {self.n_layer} layers"
                  if self.keep_layers < self.n_layer else "")
        return f"{kind}{layers}"

    def file_name(self) -> str:
        """Unique per target path and variant, so two targets named alike never share a draft."""
        digest = hashlib.sha256(os.fsencode(self.source.resolve())).hexdigest()[:8]
        stem = shown_name(self.source).removesuffix(".gguf").replace(os.sep, "_")
        cut = f".L{self.keep_layers}of{self.n_layer}" if self.keep_layers < self.n_layer else ""
        return f"{stem}-{digest}.{self.variant}{cut}.draft.gguf"


def plan_draft(target: str | os.PathLike[str], variant: str | None = None,
               layers: int | None = None) -> DraftPlan:
    """What making this draft writes (``variant`` None: ``default_variant``); SelfDraftError
    (one line) when it cannot be made."""
    path = Path(target)
    header, values = scan_header(path, lambda key: not key.startswith("tokenizer."))
    variant = _variant_name(default_variant(values.get("general.file_type")) if variant is None else variant,
                            layers)
    architecture = values.get("general.architecture")
    architecture = architecture if isinstance(architecture, str) else ""
    n_layer = values.get(f"{architecture}.block_count")
    if type(n_layer) is not int or n_layer < 1:
        raise SelfDraftError(f"{shown_name(path)}: has no layer count ({architecture}.block_count); "
                             "it is not a model llama.cpp can make a draft of")
    keep = n_layer if layers is None else layers
    if layers is not None:
        reason = pruning_refusal(architecture, values, n_layer, layers)
        if reason:
            raise SelfDraftError(f"{shown_name(path)}: {reason}")
    kept = [t for t in header.tensors if _layer_of(t.name) is None or _layer_of(t.name) < keep]
    return DraftPlan(path, architecture, variant, n_layer, keep, estimate_bytes(kept, variant, header),
                     len(kept))


def default_variant(file_type: object) -> str:
    """The variant made when none is asked for, from the target's ``general.file_type``."""
    wide = file_type is None or (type(file_type) is int and file_type in _WIDE_FILE_TYPES)
    return DEFAULT_VARIANT if wide else SMALL_TARGET_VARIANT


def pruning_refusal(architecture: str, values: dict[str, Any], n_layer: int, keep: int) -> str | None:
    """Why the first ``keep`` layers of this model are not a model; None when they are."""
    if not 1 <= keep < n_layer:
        return f"--layers must be from 1 to {n_layer - 1} (the model has {n_layer} layers)"
    if architecture not in PRUNABLE:
        return (f"layers cannot be cut from a {architecture or 'unknown'} model: only architectures whose "
                "layers are all alike can (llama, qwen2, qwen3, gemma, phi3, ...); quantise it instead")
    nextn = values.get(f"{architecture}.nextn_predict_layers")
    if type(nextn) is int and nextn > 0:
        return f"its last {nextn} layer(s) are MTP heads; cutting layers would break them"
    dense = values.get(f"{architecture}.leading_dense_block_count")
    if type(dense) is int and dense > 0:
        return "its first layers are dense and the rest MoE; cutting layers is not safe for it"
    for key, value in values.items():
        if key.startswith(f"{architecture}.") and isinstance(value, list) and len(value) == n_layer:
            return f"its layers differ ('{key}' is set per layer); cutting layers is not safe for it"
    return None


def estimate_bytes(tensors: list[TensorInfo], variant: str, header: GGUFHeader | None = None) -> int:
    """An upper estimate of the file llama.cpp writes: 2-D weights at the variant's bits
    (the fallback where rows do not divide into 256-blocks), output and embeddings at
    up to 8.5 bits, everything else as it is."""
    total = 0
    for tensor in tensors:
        elements = 1
        for d in tensor.shape:
            elements *= d
        if variant == KEEP_TYPE or len(tensor.shape) < 2 or not tensor.name.endswith("weight") \
                or "_norm" in tensor.name:
            total += tensor.nbytes
            continue
        if tensor.name in ("output.weight", "token_embd.weight"):
            bits = _HEAD_BITS
        else:
            chosen = VARIANTS[variant]
            bits = chosen.bits if tensor.shape[0] % 256 == 0 else chosen.fallback_bits
        total += min(tensor.nbytes, int(elements * bits / 8)) if tensor.is_float else int(elements * bits / 8)
    metadata = header.data_offset if header is not None else 0
    return int(total * _MARGIN) + metadata + _EXTRA_BYTES


def _variant_name(variant: str, layers: int | None) -> str:
    name = variant.strip().upper() if variant.strip().lower() != KEEP_TYPE else KEEP_TYPE
    if name == KEEP_TYPE:
        if layers is None:
            raise SelfDraftError("--variant keep writes the target's own types, so it needs --layers N")
        return name
    if name in NEEDS_IMATRIX:
        raise SelfDraftError(f"{name} needs an importance matrix, which Tandem does not make; "
                             "choose IQ3_S or Q2_K for a very small draft")
    if name not in VARIANTS:
        raise SelfDraftError(f"{variant!r} is not a variant Tandem makes; choose one of "
                             + ", ".join(VARIANTS) + f" or {KEEP_TYPE}")
    return name


def _layer_of(name: str) -> int | None:
    if not name.startswith(_BLOCK):
        return None
    number = name[len(_BLOCK):].split(".", 1)[0]
    return int(number) if number.isdigit() else None
