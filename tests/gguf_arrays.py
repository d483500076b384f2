"""Read a generated GGUF's metadata and tensors back as numpy, and write one from arrays:
what the drafter writers (tests/gemma4_models.py, tests/dflash_models.py) share.

A drafter made to agree with its target is derived from the target's own weights (its
embedding, its output matrix) and carries its tokenizer; ``gguf.GGUFReader`` takes
seconds over a 49k vocabulary and its merges, so :func:`read_gguf` walks the header
itself (tens of milliseconds) and maps the tensor data.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

V = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType

_SCALARS = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
            V.FLOAT32: "<f", V.BOOL: "<?", V.UINT64: "<Q", V.INT64: "<q", V.FLOAT64: "<d"}
_NUMPY = {V.UINT8: np.uint8, V.INT8: np.int8, V.UINT16: np.uint16, V.INT16: np.int16, V.UINT32: np.uint32,
          V.INT32: np.int32, V.FLOAT32: np.float32, V.BOOL: np.bool_, V.UINT64: np.uint64, V.INT64: np.int64,
          V.FLOAT64: np.float64}


@dataclass(frozen=True)
class TensorRecord:
    name: str
    ne: tuple[int, ...]  # ggml's shape, innermost first
    qtype: int
    offset: int          # from the start of the file
    nbytes: int


@dataclass(frozen=True)
class GGUFContents:
    path: Path
    fields: dict[str, tuple[Any, int, int | None]]  # key -> (value, value type, element type)
    tensors: dict[str, TensorRecord]

    @property
    def arch(self) -> str:
        return self.fields["general.architecture"][0]

    def value(self, key: str, default: Any = None) -> Any:
        """``{arch}.KEY``'s value (a key with a dot-free first part is taken as it is)."""
        full = key if key.startswith(("general.", "tokenizer.")) else f"{self.arch}.{key}"
        return self.fields[full][0] if full in self.fields else default

    def tokenizer(self) -> dict[str, tuple[Any, int, int | None]]:
        return {k: v for k, v in self.fields.items() if k.startswith("tokenizer.")}

    def array(self, name: str) -> np.ndarray:
        """Tensor ``name`` as float32, numpy's shape (ggml's reversed: rows first)."""
        t = self.tensors[name]
        raw = np.memmap(self.path, dtype=np.uint8, mode="r", offset=t.offset, shape=(t.nbytes,))
        qtype = Q(t.qtype)
        if qtype == Q.F32:
            data = raw.view(np.float32)
        elif qtype == Q.F16:
            data = raw.view(np.float16).astype(np.float32)
        else:
            data = gguf.quants.dequantize(np.asarray(raw), qtype)
        return np.asarray(data, dtype=np.float32).reshape(t.ne[::-1])


def read_gguf(path: str | Path) -> GGUFContents:
    """Every metadata value and tensor record of a GGUF file (v2/v3, little-endian)."""
    path = Path(path)
    size = path.stat().st_size
    prefix = 1 << 22
    while True:  # the header: a prefix of the file, grown until it parses
        with open(path, "rb") as f:
            head = f.read(prefix)
        try:
            return _parse(path, head)
        except (struct.error, _Short):
            if prefix >= size:
                raise ValueError(f"{path.name}: truncated GGUF header") from None
            prefix *= 4


class _Short(Exception):
    pass


