"""GGUF model files' headers, checked before anything else reads them.

``gguf.GGUFReader`` trusts every count and length in the header (a 49-byte file
declaring a 2^63-element array keeps it busy for minutes), and llama.cpp answers a
bad file with a bare NULL. So :func:`validate_gguf` walks the header itself,
checking each length against the bytes actually left in the file, and says in one
line what is wrong; :func:`scan_header` does the same walk and also decodes the
values a caller wants (``meta.read_metadata``'s few keys). Other people's files
are hostile until this has passed them.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf

from app.engine.errors import ModelFileError
from app.engine.gguf.rules import first_violation, rule_keys

SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32      # GGUF_DEFAULT_ALIGNMENT
MAX_DIMS = 4                # GGML_MAX_DIMS
MAX_TENSOR_NAME_BYTES = 63  # GGML_MAX_NAME is 64 including the NUL
MAX_ARRAY_NESTING = 8       # llama.cpp reads none; a bound keeps recursion finite
HEADER_BYTES = 24           # magic, version, n_tensors, n_kv

# The smallest a metadata entry or tensor info can be on disk; counts that would
# need more bytes than the file has are refused before any loop runs.
_MIN_KV_BYTES = 8 + 1 + 4 + 1               # key length, 1-byte key, type, 1-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 4 + 8  # name length, 1-byte name, n_dims, type, offset

_INT64_MAX = 2**63 - 1
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

_T = gguf.GGUFValueType
_SCALAR_FORMATS: dict[int, str] = {
    _T.UINT8: "B", _T.INT8: "b", _T.UINT16: "H", _T.INT16: "h", _T.UINT32: "I", _T.INT32: "i",
    _T.FLOAT32: "f", _T.BOOL: "?", _T.UINT64: "Q", _T.INT64: "q", _T.FLOAT64: "d",
}
_SCALARS: dict[int, struct.Struct] = {t: struct.Struct("<" + f) for t, f in _SCALAR_FORMATS.items()}
_MIN_ELEMENT_BYTES: dict[int, int] = {
    **{t: s.size for t, s in _SCALARS.items()},
    _T.STRING: 8,      # length only
    _T.ARRAY: 4 + 8,   # element type and count only
}


@dataclass(frozen=True)
class GGUFHeader:
    """What :func:`validate_gguf` learned while checking a file."""

    version: int
    n_tensors: int
    n_kv: int
    alignment: int
    data_offset: int  # where tensor data starts (no tensors: end of the header)
    data_size: int    # bytes of tensor data, alignment padding included
    file_size: int
    n_parameters: int = 0  # elements of all tensors: the model's parameter count (this file's part)
    tensors: tuple[TensorInfo, ...] = field(default=(), repr=False)  # in file order


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header describes it (its data is not read)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    nbytes: int
    offset: int = 0  # where its data starts, from the start of the tensor data

    @property
    def is_float(self) -> bool:
        """F32, F16 or BF16: not quantised."""
        return self.ggml_type in FLOAT_TENSOR_TYPES


FLOAT_TENSOR_TYPES = {0: "F32", 1: "F16", 30: "BF16"}  # ggml type -> name


def validate_gguf(path: str | os.PathLike[str]) -> GGUFHeader:
    """Check a GGUF file's structure against its size, and its metadata against what
    llama.cpp asserts (app.engine.gguf.rules); raise ModelFileError saying why not.
    A caller that goes on to load the file wants ``app.engine.gguf.model_file.open_model_file``:
    one walk for every fact a load needs."""
    return scan_header(Path(path), _nothing)[0]


def _nothing(key: str) -> bool:
    return False


def scan_header(path: Path, wanted: Callable[[str], bool], *,
                name: Path | None = None) -> tuple[GGUFHeader, dict[str, Any]]:
    """Validate ``path`` and decode the metadata values whose keys ``wanted`` accepts
    (and those the load-time rules read); every message names ``name`` (the path as the
    user gave it, where ``path`` is its resolved form) or else ``path``."""
    shown = path if name is None else name
    header, values = _walk(path, lambda key: wanted(key) or rule_keys(key), shown)
    reason = first_violation(values, header.alignment)
    if reason:
        raise file_error(shown, reason)
    return header, values


class NeedMoreBytes(Exception):
    """A walk of a header prefix (:func:`scan_header_prefix`) reached past the bytes it
    was given, though not past the file: ``needed`` bytes from the start would do."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


