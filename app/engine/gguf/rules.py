"""What llama.cpp asserts about a model's metadata, checked before it sees the file.

llama.cpp answers most bad metadata with an exception it catches (the load returns
NULL and Tandem says why), but a few values reach a ``GGML_ASSERT`` or an uncaught
``std::out_of_range`` instead, and those end the process. Each rule here mirrors
one of them (llama.cpp 0.3.36's sources; the place is named in each rule) and
returns a one-line reason, or None. Anything these rules do not foresee is caught
by loading the model in a child process first (``app.backends.model_check``).

Rules look only at values of the type llama.cpp reads: a value of another type is
an exception in llama.cpp, which is a clean error already.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

LLAMA_MAX_LAYERS = 512      # llama-hparams.h
LLAMA_MAX_EXPERTS = 1024    # llama-hparams.h
TENSOR_ALIGNMENT = 32       # ggml-impl.h: a CPU buffer's data must start on this boundary
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # llama-model.cpp LLAMA_ROPE_SCALING_TYPES
TOKEN_TYPE_BYTE = 6         # llama_token_type LLAMA_TOKEN_TYPE_BYTE
_U32 = 0xFFFFFFFF

# Bytes that can occur in UTF-8 text (C0, C1 and F5..FF never do); each needs a token
# a SentencePiece vocabulary can fall back to.
_TEXT_BYTES = tuple(b for b in range(256) if b not in (0xC0, 0xC1) and b < 0xF5)

# tokenizer.ggml.model -> (tokenizer kind, default BOS, EOS, separator ids, add-BOS, add-EOS),
# as llama_vocab::impl::load sets them before the file's own keys (llama-vocab.cpp).
_VOCABS: dict[str, tuple[str, int | None, int | None, int | None, bool, bool]] = {
    "llama": ("SPM", 1, 2, None, True, False),
    "bert": ("WPM", 101, None, 102, True, False),
    "gpt2": ("BPE", 11, 11, None, False, False),
    "hybriddna": ("BPE", 11, 11, None, False, False),
    "whitespace": ("BPE", 11, 11, None, False, False),
    "gemma4": ("BPE", None, None, None, False, False),
    "t5": ("UGM", None, 1, None, False, True),
    "rwkv": ("RWKV", None, None, None, False, False),
    "plamo2": ("PLAMO2", 1, 2, None, False, False),
}
# BPE pre-tokenizers whose vocabularies add a BOS by default (llama-vocab.cpp).
ADD_BOS_BPE_PRE = frozenset({
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
    "lfm2", "jina-v5-nano", "tekken", "chameleon",
})
_NO_VOCAB = ("no_vocab", "none")


def rule_keys(key: str) -> bool:
    """The metadata keys the rules read (for the header walk to decode)."""
    return (key in _TOKENIZER_KEYS or key.endswith(_ARCH_SUFFIXES)
            or (".attention." in key and key.endswith("_epsilon")))


_TOKENIZER_KEYS = frozenset({
    "general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
})
_ARCH_SUFFIXES = (".block_count", ".nextn_predict_layers", ".expert_count", ".expert_used_count",
                  ".expert_group_count", ".expert_group_used_count", ".rope.scaling.type",
                  ".ssm.group_count", ".ssm.time_step_rank")
# Gated delta nets whose key heads are ssm.group_count and value heads ssm.time_step_rank
# (src/models/<arch>.cpp of the vendored llama.cpp).
DELTA_NET_ARCHS = ("qwen3next", "qwen35", "qwen35moe", "qwen4exp")


def first_violation(values: dict[str, Any], alignment: int) -> str | None:
    """The first rule ``values`` (decoded metadata) break, as a reason; None when none."""
    facts = _Facts(values)
    for rule in _RULES:
        reason = rule(facts, alignment)
        if reason:
            return reason
    return None


class _Facts:
    """Typed views of the decoded metadata, absent or mistyped values as None."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        arch = values.get("general.architecture")
        self.arch = arch if isinstance(arch, str) else ""

    def get(self, key: str, kind: type | tuple[type, ...]) -> Any:
        value = self.values.get(key)
        if isinstance(value, bool) and kind is not bool:
            return None  # bool is an int to Python, not to llama.cpp
        return value if isinstance(value, kind) else None

    def integer(self, key: str) -> int | None:
        return self.get(key, int)

    def arch_int(self, suffix: str) -> int | None:
        return self.integer(f"{self.arch}.{suffix}") if self.arch else None

    @functools.cached_property
    def token_list(self) -> list[str] | None:
        tokens = self.values.get("tokenizer.ggml.tokens")
        return tokens if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens) else None

    def tokens(self) -> list[str] | None:
        return self.token_list

    @functools.cached_property
    def token_set(self) -> frozenset[str]:
        return frozenset(self.token_list or ())

    def vocab_type(self) -> str | None:
        return self.get("tokenizer.ggml.model", str)


