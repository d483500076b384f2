"""Heads trained to draft, recognised in a GGUF file: MTP ("nextn") layers, an EAGLE-3
head, Medusa heads, and drafter files of their own that read a target's hidden states.

A target's MTP head drafts for it (``app/backends/llama/mtp_head.py``) when llama.cpp
has an MTP graph for its architecture and the file gives that graph what it asserts;
the other heads are recognised and said to be unused. Wherever a file is judged
(``tandem check-pair``, the model library) :func:`head_lines` says so in one line per
kind. Only names are looked at (metadata keys and tensor names from the validated
header): nothing here reads weights.

- MTP / nextn (DeepSeek-V3, GLM-4.5, Qwen 3.5/3.6, ...): ``{arch}.nextn_predict_layers``
  > 0, or tensors named ``blk.N.nextn.*``. :func:`mtp_head_problem` says why llama.cpp
  could not run one (:data:`MTP_ARCHITECTURES`).
- EAGLE-3: an ``eagle3`` architecture (or ``eagle3.*`` keys), or the draft-to-target
  vocabulary maps ``d2t`` / ``t2d`` that EAGLE-3 conversions carry.
- Medusa: tensors or keys named ``medusa*``.
- DFlash and Gemma 4 assistant drafters: files of architecture ``dflash`` /
  ``gemma4-assistant`` (:data:`HIDDEN_STATE_DRAFTERS`).

Why MTP is judged here, before llama.cpp sees the file: on a malformed head llama.cpp
does not fail cleanly, it ends the process with a ``GGML_ASSERT`` when it builds the MTP
graph (``MTP block missing nextn.eh_proj``, ``... only supports a single MTP block``,
``MTP block missing ffn_gate_inp``). A file whose first MTP block lacks ``nextn.eh_proj``
is even loaded as "trunk only", every MTP tensor optional, so the load succeeds and the
first MTP context aborts. A split file is judged from the part read (its first): a
head whose tensors lie in another part is refused, saying so (strict, never an abort).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MTP = "MTP (nextn) layers"
EAGLE3 = "an EAGLE-3 head"
MEDUSA = "Medusa heads"
DFLASH = "a DFlash drafter"
GEMMA4_ASSISTANT = "a Gemma 4 assistant drafter"

# Drafter files of their own (general.architecture -> what they are): made for one
# target, they read its hidden states. An EAGLE-3 drafter runs (named as the draft,
# ``eagle3_problem``); the others are recognised and said to be unused.
EAGLE3_DRAFTER = "an EAGLE-3 drafter"
HIDDEN_STATE_DRAFTERS = {"eagle3": EAGLE3_DRAFTER, "dflash": DFLASH,
                         "gemma4-assistant": GEMMA4_ASSISTANT}

# Targets whose graph in the vendored llama.cpp names every layer's input
# (``res->t_layer_inp[il]`` in src/models/<arch>.cpp), which an EAGLE-3 drafter reads:
# asking another architecture for one ends the process (GGML_ASSERT "layer input tensor
# is null"), so it is refused here. qwen4exp and gemma4 name them on some paths only.
LAYER_INPUT_ARCHITECTURES = frozenset({
    "llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "lfm2", "muse-glimmer", "gpt-oss",
    "deepseek4", "minimax-01", "minimax-m2", "bailingmoe3", "nemotron_h", "nanbeige", "hunyuan_vl"})
EAGLE3_LAYERS = 3  # llama.cpp's draft-eagle3 reads exactly three
# What the drafters Tandem does not run need that its drafters do not do.
_WHY_NOT_YET = {
    "dflash": "guesses a whole block of tokens in one pass (masked positions, its own sampling on "
              "llama.cpp's side) where Tandem's drafters guess a token at a time",
    "gemma4-assistant": "reads its target's own attention cache (llama.cpp shares the target's memory "
                        "with it) where Tandem's heads keep a cache of their own",
}

NO_MTP_HEAD = "it has no MTP head"
CANNOT_RUN = "its MTP head cannot run: "

# Every MTP block of every architecture below carries these; llama.cpp asserts them.
_NEXTN_TENSORS = ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight")
# llama.cpp takes a file without this for an MTP-only file (a head split from its
# trunk), whose trunk tensors are all optional: no target to draft for.
_TRUNK_PROBE = "blk.0.attn_norm.weight"
_NEXTN_NAME = re.compile(r"blk\.(\d+)\.nextn\.")
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.")

_GATE_INP = "ffn_gate_inp.weight"
_SHARED_EXPERT = ("ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight")
_DENSE_FFN = ("ffn_up.weight", "ffn_gate.weight", "ffn_down.weight")
# Experts as one fused gate+up tensor, or gate and up apart (create_tensor_gate_up_exps).
_GATE_UP_EXPS = "ffn_gate_up_exps.weight|ffn_gate_exps.weight+ffn_up_exps.weight"


@dataclass(frozen=True)
class MtpGraph:
    """What one architecture's MTP graph in the vendored llama.cpp needs of a file
    (``graph_mtp::graph_mtp`` in src/models/<arch>.cpp and the MTP part of its
    ``load_arch_tensors``) so that building it ends in no GGML_ASSERT or null tensor."""

    single_block: bool                  # asserts n_layer_nextn == 1
    # Each MTP block's tensors beyond nextn.eh_proj/enorm/hnorm, named after "blk.N.";
    # "a|b+c" reads "a, or else both b and c".
    tensors: tuple[str, ...] = ()
    moe_block: bool = False             # a block before leading_dense_block_count gets no router
    # The feed-forward the graph picks by itself: with blk.N.ffn_gate_inp the routed
    # tensors, without it the dense ones (the loader leaves both optional).
    routed: tuple[str, ...] = ()
    dense: tuple[str, ...] = ()
    mla: bool = False                   # asserts is_mla(): attention.key_length_mla and value_length_mla
    q_lora: bool = False                # asserts n_lora_q > 0: attention.q_lora_rank
    no_attention_temperature: bool = False  # asserts f_attn_temp_scale == 0
    equal_head_sizes: bool = False      # asserts n_embd_head_v == n_embd_head_k
    rope_whole_head: bool = False       # asserts n_embd_head == n_rot


# general.architecture -> its MTP graph, for every architecture whose model builds one
# for LLAMA_CONTEXT_TYPE_MTP. glm5-next is left out: its build_arch_graph throws "NextN
# graph not implemented yet". An architecture not here has no MTP graph at all.
MTP_ARCHITECTURES: dict[str, MtpGraph] = {
    "qwen35": MtpGraph(single_block=True, equal_head_sizes=True),
    "qwen35moe": MtpGraph(single_block=True, tensors=(_GATE_INP,), equal_head_sizes=True),
    "qwen3next": MtpGraph(single_block=True, tensors=(_GATE_INP,), equal_head_sizes=True),
    "glm4moe": MtpGraph(single_block=True, tensors=(_GATE_INP,), moe_block=True, equal_head_sizes=True),
    "glm-dsa": MtpGraph(single_block=True, tensors=(_GATE_INP,), moe_block=True, mla=True),
    "deepseek32": MtpGraph(single_block=True, tensors=(_GATE_INP,), moe_block=True, mla=True),
    "deepseek2": MtpGraph(
        single_block=True, moe_block=True, mla=True, q_lora=True, no_attention_temperature=True,
        tensors=("attn_q_a.weight", "attn_q_a_norm.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight",
                 "attn_kv_a_norm.weight", "attn_k_b.weight", "ffn_norm.weight", _GATE_INP,
                 "ffn_down_exps.weight", _GATE_UP_EXPS, *_SHARED_EXPERT)),
    "deepseek4": MtpGraph(single_block=True),
    "mimo2": MtpGraph(single_block=False, tensors=("attn_qkv.weight", *_DENSE_FFN)),
    "step35": MtpGraph(single_block=False, dense=_DENSE_FFN, routed=(
        "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight", *_SHARED_EXPERT)),
    "hy_v3": MtpGraph(single_block=False, dense=_DENSE_FFN, equal_head_sizes=True, rope_whole_head=True,
                      routed=("ffn_down_exps.weight", _GATE_UP_EXPS, *_SHARED_EXPERT)),
    "bailingmoe3": MtpGraph(single_block=True, tensors=("layer_output_norm.weight",)),
    "cohere2moe": MtpGraph(single_block=True, tensors=(_GATE_INP,), equal_head_sizes=True,
                           rope_whole_head=True),
    "nemotron_h_moe": MtpGraph(single_block=True, tensors=(_GATE_INP,), equal_head_sizes=True),
}

# Metadata the MTP checks read, after "{arch}." (for the header walk to decode).
_MTP_KEY_SUFFIXES = (
    ".block_count", ".nextn_predict_layers", ".leading_dense_block_count", ".embedding_length",
    ".attention.head_count", ".attention.key_length", ".attention.value_length",
    ".attention.key_length_swa", ".attention.value_length_swa", ".attention.key_length_mla",
    ".attention.value_length_mla", ".attention.q_lora_rank", ".attention.temperature_scale",
    ".rope.dimension_count", ".rope.dimension_count_swa",
)


def eagle3_reads(values: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
    """An EAGLE-3 drafter's target layers (``eagle3.target_layers``) and the target row
    width it was trained on (``eagle3.target_hidden_size``); empty and 0 where absent."""
    layers = values.get("eagle3.target_layers")
    width = values.get("eagle3.target_hidden_size")
    layers = tuple(layers) if isinstance(layers, (list, tuple)) and all(type(v) is int for v in layers) else ()
    return layers, width if type(width) is int else 0


def eagle3_borrows(tensor_names: Iterable[str]) -> tuple[str, ...]:
    """What an EAGLE-3 drafter file takes from its target for want of its own (llama.cpp's
    decoder reads the target's token embedding and output matrix then)."""
    names = set(tensor_names)
    return tuple(what for name, what in (("token_embd.weight", "token embedding"), ("output.weight", "output matrix"))
                 if name not in names)


def eagle3_problem(target_arch: str, target_layers: int, target_width: int,
                   reads: tuple[int, ...], width: int, own_width: int = 0, borrows: tuple[str, ...] = ()) -> str | None:
    """None when an EAGLE-3 drafter that ``reads`` these layers of a ``width``-wide target
    can draft for this one (``target_layers`` blocks, rows ``target_width`` wide) without
    llama.cpp aborting; otherwise one line saying why not. ``own_width``: the drafter's
    own rows; ``borrows``: what it takes from the target (:func:`eagle3_borrows`), whose
    rows must then be as wide as its own (llama.cpp asserts in the graph otherwise)."""
    if len(reads) != EAGLE3_LAYERS:
        return f"its eagle3.target_layers names {len(reads)} layers, not {EAGLE3_LAYERS}"
    if target_arch not in LAYER_INPUT_ARCHITECTURES:
        return f"this llama.cpp hands no layer inputs out of a '{target_arch}' target"
    if width != target_width:
        return f"it reads rows {width} wide, and the target's are {target_width} wide"
    last = target_layers if target_arch in MTP_ARCHITECTURES else target_layers - 1  # its last, normed row
    outside = [layer for layer in reads if not 0 <= layer <= last]
    if outside:
        return f"it reads layer {outside[0]}, and the target has {target_layers}"
    if borrows and own_width != target_width:
        return (f"it takes the target's {' and '.join(borrows)}, yet its own rows are {own_width} wide "
                f"and the target's {target_width}")
    return None


def is_head_key(key: str) -> bool:
    """Metadata keys worth decoding for :func:`trained_heads` and :func:`mtp_head_problem`."""
    lowered = key.lower()
    return (key.endswith(_MTP_KEY_SUFFIXES) or key == "split.count"
            or "eagle" in lowered or "medusa" in lowered)


def trained_heads(architecture: str, values: Mapping[str, Any], tensor_names: Iterable[str]) -> tuple[str, ...]:
    """Which trained drafting heads a file carries, as words (empty: none)."""
    names = [name.lower() for name in tensor_names]
    keys = [key.lower() for key in values]
    found: list[str] = []
    if mtp_layers(architecture, values) or any(".nextn." in name for name in names):
        found.append(MTP)
    if ("eagle" in architecture.lower() or any(key.startswith(("eagle3.", "eagle.")) for key in keys)
            or any(name in ("d2t", "t2d") or name.startswith(("d2t.", "t2d.", "eagle")) for name in names)):
        found.append(EAGLE3)
    if "medusa" in architecture.lower() or any("medusa" in name for name in names) \
            or any("medusa" in key for key in keys):
        found.append(MEDUSA)
    if architecture in ("dflash", "gemma4-assistant"):
        found.append(HIDDEN_STATE_DRAFTERS[architecture])
    return tuple(found)


# ---------------------------------------------------------------------------
# MTP


def mtp_layers(architecture: str, values: Mapping[str, Any]) -> int:
    """``{arch}.nextn_predict_layers``: how many of the last blocks are MTP heads (0: none)."""
    nextn = values.get(f"{architecture}.nextn_predict_layers") if architecture else None
    return nextn if type(nextn) is int and nextn > 0 else 0


# ggml types a head's weights may not have: llama.cpp's matrix products and norms take
# floats and quantised blocks; an integer or F64 weight crashes the head's first graph
# (SIGSEGV or SIGABRT, after the trial load, which builds no head, has passed).
NOT_WEIGHT_TYPES = {24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64"}
I64 = 27
EAGLE3_MAPS = ("d2t", "t2d")  # an EAGLE-3 file's vocabulary maps: integers by design


def weight_type_problem(names_types: Iterable[tuple[str, int]]) -> str | None:
    """The first tensor of ``(name, ggml type)`` stored as a type no weight may have."""
    for name, ggml_type in names_types:
        if ggml_type in NOT_WEIGHT_TYPES:
            return (f"{name} is stored as {NOT_WEIGHT_TYPES[ggml_type]}; llama.cpp computes with float "
                    "or quantised weights")
    return None


def eagle3_map_problem(tensors: Mapping[str, tuple[int, tuple[int, ...]]], n_vocab: int, target_vocab: int,
                       d2t_range: tuple[int, int] | None) -> str | None:
    """What an EAGLE-3 drafter's own tensors say against running it, where llama.cpp
    would crash: ``tensors`` is {name: (ggml type, shape)}; ``d2t_range`` the lowest and
    highest id in its ``d2t`` map (None: not read). The map scatters the drafter's
    logits into the target's vocabulary (eagle3.cpp asserts its type and length; a
    row past the vocabulary is an out-of-bounds write in ggml_set_rows)."""
    why = weight_type_problem((name, t) for name, (t, _shape) in tensors.items() if name not in EAGLE3_MAPS)
    if why or "d2t" not in tensors:
        return why
    d2t_type, d2t_shape = tensors["d2t"]
    if d2t_type != I64:
        name = NOT_WEIGHT_TYPES.get(d2t_type) or FLOAT_NAMES.get(d2t_type, f"ggml type {d2t_type}")
        return f"its d2t map is stored as {name}; llama.cpp takes I64"
    length = d2t_shape[0] if d2t_shape else 0
    output = tensors.get("output.weight")
    rows = output[1][1] if output is not None and len(output[1]) > 1 else target_vocab  # its own, or the target's
    if len(d2t_shape) != 1 or length != rows:
        return f"its d2t map has {length} entries, and its output has {rows} rows"
    if d2t_range is not None and (d2t_range[0] < 0 or d2t_range[1] >= n_vocab):
        bad = d2t_range[0] if d2t_range[0] < 0 else d2t_range[1]
        return f"its d2t map names token {bad}, outside the vocabulary of {n_vocab}"
    return None


FLOAT_NAMES = {0: "F32", 1: "F16", 30: "BF16"}


def mtp_head_problem(architecture: str, values: Mapping[str, Any], tensor_names: Iterable[str],
                     tensor_types: Mapping[str, int] | None = None) -> str | None:
    """None when Tandem may make an MTP context on this file without llama.cpp aborting;
    otherwise one line saying why not (:data:`NO_MTP_HEAD` for a file without one).
    ``tensor_types``: {name: ggml type}, so a head weight of a type llama.cpp cannot
    compute with is refused too."""
    names = frozenset(tensor_names)
    nextn = mtp_layers(architecture, values)
    if not nextn and not any(".nextn." in name for name in names):
        return NO_MTP_HEAD
    graph = MTP_ARCHITECTURES.get(architecture)
    why = _metadata_problem(architecture, graph, values, nextn)
    if why is None and graph is not None:
        why = _tensor_problem(architecture, graph, values, names, nextn)
        if why is None and tensor_types:
            first = values[f"{architecture}.block_count"] - nextn
            in_head = [(name, t) for name, t in sorted(tensor_types.items())
                       if (match := _BLOCK_NAME.match(name)) and int(match.group(1)) >= first]
            why = weight_type_problem(in_head)
        parts = values.get("split.count")
        if why and type(parts) is int and parts > 1:  # the other parts' tensors are not read here
            why += f" (a split file: Tandem reads the tensors of its first part of {parts} only)"
    return CANNOT_RUN + why if why else None


def _metadata_problem(arch: str, graph: MtpGraph | None, values: Mapping[str, Any], nextn: int) -> str | None:
    """What the architecture and its keys say against running the head."""
    if graph is None:
        return f"llama.cpp has no MTP graph for {repr(arch) if arch else 'a file without an architecture'}"
    if not nextn:  # llama.cpp would load no MTP block, and refuse the tensors it did not take
        return f"it carries nextn tensors but no '{arch}.nextn_predict_layers'"
    blocks = values.get(f"{arch}.block_count")
    if type(blocks) is not int:
        return f"'{arch}.block_count' is missing"
    if nextn > blocks:
        return f"nextn_predict_layers {nextn} exceeds block_count {blocks}"
    if nextn == blocks:
        return f"nextn_predict_layers {nextn} leaves no trunk of the {blocks} blocks"
    if graph.single_block and nextn != 1:
        return f"this llama.cpp runs one MTP block of {arch}, the file has {nextn}"
    return _hparam_problem(arch, graph, values)


def _tensor_problem(arch: str, graph: MtpGraph, values: Mapping[str, Any], names: frozenset[str],
                    nextn: int) -> str | None:
    """What the tensors lack (the keys already passed :func:`_metadata_problem`)."""
    if _TRUNK_PROBE not in names:
        return f"{_TRUNK_PROBE} is missing: the file holds an MTP head without its trunk"
    blocks = values[f"{arch}.block_count"]
    first = blocks - nextn  # the MTP blocks are the last nextn, counted in block_count
    why = _stray_nextn(names, first, blocks)
    for i in range(first, blocks):  # llama.cpp runs the first; with load_mtp it needs them all
        why = why or _block_problem(arch, graph, values, names, i)
    return why


def _stray_nextn(names: frozenset[str], first: int, blocks: int) -> str | None:
    """A nextn tensor on a trunk block (or past the last): llama.cpp takes none such."""
    for name in sorted(names):
        match = _NEXTN_NAME.match(name)
        if match and not first <= int(match.group(1)) < blocks:
            return f"{name} lies outside the MTP blocks (blk.{first} to blk.{blocks - 1})"
    return None


def _hparam_problem(arch: str, graph: MtpGraph, values: Mapping[str, Any]) -> str | None:
    """The metadata a graph asserts before it looks at a tensor."""
    def positive(suffix: str) -> bool:
        value = values.get(f"{arch}.{suffix}")
        return type(value) is int and value > 0

    if graph.mla and not (positive("attention.key_length_mla") and positive("attention.value_length_mla")):
        return (f"llama.cpp's {arch} MTP graph needs MLA ('{arch}.attention.key_length_mla' "
                "and 'value_length_mla' above 0)")
    if graph.q_lora and not positive("attention.q_lora_rank"):
        return f"llama.cpp's {arch} MTP graph needs '{arch}.attention.q_lora_rank' above 0"
    temperature = values.get(f"{arch}.attention.temperature_scale")
    if graph.no_attention_temperature and temperature not in (None, 0, 0.0):
        return f"llama.cpp's {arch} MTP graph takes no attention temperature scale (the file sets {temperature})"
    if graph.equal_head_sizes or graph.rope_whole_head:
        return _head_size_problem(arch, graph, values)
    return None


def _head_size_problem(arch: str, graph: MtpGraph, values: Mapping[str, Any]) -> str | None:
    """Head sizes as llama.cpp derives them (load_hparams): key and value lengths default
    to embedding_length / head_count (layer 0's), the RoPE width to the key length; the
    sliding-window ones to the full ones. Layer 0 may be either, so both are checked."""
    def integer(suffix: str) -> int | None:
        value = values.get(f"{arch}.{suffix}")
        return value if type(value) is int else None

    heads = values.get(f"{arch}.attention.head_count")
    heads = heads[0] if isinstance(heads, list) and heads else heads
    n_embd = integer("embedding_length")
    default = n_embd // heads if type(heads) is int and heads > 0 and n_embd is not None else None
    full: tuple[int | None, ...] = (None, None, None)
    for swa in ("", "_swa"):
        k = integer(f"attention.key_length{swa}") or (full[0] if swa else default)
        v = integer(f"attention.value_length{swa}") or (full[1] if swa else default)
        rot = integer(f"rope.dimension_count{swa}") or (full[2] if swa else k)
        if k is None or v is None:
            return f"its head sizes are unknown (no '{arch}.embedding_length' and 'attention.head_count')"
        if graph.equal_head_sizes and k != v:
            return f"llama.cpp's {arch} MTP graph needs equal key and value head sizes (the file has {k} and {v})"
        if graph.rope_whole_head and rot != k:
            return f"llama.cpp's {arch} MTP graph needs RoPE over the whole head ({rot} of {k} dimensions)"
        full = (k, v, rot)
    return None


def _block_problem(arch: str, graph: MtpGraph, values: Mapping[str, Any], names: frozenset[str],
                   i: int) -> str | None:
    """What MTP block ``i`` lacks for ``graph``, or None."""
    if graph.moe_block:
        dense = values.get(f"{arch}.leading_dense_block_count")
        if type(dense) is int and i < dense:  # the loader gives a dense block no router
            return (f"blk.{i} is a dense block (leading_dense_block_count {dense}); llama.cpp's {arch} "
                    "MTP graph needs a routed one")
    needs = _NEXTN_TENSORS + graph.tensors
    if graph.routed:
        needs += graph.routed if f"blk.{i}.{_GATE_INP}" in names else graph.dense
    return next(filter(None, (_lacks(need, i, names) for need in needs)), None)


def _lacks(need: str, i: int, names: frozenset[str]) -> str | None:
    """``need`` ("a|b+c": a, or both b and c) for block ``i``: None when the file has it."""
    options = [alternative.split("+") for alternative in need.split("|")]
    if any(all(f"blk.{i}.{name}" in names for name in option) for option in options):
        return None
    if len(options) == 1:
        return f"blk.{i}.{next(n for n in options[0] if f'blk.{i}.{n}' not in names)} is missing"
    return f"blk.{i} has neither " + " nor ".join(" + ".join(option) for option in options)


# ---------------------------------------------------------------------------
# What to say


def head_lines(architecture: str, heads: Iterable[str], mtp_layers: int = 0,
               mtp_problem: str | None = None) -> tuple[str, ...]:
    """What the heads a file carries (:func:`trained_heads`) mean for drafting, one line
    per kind: its MTP head drafts, or why it cannot; a hidden-state drafter file cannot
    run yet; other heads are not used yet. Empty for a file that carries none."""
    heads = list(heads)
    if architecture == "eagle3":  # its d2t map and the like are part of it
        return (f"{EAGLE3_DRAFTER}: drafts for the target it was trained on, reading that target's layers; "
                "name it as the draft",)
    if architecture in HIDDEN_STATE_DRAFTERS:
        return (f"not used yet: {HIDDEN_STATE_DRAFTERS[architecture]}, which {_WHY_NOT_YET[architecture]}; "
                "this build of Tandem cannot run it yet",)
    lines = []
    if MTP in heads:
        lines.append(_mtp_line(mtp_layers, mtp_problem))
    unused = [head for head in heads if head != MTP]
    if unused:
        lines.append(_not_used_line(unused))
    return tuple(lines)


def _mtp_line(layers: int, problem: str | None) -> str:
    if problem is None and layers > 0:
        return (f"drafts with its own MTP head ({layers} layer{'s' if layers > 1 else ''}) when no draft "
                "model is named; --drafter mtp asks for it")
    return problem or NO_MTP_HEAD


def _not_used_line(heads: list[str]) -> str:
    """One line: what the file carries and that Tandem does not use it yet."""
    what = heads[0] if len(heads) == 1 else ", ".join(heads[:-1]) + " and " + heads[-1]
    return (f"not used yet: it carries {what}, trained to draft; Tandem drafts with a separate "
            "draft model, copies or a target's own MTP head for now")