def _parse(path: Path, head: bytes) -> GGUFContents:
    pos = 0

    def take(fmt: str) -> Any:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, head, pos)
        pos += struct.calcsize(fmt)
        return value

    def text() -> str:
        nonlocal pos
        n = take("<Q")
        if pos + n > len(head):
            raise _Short
        s = head[pos:pos + n].decode("utf-8", errors="surrogateescape")
        pos += n
        return s

    if head[:4] != b"GGUF":
        raise ValueError(f"{path.name}: not a GGUF file")
    pos = 4
    version = take("<I")
    if version < 2:
        raise ValueError(f"{path.name}: GGUF version {version} is not read here")
    n_tensors, n_kv = take("<Q"), take("<Q")
    fields: dict[str, tuple[Any, int, int | None]] = {}
    for _ in range(n_kv):
        key = text()
        vtype = V(take("<I"))
        if vtype == V.STRING:
            fields[key] = (text(), vtype, None)
        elif vtype == V.ARRAY:
            sub = V(take("<I"))
            n = take("<Q")
            if sub == V.STRING:
                fields[key] = ([text() for _ in range(n)], vtype, sub)
            elif sub in _NUMPY:
                dtype = np.dtype(_NUMPY[sub]).newbyteorder("<")
                if pos + n * dtype.itemsize > len(head):
                    raise _Short
                values = np.frombuffer(head, dtype=dtype, count=n, offset=pos)
                pos += n * dtype.itemsize
                fields[key] = (values.tolist(), vtype, sub)
            else:
                raise ValueError(f"{path.name}: nested array '{key}' is not read here")
        else:
            fields[key] = (take(_SCALARS[vtype]), vtype, None)
    records = []
    for _ in range(n_tensors):
        name = text()
        ne = tuple(take("<Q") for _ in range(take("<I")))
        qtype, offset = take("<I"), take("<Q")
        records.append((name, ne, qtype, offset))
    alignment = fields.get("general.alignment", (32,))[0]
    data_start = pos + (-pos % alignment)
    tensors = {}
    for name, ne, qtype, offset in records:
        block, size = gguf.GGML_QUANT_SIZES[Q(qtype)]
        nbytes = math.prod(ne) // block * size
        tensors[name] = TensorRecord(name, ne, qtype, data_start + offset, nbytes)
    return GGUFContents(path, fields, tensors)


# -- writing ----------------------------------------------------------------------------

def add_value(writer: Any, key: str, value: Any) -> None:
    """One metadata value, typed as llama.cpp's loader reads it (u32 counts, f32 sizes,
    i32 arrays, bool flags, strings)."""
    if isinstance(value, bool):
        writer.add_key_value(key, value, V.BOOL)
    elif isinstance(value, int):
        writer.add_key_value(key, value, V.UINT32)
    elif isinstance(value, float):
        writer.add_key_value(key, value, V.FLOAT32)
    elif isinstance(value, str):
        writer.add_key_value(key, value, V.STRING)
    elif isinstance(value, list):
        if all(isinstance(v, bool) for v in value):
            sub = V.BOOL
        elif all(isinstance(v, int) for v in value):
            sub = V.INT32
        else:
            sub = V.FLOAT32
        writer.add_key_value(key, value, V.ARRAY, sub)
    else:
        raise TypeError(f"{key}: no GGUF type for {value!r}")


ENCODINGS = ("Q8_0", "F16", "F32")


def write_gguf(path: str | Path, arch: str, name: str, values: dict[str, Any],
               tokenizer: dict[str, tuple[Any, int, int | None]], tensors: dict[str, np.ndarray], *,
               ftype: str = "Q8_0", keep_f32: tuple[str, ...] = (), retype: dict[str, Any] | None = None) -> Path:
    """Write ``tensors`` (numpy shapes, rows first) under ``arch``, with ``values`` as
    ``{arch}.KEY`` (None: left out) and the ``tokenizer`` fields as given. Matrices whose
    rows are a multiple of 32 long are stored as ``ftype``; vectors, other matrices and
    the names in ``keep_f32`` stay F32 (llama.cpp keeps norms and scales so). ``retype``
    stores tensors by name as that numpy type (a file that lies)."""
    if ftype not in ENCODINGS:
        raise ValueError(f"ftype must be one of {', '.join(ENCODINGS)}, not {ftype!r}")
    path = Path(path)
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(name)
    writer.add_file_type({"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "F16": gguf.LlamaFileType.MOSTLY_F16,
                          "F32": gguf.LlamaFileType.ALL_F32}[ftype])
    for key, value in values.items():
        if value is not None:
            add_value(writer, f"{arch}.{key}", value)
    for key, (value, vtype, sub) in tokenizer.items():
        if value is None:
            continue
        writer.add_key_value(key, value, vtype, sub) if sub is not None else writer.add_key_value(key, value, vtype)
    for tname, data in tensors.items():
        if retype and tname in retype:
            writer.add_tensor(tname, np.asarray(data).astype(retype[tname]))
            continue
        data = np.ascontiguousarray(data, dtype=np.float32)
        matrix = data.ndim >= 2 and data.shape[-1] % 32 == 0 and tname not in keep_f32
        if not matrix or ftype == "F32":
            writer.add_tensor(tname, data)
        elif ftype == "F16":
            writer.add_tensor(tname, data.astype(np.float16))
        else:
            writer.add_tensor(tname, gguf.quants.quantize(data, Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
