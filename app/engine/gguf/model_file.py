"""One model file as a load sees it: its path resolved once, its header read once.

The pair check, the trial load's caller, the backend and the library each want facts
about the same file (its vocabulary, its layers, its memory kind). Each used to ask
for them from a path, so one ``tandem generate`` resolved and validated each file
several times. :func:`open_model_file` does it once per load and returns a
:class:`ModelFile` that all of them take (each still accepts a plain path and opens
it, for callers that hold nothing else).

Resolving the path first turns every way a path can fail to name a model (a symlink
loop, a dangling link, a directory, a FIFO, a folder that cannot be entered) into one
``ModelFileError`` line, and gives llama.cpp the very file that was validated (the
resolved path; messages keep the name the user gave).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.engine.gguf.header import GGUFHeader, resolve_model_path, scan_header
from app.engine.gguf.meta import ModelMetadata, metadata_from, metadata_key
from app.engine.gguf.memory_estimate import HYPERPARAMETERS
from app.engine.gguf.memory_kinds import memory_kind

@dataclass(frozen=True)
class FileIdentity:
    """Which file a path named when it was read: a file rewritten or replaced since is
    another file (another inode, size, modification or change time)."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class ModelFile:
    """A validated GGUF file and the facts a load needs from its header."""

    path: Path                  # as given: what messages name
    resolved: Path              # every symlink followed: what llama.cpp and the trial child open
    identity: FileIdentity
    header: GGUFHeader = field(repr=False)
    metadata: ModelMetadata = field(repr=False)
    n_layers: int | None        # {arch}.block_count
    memory_kind: str            # ATTENTION, RECURRENT or HYBRID: llama.cpp decides by the architecture's name (memory_kinds.py)
    # Its {arch}.* sizes that the memory estimate reads (memory_estimate.HYPERPARAMETERS), prefix removed
    hparams: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # The header's tensors are every part's already (a split model read over the network,
    # whose other parts are not on this disk to walk).
    parts_read: bool = False

    @property
    def architecture(self) -> str:
        return self.metadata.architecture

    @property
    def n_vocab(self) -> int:
        return self.metadata.n_vocab

    @property
    def file_type(self) -> int | None:
        return self.metadata.file_type

    def __fspath__(self) -> str:
        # A ModelFile goes wherever a path does (``Path(model)``: the path as given), and
        # ``open_model_file`` of that path finds this very object again (``_Opened``).
        return os.fspath(self.path)

    def unchanged(self) -> bool:
        """Whether the path still names the file that was read."""
        try:
            return FileIdentity.of(os.stat(self.resolved)) == self.identity
        except (OSError, ValueError):
            return False


def open_model_file(path: str | os.PathLike[str] | ModelFile) -> ModelFile:
    """Resolve ``path``, validate its header (``gguf_header``, ``gguf_rules``) and read
    what a load needs, in one walk; a ModelFile passes through as it is. Raises
    ModelFileError, one line naming ``path``, for anything that is not a model llama.cpp
    can be given. An unchanged file opened before is not walked again (``_Opened``)."""
    if isinstance(path, ModelFile):
        return path
    given = Path(path)
    resolved, st = resolve_model_path(given)
    identity = FileIdentity.of(st)
    known = _OPENED.get(resolved, identity)
    if known is not None:
        return known if known.path == given else replace(known, path=given)
    header, values = scan_header(resolved, wanted_keys, name=given)
    opened = model_file_from(given, resolved, identity, header, values)
    d2t = _d2t_range(resolved, header) if opened.architecture == "eagle3" else None
    if d2t is not None:
        opened = replace(opened, metadata=replace(opened.metadata, eagle3_d2t_range=d2t))
    _OPENED.put(opened)
    return opened


def _d2t_range(path: Path, header: GGUFHeader) -> tuple[int, int] | None:
    """The lowest and highest id an EAGLE-3 drafter's I64 ``d2t`` map names (its data is
    within the file: the header walk checked every tensor's extent); None without one."""
    import numpy as np

    from app.engine.gguf.draft_heads import I64

    info = next((t for t in header.tensors if t.name == "d2t"), None)
    if info is None or info.ggml_type != I64 or len(info.shape) != 1 or not info.shape[0]:
        return None
    with open(path, "rb") as f:
        f.seek(header.data_offset + info.offset)
        ids = np.frombuffer(f.read(info.shape[0] * 8), dtype="<i8")
    return (int(ids.min()), int(ids.max())) if ids.size == info.shape[0] else None


def model_file_from(given: Path, resolved: Path, identity: FileIdentity, header: GGUFHeader,
                    values: dict[str, Any], *, parts_read: bool = False) -> ModelFile:
    """The ModelFile of a header already walked with :func:`wanted_keys` (a local file's,
    or one read over the network)."""
    metadata = metadata_from(given, header, values)
    arch = metadata.architecture
    layers = values.get(f"{arch}.block_count") if arch else None
    hparams = {key[len(arch) + 1:]: value for key, value in values.items() if arch and key.startswith(arch + ".")}
    return ModelFile(path=given, resolved=resolved, identity=identity, header=header, metadata=metadata,
                     n_layers=layers if type(layers) is int else None, memory_kind=memory_kind(arch),
                     hparams=hparams, parts_read=parts_read)


def wanted_keys(key: str) -> bool:
    """The keys a load decodes: the metadata's, and the sizes the memory estimate reads."""
    return metadata_key(key) or key.partition(".")[2] in HYPERPARAMETERS


class _Opened:
    """Files opened lately, by resolved path and identity. Within a load the ModelFile
    itself travels; this spares the walk (~0.2 s for the demo target, more for a large
    vocabulary) across loads of one process: the window checks a pair and then loads
    it, the server describes the model it serves. A failure is never kept."""

    MOST = 32

    def __init__(self) -> None:
        self._files: dict[tuple[Path, FileIdentity], ModelFile] = {}
        self._lock = threading.Lock()

    def get(self, resolved: Path, identity: FileIdentity) -> ModelFile | None:
        with self._lock:
            return self._files.get((resolved, identity))

    def put(self, opened: ModelFile) -> None:
        with self._lock:
            self._files[(opened.resolved, opened.identity)] = opened
            while len(self._files) > self.MOST:
                del self._files[next(iter(self._files))]  # the oldest first

    def clear(self) -> None:
        with self._lock:
            self._files.clear()


_OPENED = _Opened()


def forget_opened_files() -> None:
    """Walk every file again on its next open (tests that count walks; a file rewritten
    in place within a second on a file system with coarse times)."""
    _OPENED.clear()
