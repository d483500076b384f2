"""Tiny real GGUF files for tests: vocab-only models written with ``gguf.GGUFWriter``,
and raw byte builders for files no honest writer would produce."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np


def make_tokens(n: int) -> list[str]:
    """A vocabulary of ``n`` distinct texts, the first three shaped like special tokens."""
    special = ["<unk>", "<s>", "</s>"]
    return special[:n] + [f"tok{i}" for i in range(len(special[:n]), n)]


def write_vocab_gguf(
    path: Path,
    tokens: Sequence[str | bytes] | None = None,
    *,
    vocab_type: str | None = "gpt2",
    pre: str | None = None,
    bos_id: int | None = 1,
    eos_id: int | None = 2,
    add_bos: bool | None = False,
    add_eos: bool | None = False,
    arch: str = "llama",
    name: str | None = "tiny",
    chat_template: str | None = None,
    context_length: int | None = None,
    file_type: int | None = None,
    tensor: bool = False,
) -> Path:
    """Write a vocab-only model; every keyword left as None is left out of the file.

    The vocabulary is completed as llama.cpp needs it to tokenize (the validator
    refuses it otherwise, app/engine/gguf/rules.py): a SentencePiece ('llama') one
    gets the 256 byte tokens it lacks appended, a BERT one a separator token.

    ``tensor=True`` adds one F32 tensor of 8 values (32 bytes, so the file ends
    exactly where its data does: any shorter prefix is a truncated file).
    """
    tokens = make_tokens(64) if tokens is None else list(tokens)
    if vocab_type == "llama" and tokens:
        tokens += [b for b in (f"<0x{i:02X}>" for i in range(256)) if b not in tokens]
    w = gguf.GGUFWriter(path, arch)
    if name is not None:
        w.add_name(name)
    if context_length is not None:
        w.add_context_length(context_length)
    if file_type is not None:
        w.add_file_type(file_type)
    if vocab_type is not None:
        w.add_tokenizer_model(vocab_type)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    if tokens:
        w.add_token_list(list(tokens))
    if bos_id is not None:
        w.add_bos_token_id(bos_id)
    if eos_id is not None:
        w.add_eos_token_id(eos_id)
    if vocab_type == "bert" and tokens:
        w.add_sep_token_id(min(2, len(tokens) - 1))
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    if tensor:
        w.add_tensor("output_norm.weight", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- raw bytes ---------------------------------------------------------------

T = gguf.GGUFValueType


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def gstr(s: str | bytes) -> bytes:
    data = s.encode() if isinstance(s, str) else s
    return u64(len(data)) + data


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + u32(vtype) + payload


def tensor_info(name: str, dims: Sequence[int], ggml_type: int, offset: int) -> bytes:
    return gstr(name) + u32(len(dims)) + b"".join(u64(d) for d in dims) + u32(ggml_type) + u64(offset)


def raw_gguf(
    kvs: Sequence[bytes] = (),
    tensors: Sequence[bytes] = (),
    data: bytes = b"",
    *,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    alignment: int = 32,
) -> bytes:
    """Header + metadata + tensor infos (+ padding and ``data`` when there are tensors)."""
    out = b"GGUF" + u32(version)
    out += u64(len(tensors) if n_tensors is None else n_tensors)
    out += u64(len(kvs) if n_kv is None else n_kv)
    out += b"".join(kvs) + b"".join(tensors)
    if tensors:
        out += b"\0" * (-len(out) % alignment) + data
    return out