# -- hyper-parameters (llama_model_base::load_hparams, llama-model.cpp) -------------


def _layers(f: _Facts, _alignment: int) -> str | None:
    n = f.arch_int("block_count")
    if n is not None and not 1 <= n <= LLAMA_MAX_LAYERS:
        return (f"'{f.arch}.block_count' is {n}; llama.cpp needs 1 to {LLAMA_MAX_LAYERS} layers "
                "(GGML_ASSERT in load_hparams)")
    nextn = f.arch_int("nextn_predict_layers")
    if n is not None and nextn is not None and nextn > n:
        return (f"'{f.arch}.nextn_predict_layers' is {nextn}, more than the {n} layers "
                f"('{f.arch}.block_count')")
    return None


def _experts(f: _Facts, _alignment: int) -> str | None:
    if not f.arch:
        return None
    n_layer = f.arch_int("block_count")
    n_expert = f.arch_int("expert_count") or 0
    used = _used_experts(f.values.get(f"{f.arch}.expert_used_count"), n_layer)
    groups = f.arch_int("expert_group_count") or 0
    group_used = f.arch_int("expert_group_used_count") or 0
    if f.arch in ("hunyuan-dense", "hunyuan_vl") and n_expert <= 1:
        n_expert, used = 0, 0  # llama.cpp zeroes both for these
    a = f.arch
    if n_expert > LLAMA_MAX_EXPERTS:
        return f"'{a}.expert_count' is {n_expert}; llama.cpp allows at most {LLAMA_MAX_EXPERTS} experts"
    if used > n_expert:
        return (f"'{a}.expert_used_count' is {used}, more than the {n_expert} experts "
                f"('{a}.expert_count') there are to use")
    if n_expert > 0:
        if used == 0:
            return f"'{a}.expert_used_count' is 0 (or missing) but the model has {n_expert} experts"
        if groups >= n_expert:
            return f"'{a}.expert_group_count' is {groups}; it must be fewer than the {n_expert} experts"
        if groups > 1:
            if n_expert % groups:
                return f"the {n_expert} experts do not split into {groups} equal groups ('{a}.expert_group_count')"
            if not 0 < group_used < groups:
                return (f"'{a}.expert_group_used_count' is {group_used}; with {groups} expert groups "
                        f"it must be 1 to {groups - 1}")
    elif groups:
        return f"'{a}.expert_group_count' is {groups} but the model has no experts"
    return None