def scan_header_prefix(prefix: bytes, file_size: int, wanted: Callable[[str], bool], *,
                       name: Path) -> tuple[GGUFHeader, dict[str, Any]]:
    """:func:`scan_header` of a file known only by its first bytes (``prefix``) and its
    size: a header read over the network. Every length is checked against ``file_size``
    as a local file's is against its bytes, so a lying header fails the same way; a
    header that goes on past ``prefix`` raises :class:`NeedMoreBytes` (read more and
    walk again). ``name`` is what messages call the file."""
    if file_size < len(prefix):
        raise file_error(name, f"is {len(prefix)} bytes long, more than the {file_size} its server says")
    _check_magic(name, prefix[:64], file_size)
    walker = _Walker(name, prefix, file_size, lambda key: wanted(key) or rule_keys(key))
    header = walker.walk()
    reason = first_violation(walker.values, header.alignment)
    if reason:
        raise file_error(name, reason)
    return header, walker.values


def resolve_model_path(path: str | os.PathLike[str], *,
                       name: Path | None = None) -> tuple[Path, os.stat_result]:
    """``path`` with every symlink followed, and its ``stat``; a path that names no
    readable regular file is a ModelFileError naming ``name`` (else ``path``) and saying
    why in one line: a symlink loop, a dangling link, a directory, a FIFO or device
    (that would block or never end), a folder on the way that cannot be entered."""
    path = Path(path)
    shown = path if name is None else name
    try:
        st = os.stat(path)
    except OSError as exc:
        raise file_error(shown, _stat_failure(path, exc)) from None
    except ValueError:  # a NUL in the name: no file can have it
        raise file_error(shown, "does not exist (its name holds a NUL byte)") from None
    if stat.S_ISDIR(st.st_mode):
        raise file_error(shown, "is a directory, not a model file")
    if not stat.S_ISREG(st.st_mode):
        raise file_error(shown, "is not a regular file")
    # stat succeeded, so every link on the way resolves (a loop would have failed it).
    return Path(os.path.realpath(path)), st


