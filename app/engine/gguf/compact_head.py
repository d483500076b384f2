"""A compact copy of a float target's MTP head: its blocks and output matrix at Q8_0.

An MTP head step is one decoder block plus the output layer over the whole vocabulary,
and on a CPU every step reads all of those weights. In a float file the output matrix
alone is most of the step (the test Qwen 3.5 here: 201 MB of a 240 MB step, 10 ms against
the target's 37), so drafting two tokens cost half a target step. Eight bits a weight
read a quarter (F32) or half (F16, BF16) of that, and llama.cpp runs a head from a file
of its own: every architecture with an MTP graph in this build loads an "MTP-only" GGUF
(``blk.0.attn_norm.weight`` absent: the trunk's blocks are not required), and the head's
context reads nothing of the target's but the hidden rows Tandem hands it.

So where the head's output matrix is float, Tandem writes that file once per target
(``write_compact_head``): the target's metadata, its tensors outside the blocks (the
token embedding, the output norm and matrix) and its last ``nextn_predict_layers``
blocks, the large matrices as Q8_0 and everything else as it is. The head's guesses
change a little; the target still judges every one, so the reply does not change.

Pure Python (gguf's reader, writer and Q8_0 quantiser; numpy), so no file it reads can
abort the process; the backend loads the result (``app.backends.head_files``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

from app.engine.gguf.draft_heads import MTP_ARCHITECTURES, mtp_layers
from app.engine.gguf.header import FLOAT_TENSOR_TYPES, TensorInfo

Q8_0 = gguf.GGMLQuantizationType.Q8_0
# The matrices a head step multiplies by (and the embedding it reads rows of): these go
# to Q8_0. Norms, routers, biases and anything else keep their type, as llama.cpp's
# own quantiser keeps them.
_MATRICES = (
    "token_embd.weight", "output.weight", "nextn.eh_proj.weight", "nextn.shared_head_head.weight",
    "nextn.embed_tokens.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_qkv.weight",
    "attn_output.weight", "attn_q_a.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight", "attn_kv_b.weight",
    "ffn_up.weight", "ffn_down.weight", "ffn_gate.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
    "ffn_gate_exps.weight", "ffn_gate_up_exps.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
    "ffn_gate_shexp.weight",
)
_ROWS_PER_CHUNK = 4096  # rows quantised at once: bounds the float copy a chunk makes
FORMAT = 1  # bump when what is written changes: older copies are then made again


class CompactHeadError(Exception):
    """The compact head could not be written (one line, why)."""


@dataclass(frozen=True)
class CompactPlan:
    """What a compact head keeps of its target: the tensors by name, each with whether it
    becomes Q8_0, and the file's size (an upper estimate, before alignment padding)."""

    blocks: tuple[int, ...]
    tensors: tuple[tuple[str, bool], ...]
    bytes: int
    head_type: str  # the output matrix's type in the target ("F16"...)


def compact_plan(architecture: str, values: dict, tensors: tuple[TensorInfo, ...]) -> tuple[CompactPlan | None, str]:
    """(the plan, "") where a compact head pays, else (None, why not). It pays where the
    matrix the head's output layer reads is float; a quantised one is small already."""
    if architecture not in MTP_ARCHITECTURES:
        return None, f"{architecture or 'this architecture'} has no MTP graph here"
    nextn = mtp_layers(architecture, values)
    n_layer = values.get(f"{architecture}.block_count")
    if not nextn or type(n_layer) is not int or n_layer <= nextn:
        return None, "no MTP blocks after a trunk"
    blocks = tuple(range(n_layer - nextn, n_layer))
    by_name = {t.name: t for t in tensors}
    if not all(f"blk.{b}.nextn.eh_proj.weight" in by_name for b in blocks):
        return None, "its MTP blocks are not in this file (another part of a split file?)"
    head = next((by_name[name] for name in (*(f"blk.{b}.nextn.shared_head_head.weight" for b in blocks),
                                             "output.weight", "token_embd.weight") if name in by_name), None)
    if head is None or not head.is_float:
        return None, "its output matrix is quantised already"
    kept: list[tuple[str, bool]] = []
    size = 0
    for tensor in tensors:
        block = _block_of(tensor.name)
        if block is not None and block not in blocks:
            continue
        small = _to_q8(tensor)
        kept.append((tensor.name, small))
        size += _q8_bytes(tensor.shape) if small else tensor.nbytes
    return CompactPlan(blocks, tuple(kept), size, FLOAT_TENSOR_TYPES[head.ggml_type]), ""