def _used_experts(value: Any, n_layer: int | None) -> int:
    """The largest per-layer count, as llama.cpp reads a scalar or a per-layer array."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value & _U32
    if isinstance(value, list) and value and all(type(v) is int for v in value):
        if n_layer is not None and len(value) != n_layer:
            return 0  # llama.cpp throws on the length (a clean error)
        return max(v & _U32 for v in value)
    return 0


def _rope_scaling(f: _Facts, _alignment: int) -> str | None:
    kind = f.get(f"{f.arch}.rope.scaling.type", str) if f.arch else None
    if kind is not None and kind not in ROPE_SCALING_TYPES:
        return (f"'{f.arch}.rope.scaling.type' is {_short(kind)}; llama.cpp knows "
                + ", ".join(ROPE_SCALING_TYPES))
    return None


def _epsilons(f: _Facts, _alignment: int) -> str | None:
    # ggml's norm kernels assert eps >= 0 at the first decode (NaN fails that too);
    # zero or infinity is no norm at all: the logits come out NaN.
    for key, value in f.values.items():
        if ".attention." in key and key.endswith("_epsilon") and isinstance(value, float):
            if not (math.isfinite(value) and value > 0):
                return f"'{key}' is {value!r}; a norm epsilon must be a positive finite number"
    return None


def _delta_net_heads(f: _Facts, _alignment: int) -> str | None:
    """Each value head reads one key head: build_delta_net asserts H_v % H_k == 0
    (delta-net-base.cpp) at the first decode, and a zero count divides by zero there
    (a SIGFPE). A missing key is a clean error in llama.cpp's loader."""
    if f.arch not in DELTA_NET_ARCHS:
        return None
    k_heads, v_heads = f.arch_int("ssm.group_count"), f.arch_int("ssm.time_step_rank")
    if k_heads is None or v_heads is None:
        return None
    if k_heads <= 0 or v_heads <= 0 or v_heads % k_heads:
        return (f"its {v_heads} value heads ('{f.arch}.ssm.time_step_rank') are not a whole multiple of its "
                f"{k_heads} key heads ('{f.arch}.ssm.group_count'); llama.cpp aborts at the first decode "
                "(GGML_ASSERT H_v % H_k == 0 in build_delta_net)")
    return None


def _alignment(_f: _Facts, alignment: int) -> str | None:
    if alignment < TENSOR_ALIGNMENT:
        return (f"'general.alignment' is {alignment}; llama.cpp needs tensor data aligned to at least "
                f"{TENSOR_ALIGNMENT} bytes (GGML_ASSERT in ggml_backend_cpu_buffer_from_ptr)")
    return None


# -- vocabulary (llama_vocab::impl::load and tokenize, llama-vocab.cpp) ---------------


def _duplicate_texts(f: _Facts, _alignment: int) -> str | None:
    tokens = f.tokens()
    if not tokens or f.vocab_type() in _NO_VOCAB:
        return None
    # llama.cpp renames an empty token i "[EMPTY_i]" before it indexes texts.
    if "" in f.token_set:
        texts = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        if len(set(texts)) == len(texts):
            return None
    elif len(f.token_set) == len(tokens):
        return None
    else:
        texts = tokens
    first: dict[str, int] = {}
    for i, text in enumerate(texts):
        if text in first:
            return (f"token text {_short(text)} appears twice in the vocabulary (ids {first[text]} and {i}); "
                    "llama.cpp aborts on that (GGML_ASSERT in llama_vocab::load)")
        first[text] = i
    return None


def _byte_tokens(f: _Facts, _alignment: int) -> str | None:
    tokens, vocab = f.tokens(), f.vocab_type()
    if not tokens or vocab not in _VOCABS:
        return None
    kind = _VOCABS[vocab][0]
    if kind == "SPM":
        # A piece outside the vocabulary is spelled in byte tokens "<0xXX>" (or the
        # byte itself); a missing one is std::out_of_range inside llama_tokenize.
        have = f.token_set
        for b in _TEXT_BYTES:
            if f"<0x{b:02X}>" not in have and bytes([b]).decode("utf-8", "surrogateescape") not in have:
                return (f"its SentencePiece vocabulary ('llama') has no byte token <0x{b:02X}>, so llama.cpp "
                        "aborts on text it cannot spell from its pieces (std::out_of_range in llama_tokenize)")
    elif kind == "WPM":
        types = f.values.get("tokenizer.ggml.token_type")
        if isinstance(types, list):
            for i, t in enumerate(types[:len(tokens)]):
                if t == TOKEN_TYPE_BYTE:
                    return (f"its BERT (WordPiece) vocabulary marks token {i} as a byte token, which "
                            "llama.cpp aborts on (token_to_byte)")
    return None