def _stat_failure(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symlink loop (following its links never reaches a file)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read (permission denied on a folder on its way)"
    if exc.errno == errno.ENAMETOOLONG:
        return "cannot be read (the name is too long)"
    if exc.errno == errno.ENOTDIR:
        return "does not exist (a part of its path is a file, not a folder)"
    if exc.errno == errno.ENOENT:
        if os.path.islink(path):
            return f"is a symlink to {shown_path(os.readlink(path))}, which does not exist"
        return f"does not exist (looked in {shown_path(path.parent)})"
    return f"cannot be read ({exc.strerror or exc})"


def _walk(path: Path, wanted: Callable[[str], bool], shown: Path) -> tuple[GGUFHeader, dict[str, Any]]:
    resolve_model_path(path, name=shown)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            _check_magic(shown, f.read(64), size)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                walker = _Walker(shown, buf, size, wanted)
                return walker.walk(), walker.values
    except PermissionError:
        raise file_error(shown, "cannot be read (permission denied)") from None
    except OSError as exc:
        raise file_error(shown, f"cannot be read ({exc.strerror or exc})") from None


def file_error(path: Path, message: str) -> ModelFileError:
    return ModelFileError(f"{shown_name(path)}: {message}")


def shown_name(path: str | os.PathLike[str]) -> str:
    """A file's name fit to print and log: bytes that are not UTF-8 (a name Python holds
    with surrogates) shown as ``\\xff`` instead of failing every encoder they meet."""
    path = Path(path)
    return shown_path(path.name or path)


def shown_path(path: str | os.PathLike[str]) -> str:
    """A whole path, shown as :func:`shown_name` shows a name."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _check_magic(path: Path, head: bytes, size: int) -> None:
    if size == 0:
        raise file_error(path, "is empty (0 bytes), not a GGUF model")
    if head[:4] == b"GGUF":
        return
    if head.startswith(b"version https://git-lfs"):
        raise file_error(path, "is a Git LFS pointer, not the model itself (fetch it with git lfs pull)")
    if head[:4] in (b"lmgg", b"fmgg", b"tjgg"):  # ggml / ggmf / ggjt magics, little-endian
        raise file_error(path, "is an old GGML/GGJT model; llama.cpp needs it converted to GGUF")
    raise file_error(path, f"is not a GGUF file (it starts with {head[:8]!r}, a GGUF file with b'GGUF')")


class _Walker:
    """One pass over the header, every read bounded by the file size."""

    def __init__(self, path: Path, buf: mmap.mmap | bytes, size: int, wanted: Callable[[str], bool]) -> None:
        self.path = path
        self.buf = buf
        self.size = size
        self.have = len(buf)  # the bytes at hand: all of a local file, a prefix of a remote one
        self.wanted = wanted
        self.values: dict[str, Any] = {}
        self.pos = 0
        self.n_parameters = 0
        self.tensors: list[TensorInfo] = []

    def fail(self, message: str) -> ModelFileError:
        return file_error(self.path, message)

    def need(self, n: int, what: str) -> None:
        left = self.size - self.pos
        if n > left:
            raise self.fail(
                f"{what} runs past the end of the file (needs {n} bytes at offset {self.pos}, "
                f"{left} left); the file is truncated or corrupt"
            )
        if self.pos + n > self.have:
            raise NeedMoreBytes(self.pos + n)

    def scalar(self, vtype: int, what: str) -> Any:
        s = _SCALARS[vtype]
        self.need(s.size, what)
        value = s.unpack_from(self.buf, self.pos)[0]
        self.pos += s.size
        return value

    def u32(self, what: str) -> int:
        return self.scalar(_T.UINT32, what)

    def u64(self, what: str) -> int:
        return self.scalar(_T.UINT64, what)

    def raw_string(self, what: str) -> bytes:
        n = self.u64(f"length of {what}")
        self.need(n, what)
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data

    def text(self, what: str) -> str:
        try:
            return self.raw_string(what).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    def walk(self) -> GGUFHeader:
        if self.size < HEADER_BYTES:
            raise self.fail(
                f"the GGUF header is truncated (the file is {self.size} bytes, the header needs {HEADER_BYTES})"
            )
        self.pos = 4
        version = self.u32("version")
        if version == 1:
            raise self.fail("is GGUF version 1, which llama.cpp no longer supports; re-convert the model")
        if version and version & 0xFFFF == 0:
            raise self.fail(f"looks like a big-endian GGUF (version field {version:#x}); llama.cpp needs little-endian")
        if version not in SUPPORTED_VERSIONS:
            raise self.fail(f"is GGUF version {version}; only versions 2 and 3 are supported")
        n_tensors = self.u64("tensor count")
        n_kv = self.u64("metadata count")
        left = self.size - self.pos
        if n_kv * _MIN_KV_BYTES > left:
            raise self.fail(f"declares {n_kv} metadata entries, more than the rest of the file ({left} bytes) can hold")
        if n_tensors * _MIN_TENSOR_INFO_BYTES > left:
            raise self.fail(f"declares {n_tensors} tensors, more than the rest of the file ({left} bytes) can hold")

        alignment = self.walk_metadata(n_kv)
        infos = self.walk_tensor_infos(n_tensors)
        data_offset = _pad(self.pos, alignment) if n_tensors else self.pos
        data_size = self.check_tensor_data(infos, data_offset, alignment)
        return GGUFHeader(version, n_tensors, n_kv, alignment, data_offset, data_size, self.size,
                          self.n_parameters, tuple(self.tensors))

    # -- metadata ----------------------------------------------------------

    def walk_metadata(self, n_kv: int) -> int:
        alignment = DEFAULT_ALIGNMENT
        seen: set[str] = set()
        for i in range(n_kv):
            key = self.text(f"key of metadata entry {i}")
            if not key:
                raise self.fail(f"metadata entry {i} has an empty key")
            if key in seen:
                raise self.fail(f"metadata key '{key}' appears twice")
            seen.add(key)
            vtype = self.u32(f"value type of '{key}'")
            if key == "general.alignment":
                if vtype != _T.UINT32:
                    raise self.fail(f"'general.alignment' has value type {_type_name(vtype)}, expected UINT32")
                alignment = self.u32("value of 'general.alignment'")
                if alignment == 0 or alignment & (alignment - 1):
                    raise self.fail(f"'general.alignment' is {alignment}, not a power of two")
            else:
                keep = self.wanted(key)
                value = self.value(vtype, key, keep, 0)
                if keep:
                    self.values[key] = value
        return alignment

    def value(self, vtype: int, key: str, keep: bool, depth: int) -> Any:
        """Read (``keep``) or skip one value; strings decode with surrogateescape, see _decode."""
        if vtype in _SCALARS:
            return self.scalar(vtype, f"value of '{key}'")
        if vtype == _T.STRING:
            n = self.u64(f"string length of '{key}'")
            self.need(n, f"string value of '{key}'")
            start = self.pos
            self.pos += n
            return _decode(self.buf[start:self.pos]) if keep else None
        if vtype == _T.ARRAY:
            return self.array(key, keep, depth)
        raise self.fail(f"metadata '{key}' has unknown value type {vtype}")

    def array(self, key: str, keep: bool, depth: int) -> list[Any] | None:
        if depth >= MAX_ARRAY_NESTING:
            raise self.fail(f"array '{key}' is nested more than {MAX_ARRAY_NESTING} deep")
        etype = self.u32(f"element type of array '{key}'")
        count = self.u64(f"length of array '{key}'")
        min_size = _MIN_ELEMENT_BYTES.get(etype)
        if min_size is None:
            raise self.fail(f"array '{key}' has unknown element type {etype}")
        # Checked before any loop, so a 2^63-element claim fails at once.
        left = self.size - self.pos
        if count * min_size > left:
            raise self.fail(
                f"array '{key}' declares {count} elements of at least {min_size} bytes, "
                f"more than the {left} bytes left in the file"
            )
        if etype in _SCALARS:
            self.need(count * min_size, f"array '{key}'")
            start = self.pos
            self.pos += count * min_size
            return list(struct.unpack_from(f"<{count}{_SCALAR_FORMATS[etype]}", self.buf, start)) if keep else None
        if etype == _T.STRING:
            return self.string_array(key, count, keep)
        items = [self.array(key, keep, depth + 1) for _ in range(count)]
        return items if keep else None

    def string_array(self, key: str, count: int, keep: bool) -> list[str] | None:
        # The hot loop for vocabularies and merges (~50k entries each): locals only.
        buf, pos, end, unpack = self.buf, self.pos, min(self.size, self.have), _U64.unpack_from
        out: list[str] = []
        for i in range(count):
            if pos + 8 > end:
                self.pos = pos
                self.need(8, f"length of string {i} in '{key}'")
            start = pos + 8
            pos = start + unpack(buf, pos)[0]
            if pos > end:
                if pos > self.size:
                    raise self.fail(f"string {i} in '{key}' runs past the end of the file; the file is truncated or corrupt")
                raise NeedMoreBytes(pos)
            if keep:
                out.append(buf[start:pos].decode("utf-8", "surrogateescape"))
        self.pos = pos
        return out if keep else None

    # -- tensors -----------------------------------------------------------

    def walk_tensor_infos(self, n_tensors: int) -> list[tuple[str, int, int]]:
        """Returns (name, offset, byte size) per tensor."""
        infos: list[tuple[str, int, int]] = []
        seen: set[str] = set()
        for i in range(n_tensors):
            name = self.text(f"name of tensor {i}")
            if len(name.encode("utf-8")) > MAX_TENSOR_NAME_BYTES:
                raise self.fail(f"tensor {i} has a name longer than {MAX_TENSOR_NAME_BYTES} bytes")
            if name in seen:
                raise self.fail(f"tensor name '{name}' appears twice")
            seen.add(name)
            n_dims = self.u32(f"dimension count of tensor '{name}'")
            if n_dims > MAX_DIMS:
                raise self.fail(f"tensor '{name}' has {n_dims} dimensions; at most {MAX_DIMS} are allowed")
            dims = [self.u64(f"shape of tensor '{name}'") for _ in range(n_dims)]
            n_elements = 1
            for d in dims:
                n_elements *= d
            if any(d > _INT64_MAX for d in dims) or n_elements > _INT64_MAX:
                raise self.fail(f"tensor '{name}' has an impossible shape {dims}")
            ggml_type = self.u32(f"type of tensor '{name}'")
            sizes = gguf.GGML_QUANT_SIZES.get(ggml_type)  # type: ignore[call-overload]
            if sizes is None:
                raise self.fail(f"tensor '{name}' has unknown ggml type {ggml_type}")
            block, type_size = sizes
            row = dims[0] if dims else 1
            if row % block:
                raise self.fail(
                    f"tensor '{name}' has rows of {row} elements, not a multiple of the "
                    f"{gguf.GGMLQuantizationType(ggml_type).name} block size {block}"
                )
            offset = self.u64(f"data offset of tensor '{name}'")
            self.n_parameters += n_elements
            infos.append((name, offset, n_elements // block * type_size))
            self.tensors.append(TensorInfo(name, tuple(dims), ggml_type, n_elements // block * type_size, offset))
        return infos

    def check_tensor_data(self, infos: list[tuple[str, int, int]], data_offset: int, alignment: int) -> int:
        expected = 0
        for name, offset, nbytes in infos:
            # llama.cpp insists on tensors packed in order, each padded to the alignment.
            if offset != expected:
                raise self.fail(f"tensor '{name}' has data offset {offset}, expected {expected}")
            end = data_offset + offset + nbytes
            if end > self.size:
                raise self.fail(
                    f"data of tensor '{name}' runs past the end of the file (needs {end} bytes, "
                    f"the file has {self.size}); the file is truncated"
                )
            expected += _pad(nbytes, alignment)
        return expected


def _pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _type_name(vtype: int) -> str:
    try:
        return gguf.GGUFValueType(vtype).name
    except ValueError:
        return str(vtype)


def _decode(data: bytes) -> str:
    # Token texts are raw bytes to llama.cpp; surrogateescape keeps invalid UTF-8
    # distinct (and comparable) instead of failing or collapsing to U+FFFD.
    return data.decode("utf-8", "surrogateescape")
