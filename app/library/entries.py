"""One library entry: what a GGUF file is, read from its header alone.

The file goes through the same validator as a model about to load
(``app.engine.gguf.model_file.open_model_file``, with the load-time rules of ``app.engine.gguf.rules``):
a file it refuses is listed as refused with its one-line reason, never raised out of
a scan. A model split in parts (``name-00001-of-00003.gguf``, llama.cpp's naming) is
one entry, read from its first part, every part validated and counted.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from app.engine.gguf.draft_heads import head_lines
from app.engine.errors import ModelFileError
from app.engine.gguf.header import shown_name, validate_gguf
from app.engine.gguf.meta import ModelMetadata
from app.engine.gguf.model_file import open_model_file

SPLIT_PART = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_QUANT_IN_NAME = re.compile(r"(?<![A-Za-z0-9])(I?Q[0-9]_[A-Z0-9_]+|I?Q[0-9]+_?[KS]?|F16|BF16|F32)(?![A-Za-z0-9])",
                            re.IGNORECASE)


@dataclass(frozen=True)
class Vocabulary:
    """The tokenizer facts the draft rules compare (``check_compatibility``), and a digest
    of the token texts so two files with the very same vocabulary are known without
    reading either again."""

    vocab_type: str
    n_vocab: int
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    digest: str  # sha256 of the token texts, in order


@dataclass(frozen=True)
class LibraryEntry:
    path: str                  # the file to load (an Ollama blob, a split model's first part)
    name: str                  # as the user knows it
    source: str                # LM Studio, Ollama, Hugging Face, Folder
    size: int                  # bytes, all parts of a split model together
    signature: tuple[tuple[str, int, int], ...]  # (path, size, mtime_ns) of every part read
    architecture: str = ""
    model_name: str = ""
    n_parameters: int = 0
    quantisation: str = ""     # "Q4_K_M", "F16"; "" when neither the file nor its name says
    context_length: int | None = None
    parts: int = 1
    vocabulary: Vocabulary | None = None
    refused: str | None = None  # why the validator refused it; None for a usable file
    notes: tuple[str, ...] = field(default=())

    @property
    def usable(self) -> bool:
        return self.refused is None and self.vocabulary is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> LibraryEntry:
        """Back from the cache (someone else's file, in principle): ValueError if any
        field is not as ``to_dict`` wrote it."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            raise ValueError("not a library entry")
        vocabulary = data["vocabulary"]
        if vocabulary is not None:
            if not isinstance(vocabulary, dict) or set(vocabulary) != {f.name for f in fields(Vocabulary)}:
                raise ValueError("not a vocabulary")
            vocabulary = Vocabulary(**vocabulary)
            _types(vocabulary, vocab_type=str, n_vocab=int, add_bos=bool, add_eos=bool, digest=str)
            _types(vocabulary, bos_id=(int, type(None)), eos_id=(int, type(None)))
        signature = data["signature"]
        if not isinstance(signature, list) or not all(
                isinstance(s, list) and len(s) == 3 and isinstance(s[0], str)
                and all(isinstance(n, int) and not isinstance(n, bool) for n in s[1:]) for s in signature):
            raise ValueError("not a file signature")
        notes = data["notes"]
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise ValueError("not notes")
        entry = cls(**{**data, "vocabulary": vocabulary, "signature": tuple(tuple(s) for s in signature),
                       "notes": tuple(notes)})
        _types(entry, path=str, name=str, source=str, size=int, architecture=str, model_name=str,
               n_parameters=int, quantisation=str, parts=int)
        _types(entry, context_length=(int, type(None)), refused=(str, type(None)))
        return entry


def _types(item: Any, **expected: Any) -> None:
    for name, kind in expected.items():
        value = getattr(item, name)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise ValueError(f"{name} is not {kind}")


def signature_of(paths: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """What a cached entry is keyed by: a file that changes size or time is read again.
    Raises OSError for a part that is gone."""
    out = []
    for path in paths:
        stat = path.stat()
        out.append((os.fsdecode(path), stat.st_size, stat.st_mtime_ns))
    return tuple(out)


def split_parts(path: Path) -> list[Path] | None:
    """All parts of a split model, given its first; None for a file that is not a first part."""
    match = SPLIT_PART.match(path.name)
    if not match:
        return [path]
    if int(match.group("part")) != 1:
        return None
    count = int(match.group("count"))
    width = len(match.group("part"))
    return [path.with_name(f"{match.group('stem')}-{i:0{width}d}-of-{match.group('count')}.gguf")
            for i in range(1, count + 1)]


def read_entry(path: Path, name: str, source: str) -> LibraryEntry:
    """The entry for one file (a split model's first part stands for all); never raises
    for a bad file: the validator's reason becomes ``refused``."""
    parts = split_parts(path) or [path]
    try:
        signature = signature_of([p for p in parts if p.exists()])
    except OSError as exc:
        return LibraryEntry(os.fsdecode(path), name, source, 0, (), parts=len(parts),
                            refused=f"{shown_name(path)}: cannot be read ({exc.strerror or exc})")
    size = sum(s[1] for s in signature)
    base = dict(path=os.fsdecode(path), name=name, source=source, size=size, signature=signature,
                parts=len(parts), quantisation=quantisation_in_name(name))
    missing = [p for p in parts if not p.exists()]
    if missing and len(parts) > 1:  # a single file: the validator says what is wrong with it
        return LibraryEntry(**base, refused=f"{shown_name(path)}: a model in {len(parts)} parts, "
                                            f"{len(missing)} missing (first: {shown_name(missing[0])})")
    try:
        meta = open_model_file(path).metadata
        n_parameters = meta.n_parameters + sum(validate_gguf(p).n_parameters for p in parts[1:])
    except ModelFileError as exc:
        return LibraryEntry(**base, refused=str(exc))
    except (OSError, ValueError, MemoryError) as exc:  # the validator's words cover GGUF; this is the rest
        return LibraryEntry(**base, refused=f"{shown_name(path)}: cannot be read ({exc})")
    notes = (f"split in {len(parts)} parts",) if len(parts) > 1 else ()
    notes += head_lines(meta.architecture, meta.draft_heads, meta.mtp_layers, meta.mtp_problem)
    quantisation = (meta.file_type_name or "").removeprefix("ALL_")  # llama.cpp names F32 files ALL_F32
    return LibraryEntry(**{**base, "quantisation": quantisation or base["quantisation"]},
                        architecture=meta.architecture, model_name=meta.name, n_parameters=n_parameters,
                        context_length=meta.context_length, vocabulary=vocabulary_of(meta), notes=notes)


def vocabulary_of(meta: ModelMetadata) -> Vocabulary:
    digest = hashlib.sha256()
    for token in meta.tokens:
        # surrogateescape: token texts are bytes to llama.cpp; the digest is over those bytes.
        digest.update(token.encode("utf-8", "surrogateescape") + b"\0")
    return Vocabulary(meta.vocab_type, meta.n_vocab, meta.bos_id, meta.eos_id, meta.add_bos, meta.add_eos,
                      digest.hexdigest())


def quantisation_in_name(name: str) -> str:
    """The quantisation a file's name states ("...Q4_K_M.gguf"), for a file whose header does not."""
    matches = _QUANT_IN_NAME.findall(Path(name).name.removesuffix(".gguf"))
    return matches[-1].upper() if matches else ""


def parameters_shown(n: int) -> str:
    """135M, 7.2B: how model cards say it."""
    if n <= 0:
        return "?"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value >= 100 or value == int(value) else f"{value:.1f}{unit}"
    return str(n)


def size_shown(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