def _rwkv_trie(f: _Facts, _alignment: int) -> str | None:
    """RWKV's greedy trie tokenizer restarts from the text's start when a prefix of a
    token matches but no whole token does: an endless loop that fills memory (inside
    llama_tokenize, and at load for the newline). It always advances when every byte
    that starts a token is a token by itself."""
    tokens = f.tokens()
    if not tokens or f.vocab_type() != "rwkv":
        return None
    pieces = []
    for i, text in enumerate(tokens):
        text = text or f"[EMPTY_{i}]"  # as llama.cpp renames it before building the trie
        piece = _rwkv_unescape(text.encode("utf-8", "surrogateescape"))
        if piece is None:
            return f"RWKV token {i} {_short(text)} has a malformed \\x escape"
        pieces.append(piece)
    singles = {p for p in pieces if len(p) == 1}
    for i, piece in enumerate(pieces):
        if piece and piece[:1] not in singles:
            return (f"its RWKV vocabulary has token {i} {_short(tokens[i])} but no token for its first byte "
                    f"{piece[:1]!r}, on which llama.cpp's RWKV tokenizer loops forever")
    return None


def _rwkv_unescape(data: bytes) -> bytes | None:
    """llama_unescape_rwkv_token (llama-vocab.cpp), byte for byte; None for a byte >= 0x80
    after "\\x", which llama.cpp reads through a plain ``char`` (signed on x86, unsigned
    on ARM: the result differs)."""
    out = bytearray()
    escaping, hex_left, acc = False, 0, 0
    for c in data:
        if hex_left:
            if c >= 0x80:
                return None
            value = (c - ord("a") + 10) if c >= ord("a") else (c - ord("0"))
            acc = ((acc << 4) + value) & 0xFF
            hex_left -= 1
            if not hex_left:
                out.append(acc)
                acc = 0
        elif escaping:
            if c == ord("x"):
                hex_left = 2
            else:
                out.append({ord("t"): 9, ord("n"): 10, ord("r"): 13}.get(c, c))
            escaping = False
        elif c == ord("\\"):
            escaping = True
        else:
            out.append(c)
    return bytes(out)


def _special_tokens(f: _Facts, _alignment: int) -> str | None:
    """Tokenizing with special tokens asserts that the ones the vocabulary adds exist."""
    tokens, vocab = f.tokens(), f.vocab_type()
    if not tokens or vocab not in _VOCABS:
        return None
    kind, bos_default, eos_default, sep_default, add_bos, add_eos = _VOCABS[vocab]
    n_vocab = len(tokens)
    pre = f.get("tokenizer.ggml.pre", str)
    if kind == "BPE" and vocab != "gemma4":
        add_bos = pre in ADD_BOS_BPE_PRE
    file_add_bos = f.get("tokenizer.ggml.add_bos_token", bool)
    file_add_eos = f.get("tokenizer.ggml.add_eos_token", bool)
    add_bos = add_bos if file_add_bos is None else file_add_bos
    add_eos = add_eos if file_add_eos is None else file_add_eos
    if vocab == "gemma4" or pre == "gemma4":
        add_bos = True  # llama.cpp's Gemma 4 workaround

    def special(key: str, default: int | None) -> int | None:
        token = default if default is not None and default < n_vocab else None
        value = f.integer(f"tokenizer.ggml.{key}")
        if value is not None and 0 <= value < n_vocab:
            token = value
        return token

    needed: list[tuple[str, int | None]] = []
    if kind in ("SPM", "BPE", "UGM"):
        if add_bos:
            needed.append(("a BOS token (tokenizer.ggml.bos_token_id)", special("bos_token_id", bos_default)))
        if add_eos:
            needed.append(("an EOS token (tokenizer.ggml.eos_token_id)", special("eos_token_id", eos_default)))
    elif kind == "WPM":
        needed.append(("a BOS token (tokenizer.ggml.bos_token_id)", special("bos_token_id", bos_default)))
        needed.append(("a separator token (tokenizer.ggml.seperator_token_id)",
                       special("seperator_token_id", sep_default)))
    for what, token in needed:
        if token is None:
            return (f"its tokenizer adds {what} but the vocabulary of {n_vocab} tokens has none; "
                    "llama.cpp aborts when it tokenizes (GGML_ASSERT in llama_tokenize)")
    return None


def _short(text: str, limit: int = 40) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


_RULES: Sequence[Callable[[_Facts, int], str | None]] = (
    _alignment, _layers, _experts, _rope_scaling, _epsilons, _delta_net_heads, _duplicate_texts, _byte_tokens,
    _rwkv_trie, _special_tokens,
)