def write_compact_head(source: str | os.PathLike[str], dest: str | os.PathLike[str], plan: CompactPlan,
                       progress: Callable[[float], None] | None = None) -> None:
    """Write ``plan``'s compact head of ``source`` to ``dest`` (through a temporary file
    beside it, this process's own, renamed at the end: a half-written file is never left
    under ``dest``).
    Raises CompactHeadError."""
    dest = Path(dest)
    partial = dest.with_name(f"{dest.name}.{os.getpid()}.partial")  # two processes never share one
    try:
        reader = gguf.GGUFReader(os.fspath(source))
        arch = str(reader.fields["general.architecture"].contents())
        writer = gguf.GGUFWriter(os.fspath(partial), arch)
        for key, field in reader.fields.items():
            # The writer sets the architecture and lays the data out at its own alignment.
            if key.startswith("GGUF.") or key in ("general.architecture", "general.alignment"):
                continue
            kind = field.types[0]
            if kind == gguf.GGUFValueType.ARRAY:
                writer.add_key_value(key, field.contents(), kind, sub_type=field.types[-1])
            else:
                writer.add_key_value(key, field.contents(), kind)
        source_tensors = {t.name: t for t in reader.tensors}
        chosen = [(source_tensors[name], small) for name, small in plan.tensors]
        for tensor, small in chosen:
            if small:  # numpy's order, innermost last
                shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
                writer.add_tensor_info(tensor.name, shape, np.dtype(np.float32), _q8_bytes(shape[::-1]), raw_dtype=Q8_0)
            else:  # as read: a float array, or bytes (quantised, BF16) that the writer sizes by type
                data = np.asarray(tensor.data)
                writer.add_tensor_info(tensor.name, data.shape, data.dtype, int(tensor.n_bytes),
                                       raw_dtype=tensor.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        total = sum(int(t.n_bytes) for t, _ in chosen) or 1
        done = 0
        for tensor, small in chosen:
            writer.write_tensor_data(_q8_of(tensor) if small else np.asarray(tensor.data))
            done += int(tensor.n_bytes)
            if progress is not None:
                progress(done / total)
        writer.close()
        os.replace(partial, dest)
    except Exception as exc:  # gguf's reader on a file it cannot read: any error, one line
        partial.unlink(missing_ok=True)
        raise CompactHeadError(f"could not write a compact MTP head ({type(exc).__name__}: {exc})") from None


def _block_of(name: str) -> int | None:
    if not name.startswith("blk."):
        return None
    part = name.split(".", 2)[1]
    return int(part) if part.isdigit() else None


def _to_q8(tensor: TensorInfo) -> bool:
    return (tensor.is_float and len(tensor.shape) >= 2 and tensor.shape[0] % 32 == 0
            and tensor.name.endswith(_MATRICES))


def _q8_bytes(shape: tuple[int, ...]) -> int:
    """Bytes of a Q8_0 tensor of ggml ``shape`` (innermost first): 34 bytes per 32 weights."""
    return int(np.prod(shape, dtype=np.int64)) // 32 * 34


def _q8_of(tensor) -> np.ndarray:
    """A float tensor of gguf's reader as Q8_0 bytes, a chunk of rows at a time."""
    row = int(tensor.shape[0])  # ggml's innermost size
    raw = np.asarray(tensor.data)
    if tensor.tensor_type == gguf.GGMLQuantizationType.BF16:
        rows = raw.view(np.uint16).reshape(-1, row)
    else:
        rows = raw.reshape(-1, row)
    out = np.empty((rows.shape[0], row // 32 * 34), dtype=np.uint8)
    for start in range(0, rows.shape[0], _ROWS_PER_CHUNK):
        chunk = rows[start:start + _ROWS_PER_CHUNK]
        if chunk.dtype == np.uint16:  # bfloat16: the high half of a float32
            chunk = (chunk.astype(np.uint32) << 16).view(np.float32)
        out[start:start + len(chunk)] = gguf.quants.quantize(np.asarray(chunk, dtype=np.float32), Q8_0)
    return out.reshape(-1)
